"""Analytical roofline costs: FLOP formulas, roofline times, memory, cost-source parsing."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("tensorflow")

from celeritas_core.errors import CeleritasInputError
from celeritas_tf.analytical import (
    DEVICES,
    FREE_OPS,
    DeviceSpec,
    StaticShapes,
    analytical_cost_report,
    analytical_costs,
    op_flops,
    parse_cost_source,
)
from celeritas_tf.models import get_model
from celeritas_tf.step import build_training_step
from celeritas_tf.tf import tensorflow

V100 = DEVICES["v100"]


def _graph(build):
    """A fresh tf.Graph holding what ``build(tf)`` makes, and its GraphDef with shapes."""
    tf = tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        build(tf)
    return graph, graph.as_graph_def(add_shapes=True)


def _node(graph_def, name):
    return next(n for n in graph_def.node if n.name == name)


def _flops_both(graph, graph_def, name):
    """FLOPs from the tf.Graph and from StaticShapes: they must agree."""
    node = _node(graph_def, name)
    a = op_flops(node, graph)
    b = op_flops(node, StaticShapes(graph_def))
    assert a == b
    return a


def _placeholder(tf, shape, name=None):
    return tf.compat.v1.placeholder(tf.float32, shape, name=name)


@pytest.fixture(scope="module")
def mlp_steps():
    return {b: build_training_step(get_model("mlp"), b) for b in (8, 64)}


@pytest.mark.parametrize("transpose_a,transpose_b",
                         [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_flops_are_2mnk(transpose_a, transpose_b):
    m, k, n = 6, 5, 7

    def build(tf):
        a = _placeholder(tf, (k, m) if transpose_a else (m, k))
        b = _placeholder(tf, (n, k) if transpose_b else (k, n))
        tf.linalg.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b, name="mm")

    graph, gd = _graph(build)
    assert _node(gd, "mm").op == "MatMul"
    assert _flops_both(graph, gd, "mm") == 2 * m * n * k


def test_batch_matmul_honours_adj_x():
    batch, m, k, n = 3, 4, 9, 5

    def build(tf):
        a = _placeholder(tf, (batch, k, m))
        b = _placeholder(tf, (batch, k, n))
        tf.linalg.matmul(a, b, adjoint_a=True, name="bmm")

    graph, gd = _graph(build)
    assert _node(gd, "bmm").op.startswith("BatchMatMul")
    assert _flops_both(graph, gd, "bmm") == 2 * batch * m * n * k


def test_einsum_flops():
    def build(tf):
        tf.einsum("bik,bkj->bij", _placeholder(tf, (3, 4, 9)), _placeholder(tf, (3, 9, 5)), name="ein")

    graph, gd = _graph(build)
    name = next(n.name for n in gd.node if n.op == "Einsum")
    assert _flops_both(graph, gd, name) == 2 * 3 * 4 * 9 * 5


@pytest.mark.parametrize("strides,padding,out_hw", [(1, "SAME", 8), (2, "SAME", 4), (1, "VALID", 6)])
def test_conv2d_and_its_gradients_have_the_convolution_flops(strides, padding, out_hw):
    batch, hw, cin, cout, kh, kw = 2, 8, 3, 4, 3, 3
    expected = 2 * batch * out_hw * out_hw * cout * kh * kw * cin

    def build(tf):
        x = _placeholder(tf, (batch, hw, hw, cin))
        w = _placeholder(tf, (kh, kw, cin, cout))
        y = tf.nn.conv2d(x, w, strides=strides, padding=padding, name="conv")
        tf.gradients(tf.reduce_sum(y), [x, w])

    graph, gd = _graph(build)
    assert _node(gd, "conv").op == "Conv2D"
    assert _flops_both(graph, gd, "conv") == expected
    for op in ("Conv2DBackpropInput", "Conv2DBackpropFilter"):
        name = next(n.name for n in gd.node if n.op == op)
        assert _flops_both(graph, gd, name) == expected, op


def test_depthwise_conv_and_gradients():
    batch, hw, c, mult, kh, kw = 2, 6, 3, 2, 3, 3
    expected = 2 * batch * hw * hw * c * mult * kh * kw

    def build(tf):
        x = _placeholder(tf, (batch, hw, hw, c))
        w = _placeholder(tf, (kh, kw, c, mult))
        y = tf.nn.depthwise_conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME", name="dw")
        tf.gradients(tf.reduce_sum(y), [x, w])

    graph, gd = _graph(build)
    for op in ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
               "DepthwiseConv2dNativeBackpropFilter"):
        name = next(n.name for n in gd.node if n.op == op)
        assert _flops_both(graph, gd, name) == expected, op


def test_fused_batch_norm_flops():
    shape = (4, 5, 5, 3)

    def build(tf):
        x = _placeholder(tf, shape)
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, tf.ones([3]), tf.zeros([3]), is_training=True,
                                                   name="bn")
        tf.gradients(tf.reduce_sum(y), [x])

    graph, gd = _graph(build)
    elements = math.prod(shape)
    forward = next(n.name for n in gd.node if n.op.startswith("FusedBatchNorm") and "Grad" not in n.op)
    grad = next(n.name for n in gd.node if n.op.startswith("FusedBatchNormGrad"))
    assert _flops_both(graph, gd, forward) == 8 * elements
    assert _flops_both(graph, gd, grad) == 10 * elements


def test_elementwise_ops_count_output_elements():
    def build(tf):
        x = _placeholder(tf, (7, 11))
        tf.nn.relu(x, name="relu")
        tf.math.add(x, x, name="add")

    graph, gd = _graph(build)
    assert _flops_both(graph, gd, "relu") == 77  # no TensorFlow statistic: our default
    assert _flops_both(graph, gd, "add") == 77  # TensorFlow's registered statistic


def test_roofline_compute_and_memory_bound():
    m = 512

    def build(tf):
        a = _placeholder(tf, (m, m), name="a")
        tf.linalg.matmul(a, a, name="mm")
        tf.nn.relu(a, name="relu")

    _, gd = _graph(build)
    costs = analytical_costs(gd, V100)
    flops = 2.0 * m**3
    bytes_mm = 3 * m * m * 4
    assert flops / V100.peak_flops_per_s > bytes_mm / V100.memory_bandwidth_bytes_per_s  # compute bound
    assert costs["mm"][0] == pytest.approx(flops / V100.peak_flops_per_s * 1e6 + V100.launch_overhead_us)
    # relu: m² FLOPs, reads and writes 4·m² bytes each: memory bound
    bytes_relu = 2 * m * m * 4
    assert costs["relu"][0] == pytest.approx(bytes_relu / V100.memory_bandwidth_bytes_per_s * 1e6
                                             + V100.launch_overhead_us)
    assert costs["relu"][1] == m * m * 4
    # a faster device is faster
    assert analytical_costs(gd, DEVICES["h100"])["mm"][0] < costs["mm"][0]


def test_mlp_step_costs_are_finite_non_negative_and_cover_every_node(mlp_steps):
    gd = mlp_steps[64].step_graph_def()
    report = analytical_cost_report(gd, V100)
    assert set(report.costs) == {n.name for n in gd.node}
    for name, (t, mem) in report.costs.items():
        assert math.isfinite(t) and t >= 0, name
        assert math.isfinite(mem) and mem >= 0, name
    assert report.unknown_dims == 0
    ops = {n.name: n.op for n in gd.node}
    for name, (t, _) in report.costs.items():
        if ops[name] in FREE_OPS:
            assert t == 0.0, name
        else:
            assert t >= V100.launch_overhead_us, name
    assert any(op in FREE_OPS for op in ops.values()) and any(op not in FREE_OPS for op in ops.values())


def test_time_grows_with_batch_size(mlp_steps):
    small = analytical_cost_report(mlp_steps[8].step_graph_def(), V100)
    large = analytical_cost_report(mlp_steps[64].step_graph_def(), V100)
    assert set(small.costs) == set(large.costs)
    assert large.total_time_us > small.total_time_us
    matmuls = [n for n, _ in large.costs.items() if n.endswith("/MatMul")]
    assert matmuls
    for name in matmuls:
        assert large.flops[name] > small.flops[name]
        assert large.costs[name][0] > small.costs[name][0]


def test_variable_memory_is_its_size(mlp_steps):
    step = mlp_steps[8]
    gd = step.step_graph_def()
    costs = analytical_costs(gd, V100)
    config = step.model.config
    assert costs["dense_0/kernel"] == (0.0, config["features"] * config["hidden"] * 4)
    assert costs["dense_0/bias"] == (0.0, config["hidden"] * 4)
    assert costs["dense_0/kernel/Adam"][1] == config["features"] * config["hidden"] * 4


def test_optimizer_update_touches_variable_and_slots(mlp_steps):
    gd = mlp_steps[8].step_graph_def()
    report = analytical_cost_report(gd, V100)
    kernel = next(n for n in gd.node if n.op == "ResourceApplyAdam" and "dense_0/kernel" in n.name)
    size = 16 * 32 * 4
    # var, m, v read and written (6·size) + the gradient (size) + 6 float32 scalars
    assert report.bytes_touched[kernel.name] == 7 * size + 6 * 4
    assert report.costs[kernel.name][1] == 0.0


def test_unknown_dims_are_taken_as_one_and_counted():
    def build(tf):
        p = _placeholder(tf, (None, 8), name="p")
        tf.linalg.matmul(p, tf.ones((8, 4)), name="mm")

    graph, gd = _graph(build)
    report = analytical_cost_report(gd, V100)
    assert report.unknown_dims == 2  # p's and mm's batch dimension
    assert set(report.ops_with_unknown_dims) == {"p", "mm"}
    assert report.flops["mm"] == 2 * 8 * 4
    assert _flops_both(graph, gd, "mm") == 2 * 8 * 4


def test_costs_are_deterministic(mlp_steps):
    gd = mlp_steps[64].step_graph_def()
    assert analytical_costs(gd, V100) == analytical_costs(gd, V100)


def test_graph_def_without_shapes_is_rejected(mlp_steps):
    gd = mlp_steps[8].graph.as_graph_def(add_shapes=False)
    with pytest.raises(CeleritasInputError, match="_output_shapes"):
        analytical_costs(gd, V100)


@pytest.mark.parametrize("text,name", [("analytical:v100", "v100"), ("Analytical:A100", "a100"),
                                       (" analytical:h100 ", "h100")])
def test_parse_cost_source(text, name):
    spec = parse_cost_source(text)
    assert isinstance(spec, DeviceSpec)
    assert spec is DEVICES[name]


def test_presets_are_datasheet_figures():
    assert V100.peak_flops_per_s == 15.7e12
    assert V100.memory_bandwidth_bytes_per_s == 900e9
    assert V100.memory_bytes == 32 * 2**30
    for spec in DEVICES.values():
        assert spec.peak_flops_per_s > 0 and spec.memory_bandwidth_bytes_per_s > 0
        assert spec.launch_overhead_us >= 0 and spec.memory_bytes > 0


@pytest.mark.parametrize("text,match", [
    ("analytical:tpu", "unknown device 'tpu'.*analytical:a100.*analytical:h100.*analytical:v100"),
    ("analytical:", "unknown device"),
    ("v100", "malformed"),
    ("measured:v100", "malformed"),
    ("", "malformed"),
    (None, "must be a string"),
])
def test_parse_cost_source_errors(text, match):
    with pytest.raises(CeleritasInputError, match=match):
        parse_cost_source(text)
