"""Compiled loops over a DAG in CSR form: topological orders and longest paths.

These are the O(nodes + edges) passes every placer makes (Kahn's algorithm, M-TOPO,
DFS-TOPO/CPD-TOPO, top and bottom levels). Each takes only arrays, so :func:`~celeritas_core.compiled.jit.jit`
compiles it; the graph-level functions that call them live in :mod:`celeritas_core.graphs.graph`,
:mod:`celeritas_core.graphs.orders` and :mod:`celeritas_core.graphs.levels`. Reference: A. B. Kahn,
"Topological sorting of large networks", CACM 5(11), 1962.
"""

from __future__ import annotations

import numpy as np

from celeritas_core.compiled.jit import jit


@jit
def stack_order(ptr: np.ndarray, nbr: np.ndarray, indeg: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """Kahn's algorithm with a LIFO stack: ``sources[0]`` is taken first, and the successors that
    a taken node makes ready (in ``nbr`` order) are taken before older ready nodes, the last made
    ready first. Returns the order (node indices); shorter than the node count on a cycle.

    ``ptr``/``nbr`` are CSR successor lists (one slot per edge); ``indeg`` is not modified.
    """
    n = len(ptr) - 1
    left = indeg.copy()
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for k in range(len(sources) - 1, -1, -1):
        stack[top] = sources[k]
        top += 1
    order = np.empty(n, dtype=np.int64)
    done = 0
    while top > 0:
        top -= 1
        u = stack[top]
        order[done] = u
        done += 1
        for k in range(ptr[u], ptr[u + 1]):
            v = nbr[k]
            left[v] -= 1
            if left[v] == 0:
                stack[top] = v
                top += 1
    return order[:done]


@jit
def fifo_order(ptr: np.ndarray, nbr: np.ndarray, indeg: np.ndarray) -> np.ndarray:
    """Kahn's algorithm with a FIFO queue: sources in index order, ready successors appended in
    ``nbr`` order (M-TOPO). Returns the order; shorter than the node count on a cycle."""
    n = len(ptr) - 1
    left = indeg.copy()
    queue = np.empty(n, dtype=np.int64)
    tail = 0
    for u in range(n):
        if left[u] == 0:
            queue[tail] = u
            tail += 1
    head = 0
    while head < tail:
        u = queue[head]
        head += 1
        for k in range(ptr[u], ptr[u + 1]):
            v = nbr[k]
            left[v] -= 1
            if left[v] == 0:
                queue[tail] = v
                tail += 1
    return queue[:tail]


@jit
def top_levels(order: np.ndarray, ptr: np.ndarray, nbr: np.ndarray, eid: np.ndarray,
               weight: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """Longest path (µs) from any source to each node excluding its own ``weight``, edges costing
    ``comm`` (by edge id ``eid`` of each CSR successor slot), visited in topological ``order``."""
    tl = np.zeros(len(ptr) - 1)
    for u in order:
        base = tl[u] + weight[u]
        for k in range(ptr[u], ptr[u + 1]):
            cand = base + comm[eid[k]]
            v = nbr[k]
            if cand > tl[v]:
                tl[v] = cand
    return tl


@jit
def bottom_levels(order: np.ndarray, ptr: np.ndarray, nbr: np.ndarray, eid: np.ndarray,
                  weight: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """Longest path (µs) from each node to any sink including its own ``weight``, edges costing
    ``comm``, visited in reverse topological ``order``."""
    bl = np.zeros(len(ptr) - 1)
    for j in range(len(order) - 1, -1, -1):
        u = order[j]
        best = 0.0
        for k in range(ptr[u], ptr[u + 1]):
            cand = bl[nbr[k]] + comm[eid[k]]
            if cand > best:
                best = cand
        bl[u] = best + weight[u]
    return bl


@jit
def keyed_order(ptr: np.ndarray, nbr: np.ndarray, indeg: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Kahn's algorithm taking, among the ready nodes, the one with the smallest ``keys`` entry
    (ties: the smaller index), from a binary min-heap: O((nodes + edges) log nodes). With random
    keys this is a random topological order. Returns the order; shorter than the node count on a
    cycle. ``indeg`` is not modified."""
    n = len(ptr) - 1
    left = indeg.copy()
    heap = np.empty(n, dtype=np.int64)
    size = 0
    order = np.empty(n, dtype=np.int64)
    done = 0
    for u in range(n):
        if left[u] == 0:
            size = _keyed_push(heap, size, keys, u)
    while size > 0:
        u = heap[0]
        size -= 1
        if size > 0:
            heap[0] = heap[size]
            _keyed_sift_down(heap, size, keys)
        order[done] = u
        done += 1
        for k in range(ptr[u], ptr[u + 1]):
            v = nbr[k]
            left[v] -= 1
            if left[v] == 0:
                size = _keyed_push(heap, size, keys, v)
    return order[:done]


@jit
def _keyed_less(keys: np.ndarray, a: int, b: int) -> bool:
    """Node ``a`` comes before node ``b``: smaller key, then smaller index."""
    return keys[a] < keys[b] or (keys[a] == keys[b] and a < b)


@jit
def _keyed_push(heap: np.ndarray, size: int, keys: np.ndarray, u: int) -> int:
    """Push node ``u`` on the min-heap ``heap[:size]``; returns the new size."""
    i = size
    heap[i] = u
    while i > 0:
        parent = (i - 1) // 2
        if not _keyed_less(keys, heap[i], heap[parent]):
            break
        heap[i], heap[parent] = heap[parent], heap[i]
        i = parent
    return size + 1


@jit
def _keyed_sift_down(heap: np.ndarray, size: int, keys: np.ndarray) -> None:
    """Restore the min-heap ``heap[:size]`` after its root was replaced."""
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            return
        if child + 1 < size and _keyed_less(keys, heap[child + 1], heap[child]):
            child += 1
        if not _keyed_less(keys, heap[child], heap[i]):
            return
        heap[i], heap[child] = heap[child], heap[i]
        i = child
