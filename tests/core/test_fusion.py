"""Optimal Operation Fusion: the DP against brute force, the coarse graph, loops, caps, co-location."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.levels import ccr
from celeritas_core.graphs.orders import is_topological
from celeritas_core.placers.fusion import coarse_graph, optimal_breakpoints, optimal_operation_fusion
from tests.conftest import make_graph


def _random_dag(rng: np.random.Generator, n: int, p: float):
    edges = [(f"n{i}", f"n{j}", float(rng.integers(0, 1000)))
             for i in range(n) for j in range(i + 1, n) if rng.random() < p]
    return make_graph(edges, nodes=[f"n{i}" for i in range(n)],
                      times={f"n{i}": float(rng.random() * 10) for i in range(n)},
                      memory={f"n{i}": float(rng.integers(0, 10)) for i in range(n)})


def _brute_force(graph, order, comm, memory, R, cap) -> tuple[float, int]:
    """Reference DP straight from the paper's definition of cost(v_i, v_j).

    Returns the optimal cost and the fewest clusters among the optimal segmentations.
    """
    n = graph.num_nodes
    pos = np.empty(n, dtype=int)
    pos[order] = np.arange(n)
    a, b = pos[graph.edge_src], pos[graph.edge_dst]
    best = [(0.0, 0)] + [(np.inf, 0)] * n
    for j in range(1, n + 1):
        for d in range(1, min(R, j) + 1):
            i = j - d
            if d > 1 and memory[order[i:j]].sum() > cap:
                continue
            cut = float(comm[(a >= i) & (a < j) & (b >= j)].sum())
            cand = (best[i][0] + cut, best[i][1] + 1)
            if cand[0] < best[j][0] - 1e-9 or (abs(cand[0] - best[j][0]) <= 1e-9 and cand[1] < best[j][1]):
                best[j] = cand
    return best[n]


def _brute_force_cost(graph, order, comm, memory, R, cap) -> float:
    return _brute_force(graph, order, comm, memory, R, cap)[0]


def test_optimal_breakpoints_match_brute_force(rng):
    for _ in range(150):
        n = int(rng.integers(1, 13))
        g = _random_dag(rng, n, float(rng.random()))
        comm = rng.random(g.num_edges) * 10
        R = int(rng.integers(1, n + 2))
        cap = float(rng.integers(0, 30))
        bounds, cost = optimal_breakpoints(g, g.topological_order, comm, g.memory_bytes, R=R, memory_cap=cap)
        ref_cost, ref_clusters = _brute_force(g, g.topological_order, comm, g.memory_bytes, R, cap)
        assert cost == pytest.approx(ref_cost)
        assert len(bounds) - 1 == ref_clusters  # among optimal cuts, the fewest clusters
        sizes = np.diff(bounds)
        assert bounds[0] == 0 and bounds[-1] == n
        assert np.all(sizes >= 1) and np.all(sizes <= R)
        for lo, hi in itertools.pairwise(bounds):
            assert hi - lo == 1 or g.memory_bytes[g.topological_order[lo:hi]].sum() <= cap


def test_rounding_noise_does_not_split_zero_cost_stretches():
    # A chain whose cut costs (0.1, 0.2, ...) are inexact in binary, then independent 3-op groups
    # (like an optimizer's variable/slots/update groups) that can be cut for free. Optimal costs
    # reached through different cuts differ by rounding noise only; that noise must not decide the
    # segmentation: among optimal cuts the DP keeps the fewest clusters.
    rng = np.random.default_rng(0)
    for _ in range(40):
        chain, groups, R = (int(x) for x in rng.integers((20, 10, 10), (80, 40, 40)))
        edges = [(f"c{i}", f"c{i + 1}") for i in range(chain)]
        edges += [(f"g{k}a", f"g{k}b") for k in range(groups)]
        edges += [(f"g{k}b", f"g{k}c") for k in range(groups)]
        g = make_graph(edges)
        comm = np.zeros(g.num_edges)
        comm[:chain] = np.round(rng.random(chain) * 3, 1) + 0.1
        order = g.topological_order
        bounds, cost = optimal_breakpoints(g, order, comm, g.memory_bytes, R=R)
        ref_cost, ref_clusters = _brute_force(g, order, comm, g.memory_bytes, R, np.inf)
        assert cost == pytest.approx(ref_cost)
        assert len(bounds) - 1 == ref_clusters, (chain, groups, R)


def test_breakpoints_cut_the_cheapest_edge():
    # chain a-b-c-d with one cheap edge b->c; R=2 forces one cut: it must be the cheap one.
    g = make_graph([("a", "b", 100.0), ("b", "c", 1.0), ("c", "d", 100.0)])
    comm = g.edge_bytes.copy()
    bounds, cost = optimal_breakpoints(g, g.topological_order, comm, g.memory_bytes, R=2)
    assert bounds.tolist() == [0, 2, 4]
    assert cost == 1.0


def test_breakpoints_reject_non_topological_order():
    g = make_graph([("a", "b")])
    with pytest.raises(ValueError, match="not topological"):
        optimal_breakpoints(g, np.array([1, 0]), np.ones(1), g.memory_bytes)


def test_merging_non_adjacent_nodes_makes_a_loop():
    # Figure 4: u -> w -> v and u -> v. Merging u and v (not adjacent in u, w, v) loops.
    g = make_graph([("u", "w"), ("w", "v"), ("u", "v")])
    _u, w, _v = (g.index[x] for x in "uwv")
    bad = np.zeros(3, dtype=np.int64)
    bad[w] = 1
    with pytest.raises(CeleritasInputError, match="cycle"):
        coarse_graph(g, bad, 2)
    # contiguous runs of the order never loop
    fusion = optimal_operation_fusion(g, Cluster.homogeneous(2, 1e9), R=2)
    assert is_topological(fusion.coarse, np.arange(fusion.num_clusters))


def test_coarse_graph_sums_costs_and_counts_a_tensor_once_per_cluster():
    g = make_graph(
        [("a", "c", 100.0), ("a", "d", 100.0), ("b", "c", 7.0)],
        times={"a": 1, "b": 2, "c": 3, "d": 4}, memory={"a": 10, "b": 20, "c": 30, "d": 40},
        nodes=["a", "b", "c", "d"],
    )
    cluster_of = np.array([0, 0, 1, 1])
    coarse = coarse_graph(g, cluster_of, 2)
    assert coarse.time_us.tolist() == [3.0, 7.0]
    assert coarse.memory_bytes.tolist() == [30.0, 70.0]
    # a's output reaches c and d in cluster 1 once (100) plus b's tensor (7)
    assert coarse.num_edges == 1
    assert coarse.edge_bytes.tolist() == [107.0]


def test_distinct_outputs_are_summed():
    g = make_graph([("a", "b", 5.0), ("a", "c", 6.0)], nodes=["a", "b", "c"])
    g = type(g).from_arrays(name="t", node_names=g.node_names, time_us=g.time_us,
                            memory_bytes=g.memory_bytes, edge_src=g.edge_src, edge_dst=g.edge_dst,
                            edge_bytes=g.edge_bytes, edge_src_output=[0, 1])
    coarse = coarse_graph(g, np.array([0, 1, 1]), 2)
    assert coarse.edge_bytes.tolist() == [11.0]


def test_r_and_memory_cap_bound_clusters(rng):
    g = _random_dag(rng, 80, 0.05)
    cluster = Cluster.homogeneous(4, float(g.memory_bytes.sum()))
    assert optimal_operation_fusion(g, cluster, R=1).num_clusters == 80
    whole = optimal_operation_fusion(g, cluster, R=80, memory_fraction=1.0)
    assert whole.num_clusters == 1 and whole.cut_cost_us == 0.0
    capped = optimal_operation_fusion(g, cluster, R=80, memory_fraction=0.1)
    cap = 0.1 * float(g.memory_bytes.sum())
    for k in range(capped.num_clusters):
        members = capped.members(k)
        assert len(members) == 1 or g.memory_bytes[members].sum() <= cap


def test_fusion_lowers_ccr_on_a_chain_heavy_graph():
    edges = [(f"c{k}_{i}", f"c{k}_{i + 1}", 1e5) for k in range(4) for i in range(99)]
    edges += [(f"c{k}_99", "sink", 1e5) for k in range(4)]
    g = make_graph(edges, default_time=1.0)
    cluster = Cluster.homogeneous(4, 1e12)
    fusion = optimal_operation_fusion(g, cluster, R=50)
    assert fusion.num_clusters <= 20
    assert ccr(fusion.coarse, cluster) < ccr(g, cluster) / 5


def test_colocation_memory_is_charged_to_the_anchor():
    g = make_graph([("var", "read"), ("read", "loss"), ("loss", "update"), ("var", "update")],
                   memory={"var": 100, "read": 1, "loss": 1, "update": 50},
                   colocation={"var": "g", "update": "g"})
    fusion = optimal_operation_fusion(g, Cluster.homogeneous(2, 1e9), R=1)
    anchor = fusion.anchor
    assert anchor[g.index["update"]] == g.index["var"]
    var_cluster = fusion.cluster_of[g.index["var"]]
    upd_cluster = fusion.cluster_of[g.index["update"]]
    assert fusion.coarse.memory_bytes[var_cluster] == 150
    assert fusion.coarse.memory_bytes[upd_cluster] == 0
