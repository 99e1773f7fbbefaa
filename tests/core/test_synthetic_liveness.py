"""The synthetic training steps' ``liveness`` option: off changes nothing, on gives every op the
liveness fields of docs/formats.md the way ``celeritas_tf.extract`` fills them for a real step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from celeritas_core.generators.synthetic import paper_shaped_graph, small_training_graph, training_step_graph
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import ccr
from celeritas_core.readwrite.formats import load_graph, save_graph
from celeritas_core.simulation.memory import memory_profile, one_device_peak_bytes
from celeritas_core.simulation.simulator import simulate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "graphs" / "training_step_small.json"
VIEWS = ("Identity", "Reshape", "ExpandDims")
LIVENESS_KEYS = {"persistent_bytes", "output_bytes", "scratch_bytes", "output_aliases"}


def _all_options(liveness: bool) -> Graph:
    """A small step that uses every kind of op the generator makes (both kernels' gradients are
    covered by the two graphs of the tests)."""
    return training_step_graph(layers=3, width=8, batch_size=2, positions=4, classes=10, kernel="Conv2D",
                               branches=2, join="concat", norm=True, residual=True, extra_elementwise=3,
                               reshapes=1, stages=1, num_nodes=400, seed=4, liveness=liveness)


GRAPHS = {
    "small": lambda live: small_training_graph(0, liveness=live),
    "all-options": _all_options,
    "matmul": lambda live: training_step_graph(layers=4, width=16, branches=3, join="add", residual=True,
                                               norm=True, reshapes=2, batch_size=4, positions=8, classes=7,
                                               liveness=live),
}


# ---------------------------------------------------------------------------- off: nothing changes
def test_default_is_off_and_serialises_as_before(tmp_path: Path) -> None:
    graph = small_training_graph(0)
    assert graph.liveness is None and "liveness" not in graph.meta
    path = save_graph(graph, tmp_path / "g.json")
    again = save_graph(small_training_graph(0, liveness=False), tmp_path / "h.json")
    assert path.read_bytes() == again.read_bytes()
    doc = json.loads(path.read_text())
    assert doc == json.loads(EXAMPLE.read_text())  # the bundled example, written before the option
    assert not any(LIVENESS_KEYS & set(node) for node in doc["nodes"])


@pytest.mark.parametrize("name", list(GRAPHS))
def test_on_changes_only_the_liveness_fields(name: str) -> None:
    off, on = GRAPHS[name](False), GRAPHS[name](True)
    assert on.node_names == off.node_names and on.ops == off.ops and on.colocation == off.colocation
    for field in ("time_us", "memory_bytes", "edge_src", "edge_dst", "edge_bytes", "edge_src_output"):
        np.testing.assert_array_equal(getattr(on, field), getattr(off, field), err_msg=field)
    assert on.meta == {**off.meta, "liveness": True}
    assert on.liveness is not None and on.liveness.modelled.all()


# ---------------------------------------------------------------------------- on: the fields
@pytest.mark.parametrize("name", list(GRAPHS))
def test_variables_are_persistent_and_hold_no_outputs(name: str) -> None:
    graph = GRAPHS[name](True)
    live = graph.liveness
    assert live is not None
    ops = np.asarray(graph.ops)
    var = ops == "VariableV2"
    assert var.sum() >= 4  # a kernel and its two Adam slots at least
    np.testing.assert_array_equal(live.persistent_bytes[var], graph.memory_bytes[var])
    assert (live.persistent_bytes[var] > 0).all() and (live.persistent_bytes[~var] == 0).all()
    for i in np.flatnonzero(var):
        assert live.outputs(int(i)).tolist() == [0.0]  # the variable's own buffer, as extracted
    # the variables' bytes are the graph's persistent bytes: weights and both Adam slots
    kernel = graph.index["layer_0/kernel" if "layer_0/kernel" in graph.index else "layer_0/branch_0/kernel"]
    slots = [graph.index[f"{graph.node_names[kernel]}/Adam{s}"] for s in ("", "_1")]
    assert live.persistent_bytes[slots].tolist() == [live.persistent_bytes[kernel]] * 2


@pytest.mark.parametrize("name", list(GRAPHS))
def test_outputs_are_sized_from_the_node_memory(name: str) -> None:
    """Every op that is no variable and no view: memory = Σ outputs (scratch 0, as nothing here has
    a workspace); every edge reads a declared output of its producer with the output's bytes."""
    graph = GRAPHS[name](True)
    live = graph.liveness
    assert live is not None
    ops = np.asarray(graph.ops)
    plain = ~np.isin(ops, ["VariableV2", *VIEWS])
    sums = np.array([live.outputs(i).sum() for i in range(graph.num_nodes)])
    np.testing.assert_array_equal(sums[plain] + live.scratch_bytes[plain], graph.memory_bytes[plain])
    assert (live.scratch_bytes == 0).all()
    counts = np.diff(live.output_ptr)
    data = ops[graph.edge_src] != "VariableV2"
    src, out = graph.edge_src[data], graph.edge_src_output[data]
    noop = ops[src] == "NoOp"
    assert (counts[ops == "NoOp"] == 0).all() and (graph.edge_bytes[data][noop] == 0).all()
    src, out, nbytes = src[~noop], out[~noop], graph.edge_bytes[data][~noop]
    assert (out < counts[src]).all()
    np.testing.assert_array_equal(live.output_bytes[live.output_ptr[src] + out], nbytes)
    if "FusedBatchNormV3" in graph.ops:
        assert counts[graph.ops.index("FusedBatchNormV3")] == 6  # y, mean, variance, 3 reserve spaces


@pytest.mark.parametrize("name", list(GRAPHS))
def test_views_alias_their_first_input(name: str) -> None:
    graph = GRAPHS[name](True)
    live = graph.liveness
    assert live is not None
    views = [i for i, op in enumerate(graph.ops) if op in VIEWS]
    assert any(graph.ops[i] == "Reshape" for i in views) and any(graph.ops[i] == "Identity" for i in views)
    first_edge = {int(d): k for k, d in reversed(list(enumerate(graph.edge_dst)))}
    for i in views:
        first = first_edge[i]
        assert live.aliases(i) == [(int(graph.edge_src[first]), int(graph.edge_src_output[first]))]
        # declared at full size (a copy sent to another device is), but no bytes of its own here
        assert live.outputs(i).tolist() == [graph.edge_bytes[first]] and graph.edge_bytes[first] > 0
        assert graph.memory_bytes[i] <= live.outputs(i)[0]
    others = [i for i in range(graph.num_nodes) if graph.ops[i] not in VIEWS]
    assert all(a is None for i in others for a in live.aliases(i))


@pytest.mark.parametrize("name", list(GRAPHS))
def test_one_device_peak_is_below_the_sum(name: str) -> None:
    """Activations die after their gradient ops, so one device peaks well below the sum model,
    and above what is live all step (the variables) plus the largest activation."""
    graph = GRAPHS[name](True)
    live = graph.liveness
    assert live is not None
    peak = one_device_peak_bytes(graph)
    assert peak < 0.75 * graph.total_memory_bytes
    assert peak >= live.persistent_bytes.sum() + live.output_bytes.max()
    assert one_device_peak_bytes(GRAPHS[name](False)) == graph.total_memory_bytes


def test_forward_activations_live_until_their_gradient() -> None:
    """On one device, a first-layer Relu's output is live from the Relu's start until its
    ReluGrad has finished: memory falls when that gradient op is done."""
    graph = small_training_graph(0, liveness=True)
    one = np.zeros(graph.num_nodes, dtype=np.int64)
    result = simulate(graph, Cluster.homogeneous(1, 1.0), one)
    profile = memory_profile(graph, 1, one, result)
    relu = graph.index["layer_0/branch_0/Relu"]
    grad = graph.index["gradients/layer_0/branch_0/Relu_grad/ReluGrad"]
    assert result.finish_us[relu] < result.start_us[grad]
    times, usage = profile.times_us[0], profile.usage_bytes[0]
    during = usage[(times >= result.finish_us[relu]) & (times < result.start_us[grad])]
    act = graph.liveness.outputs(relu)[0] if graph.liveness is not None else 0.0
    assert act > 0 and during.min() >= act + graph.liveness.persistent_bytes.sum()


# ---------------------------------------------------------------------------- paper shapes, files
def test_paper_shaped_graph_scales_edges_not_outputs() -> None:
    off = paper_shaped_graph("inception_v3", nodes=3000, seed=2)
    on = paper_shaped_graph("inception_v3", nodes=3000, seed=2, liveness=True)
    np.testing.assert_array_equal(on.edge_bytes, off.edge_bytes)
    assert on.meta["byte_scale"] == off.meta["byte_scale"] != 1.0
    cluster = Cluster.homogeneous(4, 32 * 2**30)
    assert ccr(on, cluster) == ccr(off, cluster)
    live = on.liveness
    assert live is not None
    ops = np.asarray(on.ops)
    plain = ~np.isin(ops, ["VariableV2", *VIEWS])
    sums = np.array([live.outputs(i).sum() for i in range(on.num_nodes)])
    np.testing.assert_array_equal(sums[plain], on.memory_bytes[plain])  # op memory, unscaled


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_round_trip_keeps_the_fields_and_the_peak(tmp_path: Path, suffix: str) -> None:
    graph = small_training_graph(1, liveness=True)
    back = load_graph(save_graph(graph, tmp_path / f"g{suffix}"))
    assert back.liveness is not None
    for field in ("modelled", "persistent_bytes", "scratch_bytes", "output_ptr", "output_bytes", "alias_node",
                  "alias_output"):
        np.testing.assert_array_equal(getattr(back.liveness, field), getattr(graph.liveness, field))
    assert one_device_peak_bytes(back) == one_device_peak_bytes(graph)
