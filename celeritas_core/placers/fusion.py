"""Optimal Operation Fusion (paper, Algorithm 1): cut the CPD-TOPO order into clusters by DP.

Clusters are contiguous runs of a topological order, so by the paper's Lemma 2 the coarse graph
is acyclic. ``Optimal_BP`` chooses the breakpoints minimising the total transfer time (µs) of the
edges that leave each cluster, with at most ``R`` ops and at most ``M`` bytes per cluster (a
single op heavier than ``M`` forms its own cluster).

Implementation: with ``POut`` the prefix sums of per-position outgoing transfer time,
``cost(i, j) = POut[j] - POut[i] - internal(i, j)``, where ``internal`` (edges with both ends in
``[i, j)``) is kept for the ``R`` open segment starts and updated by the edges ending at each new
position; the DP runs in one compiled pass (:mod:`celeritas_core.compiled.jit`), O(n·R + edges) time and
O(n) memory. References: B. W. Kernighan, "Optimal sequential partitions of graphs", J. ACM
18(1), 1971; Celeritas paper, eqs. 4–6.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from celeritas_core.compiled.jit import jit
from celeritas_core.defaults import DEFAULT_MEMORY_FRACTION, DEFAULT_R
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import anchored_memory, apply_colocation, colocation_anchor
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import cpath, planning_comm_us
from celeritas_core.graphs.orders import cpd_topo_order
from celeritas_core.simulation.live_estimate import SequenceMemory


@dataclass(frozen=True, eq=False)
class Fusion:
    """The result of operation fusion: the order, the clusters and the coarse graph."""

    order: np.ndarray
    """Fine node indices in CPD-TOPO order."""
    cluster_of: np.ndarray
    """Cluster (coarse node) index of every fine node."""
    bounds: np.ndarray
    """Cluster k holds ``order[bounds[k]:bounds[k+1]]``."""
    coarse: Graph
    """The coarse graph: summed time, anchored memory, summed bytes of distinct tensors."""
    anchor: np.ndarray
    """Co-location anchor of every fine node (itself when ungrouped)."""
    cut_cost_us: float
    """The DP objective: total transfer time (µs) of the edges between clusters."""

    @property
    def num_clusters(self) -> int:
        """Number of clusters (coarse nodes)."""
        return len(self.bounds) - 1

    def to_fine(self, coarse_devices: np.ndarray) -> np.ndarray:
        """Device per op from a device per cluster, co-location members on their anchor's device."""
        return apply_colocation(coarse_devices[self.cluster_of], self.anchor)

    def members(self, k: int) -> np.ndarray:
        """Fine node indices of cluster ``k``, in order."""
        return self.order[self.bounds[k]:self.bounds[k + 1]]


def optimal_breakpoints(
    graph: Graph,
    order: np.ndarray,
    comm_us: np.ndarray,
    node_memory: np.ndarray,
    *,
    R: int = DEFAULT_R,
    memory_cap: float = np.inf,
    memory_ends: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """``Optimal_BP``: segment bounds over ``order`` minimising inter-segment transfer time (µs).

    Returns ``(bounds, cost)`` with segment k = ``order[bounds[k]:bounds[k+1]]``. Segments hold
    at most ``R`` nodes and at most ``memory_cap`` bytes of ``node_memory`` (a single node may
    exceed it), or, when ``memory_ends`` is given, a segment from position ``i`` ends by
    ``memory_ends[i]`` (a liveness-aware window, :meth:`SequenceMemory.window_ends`). Ties prefer
    the longer segment, giving fewer clusters.
    """
    n = graph.num_nodes
    if R < 1:
        raise ValueError("R must be >= 1")
    R = min(int(R), n)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    a = pos[graph.edge_src]
    b = pos[graph.edge_dst]
    c = np.asarray(comm_us, dtype=np.float64)
    if np.any(a >= b):
        raise ValueError("order is not topological")
    pout = np.zeros(n + 1)
    np.cumsum(np.bincount(a, weights=c, minlength=n), out=pout[1:])
    if memory_ends is None:
        pmem = np.zeros(n + 1)
        np.cumsum(node_memory[order], out=pmem[1:])
        memory_ends = _sum_ends(pmem, float(memory_cap))
    # cost = POut difference - internal cancels; snap rounding noise to 0 so ties stay ties
    tolerance = 1e-9 * (float(pout[-1]) + 1.0)
    short = np.flatnonzero(b - a < R)  # only an edge shorter than R can lie inside a segment
    by_end = short[np.argsort(b[short], kind="stable")]
    in_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(b[by_end], minlength=n), out=in_ptr[1:])
    choice, total = _segment_dp(in_ptr, a[by_end], c[by_end], pout, memory_ends, R, tolerance)
    bounds = [n]
    j = n
    while j > 0:
        j = int(choice[j])
        bounds.append(j)
    return np.asarray(bounds[::-1], dtype=np.int64), float(total)


@jit
def _sum_ends(pmem: np.ndarray, memory_cap: float) -> np.ndarray:
    """Per start ``i``, the last end ``j`` with ``pmem[j] - pmem[i] <= memory_cap`` (prefix sums of
    bytes along the order): two pointers, the same comparison the DP used to make."""
    n = len(pmem) - 1
    ends = np.empty(n, dtype=np.int64)
    j = 0
    for i in range(n):
        if j < i:
            j = i
        while j < n and pmem[j + 1] - pmem[i] <= memory_cap:
            j += 1
        ends[i] = j
    return ends


@jit
def _segment_dp(in_ptr: np.ndarray, in_src: np.ndarray, in_c: np.ndarray, pout: np.ndarray,
                memory_ends: np.ndarray, R: int, tolerance: float) -> tuple[np.ndarray, float]:
    """``S(j) = min_d S(j - d) + cost(j - d, j)`` over positions ``j`` of the order, ``d <= R``;
    returns the chosen start of the last segment ending at each ``j`` and ``S(n)`` (µs).

    ``cost(i, j) = POut[j] - POut[i] - internal(i, j)``; ``internal(i, j)`` (transfer time of
    the edges inside ``[i, j)``) is kept for the ``R`` open starts and grows, when ``j`` advances,
    by the edges that end at ``j - 1`` (``in_src``/``in_c`` by end position, CSR ``in_ptr``):
    one suffix sum over the window, so O(n·R + edges) time and O(n) memory. A segment longer
    than one op from position ``i`` must end by ``memory_ends[i]``. Costs within
    ``tolerance`` of the best are ties: the fewest clusters win, then the longest last segment.
    """
    n = len(pout) - 1
    internal = np.zeros(n + 1)  # internal[i] = internal(i, j) for the current end j
    pending = np.zeros(n + 1)  # transfer time of edges ending at j - 1, by start position
    best_s = np.full(n + 1, np.inf)
    best_s[0] = 0.0
    clusters = np.zeros(n + 1, dtype=np.int64)
    choice = np.zeros(n + 1, dtype=np.int64)
    values = np.empty(R)
    for j in range(1, n + 1):
        first = max(0, j - R)
        for k in range(in_ptr[j - 1], in_ptr[j]):
            if in_src[k] >= first:
                pending[in_src[k]] += in_c[k]
        running = 0.0
        for i in range(j - 1, first - 1, -1):  # edges i' -> j-1 with i' >= i are inside [i, j)
            running += pending[i]
            pending[i] = 0.0
            internal[i] += running
        lowest = np.inf
        for i in range(first, j):
            seg = pout[j] - pout[i] - internal[i]
            if seg < tolerance:
                seg = 0.0
            if j - i > 1 and j > memory_ends[i]:
                seg = np.inf
            values[i - first] = best_s[i] + seg
            lowest = min(lowest, values[i - first])
        pick, pick_count = first, np.iinfo(np.int64).max
        for i in range(first, j):  # longest segment first among the fewest clusters
            if values[i - first] <= lowest + tolerance and clusters[i] < pick_count:
                pick, pick_count = i, clusters[i]
        best_s[j] = values[pick - first]
        clusters[j] = pick_count + 1
        choice[j] = pick
    return choice, best_s[n]


def coarse_graph(graph: Graph, cluster_of: np.ndarray, num_clusters: int,
                 node_memory: np.ndarray | None = None, *, name: str | None = None) -> Graph:
    """Contract each cluster to one node: summed time (µs) and memory (bytes), summed edge bytes.

    Between two clusters the edge carries the sum of the distinct tensors crossing: edges from
    one producer output to several consumers in the same cluster count once (max bytes).
    ``node_memory`` defaults to the graph's own memory (pass anchored memory for co-location).
    """
    mem = graph.memory_bytes if node_memory is None else node_memory
    time_us = np.bincount(cluster_of, weights=graph.time_us, minlength=num_clusters)
    memory = np.bincount(cluster_of, weights=mem, minlength=num_clusters)
    e_src, e_dst, pair_bytes = _cluster_edges(graph, cluster_of, num_clusters)
    width = max(5, len(str(num_clusters - 1)))
    names = [f"cluster-{k:0{width}d}" for k in range(num_clusters)]
    return Graph.from_arrays(
        name=name or f"{graph.name}.coarse",
        node_names=names,
        ops=["Cluster"] * num_clusters,
        time_us=time_us,
        memory_bytes=memory,
        edge_src=e_src,
        edge_dst=e_dst,
        edge_bytes=pair_bytes,
        meta={"source": "fusion", "fine_graph": graph.name, "fine_nodes": graph.num_nodes},
    )


def _cluster_edges(graph: Graph, cluster_of: np.ndarray,
                   num_clusters: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One edge per ordered pair of clusters joined by a tensor: src, dst and the summed bytes of
    the distinct tensors (:attr:`Graph.tensors`, largest edge into the destination) crossing."""
    cs = cluster_of[graph.edge_src]
    cd = cluster_of[graph.edge_dst]
    cross = np.flatnonzero(cs != cd)
    if not len(cross):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    view = graph.tensors
    # one tensor per (tensor id, destination cluster), in (producer, output, cluster) order
    key = view.edge_tensor[cross] * num_clusters + cd[cross]
    uniq, inv = np.unique(key, return_inverse=True)
    tensor_bytes = np.zeros(len(uniq))
    np.maximum.at(tensor_bytes, inv.reshape(-1), graph.edge_bytes[cross])
    pair_src = cluster_of[view.producer[uniq // num_clusters]]
    pairs, pinv = np.unique(pair_src * num_clusters + uniq % num_clusters, return_inverse=True)
    pair_bytes = np.bincount(pinv.reshape(-1), weights=tensor_bytes, minlength=len(pairs))
    return pairs // num_clusters, pairs % num_clusters, pair_bytes


def memory_cap_bytes(cluster: Cluster, memory_fraction: float) -> float:
    """The per-cluster memory cap M (bytes): ``memory_fraction`` × the smallest device memory."""
    return float(memory_fraction) * float(cluster.memory_bytes.min())


def optimal_operation_fusion(
    graph: Graph,
    cluster: Cluster,
    *,
    R: int = DEFAULT_R,
    memory_fraction: float = DEFAULT_MEMORY_FRACTION,
    order: np.ndarray | None = None,
) -> Fusion:
    """Optimal Operation Fusion: CPD-TOPO order, Optimal_BP breakpoints, coarse graph.

    ``R`` is the exploration range (ops per cluster at most); the memory cap is
    ``memory_fraction`` × the smallest device memory. Co-location groups are charged to their
    anchor (first member in the order), so cluster memory matches where the group will live. A cut
    is priced by :func:`~celeritas_core.graphs.levels.planning_comm_us`: the flat model, or with a link
    topology the fastest link (the one a paid fusion boundary most likely takes). On a
    graph with liveness fields the cap bounds a cluster's liveness-aware peak
    (:class:`~celeritas_core.simulation.live_estimate.SequenceMemory` along the order), not its summed bytes.
    """
    comm = planning_comm_us(graph, cluster)
    if order is None:
        order = cpd_topo_order(graph, comm, cpath=cpath(graph, comm))
    anchor = colocation_anchor(graph, order)
    node_mem = anchored_memory(graph, anchor)
    cap = memory_cap_bytes(cluster, memory_fraction)
    ends = None
    if graph.liveness is not None and graph.liveness.modelled.any():
        position = np.empty(graph.num_nodes, dtype=np.int64)
        position[order] = np.arange(graph.num_nodes)
        ends = SequenceMemory.build(graph, position[anchor], graph.num_nodes).window_ends(cap)
    bounds, cost = optimal_breakpoints(graph, order, comm, node_mem, R=R, memory_cap=cap, memory_ends=ends)
    num_clusters = len(bounds) - 1
    cluster_of = np.empty(graph.num_nodes, dtype=np.int64)
    cluster_of[order] = np.repeat(np.arange(num_clusters), np.diff(bounds))
    coarse = coarse_graph(graph, cluster_of, num_clusters, node_mem)
    return Fusion(order=order, cluster_of=cluster_of, bounds=bounds, coarse=coarse,
                  anchor=anchor, cut_cost_us=cost)
