"""Topological orders of a graph: M-TOPO (BFS-like), DFS-TOPO and CPD-TOPO (critical path first).

Each function returns ``order``: an array of node indices, sources first. Reference:
M-TOPO from Baechi (Jeon et al., SoCC 2020); DFS-TOPO and CPD-TOPO from the Celeritas paper
(Algorithm 1, ``CPD_Topo``).
"""

from __future__ import annotations

import numpy as np

from celeritas_core.graphs.dagloops import fifo_order, stack_order
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import cpath as cpath_levels


def m_topo_order(graph: Graph) -> np.ndarray:
    """M-TOPO: a FIFO queue of zero-in-degree nodes (sources in index order), children appended.

    Parameters
    ----------
    graph : Graph
        The DAG.

    Returns
    -------
    numpy.ndarray of int64
        Every node index once, sources first, each edge pointing forward.

    See Also
    --------
    dfs_topo_order, cpd_topo_order

    References
    ----------
    .. [1] B. Jeon et al., "Baechi: fast device placement of machine learning graphs",
       ACM SoCC 2020.

    Examples
    --------
    >>> from celeritas_core import Graph, m_topo_order
    >>> graph = Graph.from_arrays(   # x -> a -> a2 -> y and x -> b -> y; b is long
    ...     name="fork", node_names=["x", "a", "b", "a2", "y"], time_us=[1.0, 5.0, 50.0, 5.0, 1.0],
    ...     memory_bytes=[1, 1, 1, 1, 1], edge_src=[0, 0, 1, 2, 3], edge_dst=[1, 2, 3, 4, 4],
    ...     edge_bytes=[0, 0, 0, 0, 0])
    >>> [graph.node_names[i] for i in m_topo_order(graph)]   # breadth first
    ['x', 'a', 'b', 'a2', 'y']
    """
    return fifo_order(graph.succ_ptr, graph.succ_idx, graph.in_degree)


def _children_by_key(graph: Graph, key: np.ndarray) -> np.ndarray:
    """Successor slots (one per edge, CSR rows of :attr:`Graph.succ_ptr`) sorted within each row
    by increasing ``key`` of the successor, then by its index."""
    nbr = graph.succ_idx
    if not len(nbr):
        return nbr
    rows = np.repeat(np.arange(graph.num_nodes), np.diff(graph.succ_ptr))
    return nbr[np.lexsort((nbr, key[nbr], rows))]


def dfs_topo_order(graph: Graph) -> np.ndarray:
    """DFS-TOPO: like M-TOPO, but newly ready children go to the head of the queue.

    Sources start in index order; the first-listed ready child of the taken node is taken next
    (a LIFO stack fed each row's children in reverse edge order).

    Parameters
    ----------
    graph : Graph
        The DAG.

    Returns
    -------
    numpy.ndarray of int64
        Every node index once, sources first, each edge pointing forward.

    Examples
    --------
    >>> from celeritas_core import Graph, dfs_topo_order
    >>> graph = Graph.from_arrays(   # x -> a -> a2 -> y and x -> b -> y; b is long
    ...     name="fork", node_names=["x", "a", "b", "a2", "y"], time_us=[1.0, 5.0, 50.0, 5.0, 1.0],
    ...     memory_bytes=[1, 1, 1, 1, 1], edge_src=[0, 0, 1, 2, 3], edge_dst=[1, 2, 3, 4, 4],
    ...     edge_bytes=[0, 0, 0, 0, 0])
    >>> [graph.node_names[i] for i in dfs_topo_order(graph)]   # a's chain before b
    ['x', 'a', 'a2', 'b', 'y']
    """
    ptr = graph.succ_ptr
    rows = np.repeat(np.arange(graph.num_nodes), np.diff(ptr))
    reversed_rows = graph.succ_idx[ptr[rows] + ptr[rows + 1] - 1 - np.arange(len(rows))]
    sources = np.flatnonzero(graph.in_degree == 0).astype(np.int64)
    return stack_order(ptr, reversed_rows, graph.in_degree, sources)


def cpd_topo_order(graph: Graph, comm_us: np.ndarray | None = None, *,
                   cpath: np.ndarray | None = None) -> np.ndarray:
    """CPD-TOPO (paper, Algorithm 1): DFS-TOPO that follows the largest ``cpath`` child first.

    Sources are queued by decreasing ``cpath``; the children of the taken node are visited by
    increasing ``cpath`` and each newly ready one is put at the head, so the ready child on the
    critical path is taken next. Ties break by node index. ``comm_us`` are per-edge transfer
    times (µs) used for the levels; pass ``cpath`` to reuse precomputed values.

    Parameters
    ----------
    graph : Graph
        The DAG.
    comm_us : array_like of float, optional
        Per-edge transfer time (µs) for the levels (:func:`~celeritas_core.graphs.levels.edge_comm_us`);
        default none.
    cpath : numpy.ndarray, optional
        Precomputed :func:`~celeritas_core.graphs.levels.cpath` of every node (µs); ``comm_us`` is then
        not used.

    Returns
    -------
    numpy.ndarray of int64
        Every node index once, sources first, each edge pointing forward.

    References
    ----------
    .. [1] The Celeritas paper, Algorithm 1 (``CPD_Topo``).

    Examples
    --------
    >>> from celeritas_core import Graph, cpd_topo_order
    >>> graph = Graph.from_arrays(   # x -> a -> a2 -> y and x -> b -> y; b is long
    ...     name="fork", node_names=["x", "a", "b", "a2", "y"], time_us=[1.0, 5.0, 50.0, 5.0, 1.0],
    ...     memory_bytes=[1, 1, 1, 1, 1], edge_src=[0, 0, 1, 2, 3], edge_dst=[1, 2, 3, 4, 4],
    ...     edge_bytes=[0, 0, 0, 0, 0])
    >>> [graph.node_names[i] for i in cpd_topo_order(graph)]   # the critical path x, b, y first
    ['x', 'b', 'a', 'a2', 'y']
    """
    cp = cpath_levels(graph, comm_us) if cpath is None else cpath
    src = np.flatnonzero(graph.in_degree == 0)
    sources = src[np.lexsort((src, -cp[src]))].astype(np.int64)
    return stack_order(graph.succ_ptr, _children_by_key(graph, cp), graph.in_degree, sources)


def is_topological(graph: Graph, order: np.ndarray) -> bool:
    """True when ``order`` is a permutation of all nodes with every edge pointing forward.

    Parameters
    ----------
    graph : Graph
        The DAG.
    order : numpy.ndarray of int
        Node indices.

    Returns
    -------
    bool
        Whether ``order`` holds every node once and every edge goes from earlier to later.

    Examples
    --------
    >>> import numpy as np
    >>> from celeritas_core import Graph, is_topological
    >>> graph = Graph.from_arrays(   # x -> a -> a2 -> y and x -> b -> y; b is long
    ...     name="fork", node_names=["x", "a", "b", "a2", "y"], time_us=[1.0, 5.0, 50.0, 5.0, 1.0],
    ...     memory_bytes=[1, 1, 1, 1, 1], edge_src=[0, 0, 1, 2, 3], edge_dst=[1, 2, 3, 4, 4],
    ...     edge_bytes=[0, 0, 0, 0, 0])
    >>> is_topological(graph, np.array([0, 2, 1, 3, 4])), is_topological(graph, np.array([1, 0, 2, 3, 4]))
    (True, False)
    """
    if len(order) != graph.num_nodes or len(np.unique(order)) != graph.num_nodes:
        return False
    rank = np.empty(graph.num_nodes, dtype=np.int64)
    rank[order] = np.arange(graph.num_nodes)
    return bool(np.all(rank[graph.edge_src] < rank[graph.edge_dst]))
