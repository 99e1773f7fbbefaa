"""Top level, bottom level and critical-path length of every node (paper, eqs. 2–3).

``tlevel(v)`` is the longest path from a source to ``v`` excluding ``v``'s own time;
``blevel(v)`` the longest path from ``v`` to a sink including it; ``cpath = tlevel + blevel``.
Edge weights are transfer times from the cluster's linear model (µs), as if every edge crossed
devices. Reference: Y.-K. Kwok and I. Ahmad, "Static scheduling algorithms for allocating
directed task graphs to multiprocessors", ACM Computing Surveys 31(4), 1999.
"""

from __future__ import annotations

import numpy as np

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.dagloops import bottom_levels, top_levels
from celeritas_core.graphs.graph import Graph


def edge_comm_us(graph: Graph, cluster: Cluster) -> np.ndarray:
    """Transfer time (µs) of each edge if its endpoints sat on different devices (the flat model;
    with a topology, its topology-blind summary, :meth:`Cluster.comm_time_us`)."""
    return np.asarray(cluster.comm_time_us(graph.edge_bytes), dtype=np.float64)


def fastest_link(cluster: Cluster) -> tuple[float, float]:
    """``(k µs/B, b µs)``: the least slope and the least intercept over the pairs of distinct devices
    (each pair's transfer takes at least ``k·bytes + b``); the flat model on a flat cluster."""
    if cluster.is_flat or cluster.num_devices < 2:
        return cluster.slope_us_per_byte, cluster.intercept_us
    off = ~np.eye(cluster.num_devices, dtype=bool)
    return (float(cluster.pair_slope_us_per_byte[off].min()), float(cluster.pair_intercept_us[off].min()))


def planning_comm_us(graph: Graph, cluster: Cluster) -> np.ndarray:
    """Transfer time (µs) of each edge as fusion and the orders price a *potential* cut, before any
    device is chosen: :func:`edge_comm_us` on a flat cluster; with a topology, over the fastest
    link (:func:`fastest_link`). A fusion boundary is paid only when a placer puts its two sides on
    different devices, and a topology-aware placer keeps neighbouring clusters on one device or
    one island, so the link a paid boundary most likely takes is the fastest (docs/algorithms.md,
    "Link topology")."""
    if cluster.is_flat:
        return edge_comm_us(graph, cluster)
    slope, intercept = fastest_link(cluster)
    return np.asarray(slope * graph.edge_bytes + intercept, dtype=np.float64)


def tlevel(graph: Graph, comm_us: np.ndarray | None = None) -> np.ndarray:
    """Longest path (µs) from any source to each node, excluding the node's own time.

    Parameters
    ----------
    graph : Graph
        The DAG.
    comm_us : array_like of float, optional
        Per-edge transfer time (µs) added along each edge, e.g. :func:`edge_comm_us`; default none.

    Returns
    -------
    numpy.ndarray of float64
        The top level of every node (µs); 0 for a source.

    Examples
    --------
    >>> import numpy as np
    >>> from celeritas_core import Graph, tlevel
    >>> graph = Graph.from_arrays(   # x -> a -> a2 -> y and x -> b -> y; b is long
    ...     name="fork", node_names=["x", "a", "b", "a2", "y"], time_us=[1.0, 5.0, 50.0, 5.0, 1.0],
    ...     memory_bytes=[1, 1, 1, 1, 1], edge_src=[0, 0, 1, 2, 3], edge_dst=[1, 2, 3, 4, 4],
    ...     edge_bytes=[0, 0, 0, 0, 0])
    >>> tlevel(graph).tolist()
    [0.0, 1.0, 1.0, 6.0, 51.0]
    >>> tlevel(graph, np.full(5, 10.0)).tolist()   # 10 µs on every edge
    [0.0, 11.0, 11.0, 26.0, 71.0]
    """
    comm = np.zeros(graph.num_edges) if comm_us is None else np.asarray(comm_us, dtype=np.float64)
    return top_levels(graph.topological_order, graph.succ_ptr, graph.succ_idx, graph.succ_edge,
                      np.asarray(graph.time_us, dtype=np.float64), comm)


def blevel(graph: Graph, comm_us: np.ndarray | None = None, time_us: np.ndarray | None = None) -> np.ndarray:
    """Longest path (µs) from each node to any sink, including the node's own time (``time_us``,
    default the graph's op times; HEFT's upward rank passes mean times over devices).

    Parameters
    ----------
    graph : Graph
        The DAG.
    comm_us : array_like of float, optional
        Per-edge transfer time (µs) added along each edge, e.g. :func:`edge_comm_us`; default none.
    time_us : array_like of float, optional
        Per-node time (µs) instead of the graph's ``time_us``.

    Returns
    -------
    numpy.ndarray of float64
        The bottom level of every node (µs); a sink's own time.

    Examples
    --------
    >>> from celeritas_core import Graph, blevel
    >>> graph = Graph.from_arrays(   # x -> a -> a2 -> y and x -> b -> y; b is long
    ...     name="fork", node_names=["x", "a", "b", "a2", "y"], time_us=[1.0, 5.0, 50.0, 5.0, 1.0],
    ...     memory_bytes=[1, 1, 1, 1, 1], edge_src=[0, 0, 1, 2, 3], edge_dst=[1, 2, 3, 4, 4],
    ...     edge_bytes=[0, 0, 0, 0, 0])
    >>> blevel(graph).tolist()
    [52.0, 11.0, 51.0, 6.0, 1.0]
    """
    comm = np.zeros(graph.num_edges) if comm_us is None else np.asarray(comm_us, dtype=np.float64)
    weight = graph.time_us if time_us is None else time_us
    return bottom_levels(graph.topological_order, graph.succ_ptr, graph.succ_idx, graph.succ_edge,
                         np.asarray(weight, dtype=np.float64), comm)


def cpath(graph: Graph, comm_us: np.ndarray | None = None) -> np.ndarray:
    """Length (µs) of the longest source-to-sink path through each node: tlevel + blevel.

    Parameters
    ----------
    graph : Graph
        The DAG.
    comm_us : array_like of float, optional
        Per-edge transfer time (µs) added along each edge, e.g. :func:`edge_comm_us`; default none.

    Returns
    -------
    numpy.ndarray of float64
        Per node (µs); the nodes on a critical path have the largest value.

    References
    ----------
    .. [1] Y.-K. Kwok and I. Ahmad, "Static scheduling algorithms for allocating directed task
       graphs to multiprocessors", ACM Computing Surveys 31(4), 1999.

    Examples
    --------
    >>> from celeritas_core import Graph, cpath
    >>> graph = Graph.from_arrays(   # x -> a -> a2 -> y and x -> b -> y; b is long
    ...     name="fork", node_names=["x", "a", "b", "a2", "y"], time_us=[1.0, 5.0, 50.0, 5.0, 1.0],
    ...     memory_bytes=[1, 1, 1, 1, 1], edge_src=[0, 0, 1, 2, 3], edge_dst=[1, 2, 3, 4, 4],
    ...     edge_bytes=[0, 0, 0, 0, 0])
    >>> cpath(graph).tolist()   # x, b, y lie on the critical path
    [52.0, 12.0, 52.0, 12.0, 52.0]
    """
    return tlevel(graph, comm_us) + blevel(graph, comm_us)


def critical_path_length_us(graph: Graph, comm_us: np.ndarray | None = None) -> float:
    """Length (µs) of the longest source-to-sink path (no communication when ``comm_us`` is None).

    Parameters
    ----------
    graph : Graph
        The DAG.
    comm_us : array_like of float, optional
        Per-edge transfer time (µs) added along each edge, e.g. :func:`edge_comm_us`; default none.

    Returns
    -------
    float
        The critical path's length (µs), op times plus ``comm_us`` along it.

    Examples
    --------
    >>> import numpy as np
    >>> from celeritas_core import Graph, critical_path_length_us
    >>> graph = Graph.from_arrays(   # x -> a -> a2 -> y and x -> b -> y; b is long
    ...     name="fork", node_names=["x", "a", "b", "a2", "y"], time_us=[1.0, 5.0, 50.0, 5.0, 1.0],
    ...     memory_bytes=[1, 1, 1, 1, 1], edge_src=[0, 0, 1, 2, 3], edge_dst=[1, 2, 3, 4, 4],
    ...     edge_bytes=[0, 0, 0, 0, 0])
    >>> critical_path_length_us(graph), critical_path_length_us(graph, np.full(5, 10.0))
    (52.0, 72.0)
    """
    return float(blevel(graph, comm_us).max())


def ccr(graph: Graph, cluster: Cluster) -> float:
    """Communication-to-computation ratio (paper, eq. 1): Σ edge transfer time / Σ op time.

    Parameters
    ----------
    graph : Graph
        The DAG.
    cluster : Cluster
        Its transfer model times every edge as if it crossed devices.

    Returns
    -------
    float
        The ratio (``inf`` when the ops take no time).

    Examples
    --------
    >>> from celeritas_core import Cluster, Graph, ccr
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> ccr(graph, Cluster.homogeneous(2, 1e9))   # 4 edges of 25.1 µs over 120 µs of ops
    0.8366666666666667
    """
    work = graph.total_time_us
    comm = float(edge_comm_us(graph, cluster).sum())
    return comm / work if work > 0 else float("inf")
