"""The default celeritas placer uses parallel work when it pays and keeps transfers off when they cost."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import celeritas_core.placers.portfolio as portfolio_module
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers import place
from celeritas_core.placers.local_search import (
    CandidatePool,
    critical_chain,
    critical_path_search,
    placement_units,
    robust_step_us,
)
from celeritas_core.simulation.simulator import simulate
from tests.conftest import make_graph
from tests.core.test_properties import SETTINGS, clusters, dags

FREE = {"slope_us_per_byte": 0.0, "intercept_us": 0.0}


def _two_chains(length: int = 10, time_us: float = 10.0) -> Graph:
    edges = [(f"{c}{i}", f"{c}{i + 1}") for c in "ab" for i in range(length - 1)]
    return make_graph(edges, default_time=time_us)


def test_two_independent_chains_with_free_transfers_halve_the_step():
    g = _two_chains()
    cluster = Cluster.homogeneous(2, 1e9, **FREE)
    p = place(g, cluster, "celeritas")
    assert p.single_device_time_us == pytest.approx(200.0)
    assert p.predicted_step_time_us == pytest.approx(100.0)
    assert p.extra["chosen"] != "adjusting"


def test_the_paper_placer_keeps_its_own_answer_on_the_same_graph():
    # refine=0 is the paper's path: with free cuts the DP fuses everything into one cluster
    g = _two_chains()
    p = place(g, Cluster.homogeneous(2, 1e9, **FREE), "celeritas", {"refine": 0})
    assert p.coarse_nodes == 1
    assert p.predicted_step_time_us == pytest.approx(200.0)


def test_a_chain_with_expensive_transfers_stays_on_one_device():
    edges = [(f"x{i}", f"x{i + 1}", 1e6) for i in range(20)]
    g = make_graph(edges, default_time=10.0)
    cluster = Cluster.homogeneous(4, 1e9, slope_us_per_byte=1e-4, intercept_us=25.0)
    p = place(g, cluster, "celeritas")
    assert len(set(p.assignment.tolist())) == 1
    assert p.predicted_step_time_us == pytest.approx(g.total_time_us)


def test_fork_join_moves_only_the_branch_worth_moving():
    # a and b are long and send small tensors; c is short and its tensors are huge
    edges = [("s", "a", 0), ("s", "b", 0), ("s", "c", 5e6), ("a", "t", 0), ("b", "t", 0), ("c", "t", 5e6)]
    g = make_graph(edges, times={"s": 1, "a": 100, "b": 100, "c": 10, "t": 1})
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=1e-4, intercept_us=5.0)
    p = place(g, cluster, "celeritas")
    dev = {name: p.device_of(name) for name in "sabct"}
    assert dev["a"] != dev["b"]
    assert dev["c"] == dev["s"] == dev["t"]
    assert p.predicted_step_time_us < 0.6 * p.single_device_time_us


def test_never_slower_than_one_device_when_one_device_holds_the_model():
    # heavy transfers everywhere: every split loses, so the answer is one device
    rng = np.random.default_rng(7)
    pairs = [(i, j) for i in range(30) for j in range(i + 1, 30) if rng.random() < 0.15]
    g = make_graph([(f"n{i}", f"n{j}", 1e7) for i, j in pairs],
                   nodes=[f"n{i}" for i in range(30)], default_time=5.0)
    cluster = Cluster.homogeneous(4, 1e9, slope_us_per_byte=1e-4, intercept_us=25.0)
    p = place(g, cluster, "celeritas")
    assert p.predicted_step_time_us <= p.single_device_time_us * (1 + 1e-12)


def test_critical_chain_follows_the_transfer_then_the_device():
    # x on device 0 feeds y on device 1 (transfer 5 µs); z waits for y on device 1
    g = make_graph([("x", "y"), ("y", "z")], times={"x": 10, "y": 10, "z": 10})
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=5.0)
    assignment = np.array([0, 1, 1])
    result = simulate(g, cluster, assignment)
    assert [g.node_names[v] for v in critical_chain(g, assignment, result)] == ["z", "y", "x"]


def test_search_moves_a_unit_off_a_busy_device():
    g = _two_chains(length=4)
    cluster = Cluster.homogeneous(2, 1e9, **FREE)
    pool = CandidatePool(g, cluster)
    start = pool.add("start", np.zeros(g.num_nodes, dtype=np.int64))
    better = critical_path_search(g, cluster, start, deadline=float("inf"))
    assert better.step_time_us < start.step_time_us
    assert better.name == "start+search"
    assert better.step_time_us == pytest.approx(simulate(g, cluster, better.assignment).step_time_us)


def test_search_respects_memory_and_colocation():
    g = make_graph([("a", "b"), ("c", "d")], memory={"a": 5, "b": 5, "c": 5, "d": 5},
                   colocation={"a": "g", "d": "g"}, default_time=10.0)
    units = placement_units(g)
    assert units[g.index["a"]] == units[g.index["d"]]
    cluster = Cluster.homogeneous(2, 15.0, **FREE)  # the group (10 bytes) and one op fit together
    pool = CandidatePool(g, cluster)
    start = pool.add("start", np.zeros(g.num_nodes, dtype=np.int64))  # 20 bytes on a 15-byte device
    assert not start.fits
    result = critical_path_search(g, cluster, start, deadline=float("inf"))
    assert colocation_respected(g, result.assignment)
    assert np.bincount(result.assignment, weights=g.memory_bytes, minlength=2).max() <= 20.0


@SETTINGS
@given(graph=dags(max_nodes=25), devices=st.integers(1, 4), scale=st.floats(0.3, 2.0),
       slope=st.sampled_from([0.0, 1e-5, 1e-3]), intercept=st.sampled_from([0.0, 5.0, 50.0]))
def test_celeritas_is_never_slower_than_its_best_candidates_robustly(graph, devices, scale, slope, intercept):
    """The result's robust step (documented step, or the mean over the search's orders when that
    is larger) is never above that of the pool's three best candidates and its one-device ones,
    and its predicted step never above one device's."""
    pools: list[CandidatePool] = []

    class Recorded(CandidatePool):
        def __init__(self, *args: object) -> None:
            super().__init__(*args)  # type: ignore[arg-type]
            pools.append(self)

    cluster = clusters(graph, devices, scale, slope, intercept)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(portfolio_module, "CandidatePool", Recorded)
        p = place(graph, cluster, "celeritas")
    assert colocation_respected(graph, p.assignment)

    def robust(assignment: np.ndarray) -> float:
        return robust_step_us(graph, cluster, assignment, simulate(graph, cluster, assignment))

    if pools and not p.oom:
        ranked = sorted(pools[0].candidates, key=lambda c: c.key)
        finalists = [c for c in ranked[:3] + [c for c in ranked if np.all(c.assignment == c.assignment[0])]
                     if c.fits]
        if finalists:
            assert robust(p.assignment) <= min(robust(c.assignment) for c in finalists) * (1 + 1e-9) + 1e-9
    if graph.total_memory_bytes <= cluster.memory_bytes.max():
        assert not p.oom
        assert p.predicted_step_time_us <= p.single_device_time_us * (1 + 1e-9) + 1e-9


def test_pool_replays_an_assignment_once_and_ranks_fitting_placements_first(monkeypatch):
    import celeritas_core.placers.local_search as ls

    g = make_graph([("a", "b")], memory={"a": 10, "b": 10}, times={"a": 10, "b": 10})
    cluster = Cluster.homogeneous(2, 15.0, **FREE)
    calls = []
    real = ls.simulate
    monkeypatch.setattr(ls, "simulate", lambda *a, **k: calls.append(1) or real(*a, **k))
    pool = CandidatePool(g, cluster)
    one = pool.add("one-device", np.array([0, 0]))
    again = pool.add("same", np.array([0, 0]))
    split = pool.add("split", np.array([0, 1]))
    assert len(calls) == 2 and again.step_time_us == one.step_time_us
    assert not one.fits and split.fits and one.step_time_us < split.step_time_us + 1e-9
    assert pool.best.name == "split"  # fits beats faster-but-OOM
    assert pool.summary() == {"one-device": None, "same": None, "split": pytest.approx(20.0)}
