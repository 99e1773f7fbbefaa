"""A longest path through the graph and the cuts along it: where a training step turns, and what
must be live there.

Every op ``p`` splits the others into its ancestors, its descendants and the ops unrelated to it.
A tensor made by ``p`` or an ancestor and read by a descendant is live, on some device, for the
whole time ``p`` runs, whatever the placement and the order the runtime picks: it exists before
``p`` starts and is still needed after ``p`` ends. In a training step every activation kept for
the backward pass crosses the loss this way, so along a longest path the loss is where the most
tensors cross (:func:`turning_point`), and the bytes crossing any op bound the memory every
placement needs (:func:`live_across_path`). Computing this for every op would take a transitive
closure; along one path it is a single incremental search each way, O(ops + edges). Units: bytes.
"""

from __future__ import annotations

import numpy as np

from celeritas_core.compiled.jit import jit
from celeritas_core.graphs.dagloops import bottom_levels
from celeritas_core.graphs.graph import Graph


def longest_path(graph: Graph) -> np.ndarray:
    """The ops of a longest source-to-sink path, counted in ops (ties: the first listed successor).

    Examples
    --------
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> g = small_training_graph(0)
    >>> path = longest_path(g)
    >>> bool(g.in_degree[path[0]] == 0 and g.out_degree[path[-1]] == 0)
    True
    """
    if graph.num_nodes == 0:
        return np.zeros(0, dtype=np.int64)
    ones, no_comm = np.ones(graph.num_nodes), np.zeros(graph.num_edges)
    to_sink = bottom_levels(graph.topological_order, graph.succ_ptr, graph.succ_idx, graph.succ_edge, ones,
                            no_comm)
    return _longest_path(int(np.argmax(to_sink)), to_sink, graph.succ_ptr, graph.succ_idx)


def crossing_spans(graph: Graph, path: np.ndarray, producer: np.ndarray, consumer: np.ndarray,
                   item: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per item (a tensor, made by ``producer[i]``): the range ``[first, last]`` of path positions
    ``j`` at which it crosses ``path[j]``: made by ``path[j]`` or an ancestor and read by a
    descendant (one of the ``consumer`` entries whose ``item`` it is). ``last < first`` when it
    never crosses."""
    first_above = _first_reached(path, graph.pred_ptr, graph.pred_idx)
    last_below = len(path) - 1 - _first_reached(path[::-1], graph.succ_ptr, graph.succ_idx)
    last = np.full(len(producer), -1, dtype=np.int64)
    np.maximum.at(last, item, last_below[consumer])
    return first_above[producer], last


def crossing_totals(num_positions: int, first: np.ndarray, last: np.ndarray,
                    weight: np.ndarray) -> np.ndarray:
    """Per path position, the summed ``weight`` of the items whose span ``[first, last]`` holds it."""
    counted = last >= first
    diff = np.zeros(num_positions + 1)
    np.add.at(diff, first[counted], weight[counted])
    np.add.at(diff, last[counted] + 1, -weight[counted])
    return np.cumsum(diff)[:-1]


def turning_point(graph: Graph) -> int:
    """The op of a longest path across which the most tensors cross (each counted once, whatever
    its size): the loss of a training step (module docstring). Ties: the first along the path.

    Examples
    --------
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> g = small_training_graph(0)
    >>> "loss" in g.node_names[turning_point(g)].lower() or g.node_names[turning_point(g)]
    True
    """
    path = longest_path(graph)
    tensors = graph.tensors
    first, last = crossing_spans(graph, path, tensors.producer, graph.edge_dst, tensors.edge_tensor)
    widths = crossing_totals(len(path), first, last, np.ones(tensors.num_tensors))
    return int(path[int(np.argmax(widths))])


def ancestors(v: int, pred_ptr: np.ndarray, pred_idx: np.ndarray) -> np.ndarray:
    """True for every ancestor of op ``v`` (not ``v`` itself), from the predecessor CSR."""
    return _ancestors(v, pred_ptr, pred_idx)


@jit
def _longest_path(start: int, to_sink: np.ndarray, succ_ptr: np.ndarray, succ_idx: np.ndarray) -> np.ndarray:
    """A longest path (in ops) from ``start``: each step takes the first successor one level lower
    (``to_sink``: ops on the longest path to a sink, itself included)."""
    path = np.empty(int(to_sink[start]) + 1, dtype=np.int64)
    length, u = 0, start
    while True:
        path[length] = u
        length += 1
        nxt = -1
        for k in range(succ_ptr[u], succ_ptr[u + 1]):
            if to_sink[succ_idx[k]] == to_sink[u] - 1:
                nxt = succ_idx[k]
                break
        if nxt < 0:
            return path[:length]
        u = nxt


@jit
def _first_reached(path: np.ndarray, ptr: np.ndarray, nbr: np.ndarray) -> np.ndarray:
    """Per op, the first index ``j`` such that it is ``path[j]`` or reached from it through
    ``ptr``/``nbr`` (predecessors: ancestors; successors: descendants); ``len(path)`` if never.
    Each ``path[j]`` reaches ``path[j + 1]``'s way, so one incremental search: O(ops + edges)."""
    n = len(ptr) - 1
    first = np.full(n, len(path), dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    for j in range(len(path)):
        if first[path[j]] < len(path):
            continue
        first[path[j]] = j
        stack[0], top = path[j], 1
        while top > 0:
            top -= 1
            u = stack[top]
            for k in range(ptr[u], ptr[u + 1]):
                w = nbr[k]
                if first[w] == len(path):
                    first[w] = j
                    stack[top] = w
                    top += 1
    return first


@jit
def _ancestors(v: int, pred_ptr: np.ndarray, pred_idx: np.ndarray) -> np.ndarray:
    """True for every ancestor of ``v`` (not ``v`` itself)."""
    n = len(pred_ptr) - 1
    seen = np.zeros(n, dtype=np.bool_)
    stack = np.empty(n, dtype=np.int64)
    stack[0], top = v, 1
    while top > 0:
        top -= 1
        u = stack[top]
        for k in range(pred_ptr[u], pred_ptr[u + 1]):
            w = pred_idx[k]
            if not seen[w]:
                seen[w] = True
                stack[top] = w
                top += 1
    return seen
