"""Topological orders of a graph: M-TOPO (BFS-like), DFS-TOPO and CPD-TOPO (critical path first).

Each function returns ``order``: an array of node indices, sources first. Reference:
M-TOPO from Baechi (Jeon et al., SoCC 2020); DFS-TOPO and CPD-TOPO from the Celeritas paper
(Algorithm 1, ``CPD_Topo``).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from celeritas_core.graph import Graph
from celeritas_core.levels import cpath as cpath_levels


def m_topo_order(graph: Graph) -> np.ndarray:
    """M-TOPO: a FIFO queue of zero-in-degree nodes (sources in index order), children appended."""
    indeg = graph.in_degree.tolist()
    ptr = graph.succ_ptr.tolist()
    nbr = graph.succ_idx.tolist()
    queue = deque(i for i in range(graph.num_nodes) if indeg[i] == 0)
    order: list[int] = []
    while queue:
        u = queue.popleft()
        order.append(u)
        for k in range(ptr[u], ptr[u + 1]):
            v = nbr[k]
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.append(v)
    return np.asarray(order, dtype=np.int64)


def _head_first_order(graph: Graph, sources: list[int], children_sorted: list[list[int]]) -> np.ndarray:
    """Shared loop of DFS-TOPO and CPD-TOPO.

    Take the head of the queue; each child whose in-degree drops to zero goes to the head, in the
    order of ``children_sorted[u]``, so the last such child is taken next.
    """
    indeg = graph.in_degree.tolist()
    queue = deque(sources)
    order: list[int] = []
    while queue:
        u = queue.popleft()
        order.append(u)
        for v in children_sorted[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.appendleft(v)
    return np.asarray(order, dtype=np.int64)


def _children_by_key(graph: Graph, key: np.ndarray | None) -> list[list[int]]:
    """Successor lists (one entry per edge) sorted by increasing ``key`` (CSR order if None)."""
    ptr = graph.succ_ptr
    nbr = graph.succ_idx
    if key is not None and len(nbr):
        rows = np.repeat(np.arange(graph.num_nodes), np.diff(ptr))
        perm = np.lexsort((nbr, key[nbr], rows))
        nbr = nbr[perm]
    flat = nbr.tolist()
    bounds = ptr.tolist()
    return [flat[bounds[u]:bounds[u + 1]] for u in range(graph.num_nodes)]


def dfs_topo_order(graph: Graph) -> np.ndarray:
    """DFS-TOPO: like M-TOPO, but newly ready children go to the head of the queue.

    Children are pushed in reverse edge order so that the first-listed child is taken first;
    sources start in index order.
    """
    children = [list(reversed(c)) for c in _children_by_key(graph, None)]
    sources = np.flatnonzero(graph.in_degree == 0).tolist()
    return _head_first_order(graph, sources, children)


def cpd_topo_order(graph: Graph, comm_us: np.ndarray | None = None, *,
                   cpath: np.ndarray | None = None) -> np.ndarray:
    """CPD-TOPO (paper, Algorithm 1): DFS-TOPO that follows the largest ``cpath`` child first.

    Sources are queued by decreasing ``cpath``; the children of the taken node are visited by
    increasing ``cpath`` and each newly ready one is put at the head, so the ready child on the
    critical path is taken next. Ties break by node index. ``comm_us`` are per-edge transfer
    times (µs) used for the levels; pass ``cpath`` to reuse precomputed values.
    """
    cp = cpath_levels(graph, comm_us) if cpath is None else cpath
    children = _children_by_key(graph, cp)
    src = np.flatnonzero(graph.in_degree == 0)
    sources = src[np.lexsort((src, -cp[src]))].tolist()
    return _head_first_order(graph, sources, children)


def is_topological(graph: Graph, order: np.ndarray) -> bool:
    """True when ``order`` is a permutation of all nodes with every edge pointing forward."""
    if len(order) != graph.num_nodes or len(np.unique(order)) != graph.num_nodes:
        return False
    rank = np.empty(graph.num_nodes, dtype=np.int64)
    rank[order] = np.arange(graph.num_nodes)
    return bool(np.all(rank[graph.edge_src] < rank[graph.edge_dst]))
