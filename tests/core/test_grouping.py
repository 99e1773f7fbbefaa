"""Baechi's co-placement grouping and operator fusion (celeritas_core.placers.grouping) on hand-made and
random graphs: the rules, acyclicity, co-location and the way back to the ops."""

from __future__ import annotations

import numpy as np
import pytest

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers import place
from celeritas_core.placers.etf import list_schedule
from celeritas_core.placers.grouping import (
    baechi_fusion,
    contract_groups,
    coplacement_groups,
    distinct_pairs,
    fuse_groups,
)
from tests.conftest import make_graph


def _same(groups: np.ndarray, g: Graph, *names: str) -> bool:
    return len({int(groups[g.index[x]]) for x in names}) == 1


def _partition(groups: np.ndarray) -> set[frozenset[int]]:
    return {frozenset(np.flatnonzero(groups == k).tolist()) for k in np.unique(groups).tolist()}


def test_a_chain_collapses_into_one_group_and_one_fused_node():
    g = make_graph([("a", "b", 8.0), ("b", "c", 8.0), ("c", "d", 8.0)],
                   times={"a": 1, "b": 2, "c": 3, "d": 4}, memory={"a": 10, "b": 20, "c": 30, "d": 40})
    fused = baechi_fusion(g)
    assert fused.groups.tolist() == [0, 0, 0, 0]
    assert fused.fused_of.tolist() == [0, 0, 0, 0]
    assert fused.graph.num_nodes == 1 and fused.graph.num_edges == 0
    assert fused.graph.time_us.tolist() == [10.0] and fused.graph.memory_bytes.tolist() == [100.0]


def test_baechi_unit_test_graph_groups_as_in_baechi():
    # op0 -> op1 -> op2 <- op4, op0 -> op3: op1 and op4 have one consumer (op2); op0 has two.
    g = make_graph([("op0", "op1"), ("op1", "op2"), ("op0", "op3"), ("op4", "op2")])
    groups = coplacement_groups(g)
    assert _same(groups, g, "op1", "op2", "op4")
    assert len(np.unique(groups)) == 3


def test_fork_join_branches_with_one_consumer_join_the_join():
    # a and b each feed only t, so Baechi groups them with t: one device, no branch parallelism.
    g = make_graph([("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")],
                   times={"s": 1, "a": 100, "b": 100, "t": 1})
    fused = baechi_fusion(g)
    assert _same(fused.groups, g, "a", "b", "t") and not _same(fused.groups, g, "s", "t")
    assert fused.graph.num_nodes == 2 and fused.graph.time_us.tolist() == [1.0, 201.0]


def test_fork_join_branches_with_two_consumers_keep_their_parallelism():
    # a and b each feed t and u: no op has a single consumer, so nothing is grouped and the
    # branches still run side by side on two devices.
    g = make_graph([("s", "a"), ("s", "b"), ("a", "t"), ("a", "u"), ("b", "t"), ("b", "u")],
                   times={"s": 1, "a": 100, "b": 100, "t": 1, "u": 1})
    fused = baechi_fusion(g)
    assert len(np.unique(fused.groups)) == g.num_nodes == fused.graph.num_nodes
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=5.0)
    p = place(g, cluster, "m-etf")
    assert p.device_of("a") != p.device_of("b")
    assert p.extra["fused_nodes"] == 5 and p.extra["groups"] == 5


def test_an_edge_whose_contraction_would_close_a_cycle_is_not_fused():
    # x and y are co-located; x -> y, and also x -> z -> y with z (two consumers) outside the
    # group. Fusing x -> y would give {x, y} -> z -> {x, y}: out(x) = 2 and in(y) = 2, so refused.
    g = make_graph([("x", "y"), ("x", "z"), ("z", "y"), ("z", "w")], colocation={"x": "g", "y": "g"})
    fused = baechi_fusion(g)
    assert _same(fused.groups, g, "x", "y") and not _same(fused.groups, g, "x", "z")
    assert fused.graph.num_nodes == 4
    cg = fused.graph
    assert cg.colocation[fused.fused_of[g.index["x"]]] == cg.colocation[fused.fused_of[g.index["y"]]]


def test_a_diamond_inside_one_group_fuses_completely():
    # All four ops co-located: a -> b is fused (out(a) = 2 but in(b) = 1), then {a, b} -> c
    # (in(c) = 1), then {a, b, c} -> d (out = 1): one node, acyclic at every step.
    g = make_graph([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
                   colocation=dict.fromkeys("abcd", "g"))
    fused = baechi_fusion(g)
    assert fused.graph.num_nodes == 1


def test_tensors_stay_distinct_between_fused_nodes():
    # p's output 0 goes to a (10 B) and b (30 B), output 1 to b (5 B); a and b fuse (both feed c
    # only). One edge per distinct tensor: output 0 as its largest edge (30 B), output 1 (5 B).
    g = Graph.from_arrays(name="t", node_names=["p", "a", "b", "c", "q"], time_us=[1] * 5,
                          memory_bytes=[1] * 5, edge_src=[0, 0, 0, 1, 2, 0],
                          edge_dst=[1, 2, 2, 3, 3, 4], edge_bytes=[10, 30, 5, 7, 7, 1],
                          edge_src_output=[0, 0, 1, 0, 0, 2])
    fused = baechi_fusion(g)
    cg = fused.graph
    to_abc = [e for e in range(cg.num_edges) if cg.edge_dst[e] == fused.fused_of[1]]
    assert fused.fused_of[1] == fused.fused_of[2] == fused.fused_of[3]
    assert sorted(cg.edge_bytes[to_abc].tolist()) == [5.0, 30.0]
    assert len({int(cg.edge_src_output[e]) for e in to_abc}) == 2


def test_ignore_control_edges_keeps_an_op_whose_only_consumer_is_a_control_edge_apart():
    g = make_graph([("a", "b", 0.0), ("b", "c", 4.0)])
    assert len(np.unique(coplacement_groups(g))) == 1
    groups = coplacement_groups(g, ignore_control_edges=True)
    assert not _same(groups, g, "a", "b") and _same(groups, g, "b", "c")


# ------------------------------------------------------------------ random DAGs
def _random_dag(seed: int) -> Graph:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    density = float(rng.uniform(0.02, 0.3))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < density]
    pairs += [(i, j) for i, j in pairs if rng.random() < 0.1]  # some parallel edges
    perm = rng.permutation(n)
    colocation: list[str | None] = [None] * n
    for k in range(int(rng.integers(0, 4))):
        for v in rng.choice(n, size=min(n, int(rng.integers(1, 4))), replace=False).tolist():
            colocation[int(perm[v])] = f"g{k}"
    return Graph.from_arrays(
        name=f"r{seed}", node_names=[f"op{i}" for i in range(n)],
        time_us=rng.lognormal(1.0, 1.0, n), memory_bytes=rng.integers(0, 100, n).astype(float),
        colocation=colocation, edge_src=[int(perm[i]) for i, _ in pairs],
        edge_dst=[int(perm[j]) for _, j in pairs], edge_bytes=rng.integers(0, 1000, len(pairs)).astype(float),
        edge_src_output=rng.integers(0, 3, len(pairs)))


def _fixpoint_groups(g: Graph) -> np.ndarray:
    """Baechi's loop, literally: merge an op's group into its only consumer's until nothing changes."""
    group = list(range(g.num_nodes))
    gid = g.colocation_ids.tolist()
    for v in range(g.num_nodes):  # TF co-location groups first
        if gid[v] >= 0:
            first = gid.index(gid[v])
            group = [group[first] if x == group[v] else x for x in group]
    src, dst = distinct_pairs(g)
    consumers: dict[int, set[int]] = {}
    for u, v in zip(src.tolist(), dst.tolist(), strict=True):
        consumers.setdefault(u, set()).add(v)
    changed = True
    while changed:
        changed = False
        for u, cs in consumers.items():
            (v,) = cs if len(cs) == 1 else (None,)
            if v is not None and group[u] != group[v]:
                old = group[u]
                group = [group[v] if x == old else x for x in group]
                changed = True
    return np.asarray(group)


@pytest.mark.parametrize("seed", range(60))
def test_random_dags_fuse_acyclic_keep_groups_and_map_every_op_once(seed):
    g = _random_dag(seed)
    groups = coplacement_groups(g)
    assert _partition(groups) == _partition(_fixpoint_groups(g))
    fused = fuse_groups(g, groups)
    cg = fused.graph  # Graph.from_arrays has checked it is acyclic
    k = cg.num_nodes
    assert fused.fused_of.shape == (g.num_nodes,) and sorted(set(fused.fused_of.tolist())) == list(range(k))
    # a fused node lies inside one group; co-location groups of the graph are never split
    for j in range(k):
        assert len(set(groups[fused.fused_of == j].tolist())) == 1
    assert colocation_respected(g, groups)
    assert np.allclose(np.bincount(fused.fused_of, weights=g.time_us, minlength=k), cg.time_us)
    assert cg.total_memory_bytes == pytest.approx(g.total_memory_bytes)
    # every op edge is inside a fused node or follows the fused graph's topological order
    fs, fd = fused.fused_of[g.edge_src], fused.fused_of[g.edge_dst]
    cross = fs != fd
    assert np.all(cg.topological_rank[fs[cross]] < cg.topological_rank[fd[cross]])
    assert {(int(a), int(b)) for a, b in zip(fs[cross], fd[cross], strict=True)} == \
        set(zip(cg.edge_src.tolist(), cg.edge_dst.tolist(), strict=True))
    # fused nodes of one group carry the same co-location name, different groups different names
    names = {groups[int(np.flatnonzero(fused.fused_of == j)[0])]: cg.colocation[j] for j in range(k)}
    assert len(set(names.values())) == len(names)
    # scheduling the fused graph and mapping back keeps co-location
    cluster = Cluster.homogeneous(3, 1e12, slope_us_per_byte=1e-3, intercept_us=2.0)
    assignment = fused.to_ops(list_schedule(cg, cluster).assignment)
    assert colocation_respected(g, assignment)


def test_contraction_labels_follow_the_topological_order():
    g = make_graph([("c", "d"), ("a", "b"), ("b", "c")], colocation={"a": "g", "b": "g"})
    fused_of = contract_groups(g, coplacement_groups(g))
    assert fused_of.tolist() == [0, 0, 0, 0]  # one chain: one fused node
    h = make_graph([("x", "y"), ("x", "z")])
    assert contract_groups(h, coplacement_groups(h)).tolist() == h.topological_rank.tolist()


def test_m_etf_and_m_sct_fusion_zero_schedule_the_ops_and_fusion_one_maps_back():
    g = make_graph([("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")],
                   times={"s": 1, "a": 100, "b": 100, "t": 1})
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=5.0)
    assert place(g, cluster, "m-etf", {"fusion": 0}).assignment.tolist() == \
        list_schedule(g, cluster, live_memory=True, baechi_ties=True).assignment.tolist()
    for name in ("m-etf", "m-sct"):
        p = place(g, cluster, name)
        assert p.params["fusion"] == 1 and p.coarse_nodes == p.extra["fused_nodes"] == 2
        assert p.device_of("a") == p.device_of("b") == p.device_of("t")
