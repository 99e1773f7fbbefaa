"""Topological orders, levels and the paper's Figure 3 situation (M-TOPO vs DFS-TOPO)."""

from __future__ import annotations

import numpy as np
import pytest

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.levels import blevel, ccr, cpath, critical_path_length_us, tlevel
from celeritas_core.graphs.orders import cpd_topo_order, dfs_topo_order, is_topological, m_topo_order
from celeritas_core.placers.adjusting import order_place
from tests.conftest import make_graph


def _names(graph, order) -> list[str]:
    return [graph.node_names[i] for i in order]


def _cut_edges(graph, device) -> int:
    return int(np.count_nonzero(device[graph.edge_src] != device[graph.edge_dst]))


@pytest.fixture
def weights_chain():
    """Figure 3: a chain x1..x4, each x_i also reading a source w_i (in-degree 0)."""
    edges = [("w1", "x1"), ("w2", "x2"), ("w3", "x3"), ("w4", "x4"),
             ("x1", "x2"), ("x2", "x3"), ("x3", "x4")]
    return make_graph(edges, nodes=["w1", "w2", "w3", "w4", "x1", "x2", "x3", "x4"])


def test_m_topo_takes_all_sources_first(weights_chain):
    assert _names(weights_chain, m_topo_order(weights_chain)) == [
        "w1", "w2", "w3", "w4", "x1", "x2", "x3", "x4"]


def test_dfs_topo_follows_children(weights_chain):
    assert _names(weights_chain, dfs_topo_order(weights_chain)) == [
        "w1", "x1", "w2", "x2", "w3", "x3", "w4", "x4"]


def test_figure3_mtopo_cuts_more_edges_than_dfs_topo(weights_chain):
    two_halves = Cluster.homogeneous(2, 4.0)  # 8 unit-memory ops: 4 fit on each device
    m_dev = order_place(weights_chain, two_halves, m_topo_order(weights_chain))
    d_dev = order_place(weights_chain, two_halves, dfs_topo_order(weights_chain))
    assert _cut_edges(weights_chain, m_dev) == 4
    assert _cut_edges(weights_chain, d_dev) == 1


def test_levels_match_hand_computation():
    # a(2) -> b(3) -> d(1); a -> c(5) -> d ; edge comm given explicitly
    g = make_graph([("a", "b"), ("b", "d"), ("a", "c"), ("c", "d")],
                   times={"a": 2, "b": 3, "c": 5, "d": 1})
    comm = np.array([1.0, 1.0, 10.0, 1.0])  # edges in listed order
    assert tlevel(g, comm).tolist() == [0.0, 3.0, 18.0, 12.0]  # a, b, d, c (first-mention order)
    assert blevel(g, comm).tolist() == [19.0, 5.0, 1.0, 7.0]
    assert cpath(g, comm).tolist() == [19.0, 8.0, 19.0, 19.0]
    assert critical_path_length_us(g) == 8.0


def test_cpd_topo_prefers_critical_child():
    # s has children a (long path) and b (short); CPD-TOPO must take a's branch first.
    g = make_graph([("s", "b"), ("s", "a"), ("a", "a2"), ("b", "t"), ("a2", "t")],
                   times={"s": 1, "a": 10, "a2": 10, "b": 1, "t": 1})
    assert _names(g, cpd_topo_order(g)) == ["s", "a", "a2", "b", "t"]
    assert _names(g, dfs_topo_order(g)) == ["s", "b", "a", "a2", "t"]


def test_cpd_topo_sources_by_decreasing_cpath():
    g = make_graph([("small", "t"), ("big", "t")], times={"small": 1, "big": 9, "t": 1})
    assert _names(g, cpd_topo_order(g))[0] == "big"


def test_ccr_is_comm_over_work():
    g = make_graph([("a", "b", 1000.0)], times={"a": 10, "b": 30})
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.01, intercept_us=2.0)
    assert ccr(g, cluster) == pytest.approx((0.01 * 1000 + 2) / 40)


@pytest.mark.parametrize("order_fn", [m_topo_order, dfs_topo_order, cpd_topo_order])
def test_orders_are_topological_on_random_dags(order_fn, rng):
    for _ in range(20):
        n = int(rng.integers(2, 60))
        edges = [(f"n{i}", f"n{j}") for i in range(n) for j in range(i + 1, n) if rng.random() < 0.1]
        g = make_graph(edges, nodes=[f"n{i}" for i in rng.permutation(n)],
                       times={f"n{i}": float(rng.random()) for i in range(n)})
        assert is_topological(g, order_fn(g))


def test_is_topological_rejects_bad_orders(weights_chain):
    good = dfs_topo_order(weights_chain)
    assert is_topological(weights_chain, good)
    assert not is_topological(weights_chain, good[::-1])
    assert not is_topological(weights_chain, good[:-1])
