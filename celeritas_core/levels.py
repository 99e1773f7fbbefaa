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
from celeritas_core.dagloops import bottom_levels, top_levels
from celeritas_core.graph import Graph


def edge_comm_us(graph: Graph, cluster: Cluster) -> np.ndarray:
    """Transfer time (µs) of each edge if its endpoints sat on different devices."""
    return np.asarray(cluster.comm_time_us(graph.edge_bytes), dtype=np.float64)


def tlevel(graph: Graph, comm_us: np.ndarray | None = None) -> np.ndarray:
    """Longest path (µs) from any source to each node, excluding the node's own time."""
    comm = np.zeros(graph.num_edges) if comm_us is None else np.asarray(comm_us, dtype=np.float64)
    return top_levels(graph.topological_order, graph.succ_ptr, graph.succ_idx, graph.succ_edge,
                      np.asarray(graph.time_us, dtype=np.float64), comm)


def blevel(graph: Graph, comm_us: np.ndarray | None = None, time_us: np.ndarray | None = None) -> np.ndarray:
    """Longest path (µs) from each node to any sink, including the node's own time (``time_us``,
    default the graph's op times; HEFT's upward rank passes mean times over devices)."""
    comm = np.zeros(graph.num_edges) if comm_us is None else np.asarray(comm_us, dtype=np.float64)
    weight = graph.time_us if time_us is None else time_us
    return bottom_levels(graph.topological_order, graph.succ_ptr, graph.succ_idx, graph.succ_edge,
                         np.asarray(weight, dtype=np.float64), comm)


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
