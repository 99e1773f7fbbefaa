"""Property-based tests on random DAGs with random costs, co-location groups and clusters."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.orders import cpd_topo_order, dfs_topo_order, is_topological, m_topo_order
from celeritas_core.placers import PLACERS, place
from celeritas_core.placers.compare import params_for
from celeritas_core.placers.fusion import optimal_operation_fusion


@st.composite
def dags(draw: st.DrawFn, max_nodes: int = 40) -> Graph:
    """A random DAG (edges only from lower to higher index, then names shuffled)."""
    n = draw(st.integers(1, max_nodes))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.floats(0.0, 0.4))
    rng = np.random.default_rng(seed)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < density]
    perm = rng.permutation(n)  # node indices need not be topological
    groups = draw(st.integers(0, 3))
    colocation = [None] * n
    for g in range(groups):
        for node in rng.choice(n, size=min(n, int(rng.integers(1, 4))), replace=False):
            colocation[int(perm[node])] = f"group{g}"
    return Graph.from_arrays(
        name="random",
        node_names=[f"op{i}" for i in range(n)],
        time_us=rng.lognormal(2.0, 1.0, n),
        memory_bytes=rng.integers(0, 100, n).astype(float),
        colocation=colocation,
        edge_src=[int(perm[i]) for i, _ in pairs],
        edge_dst=[int(perm[j]) for _, j in pairs],
        edge_bytes=rng.integers(0, 10**6, len(pairs)).astype(float),
        edge_src_output=rng.integers(0, 2, len(pairs)),
    )


def clusters(graph: Graph, devices: int, memory_scale: float, slope: float, intercept: float) -> Cluster:
    """Devices holding ``memory_scale`` × the graph's memory each (at least its largest group)."""
    total = max(graph.total_memory_bytes, 1.0)
    gid = graph.colocation_ids
    grouped = gid >= 0
    largest = 0.0
    if grouped.any():
        largest = float(np.bincount(gid[grouped], weights=graph.memory_bytes[grouped]).max())
    return Cluster.homogeneous(devices, max(memory_scale * total, largest, 1.0),
                               slope_us_per_byte=slope, intercept_us=intercept)


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
cluster_args = st.tuples(st.integers(1, 5), st.floats(0.2, 2.0), st.sampled_from([0.0, 1e-5, 1e-3]),
                         st.sampled_from([0.0, 5.0, 50.0]))


@SETTINGS
@given(dags())
def test_every_order_is_topological(graph: Graph) -> None:
    for order in (m_topo_order(graph), dfs_topo_order(graph), cpd_topo_order(graph)):
        assert is_topological(graph, order)


@SETTINGS
@given(dags(), cluster_args, st.integers(1, 50), st.floats(0.05, 1.0))
def test_coarse_graph_is_acyclic_and_partitions_the_ops(graph, cargs, R, fraction) -> None:
    cluster = clusters(graph, *cargs)
    fusion = optimal_operation_fusion(graph, cluster, R=R, memory_fraction=fraction)
    coarse = fusion.coarse
    assert np.all(coarse.edge_src < coarse.edge_dst)  # cluster index order is topological
    assert np.array_equal(np.sort(np.concatenate([fusion.members(k) for k in range(fusion.num_clusters)])),
                          np.arange(graph.num_nodes))
    assert coarse.total_time_us == np.float64(graph.time_us.sum()) or np.isclose(
        coarse.total_time_us, graph.total_time_us)
    assert np.isclose(coarse.total_memory_bytes, graph.total_memory_bytes)


@SETTINGS
@given(dags(), cluster_args, st.sampled_from(sorted(PLACERS)), st.integers(1, 30))
def test_placements_are_complete_colocated_and_above_the_lower_bound(graph, cargs, placer, R) -> None:
    cluster = clusters(graph, *cargs)
    # the MILP gets 1 s: a dense 40-op graph can take minutes to prove optimal (tests/test_optimal.py)
    p = place(graph, cluster, placer, params_for(placer, {"R": R, "time_limit": 1.0}))
    assert p.assignment.shape == (graph.num_nodes,)
    assert p.assignment.min() >= 0 and p.assignment.max() < cluster.num_devices
    assert colocation_respected(graph, p.assignment)
    assert p.predicted_step_time_us >= p.lower_bound_us * (1 - 1e-9)
    if cluster.memory_bytes.min() >= graph.total_memory_bytes:  # any one device holds everything
        assert not p.oom


NEVER_SLOWER_COUNTEREXAMPLE = (
    "the paper's claim does not hold in our simulator: Adjusting Placement decides with per-edge EST "
    "estimates that ignore send/receive channel contention, so a move that looks earlier by more than "
    "back_cost can delay successors (docs/algorithms.md, 'Never slower than Order-Place?')"
)


@pytest.mark.xfail(strict=False, reason=NEVER_SLOWER_COUNTEREXAMPLE)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.integers(2, 4), st.sampled_from([0.0, 1e-5, 1e-3]), st.sampled_from([0.0, 5.0, 50.0]),
       st.integers(1, 10))
def test_adjusting_placement_never_slower_than_order_place_with_unlimited_memory(
        graph, devices, slope, intercept, R) -> None:
    """The paper's claim (section "Adjusting Placement"), checked in the simulator."""
    cluster = Cluster.homogeneous(devices, 1e18, slope_us_per_byte=slope, intercept_us=intercept)
    adjusting = place(graph, cluster, "celeritas", {"R": R, "refine": 0})
    ordered = place(graph, cluster, "order-place", {"R": R})
    assert adjusting.predicted_step_time_us <= ordered.predicted_step_time_us * (1 + 1e-9)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.integers(2, 4), st.sampled_from([0.0, 1e-5, 1e-3]), st.sampled_from([0.0, 5.0, 50.0]),
       st.integers(1, 10))
def test_refined_celeritas_never_slower_than_order_place_with_unlimited_memory(
        graph, devices, slope, intercept, R) -> None:
    """With the communication refinement the claim holds: one of its candidates is Order-Place's
    all-on-one-device placement, and it keeps the fastest candidate."""
    cluster = Cluster.homogeneous(devices, 1e18, slope_us_per_byte=slope, intercept_us=intercept)
    refined = place(graph, cluster, "celeritas", {"R": R})
    ordered = place(graph, cluster, "order-place", {"R": R})
    assert refined.predicted_step_time_us <= ordered.predicted_step_time_us * (1 + 1e-9)


def counterexample_graph() -> Graph:
    """The smallest counterexample hypothesis found (2 devices, 0 µs/B + 50 µs per transfer, R=1)."""
    return Graph.from_arrays(
        name="never-slower-counterexample",
        node_names=[f"op{i}" for i in range(9)],
        time_us=[16.14017331, 9.62588314, 5.39826273, 31.75406293, 52.47087829, 44.77432488,
                 27.52524999, 10.56324382, 2.20710426],
        memory_bytes=[59.0, 79.0, 87.0, 7.0, 5.0, 67.0, 33.0, 57.0, 15.0],
        colocation=[None, None, None, None, None, None, "group0", None, "group0"],
        edge_src=[4, 4, 7, 7, 6, 6, 0, 2],
        edge_dst=[0, 5, 2, 1, 0, 8, 5, 8],
        edge_bytes=[860040.0, 450339.0, 894993.0, 796324.0, 705342.0, 230642.0, 767009.0, 52021.0],
        edge_src_output=[1, 0, 1, 0, 1, 0, 1, 1],
    )


@pytest.mark.xfail(strict=True, reason=NEVER_SLOWER_COUNTEREXAMPLE)
def test_never_slower_counterexample_is_documented() -> None:
    """Strict: if a placer change fixes this graph, the test XPASSes and the docs must be updated."""
    graph = counterexample_graph()
    cluster = Cluster.homogeneous(2, 1e18, slope_us_per_byte=0.0, intercept_us=50.0)
    adjusting = place(graph, cluster, "celeritas", {"R": 1, "refine": 0})
    ordered = place(graph, cluster, "order-place", {"R": 1})
    assert adjusting.predicted_step_time_us <= ordered.predicted_step_time_us * (1 + 1e-9)
