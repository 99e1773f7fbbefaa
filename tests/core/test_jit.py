"""The compiled hot loops (celeritas_core.compiled.jit): Numba is in use, and each compiled loop returns
exactly what the same function returns run as Python."""

from __future__ import annotations

import numpy as np
import pytest

from celeritas_core.compiled import jit
from celeritas_core.generators import families
from celeritas_core.graphs import dagloops
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.levels import cpath, edge_comm_us
from celeritas_core.graphs.orders import cpd_topo_order
from celeritas_core.placers.fusion import _segment_dp, optimal_breakpoints

# the compiled side of each comparison must run compiled, however small its input
pytestmark = pytest.mark.usefixtures("compiled_loops")


def _python(func):
    """The Python function behind a compiled dispatcher."""
    return func.py_func


def test_numba_compiles_the_hot_loops():
    # numba is a pinned dependency: without it a million-op graph would take minutes to place
    assert jit.ENABLED
    assert hasattr(dagloops.stack_order, "py_func")


def _graphs():
    for seed, tasks, ccr in [(0, 40, 1.0), (1, 300, 5.0), (2, 900, 0.2)]:
        yield families.layered_dag(seed=seed, tasks=tasks, ccr=ccr)
    yield families.towers_graph(seed=3)


@pytest.mark.parametrize("graph", list(_graphs()), ids=lambda g: g.name)
def test_dag_loops_compiled_equal_python(graph):
    comm = edge_comm_us(graph, Cluster.homogeneous(4, 1e12))
    ptr, nbr, eid, indeg = graph.succ_ptr, graph.succ_idx, graph.succ_edge, graph.in_degree
    sources = np.flatnonzero(indeg == 0).astype(np.int64)[::-1].copy()
    for func, args in [
        (dagloops.stack_order, (ptr, nbr, indeg, sources)),
        (dagloops.fifo_order, (ptr, nbr, indeg)),
        (dagloops.top_levels, (graph.topological_order, ptr, nbr, eid, graph.time_us, comm)),
        (dagloops.bottom_levels, (graph.topological_order, ptr, nbr, eid, graph.time_us, comm)),
    ]:
        np.testing.assert_array_equal(func(*args), _python(func)(*args))


def test_stack_order_stops_short_on_a_cycle():
    ptr = np.array([0, 1, 2, 3])
    nbr = np.array([1, 2, 1])  # 0 -> 1 -> 2 -> 1
    indeg = np.array([0, 2, 1])
    assert dagloops.stack_order(ptr, nbr, indeg, np.array([0])).tolist() == [0]


@pytest.mark.parametrize("R,cap", [(1, np.inf), (5, np.inf), (40, 1e6), (200, 3e5)])
def test_fusion_dp_compiled_equals_python(R, cap, monkeypatch):
    graph = families.layered_dag(seed=7, tasks=600, ccr=3.0)
    comm = edge_comm_us(graph, Cluster.homogeneous(4, 1e12))
    order = cpd_topo_order(graph, comm, cpath=cpath(graph, comm))
    memory = np.random.default_rng(0).uniform(0, 1e5, graph.num_nodes)
    compiled = optimal_breakpoints(graph, order, comm, memory, R=R, memory_cap=cap)
    monkeypatch.setattr("celeritas_core.placers.fusion._segment_dp", _python(_segment_dp))
    interpreted = optimal_breakpoints(graph, order, comm, memory, R=R, memory_cap=cap)
    np.testing.assert_array_equal(compiled[0], interpreted[0])
    assert compiled[1] == interpreted[1]
