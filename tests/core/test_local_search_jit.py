"""critical_chain (a compiled walk over a sorted transfer table) returns exactly the chain of the
original walk over a dict of transfer ends, kept here as the reference, compiled or run as Python."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from celeritas_core.compiled import jit
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers import local_search
from celeritas_core.placers.local_search import critical_chain
from celeritas_core.simulation.simulator import SimulationResult, simulate
from tests.core.test_simulator_jit import random_assignment, random_cluster, random_graph


def reference_chain(graph: Graph, assignment: np.ndarray, result: SimulationResult) -> list[int]:
    """critical_chain as it was: transfer ends in a dict keyed (src node, src_output, dst device)."""
    start, finish = result.start_us, result.finish_us
    tr = result.transfers
    arrival = dict(zip(zip(tr.src_node.tolist(), tr.src_output.tolist(), tr.dst_device.tolist(), strict=True),
                       tr.end_us.tolist(), strict=True))
    by_device = np.lexsort((finish, start, assignment))
    previous = np.full(graph.num_nodes, -1, dtype=np.int64)
    same = assignment[by_device[1:]] == assignment[by_device[:-1]]
    previous[by_device[1:][same]] = by_device[:-1][same]
    tolerance = 1e-9 * (float(finish.max(initial=0.0)) + 1.0)
    chain: list[int] = []
    seen: set[int] = set()
    v = int(np.argmax(finish)) if graph.num_nodes else -1
    while v >= 0 and v not in seen:
        chain.append(v)
        seen.add(v)
        if start[v] <= tolerance:
            break
        d, best, best_time = int(assignment[v]), -1, -np.inf
        for k in range(int(graph.pred_ptr[v]), int(graph.pred_ptr[v + 1])):
            u, e = int(graph.pred_idx[k]), int(graph.pred_edge[k])
            t = float(finish[u]) if int(assignment[u]) == d else arrival.get(
                (u, int(graph.edge_src_output[e]), d), float(finish[u]))
            if t > best_time:
                best, best_time = u, t
        w = int(previous[v])
        if best >= 0 and best_time >= start[v] - tolerance:
            v = best
        else:
            v = w if w >= 0 and finish[w] >= start[v] - tolerance else best
    return chain


def replayed(seed: int) -> tuple[Graph, np.ndarray, SimulationResult]:
    """A random graph, assignment and its replay (channels on or off)."""
    rng = np.random.default_rng(seed)
    graph, cluster = random_graph(rng), random_cluster(rng)
    assignment = random_assignment(rng, graph, cluster.num_devices)
    return graph, assignment, simulate(graph, cluster, assignment, channels=bool(rng.random() < 0.7))


@pytest.mark.parametrize("block", range(2))
def test_critical_chain_matches_the_reference(block: int) -> None:
    for seed in range(block, 120, 2):
        graph, assignment, result = replayed(seed)
        assert critical_chain(graph, assignment, result) == reference_chain(graph, assignment, result)


def test_the_last_listed_transfer_of_a_tensor_counts_and_unknown_ones_are_ignored() -> None:
    for seed in range(40):
        graph, assignment, result = replayed(seed)
        tr = result.transfers
        shifted = replace(tr, **{  # every transfer twice, the second copy arriving later; plus a stray one
            name: np.r_[getattr(tr, name), getattr(tr, name), value]
            for name, value in (("src_node", 0), ("src_output", 2**50), ("src_device", 0), ("dst_device", 0),
                                ("bytes", 0.0), ("start_us", 0.0))})
        shifted = replace(shifted, end_us=np.r_[tr.end_us, tr.end_us + 1.0, 1e9])
        moved = replace(result, transfers=shifted)
        assert critical_chain(graph, assignment, moved) == reference_chain(graph, assignment, moved)


@pytest.mark.skipif(not jit.ENABLED, reason="the walk runs as Python already")
@pytest.mark.usefixtures("compiled_loops")
def test_compiled_walk_equals_the_same_walk_run_as_python(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [replayed(seed) for seed in range(40)]
    compiled = [critical_chain(*case) for case in cases]
    for name, func in list(vars(local_search).items()):  # every compiled function
        if hasattr(func, "py_func"):
            monkeypatch.setattr(local_search, name, func.py_func)
    assert [critical_chain(*case) for case in cases] == compiled


def test_a_single_op_is_its_own_chain() -> None:
    graph = Graph.from_arrays(name="one", node_names=["a"], time_us=[3.0], memory_bytes=[1.0], edge_src=[],
                              edge_dst=[], edge_bytes=[])
    assignment = np.zeros(1, dtype=np.int64)
    assert critical_chain(graph, assignment, simulate(graph, Cluster.homogeneous(2, 1e9), assignment)) == [0]
