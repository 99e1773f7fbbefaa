"""Memory-capped k-way min-cut partitioning of a (coarse) graph: seed orders, splits, FM refinement.

Used by the ``celeritas`` placer to offer communication-minimising candidates next to Adjusting
Placement. The cut weight of an edge is its transfer time (µs); parts have memory capacities
(bytes). A partition starts as contiguous, capacity-proportional runs of a *seed order* (the
CPD-TOPO order, or the spectral order: nodes sorted by the Fiedler vector of the weighted
Laplacian, which puts strongly connected nodes such as a layer's forward op and its gradient next
to each other) and is then improved by Fiduccia–Mattheyses passes: repeatedly move the unlocked
node with the largest cut reduction to a part with room, lock it, and keep the best prefix of the
pass. References: M. Fiedler, "Algebraic connectivity of graphs", Czech. Math. J. 23, 1973;
C. M. Fiduccia and R. M. Mattheyses, "A linear-time heuristic for improving network partitions",
DAC 1982.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from celeritas_core.graph import Graph
from celeritas_core.jit import jit

#: Largest graph whose spectral order is computed with a dense eigensolver (O(n³) time).
SPECTRAL_MAX_NODES = 1500


def undirected_weights(graph: Graph, weight: np.ndarray) -> sp.csr_matrix:
    """Symmetric sparse matrix W with W[u, v] = total ``weight`` of the edges between u and v."""
    n = graph.num_nodes
    rows = np.concatenate([graph.edge_src, graph.edge_dst])
    cols = np.concatenate([graph.edge_dst, graph.edge_src])
    data = np.concatenate([weight, weight]).astype(np.float64)
    w = sp.csr_matrix((data, (rows, cols)), shape=(n, n))
    w.sum_duplicates()
    return w


def cut_weight(w: sp.csr_matrix, parts: np.ndarray) -> float:
    """Total weight of the edges whose endpoints are in different parts (each edge once)."""
    coo = w.tocoo()
    return float(coo.data[parts[coo.row] != parts[coo.col]].sum()) / 2.0


def spectral_order(w: sp.csr_matrix, chain: np.ndarray) -> np.ndarray | None:
    """Nodes sorted by the Fiedler vector of W plus a faint path along ``chain`` (an order).

    The path (weight 1e-3 × the mean edge weight) keeps the graph connected so the vector is
    defined, and breaks ties toward ``chain``. Returns None above :data:`SPECTRAL_MAX_NODES` nodes
    or when the eigensolver fails.
    """
    n = w.shape[0]
    if n < 3 or n > SPECTRAL_MAX_NODES:
        return None
    dense = w.toarray()
    faint = 1e-3 * (float(w.data.mean()) if w.nnz else 1.0)
    dense[chain[:-1], chain[1:]] += faint
    dense[chain[1:], chain[:-1]] += faint
    degree = dense.sum(axis=1)
    scale = 1.0 / np.sqrt(np.maximum(degree, 1e-300))
    laplacian = np.eye(n) - scale[:, None] * dense * scale[None, :]  # normalised Laplacian
    try:
        _, vectors = np.linalg.eigh(laplacian)
    except np.linalg.LinAlgError:
        return None
    fiedler = vectors[:, 1] * scale
    rank = np.empty(n, dtype=np.int64)
    rank[chain] = np.arange(n)
    return np.lexsort((rank, fiedler))


def split_order(order: np.ndarray, memory: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Cut ``order`` into ``len(capacity)`` contiguous runs with memory shares proportional to
    ``capacity`` (bytes); a run closes early rather than exceed its capacity. Returns part per node."""
    memory = np.asarray(memory, dtype=np.float64)
    capacity = np.asarray(capacity, dtype=np.float64)
    targets = np.cumsum(capacity / capacity.sum()) * float(memory.sum())
    return _split(np.asarray(order, dtype=np.int64), memory, capacity, targets)


@jit
def _split(order: np.ndarray, memory: np.ndarray, capacity: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The loop of :func:`split_order`: ``targets`` are the cumulative memory (bytes) each run ends at."""
    k = len(capacity)
    parts = np.empty(len(order), dtype=np.int64)
    used = np.zeros(k)
    part = 0
    filled = 0.0
    for v in order:
        m = memory[v]
        while part < k - 1 and (filled + m / 2 > targets[part] or used[part] + m > capacity[part]):
            part += 1
        parts[v] = part
        used[part] += m
        filled += m
    return parts


def fm_refine(w: sp.csr_matrix, memory: np.ndarray, capacity: np.ndarray, parts: np.ndarray,
              *, max_passes: int = 8) -> np.ndarray:
    """Fiduccia–Mattheyses k-way refinement of ``parts`` minimising :func:`cut_weight`.

    A move is allowed when the target part has room for the node (bytes), so refinement never
    adds overflow (and moves out of an over-full part reduce it). Each pass moves every node at
    most once, greedily by gain (ties: lowest node, then lowest part), and keeps the prefix with
    the largest total gain; passes stop when none improves, after ``max_passes`` at most. Only
    single moves: parts filled exactly to capacity cannot trade nodes.

    The best allowed move is found with one max-segment tree per target part over the nodes
    sorted by memory (those that fit are a prefix), so a pass costs O((n + nnz) · k · log n) and
    the whole refinement O(max_passes · (n + nnz) · k · log n) (Fiduccia and Mattheyses 1982 use
    gain buckets for integer gains; the gains here are transfer times in µs, floats).
    """
    out = parts.copy()
    n, k = len(parts), len(capacity)
    if n == 0 or k < 2:
        return out
    w = sp.csr_matrix(w)
    if not w.has_canonical_format:
        w = w.copy()
        w.sum_duplicates()
    memory = np.asarray(memory, dtype=np.float64)
    work = np.asarray(parts, dtype=np.int64).copy()
    used = np.bincount(work, weights=memory, minlength=k).astype(np.float64)
    by_memory = np.argsort(memory, kind="stable").astype(np.int64)
    tolerance = 1e-9 * (float(w.data.sum()) + 1.0)
    _fm_passes(w.indptr.astype(np.int64), w.indices.astype(np.int64), w.data.astype(np.float64),
               memory, np.asarray(capacity, dtype=np.float64), work, used, by_memory, tolerance,
               max_passes)
    out[:] = work
    return out


@jit
def _fm_passes(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, memory: np.ndarray,
               capacity: np.ndarray, parts: np.ndarray, used: np.ndarray, by_memory: np.ndarray,
               tolerance: float, max_passes: int) -> None:
    """The passes of :func:`fm_refine` on CSR arrays; updates ``parts`` and ``used`` (bytes) in place."""
    n, k = len(parts), len(capacity)
    links = np.zeros((n, k))  # links[v, p]: weight (µs) from v to part p, summed in CSR order
    for v in range(n):
        for jj in range(indptr[v], indptr[v + 1]):
            links[v, parts[indices[jj]]] += data[jj]
    position = np.empty(n, dtype=np.int64)
    position[by_memory] = np.arange(n)
    sorted_memory = memory[by_memory]
    size = 1
    while size < n:
        size *= 2
    tree = np.full((k, 2 * size), -1, dtype=np.int64)
    gain = np.empty((n, k))
    locked = np.zeros(n, dtype=np.bool_)
    moves = np.empty((n, 3), dtype=np.int64)
    for _ in range(max_passes):
        locked[:] = False
        for v in range(n):
            _fm_gain_row(v, links, parts, gain)
        _fm_build(tree, gain, parts, position, locked, size)
        count = 0
        total = best_total = 0.0
        best_len = 0
        for _step in range(n):
            v, target = _fm_best_move(tree, gain, used, capacity, sorted_memory, size)
            if v < 0:
                break
            source = parts[v]
            total += gain[v, target]
            _fm_move(v, source, target, indptr, indices, data, memory, links, used, parts)
            locked[v] = True
            moves[count, 0], moves[count, 1], moves[count, 2] = v, source, target
            count += 1
            _fm_refresh(v, indptr, indices, links, parts, gain, tree, position, locked, size)
            if total > best_total + tolerance:
                best_total, best_len = total, count
        for i in range(count - 1, best_len - 1, -1):
            _fm_move(moves[i, 0], moves[i, 2], moves[i, 1], indptr, indices, data, memory, links, used, parts)
        if best_len == 0:
            break


@jit
def _fm_move(v: int, source: int, target: int, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
             memory: np.ndarray, links: np.ndarray, used: np.ndarray, parts: np.ndarray) -> None:
    """Move node ``v`` from ``source`` to ``target``: its neighbours' links and the parts' bytes."""
    for jj in range(indptr[v], indptr[v + 1]):
        links[indices[jj], source] -= data[jj]
    for jj in range(indptr[v], indptr[v + 1]):
        links[indices[jj], target] += data[jj]
    used[source] -= memory[v]
    used[target] += memory[v]
    parts[v] = target


@jit
def _fm_gain_row(v: int, links: np.ndarray, parts: np.ndarray, gain: np.ndarray) -> None:
    """Cut reduction (µs) of moving ``v`` to each part; -inf for its own part."""
    own = links[v, parts[v]]
    for p in range(links.shape[1]):
        gain[v, p] = -np.inf if p == parts[v] else links[v, p] - own


@jit
def _fm_better(a: int, b: int, gain: np.ndarray, t: int) -> int:
    """The node of ``a`` and ``b`` (-1: none) with the larger gain toward ``t``, ties to the lower."""
    if a < 0:
        return b
    if b < 0:
        return a
    if gain[a, t] > gain[b, t] or (gain[a, t] == gain[b, t] and a < b):
        return a
    return b


@jit
def _fm_build(tree: np.ndarray, gain: np.ndarray, parts: np.ndarray, position: np.ndarray,
              locked: np.ndarray, size: int) -> None:
    """Fill every part's segment tree: leaves by memory rank, inner nodes the best of their two."""
    k = tree.shape[0]
    tree[:, :] = -1
    for v in range(len(parts)):
        if not locked[v]:
            for t in range(k):
                if t != parts[v]:
                    tree[t, size + position[v]] = v
    for t in range(k):
        for i in range(size - 1, 0, -1):
            tree[t, i] = _fm_better(tree[t, 2 * i], tree[t, 2 * i + 1], gain, t)


@jit
def _fm_update(tree: np.ndarray, gain: np.ndarray, t: int, leaf: int, value: int, changed: int) -> None:
    """Set one leaf of part ``t``'s tree and recompute its ancestors (O(log n)) after node
    ``changed`` left the tree or changed gain; stops where an ancestor keeps another winner."""
    i = leaf
    tree[t, i] = value
    i //= 2
    while i >= 1:
        winner = _fm_better(tree[t, 2 * i], tree[t, 2 * i + 1], gain, t)
        if winner == tree[t, i] and winner != changed:
            break
        tree[t, i] = winner
        i //= 2


@jit
def _fm_refresh(v: int, indptr: np.ndarray, indices: np.ndarray, links: np.ndarray, parts: np.ndarray,
                gain: np.ndarray, tree: np.ndarray, position: np.ndarray, locked: np.ndarray,
                size: int) -> None:
    """After moving ``v``: take it out of every tree and re-rank its unlocked neighbours' changed gains."""
    k = tree.shape[0]
    for t in range(k):
        _fm_update(tree, gain, t, size + position[v], -1, v)
    for jj in range(indptr[v], indptr[v + 1]):
        u = indices[jj]
        if locked[u]:
            continue
        own = links[u, parts[u]]
        for t in range(k):
            if t != parts[u] and links[u, t] - own != gain[u, t]:
                gain[u, t] = links[u, t] - own
                _fm_update(tree, gain, t, size + position[u], u, u)


@jit
def _fm_best_move(tree: np.ndarray, gain: np.ndarray, used: np.ndarray, capacity: np.ndarray,
                  sorted_memory: np.ndarray, size: int) -> tuple[int, int]:
    """The allowed move of largest gain (ties: lowest node, then lowest part), or (-1, -1)."""
    best_v, best_t = -1, -1
    for t in range(tree.shape[0]):
        lo, hi = 0, len(sorted_memory)  # nodes that fit into t: a prefix by memory
        while lo < hi:
            mid = (lo + hi) // 2
            if used[t] + sorted_memory[mid] <= capacity[t]:
                lo = mid + 1
            else:
                hi = mid
        v = _fm_prefix_best(tree, gain, t, lo, size)
        if v >= 0 and (best_v < 0 or gain[v, t] > gain[best_v, best_t]
                       or (gain[v, t] == gain[best_v, best_t] and v < best_v)):
            best_v, best_t = v, t
    return best_v, best_t


@jit
def _fm_prefix_best(tree: np.ndarray, gain: np.ndarray, t: int, count: int, size: int) -> int:
    """Best node among the first ``count`` leaves (by memory) of part ``t``'s tree, or -1."""
    best = -1
    lo, hi = size, size + count
    while lo < hi:
        if lo & 1:
            best = _fm_better(best, tree[t, lo], gain, t)
            lo += 1
        if hi & 1:
            hi -= 1
            best = _fm_better(best, tree[t, hi], gain, t)
        lo //= 2
        hi //= 2
    return best


def parts_needed(memory: np.ndarray, capacity: np.ndarray) -> int:
    """Fewest of the largest devices whose total capacity holds all of ``memory`` (at least 1)."""
    caps = np.sort(capacity)[::-1]
    enough = np.flatnonzero(np.cumsum(caps) >= float(memory.sum()))
    return int(enough[0]) + 1 if len(enough) else len(caps)


def tensor_nets(graph: Graph, comm_us: np.ndarray, unit_of: np.ndarray,
                num_units: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """The graph's tensors as hyperedges over units: one net per (producer, ``src_output``).

    A net's pins are the units of its producer and consumers; its cost is the transfer time (µs)
    of the tensor (the largest ``comm_us`` of its edges). Placing a net's pins on ``λ`` devices
    costs ``λ − 1`` transfers, exactly the simulator's one transfer per tensor and destination
    device. Returns the binary nets × units incidence (nets with a single unit dropped) and costs.
    """
    if graph.num_edges == 0:
        return sp.csr_matrix((0, num_units)), np.zeros(0)
    view = graph.tensors
    net_of, producer = view.edge_tensor, view.producer
    num_nets = view.num_tensors
    cost = np.zeros(num_nets)
    np.maximum.at(cost, net_of, comm_us)
    rows = np.concatenate([net_of, np.arange(num_nets)])
    cols = np.concatenate([unit_of[graph.edge_dst], unit_of[producer]])
    incidence = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(num_nets, num_units))
    incidence.sum_duplicates()
    incidence.data[:] = 1.0
    keep = np.diff(incidence.indptr) > 1
    return incidence[keep], cost[keep]


def connectivity_cost(incidence: sp.csr_matrix, cost: np.ndarray, parts: np.ndarray, k: int) -> float:
    """Σ over nets of cost × (number of parts the net spans − 1): the transfer time (µs) placed."""
    onehot = sp.csr_matrix((np.ones(len(parts)), (np.arange(len(parts)), parts)), shape=(len(parts), k))
    spans = np.asarray(((incidence @ onehot) > 0).sum(axis=1)).ravel()
    return float((cost * (spans - 1)).sum())


def connectivity_refine(incidence: sp.csr_matrix, cost: np.ndarray, memory: np.ndarray,
                        capacity: np.ndarray, parts: np.ndarray, *, max_rounds: int = 40) -> np.ndarray:
    """Rounds of simultaneous moves lowering :func:`connectivity_cost`, memory capped (bytes).

    Moving unit ``v`` from part ``a`` to ``b`` saves the cost of every net of ``v`` whose only pin
    in ``a`` is ``v`` and pays for every net of ``v`` without a pin in ``b``. Each round every unit
    picks its best move to a part with room; equal gains go to the part where its nets already
    have more pins (weighted by cost), and a move of gain 0 is made when it gathers pins that way,
    so pins of a net that are split evenly can still come together. A unit moves only when it
    ranks first among the candidates on every one of its nets, so the gains of one round add up
    exactly; the cost never rises, and rounds of gain 0 strictly raise Σ cost × pins² per part,
    so refinement ends. Moves into a part are taken best first while its free memory (bytes,
    before the round) lasts. Vectorised sparse algebra: O(pins · k) per round.
    """
    parts = parts.copy()
    n = len(parts)
    k = len(capacity)
    if n == 0 or k < 2 or incidence.shape[0] == 0:
        return parts
    rows = np.arange(n)
    pins_t = incidence.T.tocsr()  # units × nets
    weighted_t = pins_t.multiply(cost[None, :]).tocsr()
    own_weight = np.asarray(weighted_t.sum(axis=1)).ravel()  # Σ cost of each unit's nets
    net_starts = incidence.indptr[:-1]
    unit_has = np.diff(pins_t.indptr) > 0
    unit_starts = np.minimum(pins_t.indptr[:-1], max(pins_t.nnz - 1, 0))
    tolerance = 1e-9 * (float(cost.sum()) + 1.0)
    for _ in range(max_rounds):
        onehot = sp.csr_matrix((np.ones(n), (rows, parts)), shape=(n, k))
        count = np.asarray((incidence @ onehot).todense())  # pins of each net in each part
        join = np.asarray(weighted_t @ (count == 0).astype(np.float64))
        alone = np.asarray(weighted_t @ (count == 1).astype(np.float64))
        pull = np.asarray(weighted_t @ count)  # Σ cost × pins already in each part
        gain = alone[rows, parts][:, None] - join
        # tie-break among equal gains: join the part where the unit's nets have more pins
        attraction = pull - pull[rows, parts][:, None] + own_weight[:, None]
        used = np.bincount(parts, weights=memory, minlength=k)
        room = capacity - used
        blocked = memory[:, None] > room[None, :]
        blocked[rows, parts] = True
        gain[blocked] = -np.inf
        top = gain.max(axis=1)
        attraction[blocked | (gain < top[:, None] - tolerance)] = -np.inf
        target = np.argmax(attraction, axis=1)
        best = gain[rows, target]
        pulled = attraction[rows, target]
        candidate = (best > tolerance) | ((best >= -tolerance) & (pulled > tolerance))
        if not candidate.any():
            break
        # one mover per net: the candidate with the highest (gain, attraction, index) rank
        rank = np.empty(n)
        rank[np.lexsort((rows, np.where(candidate, pulled, -np.inf), np.where(candidate, best, -np.inf)))] = \
            np.arange(n, dtype=np.float64)
        priority = np.where(candidate, rank, -1.0)
        net_best = np.maximum.reduceat(priority[incidence.indices], net_starts)
        blocker = np.full(n, -1.0)
        reduced = np.maximum.reduceat(net_best[pins_t.indices], unit_starts)
        blocker[unit_has] = reduced[unit_has]
        movers = np.flatnonzero(candidate & (priority >= blocker))
        # memory: per target part, the best-ranked movers first while its room lasts
        movers = movers[np.lexsort((-priority[movers], target[movers]))]
        tgt = target[movers]
        cum = np.cumsum(memory[movers])
        first = np.searchsorted(tgt, np.arange(k))
        base = np.where(first > 0, cum[np.maximum(first - 1, 0)], 0.0)
        movers = movers[cum - base[tgt] <= room[tgt]]
        if len(movers) == 0:
            break
        parts[movers] = target[movers]
    return parts
