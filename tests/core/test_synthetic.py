"""The synthetic training-step generator: node counts, CCR, determinism, structure, round trips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.generators.synthetic import (
    PAPER_MODELS,
    PaperModel,
    paper_shaped_graph,
    small_training_graph,
    training_step_graph,
)
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import ccr
from celeritas_core.readwrite.formats import load_graph, save_graph

MODELS = list(PAPER_MODELS)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "graphs" / "training_step_small.json"
DEFAULT_CLUSTER = Cluster.homogeneous(4, 32 * 2**30)

_CACHE: dict[tuple[str, int], Graph] = {}


def _paper(model: str, seed: int = 0) -> Graph:
    """Each (model, seed) graph is generated once per test session."""
    key = (model, seed)
    if key not in _CACHE:
        _CACHE[key] = paper_shaped_graph(model, seed=seed)
    return _CACHE[key]


def _assert_same(a: Graph, b: Graph) -> None:
    assert a.name == b.name
    assert a.node_names == b.node_names
    assert a.ops == b.ops
    assert a.colocation == b.colocation
    np.testing.assert_array_equal(a.time_us, b.time_us)
    np.testing.assert_array_equal(a.memory_bytes, b.memory_bytes)
    np.testing.assert_array_equal(a.edge_src, b.edge_src)
    np.testing.assert_array_equal(a.edge_dst, b.edge_dst)
    np.testing.assert_array_equal(a.edge_bytes, b.edge_bytes)
    np.testing.assert_array_equal(a.edge_src_output, b.edge_src_output)
    assert dict(a.meta) == dict(b.meta)


# ---------------------------------------------------------------------------- the paper's table
def test_paper_models_table() -> None:
    assert MODELS == ["tensor_holography", "inception_v3", "nmt", "transformer"]
    assert {m: (p.nodes, p.ccr) for m, p in PAPER_MODELS.items()} == {
        "tensor_holography": (3810, 49.147),
        "inception_v3": (6332, 33.118),
        "nmt": (25463, 18.630),
        "transformer": (36352, 111.957),
    }
    assert all(isinstance(p, PaperModel) and p.name == m and p.description for m, p in PAPER_MODELS.items())


@pytest.mark.parametrize("model", MODELS)
def test_exact_node_count(model: str) -> None:
    graph = _paper(model)
    assert graph.num_nodes == PAPER_MODELS[model].nodes
    assert graph.name == model


@pytest.mark.parametrize("model", MODELS)
def test_ccr_matches_table(model: str) -> None:
    graph = _paper(model)
    target = PAPER_MODELS[model].ccr
    assert ccr(graph, DEFAULT_CLUSTER) == pytest.approx(target, rel=0.01)
    assert graph.meta["target_ccr"] == target
    assert graph.meta["byte_scale"] > 0


def test_ccr_matches_table_for_a_given_cluster() -> None:
    cluster = Cluster.homogeneous(2, 2**30, slope_us_per_byte=3e-4, intercept_us=5.0)
    graph = paper_shaped_graph("inception_v3", cluster=cluster)
    assert ccr(graph, cluster) == pytest.approx(PAPER_MODELS["inception_v3"].ccr, rel=0.01)


def test_unreachable_ccr_raises() -> None:
    cluster = Cluster.homogeneous(4, 2**30, intercept_us=1e6)  # the latency alone exceeds the target
    with pytest.raises(CeleritasInputError, match="cannot reach CCR"):
        paper_shaped_graph("tensor_holography", cluster=cluster)


def test_unknown_model_names_it_and_lists_known_ones() -> None:
    with pytest.raises(CeleritasInputError) as info:
        paper_shaped_graph("resnet50")
    message = str(info.value)
    assert "'resnet50'" in message
    for model in MODELS:
        assert model in message


# ---------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("model", MODELS)
def test_same_seed_same_graph(model: str) -> None:
    _assert_same(_paper(model), paper_shaped_graph(model, seed=0))


@pytest.mark.parametrize("model", MODELS)
def test_different_seed_different_costs(model: str) -> None:
    a, b = _paper(model, 0), _paper(model, 1)
    assert a.num_nodes == b.num_nodes
    assert not np.array_equal(a.time_us, b.time_us)
    assert b.meta["seed"] == 1
    assert ccr(b, DEFAULT_CLUSTER) == pytest.approx(PAPER_MODELS[model].ccr, rel=0.01)


# ---------------------------------------------------------------------------- structure
@pytest.mark.parametrize("model", MODELS)
def test_is_a_dag(model: str) -> None:
    graph = _paper(model)
    order = graph.topological_order  # raises on a cycle
    assert sorted(order.tolist()) == list(range(graph.num_nodes))
    rank = graph.topological_rank
    assert np.all(rank[graph.edge_src] < rank[graph.edge_dst])


@pytest.mark.parametrize("model", MODELS)
def test_training_step_shape(model: str) -> None:
    graph = _paper(model)
    n = graph.num_nodes
    ops = np.asarray(graph.ops)
    # many ops without inputs: variables, Adam slots, constants
    assert np.mean(graph.in_degree == 0) >= 0.10
    # forward, loss, backward and optimizer are all there
    for op in ("VariableV2", "Relu", "ReluGrad", "SparseSoftmaxCrossEntropyWithLogits", "ApplyAdam", "AddN"):
        assert op in graph.ops, op
    assert np.sum(ops == "ApplyAdam") == len(graph.colocation_names)
    # long skip edges: a first-layer activation feeds a gradient op near the end of the step
    rank = graph.topological_rank
    assert int(np.max(rank[graph.edge_dst] - rank[graph.edge_src])) > n // 2
    # fan-out to gradients: every Relu feeds its ReluGrad
    relu_grad = np.flatnonzero(ops == "ReluGrad")
    fed_by_relu = {int(d) for s, d in zip(graph.edge_src, graph.edge_dst, strict=True) if ops[s] == "Relu"}
    assert set(relu_grad.tolist()) <= fed_by_relu
    # times: heavy ops dominate, constants and variables are ~0
    assert graph.time_us[ops == "VariableV2"].max() < 1.0
    heavy = np.isin(ops, ["MatMul", "Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"])
    assert np.median(graph.time_us[heavy]) > np.median(graph.time_us[ops == "Const"])


@pytest.mark.parametrize("model", MODELS)
def test_colocation_groups_hold_a_variable_and_its_update(model: str) -> None:
    graph = _paper(model)
    ops = np.asarray(graph.ops)
    gid = graph.colocation_ids
    assert len(graph.colocation_names) > 0
    for k, group in enumerate(graph.colocation_names):
        members = np.flatnonzero(gid == k)
        kinds = set(ops[members].tolist())
        assert {"VariableV2", "ApplyAdam"} <= kinds, group
        var = graph.index[group]  # the group is named after its variable, as loc:@<var> would give
        assert graph.ops[var] == "VariableV2"
        update = graph.index[f"Adam/update_{group}/ApplyAdam"]
        assert graph.colocation[update] == group
        assert var in graph.pred_idx[graph.pred_ptr[update]:graph.pred_ptr[update + 1]].tolist()


@pytest.mark.parametrize("model", MODELS)
def test_edges_of_one_tensor_carry_the_same_bytes(model: str) -> None:
    graph = _paper(model)
    key = graph.edge_src * 64 + graph.edge_src_output
    order = np.lexsort((graph.edge_bytes, key))
    same_tensor = key[order][1:] == key[order][:-1]
    assert np.all(graph.edge_bytes[order][1:][same_tensor] == graph.edge_bytes[order][:-1][same_tensor])
    assert np.all(graph.edge_bytes >= 0) and np.all(graph.memory_bytes >= 0)


@pytest.mark.parametrize("model", MODELS)
def test_meta(model: str) -> None:
    meta = _paper(model).meta
    assert meta["source"] == "synthetic"
    assert meta["model"] == model
    assert meta["seed"] == 0
    assert isinstance(meta["batch_size"], int) and meta["batch_size"] >= 1


# ---------------------------------------------------------------------------- the general generator
def test_training_step_graph_options() -> None:
    base = {"layers": 3, "width": 8, "batch_size": 2, "positions": 4, "classes": 10}
    plain = training_step_graph(**base)
    assert plain.name == "synthetic" and plain.meta["model"] == "synthetic"
    assert "Conv2D" not in plain.ops and "MatMul" in plain.ops
    conv = training_step_graph(**base, kernel="Conv2D", branches=2, join="concat", norm=True, residual=True,
                               extra_elementwise=3, reshapes=1, stages=1, name="conv", model="m")
    assert conv.meta == {"source": "synthetic", "model": "m", "seed": 0, "batch_size": 2}
    for op in ("Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "ConcatV2", "FusedBatchNormV3",
               "FusedBatchNormGradV3", "AddV2", "Mul", "Sigmoid", "Tanh", "TanhGrad", "Reshape", "Slice"):
        assert op in conv.ops, op
    added = training_step_graph(**base, branches=3, join="add")
    assert added.ops.count("AddN") >= 3
    assert not any(name.endswith("_grad/Conv2DBackpropInput") and "layer_0/" in name
                   for name in conv.node_names), "no gradient is computed for the input placeholder"


def test_padding_to_an_exact_node_count() -> None:
    natural = training_step_graph(layers=2, width=4).num_nodes
    padded = training_step_graph(layers=2, width=4, num_nodes=natural + 7, seed=3)
    assert padded.num_nodes == natural + 7
    pads = [i for i, name in enumerate(padded.node_names) if name.startswith("pad/")]
    assert len(pads) == 7
    assert np.all(padded.in_degree[pads] == 0) and np.all(padded.out_degree[pads] == 1)
    with pytest.raises(CeleritasInputError, match="num_nodes"):
        training_step_graph(layers=2, width=4, num_nodes=natural - 1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"layers": 0, "width": 4}, "layers"),
        ({"layers": 2, "width": 0}, "width"),
        ({"layers": 2, "width": 4, "branches": 0}, "branches"),
        ({"layers": 2, "width": 2, "branches": 3}, "width"),
        ({"layers": 2, "width": 4, "kernel": "Conv3D"}, "kernel"),
        ({"layers": 2, "width": 4, "join": "mul"}, "join"),
        ({"layers": 2, "width": 4, "seed": -1}, "seed"),
        ({"layers": True, "width": 4}, "layers"),
    ],
)
def test_bad_parameters(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(CeleritasInputError, match=field):
        training_step_graph(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- files
@pytest.mark.parametrize("model", MODELS)
def test_any_node_count_keeps_the_shape_and_ccr(model: str) -> None:
    paper = PAPER_MODELS[model]
    for nodes in (paper.nodes // 3, 2 * paper.nodes + 17):
        g = paper_shaped_graph(model, nodes=nodes)
        assert g.num_nodes == nodes
        assert ccr(g, DEFAULT_CLUSTER) == pytest.approx(paper.ccr, rel=0.01)
        assert set(g.ops) == set(_paper(model).ops)


@pytest.mark.parametrize("nodes", [0, 5, 10_000_001, 2.5, True])
def test_impossible_node_counts_name_the_field(nodes: object) -> None:
    with pytest.raises(CeleritasInputError, match=r"^nodes: "):
        paper_shaped_graph("transformer", nodes=nodes)  # type: ignore[arg-type]


def test_small_training_graph() -> None:
    graph = small_training_graph()
    assert graph.name == "training_step_small"
    assert 300 <= graph.num_nodes <= 600
    assert np.mean(graph.in_degree == 0) >= 0.10
    # the demo's 4 x 600 MiB devices: too big for one device, fits on four
    assert 600 * 2**20 < graph.total_memory_bytes < 4 * 600 * 2**20
    _assert_same(graph, small_training_graph(seed=0))


@pytest.mark.parametrize("make", [small_training_graph, lambda: _paper("tensor_holography")],
                         ids=["small", "tensor_holography"])
def test_round_trip_through_json(make, tmp_path: Path) -> None:
    graph = make()
    path = save_graph(graph, tmp_path / "g.json")
    _assert_same(load_graph(path), graph)


def test_bundled_example_is_up_to_date() -> None:
    """examples/graphs/training_step_small.json is what examples/make_examples.py writes today."""
    assert EXAMPLE.is_file(), "run examples/make_examples.py"
    _assert_same(load_graph(EXAMPLE), small_training_graph())
    assert EXAMPLE.stat().st_size < 300_000
