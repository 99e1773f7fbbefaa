"""Liveness-aware peak memory of a replay: hand-made graphs with known peaks, OOM by peak, properties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph, Liveness
from celeritas_core.placers import place
from celeritas_core.readwrite.formats import graph_from_json, graph_to_json, placement_to_json
from celeritas_core.simulation.memory import memory_profile
from celeritas_core.simulation.simulator import simulate
from tests.core.test_properties import SETTINGS

X = 100.0


def _live_graph(names: list[str], edges: list[tuple[str, str]], *, persistent: dict[str, float] | None = None,
                scratch: dict[str, float] | None = None, out: float = X) -> Graph:
    """Every op runs 10 µs and has one output of ``out`` bytes; memory_bytes is the sum model."""
    persistent = persistent or {}
    scratch = scratch or {}
    index = {n: i for i, n in enumerate(names)}
    live = Liveness.from_lists([persistent.get(n, 0.0) for n in names], [scratch.get(n) for n in names],
                               [[out] for _ in names])
    memory = [persistent.get(n, 0.0) + out + scratch.get(n, 0.0) for n in names]
    return Graph.from_arrays(name="live", node_names=names, time_us=[10.0] * len(names), memory_bytes=memory,
                             edge_src=[index[a] for a, _ in edges], edge_dst=[index[b] for _, b in edges],
                             edge_bytes=[out] * len(edges), liveness=live)


def _peaks(graph: Graph, assignment: list[int], devices: int = 1) -> np.ndarray:
    cluster = Cluster.homogeneous(devices, 1e12, slope_us_per_byte=0.0, intercept_us=5.0)
    a = np.asarray(assignment)
    return memory_profile(graph, devices, a, simulate(graph, cluster, a)).peak_bytes


def test_a_chain_frees_as_it_goes():
    names = [f"x{i}" for i in range(6)]
    g = _live_graph(names, list(itertools.pairwise(names)))
    assert _peaks(g, [0] * 6)[0] == pytest.approx(2 * X)  # an op's input and output, never more
    assert g.total_memory_bytes == pytest.approx(6 * X)


def test_a_fork_keeps_both_branches_live():
    g = _live_graph(["s", "a", "b", "t"], [("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")])
    assert _peaks(g, [0, 0, 0, 0])[0] == pytest.approx(3 * X)  # s, a and b while b runs


def test_a_training_step_keeps_forward_activations_until_their_gradients():
    names = ["f1", "f2", "f3", "g3", "g2", "g1"]
    edges = [("f1", "f2"), ("f2", "f3"), ("f3", "g3"), ("g3", "g2"), ("g2", "g1"), ("f1", "g1"), ("f2", "g2")]
    g = _live_graph(names, edges)
    # while g2 runs: f1 (kept for g1), f2 (its input), g3 (its input) and g2's own output
    assert _peaks(g, [0] * 6)[0] == pytest.approx(4 * X)


def test_persistent_and_scratch_bytes():
    g = _live_graph(["v", "a", "b"], [("v", "a"), ("a", "b")], persistent={"v": 1000.0}, scratch={"a": 50.0})
    assert _peaks(g, [0, 0, 0])[0] == pytest.approx(1000 + 2 * X + 50)


def test_a_received_copy_lives_on_the_receiver_until_its_last_consumer():
    g = _live_graph(["a", "b", "c"], [("a", "b"), ("a", "c"), ("b", "c")])
    peaks = _peaks(g, [0, 1, 1], devices=2)
    assert peaks[0] == pytest.approx(X)  # a's output, until its transfer has left
    assert peaks[1] == pytest.approx(3 * X)  # the copy of a, b's and c's outputs while c runs


def test_graph_without_liveness_fields_keeps_the_sum():
    g = Graph.from_arrays(name="old", node_names=["a", "b"], time_us=[1, 1], memory_bytes=[7, 5],
                          edge_src=[0], edge_dst=[1], edge_bytes=[3])
    assert _peaks(g, [0, 1], devices=2).tolist() == [7.0, 5.0]


def test_fits_by_peak_but_not_by_sum_is_accepted_and_over_peak_is_oom():
    names = [f"x{i}" for i in range(6)]
    g = _live_graph(names, list(itertools.pairwise(names)))
    fits = place(g, Cluster.homogeneous(1, 3 * X), "single")  # sum 6X, peak 2X
    assert not fits.oom
    assert fits.device_peak_memory_bytes.tolist() == [2 * X] and fits.device_memory_bytes.tolist() == [6 * X]
    assert fits.single_device_peak_memory_bytes == pytest.approx(2 * X)
    tight = place(g, Cluster.homogeneous(1, 1.5 * X), "single")
    assert tight.oom and tight.oom_devices == ("gpu:0",)
    doc = placement_to_json(tight)
    assert doc["device_peak_memory_bytes"] == [200] and doc["single_device_peak_memory_bytes"] == 200.0


def test_liveness_fields_round_trip_through_json_and_are_checked():
    g = _live_graph(["v", "a"], [("v", "a")], persistent={"v": 1000.0}, scratch={"a": 50.0})
    doc = graph_to_json(g)
    assert doc["nodes"][0]["persistent_bytes"] == 1000 and doc["nodes"][1]["scratch_bytes"] == 50
    back = graph_from_json(doc)
    assert back.liveness is not None
    assert back.liveness.outputs(1).tolist() == [X]
    assert _peaks(back, [0, 0]).tolist() == _peaks(g, [0, 0]).tolist()
    doc["nodes"][1]["output_bytes"] = [-1]
    with pytest.raises(Exception, match="node 'a': field 'output_bytes\\[0\\]' must be finite and >= 0"):
        graph_from_json(doc)


@st.composite
def live_dags(draw: st.DrawFn) -> Graph:
    """A random DAG whose ops all carry persistent, output and scratch bytes."""
    n = draw(st.integers(2, 25))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.2]
    outs = rng.integers(1, 3, n)
    sizes = [rng.integers(0, 1000, k).astype(float).tolist() for k in outs]
    src_out = [int(rng.integers(0, outs[i])) for i, _ in pairs]
    persistent = rng.integers(0, 500, n).astype(float)
    scratch = rng.integers(0, 200, n).astype(float)
    return Graph.from_arrays(
        name="rand", node_names=[f"n{i}" for i in range(n)], time_us=rng.integers(0, 50, n),
        memory_bytes=persistent + scratch + np.array([sum(s) for s in sizes]),
        edge_src=[i for i, _ in pairs], edge_dst=[j for _, j in pairs],
        edge_bytes=[sizes[i][o] for (i, _), o in zip(pairs, src_out, strict=True)], edge_src_output=src_out,
        liveness=Liveness.from_lists(persistent.tolist(), scratch.tolist(), sizes))


@SETTINGS
@given(graph=live_dags())
def test_one_device_peak_is_between_the_largest_live_set_and_the_sum(graph):
    live = graph.liveness
    one = np.zeros(graph.num_nodes, dtype=np.int64)
    peak = _peaks(graph, one.tolist())[0]
    assert peak <= graph.total_memory_bytes + 1e-6
    persistent = live.persistent_bytes.sum()
    for v in range(graph.num_nodes):  # while v runs: its inputs, its outputs, its scratch
        inputs = {(int(graph.edge_src[e]), int(graph.edge_src_output[e]))
                  for e in np.flatnonzero(graph.edge_dst == v)}
        in_bytes = sum(live.outputs(u)[o] for u, o in inputs)
        assert peak >= persistent + live.scratch_bytes[v] + live.outputs(v).sum() + in_bytes - 1e-6


@SETTINGS
@given(graph=live_dags(), seed=st.integers(0, 1000))
def test_peak_never_exceeds_sum_plus_received_copies(graph, seed):
    devices = 3
    a = np.random.default_rng(seed).integers(0, devices, graph.num_nodes)
    cluster = Cluster.homogeneous(devices, 1e12, slope_us_per_byte=1e-3, intercept_us=5.0)
    result = simulate(graph, cluster, a)
    peaks = memory_profile(graph, devices, a, result).peak_bytes
    sums = np.bincount(a, weights=graph.memory_bytes, minlength=devices)
    received = np.bincount(result.transfers.dst_device, weights=result.transfers.bytes, minlength=devices)
    assert np.all(peaks <= sums + received + 1e-6)


def test_planning_bytes_add_up_to_the_one_device_peak():
    from celeritas_core.simulation.memory import planning_memory_bytes

    names = [f"x{i}" for i in range(6)]
    g = _live_graph(names, list(itertools.pairwise(names)), persistent={"x0": 50.0})
    planning = planning_memory_bytes(g)
    assert planning.sum() == pytest.approx(50 + 2 * X)
    assert planning[0] >= 50  # persistent bytes count in full


def test_placers_plan_by_peak_and_keep_the_headroom_free():
    from celeritas_core.errors import CeleritasInputError

    names = [f"x{i}" for i in range(6)]
    g = _live_graph(names, list(itertools.pairwise(names)))  # sum 6X, one-device peak 2X
    cluster = Cluster.homogeneous(2, 3 * X, slope_us_per_byte=0.0, intercept_us=50.0)
    p = place(g, cluster, "order-place", {"R": 1})  # by the sum it would need both devices
    assert not p.oom and len(set(p.assignment.tolist())) == 1
    roomy = place(g, cluster, "celeritas", headroom=0.2)
    assert roomy.extra["headroom"] == 0.2 and not roomy.oom
    assert roomy.device_peak_memory_bytes.max() <= 0.8 * 3 * X
    with pytest.raises(CeleritasInputError, match=r"headroom: must be in \[0, 1\)"):
        place(g, cluster, "celeritas", headroom=1.0)


# ---------------------------------------------------------------------------- peak-memory repair
def _two_branches() -> Graph:
    """A training-like chain f1..f4, g4..g1 (forward activations kept for their gradients: peak 5X on
    one device) beside a chain l1..l8 that frees as it goes (peak 2X). Planning bytes spread the
    one-device peak evenly over the 16 ops, so a placer that splits the branches thinks both fit
    into 4.5X; by replay the f/g branch alone needs 5X."""
    fg = [f"f{i}" for i in range(1, 5)] + [f"g{i}" for i in range(4, 0, -1)]
    chain = [f"l{i}" for i in range(1, 9)]
    edges = [*itertools.pairwise(fg), *((f"f{i}", f"g{i}") for i in range(1, 4)), *itertools.pairwise(chain)]
    return _live_graph(fg + chain, edges)


def _tight(capacity: float = 4.5 * X) -> Cluster:
    return Cluster.homogeneous(2, capacity, slope_us_per_byte=0.0, intercept_us=1.0)


def _excess(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> float:
    result = simulate(graph, cluster, assignment)
    peaks = memory_profile(graph, cluster.num_devices, assignment, result).peak_bytes
    return float(np.maximum(peaks - cluster.memory_bytes, 0.0).sum())


def _repair(graph: Graph, cluster: Cluster, start, *, budget: int = 10**6, stats: dict | None = None):
    from celeritas_core.placers.local_search import peak_memory_repair

    return peak_memory_repair(graph, cluster, start, budget=budget, stats=stats)


def test_live_bytes_by_op_charges_what_is_live_at_an_instant():
    from celeritas_core.simulation.memory import live_bytes_by_op

    g = _live_graph(["a", "b", "c"], [("a", "b"), ("a", "c"), ("b", "c")])
    cluster = Cluster.homogeneous(2, 1e12, slope_us_per_byte=0.0, intercept_us=5.0)
    a = np.array([0, 1, 1])
    result = simulate(g, cluster, a)
    assert result.start_us[2] == pytest.approx(25.0)
    # while c runs: b holds its output; c its output and the inputs it keeps live (the copy of a, b's output)
    assert live_bytes_by_op(g, a, result, 1, 25.0).tolist() == [0.0, X, 3 * X]
    # while b runs: the copy of a and b's output (allocated when b starts) are each charged to b and c
    assert live_bytes_by_op(g, a, result, 1, 20.0).tolist() == [0.0, 2 * X, 2 * X]
    assert live_bytes_by_op(g, a, result, 0, 5.0).tolist() == [X, 0.0, 0.0]
    assert live_bytes_by_op(g, a, result, 0, 25.0).tolist() == [0.0, 0.0, 0.0]  # sent at 10, freed at 15


def test_peak_memory_repair_strictly_lowers_the_excess():
    from celeritas_core.placers.local_search import CandidatePool

    g, cluster = _two_branches(), _tight()
    pool = CandidatePool(g, cluster)
    start = pool.add("split", np.array([0] * 8 + [1] * 8))  # the fastest placement: 80 µs
    assert start.excess_bytes == pytest.approx(0.5 * X)
    stats: dict = {}
    repaired = _repair(g, cluster, start, stats=stats)
    assert repaired.name == "split+repair" and repaired.excess_bytes < start.excess_bytes
    assert repaired.excess_bytes == _excess(g, cluster, repaired.assignment) == 0.0
    assert stats["moves"] >= 1 and stats["stopped"] == "fits" and 0 < stats["replays"] * g.num_nodes <= 10**6
    # no budget, nothing to repair, or no liveness fields: the start comes back unchanged
    assert _repair(g, cluster, start, budget=0) is start
    assert _repair(g, _tight(1e6), start) is start
    no_live = Graph.from_arrays(name="old", node_names=g.node_names, time_us=g.time_us,
                                memory_bytes=g.memory_bytes, edge_src=g.edge_src, edge_dst=g.edge_dst,
                                edge_bytes=g.edge_bytes)
    assert _repair(no_live, cluster, start) is start


def test_peak_memory_repair_keeps_no_move_that_does_not_lower_the_excess():
    from celeritas_core.placers.local_search import CandidatePool

    names = [f"x{i}" for i in range(6)]
    g = _live_graph(names, list(itertools.pairwise(names)), persistent={"x2": 10 * X})  # x2 alone: 11X
    cluster = _tight()
    pool = CandidatePool(g, cluster)
    start = pool.add("one", np.zeros(6, dtype=np.int64))
    stats: dict = {}
    # 7.5X over wherever x2 goes: no move is kept, and it stops after one round
    assert _repair(g, cluster, start, stats=stats) is start
    assert stats == {"moves": 0, "replays": 6, "stopped": "no improving move"}  # each op tried once


def test_critical_path_search_keeps_a_fitting_placement_fitting_by_peak():
    import time

    from celeritas_core.placers.local_search import CandidatePool, critical_path_search

    g, cluster = _two_branches(), _tight()
    pool = CandidatePool(g, cluster)
    start = pool.add("fits", np.array([0, 0, 0, 0, 0, 1, 0, 0] + [1] * 8))  # g3 beside the chain: 91 µs
    assert start.fits
    faster_but_over = pool.add("back", np.array([0] * 8 + [1] * 8))  # one move away: g3 back
    assert faster_but_over.step_time_us < start.step_time_us and not faster_but_over.fits
    best = critical_path_search(g, cluster, start, deadline=time.perf_counter() + 60)
    assert best.step_time_us < start.step_time_us  # it still improves ...
    assert best.fits and _excess(g, cluster, best.assignment) == 0.0  # ... but never past capacity


def test_celeritas_fits_where_the_summed_bytes_placers_overflow():
    g, cluster = _two_branches(), _tight()
    p = place(g, cluster, "celeritas")
    assert not p.oom and np.all(p.device_peak_memory_bytes <= cluster.memory_bytes)
    for name in ("metis", "m-topo", "heft", "m-etf"):  # planning bytes: over by their replayed peak
        assert place(g, cluster, name).oom, name
    ample = place(g, _tight(10 * X), "celeritas")  # fits without moves: no repair stage
    assert "memory_repair" not in ample.extra and not ample.oom


def test_memory_repair_repairs_every_start_that_could_still_win():
    from celeritas_core.placers.local_search import CandidatePool
    from celeritas_core.placers.portfolio import memory_repair

    g, cluster = _two_branches(), _tight()
    pool = CandidatePool(g, cluster)
    pool.add("split", np.array([0] * 8 + [1] * 8))  # the fastest, over by 0.5X
    pool.add("alternate", np.arange(16) % 2)  # slower and also over
    report = memory_repair(g, cluster, pool, budget=10**6)
    assert report["excess_before_bytes"] > 0 and report["excess_after_bytes"] == 0.0
    assert report["starts"] >= 1 and report["moves"] >= 1
    assert pool.best.fits and pool.best.name.endswith("+repair")
    assert _excess(g, cluster, pool.best.assignment) == 0.0
    # a start slower than a placement that already fits is not repaired
    slow = CandidatePool(g, cluster)
    slow.add("fits", np.array([0, 0, 0, 0, 0, 1, 0, 0] + [1] * 8))
    slow.add("over-and-slower", np.zeros(16, dtype=np.int64))
    assert slow.candidates[1].step_time_us >= slow.candidates[0].step_time_us and not slow.candidates[1].fits
    assert memory_repair(g, cluster, slow, budget=10**6)["starts"] == 0


def test_a_placement_that_cannot_fit_is_flagged_with_its_device_and_excess():
    names = [f"x{i}" for i in range(6)]
    g = _live_graph(names, list(itertools.pairwise(names)), persistent={"x2": 10 * X})  # x2 alone: 11X
    cluster = _tight()
    p = place(g, cluster, "celeritas")
    assert p.oom and p.cannot_fit and "skipped" in p.extra["memory_repair"]  # x2's working set: 11X > 4.5X
    device = p.assignment[2]
    assert p.oom_devices == (cluster.device_names[device],)
    excess = placement_to_json(p)["extra"]["oom_excess_bytes"]  # what the placement file says
    assert excess == p.evaluation.oom_excess_bytes
    assert set(excess) == {cluster.device_names[device]}
    assert excess[cluster.device_names[device]] == pytest.approx(p.device_peak_memory_bytes[device] - 4.5 * X)
    assert excess[cluster.device_names[device]] >= 10 * X + X - 4.5 * X
