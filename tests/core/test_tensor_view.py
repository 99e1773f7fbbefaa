"""Graph.tensors: the one grouping of edges into tensors (producer, src_output) that the simulator,
fusion, the list schedulers, the partitioners and the memory model share."""

from __future__ import annotations

import numpy as np
import pytest

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph, Liveness, TensorView
from celeritas_core.graphs.levels import edge_comm_us
from celeritas_core.placers.etf import list_schedule
from celeritas_core.placers.fusion import coarse_graph
from celeritas_core.placers.grouping import baechi_fusion
from celeritas_core.placers.metis import unit_graph
from celeritas_core.placers.partition import tensor_nets
from celeritas_core.simulation import simulator
from celeritas_core.simulation.memory import memory_profile
from celeritas_core.simulation.simulator import simulate

HUGE = 2**62


def _graph(names: str, edges: list[tuple[str, str, float, int]], **kwargs) -> Graph:
    """Ops named by the letters of ``names``; edges (src, dst, bytes, src_output)."""
    index = {c: i for i, c in enumerate(names)}
    return Graph.from_arrays(
        name="t", node_names=list(names), time_us=[10.0] * len(names), memory_bytes=[1.0] * len(names),
        edge_src=[index[s] for s, _, _, _ in edges], edge_dst=[index[d] for _, d, _, _ in edges],
        edge_bytes=[b for _, _, b, _ in edges], edge_src_output=[o for _, _, _, o in edges], **kwargs)


def _slots(ptr: np.ndarray, values: np.ndarray) -> list[list[int]]:
    return [values[ptr[i]:ptr[i + 1]].tolist() for i in range(len(ptr) - 1)]


def test_parallel_edges_of_one_tensor_are_one_tensor_sized_by_the_largest_edge():
    g = _graph("abc", [("a", "b", 100.0, 0), ("a", "c", 200.0, 0), ("a", "b", 300.0, 0)])
    t = g.tensors
    assert t.num_tensors == 1
    assert t.producer.tolist() == [0] and t.output.tolist() == [0]
    assert t.nbytes.tolist() == [300.0]
    assert t.edge_tensor.tolist() == [0, 0, 0]
    assert _slots(t.consumer_ptr, t.consumer) == [[1, 2]]
    assert _slots(t.consumer_ptr, t.consumer_bytes) == [[300.0, 200.0]]
    assert t.edge_consumer_slot.tolist() == [0, 1, 0]
    assert _slots(t.input_ptr, t.input_tensor) == [[], [0], [0]]


def test_several_outputs_are_numbered_by_producer_then_output():
    # b's outputs listed out of order; a has one output read by two ops
    g = _graph("abcd", [("b", "d", 8.0, 2), ("a", "b", 4.0, 0), ("b", "c", 16.0, 0), ("a", "c", 4.0, 0),
                        ("b", "d", 32.0, 1), ("b", "c", 8.0, 2)])
    t = g.tensors
    assert list(zip(t.producer.tolist(), t.output.tolist(), strict=True)) == [(0, 0), (1, 0), (1, 1), (1, 2)]
    assert t.nbytes.tolist() == [4.0, 16.0, 32.0, 8.0]
    assert t.edge_tensor.tolist() == [3, 0, 1, 0, 2, 3]
    assert t.producer_ptr.tolist() == [0, 1, 4, 4, 4]
    assert t.local_index.tolist() == [0, 0, 1, 2]
    assert t.max_per_producer == 3
    assert _slots(t.consumer_ptr, t.consumer) == [[1, 2], [2], [3], [2, 3]]
    assert _slots(t.input_ptr, t.input_tensor) == [[], [0], [0, 1, 3], [2, 3]]
    assert t.ids(np.array([1, 1, 0, 0, 2, 7, -1]), np.array([2, 0, 0, 1, 0, 0, 0])).tolist() == \
        [3, 1, 0, -1, -1, -1, -1]


def test_a_control_edge_on_its_own_slot_is_its_own_tensor_and_transfer():
    # TensorFlow's control input ^a: 0 bytes on the slot one past a's data outputs
    g = _graph("abc", [("a", "b", 64.0, 0), ("a", "c", 0.0, 1), ("a", "c", 64.0, 0)])
    t = g.tensors
    assert list(zip(t.producer.tolist(), t.output.tolist(), strict=True)) == [(0, 0), (0, 1)]
    assert t.nbytes.tolist() == [64.0, 0.0]
    assert _slots(t.consumer_ptr, t.consumer) == [[1, 2], [2]]
    cluster = Cluster.homogeneous(2, 1e9)
    tr = simulate(g, cluster, np.array([0, 0, 1])).transfers
    assert tr.src_output.tolist() == [0, 1]  # two transfers to c's device: the data and the control
    assert tr.bytes.tolist() == [64.0, 0.0]


def test_huge_src_output_ids_do_not_overflow_any_user():
    edges = [("a", "b", 8.0, HUGE), ("a", "c", 16.0, HUGE - 1), ("a", "c", 4.0, 0), ("b", "d", 2.0, HUGE),
             ("c", "d", 1.0, HUGE), ("a", "d", 8.0, HUGE)]
    g = _graph("abcd", edges)
    t = g.tensors
    assert list(zip(t.producer.tolist(), t.output.tolist(), strict=True)) == \
        [(0, 0), (0, HUGE - 1), (0, HUGE), (1, HUGE), (2, HUGE)]
    assert t.ids(np.array([0, 2, 3]), np.array([HUGE, HUGE, HUGE])).tolist() == [2, 4, -1]
    cluster = Cluster.homogeneous(2, 1e9)
    assignment = np.array([0, 1, 1, 0])
    tr = simulate(g, cluster, assignment).transfers
    assert list(zip(tr.src_node.tolist(), tr.dst_device.tolist(), tr.src_output.tolist(), strict=True)) == \
        [(0, 1, 0), (0, 1, HUGE - 1), (0, 1, HUGE), (1, 0, HUGE), (2, 0, HUGE)]
    incidence, cost = tensor_nets(g, edge_comm_us(g, cluster), np.arange(4), 4)
    assert incidence.shape == (5, 4) and len(cost) == 5
    fused = baechi_fusion(g).graph
    assert fused.num_nodes >= 1
    coarse = coarse_graph(g, np.array([0, 1, 1, 2]), 3)
    assert coarse.edge_bytes.tolist() == [8.0 + 20.0, 8.0, 3.0]  # a's tensors into {b, c}; into d; b, c -> d
    assert unit_graph(g).num_units == 4
    assert list_schedule(g, cluster).assignment.shape == (4,)
    live = Liveness.from_lists([0.0] * 4, [0.0] * 4, [[100.0], None, None, None])
    lg = _graph("abcd", edges, liveness=live)
    peak = memory_profile(lg, 2, assignment, simulate(lg, cluster, assignment)).peak_bytes
    assert np.all(np.isfinite(peak))


def test_transfer_grouping_without_the_mixed_radix_key_gives_the_same_replay(monkeypatch):
    rng = np.random.default_rng(3)
    n = 40
    edges = [(int(i), int(j)) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.15]
    g = Graph.from_arrays(name="r", node_names=[f"n{i}" for i in range(n)], time_us=rng.random(n) * 50,
                          memory_bytes=np.ones(n), edge_src=[e[0] for e in edges],
                          edge_dst=[e[1] for e in edges], edge_bytes=rng.integers(0, 10**6, len(edges)),
                          edge_src_output=rng.integers(0, 3, len(edges)) * HUGE // 2)
    cluster = Cluster.homogeneous(3, 1e9)
    assignment = rng.integers(0, 3, n)
    wide = simulate(g, cluster, assignment)
    monkeypatch.setattr(simulator, "_KEY_LIMIT", 0)  # force the dense-rank fallback
    ranked = simulate(g, cluster, assignment)
    assert ranked.step_time_us == wide.step_time_us
    for field in ("src_node", "src_output", "dst_device", "bytes", "start_us", "end_us"):
        assert getattr(ranked.transfers, field).tolist() == getattr(wide.transfers, field).tolist()


def test_a_graph_without_edges_has_no_tensors():
    g = Graph.from_arrays(name="e", node_names=["a", "b"], time_us=[1.0, 1.0], memory_bytes=[0.0, 0.0],
                          edge_src=[], edge_dst=[], edge_bytes=[])
    t = g.tensors
    assert t.num_tensors == 0 and t.producer_ptr.tolist() == [0, 0, 0]
    assert t.consumer_ptr.tolist() == [0] and t.input_ptr.tolist() == [0, 0, 0]
    assert t.ids(np.array([0]), np.array([0])).tolist() == [-1]


def test_the_view_is_computed_once_per_graph(monkeypatch):
    g = _graph("abc", [("a", "b", 100.0, 0), ("a", "c", 200.0, 1), ("b", "c", 50.0, 0)])
    calls = []
    build = TensorView.build

    def counting(*args, **kwargs):
        calls.append(1)
        return build(*args, **kwargs)

    monkeypatch.setattr(TensorView, "build", counting)
    first = g.tensors
    assert g.tensors is first
    cluster = Cluster.homogeneous(2, 1e9)
    for assignment in ([0, 1, 1], [1, 0, 1]):
        simulate(g, cluster, np.array(assignment))
    list_schedule(g, cluster)
    tensor_nets(g, edge_comm_us(g, cluster), np.arange(3), 3)
    coarse_graph(g, np.array([0, 1, 1]), 2)
    assert len(calls) == 1
    assert first.consumer_ptr is first.consumer_ptr  # the CSR arrays are cached too


@pytest.mark.parametrize("seed", range(20))
def test_the_view_matches_a_dictionary_grouping(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 30))
    edges = [(int(i), int(j)) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.25]
    edges += [edges[k] for k in rng.integers(0, len(edges), size=len(edges) // 2)] if edges else []
    outputs = rng.integers(0, 4, len(edges)) * rng.choice([1, 2**40])
    nbytes = rng.integers(0, 1000, len(edges)).astype(float)
    g = Graph.from_arrays(name="r", node_names=[f"n{i}" for i in range(n)], time_us=np.ones(n),
                          memory_bytes=np.ones(n), edge_src=[e[0] for e in edges],
                          edge_dst=[e[1] for e in edges], edge_bytes=nbytes, edge_src_output=outputs)
    largest: dict[tuple[int, int], float] = {}
    into: dict[tuple[int, int], dict[int, float]] = {}
    for (u, v), o, b in zip(edges, outputs.tolist(), nbytes.tolist(), strict=True):
        largest[(u, o)] = max(largest.get((u, o), 0.0), b)
        into.setdefault((u, o), {})[v] = max(into.get((u, o), {}).get(v, 0.0), b)
    keys = sorted(largest)
    t = g.tensors
    assert list(zip(t.producer.tolist(), t.output.tolist(), strict=True)) == keys
    assert t.nbytes.tolist() == [largest[k] for k in keys]
    assert [keys[i] for i in t.edge_tensor.tolist()] == \
        [(u, o) for (u, _), o in zip(edges, outputs.tolist(), strict=True)]
    assert _slots(t.consumer_ptr, t.consumer) == [sorted(into[k]) for k in keys]
    assert _slots(t.consumer_ptr, t.consumer_bytes) == [[into[k][v] for v in sorted(into[k])] for k in keys]
    assert t.ids(t.producer, t.output).tolist() == list(range(len(keys)))
