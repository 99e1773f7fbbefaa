"""HEFT (Topcuoglu et al. 2002) with insertion and memory: hand-made graphs with known optima,
memory and co-location rules, and schedule validity on random DAGs."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers import place
from celeritas_core.placers.heft import heft_order, heft_schedule, upward_rank
from celeritas_core.simulation.bounds import lower_bound_us
from tests.conftest import make_graph


def _devices(g: Graph, assignment: np.ndarray) -> dict[str, int]:
    return {name: int(assignment[i]) for i, name in enumerate(g.node_names)}


def _free(devices: int = 2, memory: float = 1e9) -> Cluster:
    return Cluster.homogeneous(devices, memory, slope_us_per_byte=0.0, intercept_us=0.0)


def _two_chains() -> Graph:
    return make_graph([("a1", "a2"), ("a2", "a3"), ("b1", "b2"), ("b2", "b3")], default_time=10.0)


def test_two_independent_chains_with_free_transfers_halve_the_makespan():
    g = _two_chains()
    res = heft_schedule(g, _free())
    assert res.makespan_us == pytest.approx(30.0)  # 60 µs of work on two devices
    heft, single = place(g, _free(), "heft"), place(g, _free(), "single")
    assert heft.predicted_step_time_us == pytest.approx(30.0)
    assert single.predicted_step_time_us == pytest.approx(60.0)


def test_a_chain_with_expensive_transfers_stays_on_one_device():
    g = make_graph([("a", "b", 100.0), ("b", "c", 100.0), ("c", "d", 100.0)], default_time=10.0)
    cluster = Cluster.homogeneous(3, 1e9, slope_us_per_byte=1.0, intercept_us=5.0)
    res = heft_schedule(g, cluster)
    assert res.assignment.tolist() == [0, 0, 0, 0]
    assert res.makespan_us == pytest.approx(40.0)


def test_fork_join_branches_split_when_transfers_are_cheap():
    g = make_graph([("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")],
                   times={"s": 1, "a": 100, "b": 100, "t": 1})
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=5.0)
    res = heft_schedule(g, cluster)
    dev = _devices(g, res.assignment)
    assert dev["a"] != dev["b"]
    # s [0, 1]; one branch [1, 101] beside s, the other [6, 106] remote; t where the later branch
    # finished: max(101 + 5, 106) = 106 -> 107.
    assert res.makespan_us == pytest.approx(107.0)
    single = place(g, cluster, "single").predicted_step_time_us
    assert place(g, cluster, "heft").predicted_step_time_us <= single
    expensive = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=500.0)
    assert heft_schedule(g, expensive).assignment.tolist() == [0, 0, 0, 0]


def test_insertion_fills_an_idle_gap_before_a_remote_input():
    # p forks to q and r (100 µs each); the one on gpu:1 waits 5 µs for p's tensor, leaving gpu:1
    # idle on [0, 5 + 1): z (5 µs, lowest rank, scheduled last, ready at 0) fits in that gap.
    g = make_graph([("p", "q"), ("p", "r")], nodes=["z"], times={"p": 1, "q": 100, "r": 100, "z": 5})
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=5.0)
    order = heft_order(g, upward_rank(g, cluster)).tolist()
    assert order[-1] == g.index["z"]
    res = heft_schedule(g, cluster)
    z = g.index["z"]
    remote = 1 - int(res.assignment[g.index["p"]])
    assert res.assignment[z] == remote and res.start_us[z] == 0.0
    assert res.makespan_us == pytest.approx(106.0)  # without insertion z would end at 111


def test_upward_rank_uses_mean_time_and_mean_transfer():
    g = make_graph([("a", "b", 10.0)], times={"a": 6, "b": 4})
    cluster = Cluster.build(["x", "y"], [1e9, 1e9], [1.0, 2.0], slope_us_per_byte=1.0, intercept_us=2.0)
    # mean 1/speed = 0.75; mean transfer = (1/2)·(10 + 2) = 6
    assert upward_rank(g, cluster).tolist() == pytest.approx([6 * 0.75 + 6 + 4 * 0.75, 4 * 0.75])


def test_a_device_without_room_is_skipped_and_best_effort_when_none_has_room():
    g = make_graph([("a", "b"), ("b", "c")], memory={"a": 1, "b": 1, "c": 1})
    cluster = Cluster.homogeneous(2, 2.0, slope_us_per_byte=0.0, intercept_us=1000.0)
    res = heft_schedule(g, cluster)
    assert res.assignment.tolist() == [0, 0, 1] and res.best_effort_ops == 0
    tight = make_graph([("a", "b"), ("b", "c")], memory={"a": 3, "b": 2, "c": 5})
    small = Cluster.build(["x", "y"], [3.0, 4.0], slope_us_per_byte=0.0, intercept_us=1.0)
    res = heft_schedule(tight, small)
    assert res.assignment.tolist() == [0, 1, 1] and res.best_effort_ops == 1  # c fits nowhere
    p = place(tight, small, "heft")
    assert p.oom_devices == ("y",) and p.extra["best_effort_ops"] == 1


def test_node_memory_overrides_the_graph_memory():
    g = make_graph([("a", "b"), ("b", "c")], memory={"a": 1, "b": 1, "c": 1})
    cluster = Cluster.homogeneous(2, 2.0, slope_us_per_byte=0.0, intercept_us=1000.0)
    assert heft_schedule(g, cluster, node_memory=np.zeros(3)).assignment.tolist() == [0, 0, 0]


def test_a_colocation_group_stays_together_and_is_charged_whole():
    edges = [("a", "c"), ("a", "b")]
    times = {"a": 10, "b": 10, "c": 10}
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=1.0)
    free = heft_schedule(make_graph(edges, times=times), cluster)
    assert free.assignment[1] != free.assignment[2]  # b and c split without the group
    grouped = make_graph(edges, times=times, colocation={"a": "g", "c": "g"})
    res = heft_schedule(grouped, cluster)
    assert colocation_respected(grouped, res.assignment)
    # each group needs 3 bytes at its first member, so the second group cannot share gpu:0
    g = make_graph([("v1", "u1"), ("v2", "u2")], times={"v1": 0, "v2": 0, "u1": 10, "u2": 10},
                   memory={"v1": 1, "v2": 1, "u1": 2, "u2": 2},
                   colocation={"v1": "g1", "u1": "g1", "v2": "g2", "u2": "g2"})
    res = heft_schedule(g, Cluster.homogeneous(2, 3.0, slope_us_per_byte=0.0, intercept_us=1.0))
    assert _devices(g, res.assignment) == {"v1": 0, "u1": 0, "v2": 1, "u2": 1}
    assert res.best_effort_ops == 0


def _random_dag(seed: int, n: int = 40) -> Graph:
    rng = np.random.default_rng(seed)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.12]
    perm = rng.permutation(n)
    colocation: list[str | None] = [None] * n
    for v in rng.choice(n, size=3, replace=False).tolist():
        colocation[int(perm[v])] = "g"
    return Graph.from_arrays(
        name="random", node_names=[f"op{i}" for i in range(n)],
        time_us=np.round(rng.lognormal(2.0, 1.0, n), 1) * (rng.random(n) > 0.1),
        memory_bytes=rng.integers(0, 100, n).astype(float), colocation=colocation,
        edge_src=[int(perm[i]) for i, _ in pairs], edge_dst=[int(perm[j]) for _, j in pairs],
        edge_bytes=rng.integers(0, 10**5, len(pairs)).astype(float))


@pytest.mark.parametrize("seed", range(12))
def test_random_schedules_are_valid_and_above_the_lower_bound(seed):
    g = _random_dag(seed)
    cluster = Cluster.build(["a", "b", "c"], [0.5 * g.total_memory_bytes] * 3, [1.0, 1.0, 2.0],
                            slope_us_per_byte=1e-4, intercept_us=[0.0, 5.0, 50.0][seed % 3])
    res = heft_schedule(g, cluster)
    dev, start, fin = res.assignment, res.start_us, res.finish_us
    assert colocation_respected(g, dev)
    assert np.allclose(fin - start, g.time_us / cluster.speed[dev])
    for s, d, b in zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_bytes.tolist(), strict=True):
        arrive = fin[s] + (0.0 if dev[s] == dev[d] else cluster.comm_time_us(b))
        assert start[d] >= arrive - 1e-9
    for k in range(cluster.num_devices):  # no two ops overlap on a device
        busy = sorted((start[v], fin[v]) for v in np.flatnonzero((dev == k) & (fin > start)).tolist())
        assert all(a[1] <= b[0] + 1e-9 for a, b in pairwise(busy))
    assert res.makespan_us >= lower_bound_us(g, cluster) * (1 - 1e-9)
    for fusion in (0, 1):
        p = place(g, cluster, "heft", {"fusion": fusion})
        assert colocation_respected(g, p.assignment)
        assert p.predicted_step_time_us >= p.lower_bound_us * (1 - 1e-9)
