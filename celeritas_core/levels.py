"""Top level, bottom level and critical-path length of every node (paper, eqs. 2–3).

``tlevel(v)`` is the longest path from a source to ``v`` excluding ``v``'s own time;
``blevel(v)`` the longest path from ``v`` to a sink including it; ``cpath = tlevel + blevel``.
Edge weights are transfer times from the cluster's linear model (µs), as if every edge crossed
devices. Reference: Y.-K. Kwok and I. Ahmad, "Static scheduling algorithms for allocating
directed task graphs to multiprocessors", ACM Computing Surveys 31(4), 1999.
"""

from __future__ import annotations

import numpy as np

from celeritas_core.cluster import Cluster
from celeritas_core.graph import Graph


def edge_comm_us(graph: Graph, cluster: Cluster) -> np.ndarray:
    """Transfer time (µs) of each edge if its endpoints sat on different devices."""
    return np.asarray(cluster.comm_time_us(graph.edge_bytes), dtype=np.float64)


def tlevel(graph: Graph, comm_us: np.ndarray | None = None) -> np.ndarray:
    """Longest path (µs) from any source to each node, excluding the node's own time."""
    n = graph.num_nodes
    w = graph.time_us.tolist()
    comm = (np.zeros(graph.num_edges) if comm_us is None else comm_us).tolist()
    ptr = graph.succ_ptr.tolist()
    nbr = graph.succ_idx.tolist()
    eid = graph.succ_edge.tolist()
    tl = [0.0] * n
    for u in graph.topological_order.tolist():
        base = tl[u] + w[u]
        for k in range(ptr[u], ptr[u + 1]):
            v = nbr[k]
            cand = base + comm[eid[k]]
            if cand > tl[v]:
                tl[v] = cand
    return np.asarray(tl)


def blevel(graph: Graph, comm_us: np.ndarray | None = None, time_us: np.ndarray | None = None) -> np.ndarray:
    """Longest path (µs) from each node to any sink, including the node's own time (``time_us``,
    default the graph's op times; HEFT's upward rank passes mean times over devices)."""
    n = graph.num_nodes
    w = (graph.time_us if time_us is None else time_us).tolist()
    comm = (np.zeros(graph.num_edges) if comm_us is None else comm_us).tolist()
    ptr = graph.succ_ptr.tolist()
    nbr = graph.succ_idx.tolist()
    eid = graph.succ_edge.tolist()
    bl = [0.0] * n
    for u in reversed(graph.topological_order.tolist()):
        best = 0.0
        for k in range(ptr[u], ptr[u + 1]):
            cand = bl[nbr[k]] + comm[eid[k]]
            if cand > best:
                best = cand
        bl[u] = best + w[u]
    return np.asarray(bl)


def cpath(graph: Graph, comm_us: np.ndarray | None = None) -> np.ndarray:
    """Length (µs) of the longest source-to-sink path through each node: tlevel + blevel."""
    return tlevel(graph, comm_us) + blevel(graph, comm_us)


def critical_path_length_us(graph: Graph, comm_us: np.ndarray | None = None) -> float:
    """Length (µs) of the longest source-to-sink path (no communication when ``comm_us`` is None)."""
    return float(blevel(graph, comm_us).max())


def ccr(graph: Graph, cluster: Cluster) -> float:
    """Communication-to-computation ratio (paper, eq. 1): Σ edge transfer time / Σ op time."""
    work = graph.total_time_us
    comm = float(edge_comm_us(graph, cluster).sum())
    return comm / work if work > 0 else float("inf")
