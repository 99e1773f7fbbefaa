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

import functools
import math

import numpy as np
import scipy.sparse as sp

from celeritas_core.compiled.jit import jit
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph

#: Graphs up to this many nodes get the exact Fiedler vector from a dense eigensolver (O(n³), ms).
SPECTRAL_DENSE_MAX_NODES = 200
#: Work budget of the sparse eigensolver on larger graphs, in matrix entries visited (an iteration
#: visits nnz + n): about 0.3 s on one core. It runs SPECTRAL_WORK / (nnz + n) iterations, at least
#: SPECTRAL_MIN_ITERATIONS, fewer when it converges: exact up to some 10k nodes, O(nnz + n) above.
SPECTRAL_WORK = 150_000_000
SPECTRAL_MIN_ITERATIONS = 100


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
    defined, and breaks ties toward ``chain``. Up to :data:`SPECTRAL_DENSE_MAX_NODES` nodes the
    vector is exact (dense eigensolver). Above, a sparse eigensolver (:func:`_locg`) runs until
    it converges or its iterations use up :data:`SPECTRAL_WORK` (at least
    :data:`SPECTRAL_MIN_ITERATIONS`): O(nnz + n) time, a bound chosen over convergence, since on
    chain-like graphs the eigenvalues crowd and convergence takes O(n) iterations. Coarse graphs
    of the paper-shaped models (0.5–7k nodes, up to 60k nonzeros) converge to the exact order (up
    to its direction); on the 1M-op transformer's (5,303 nodes, 330k nonzeros, 450 iterations) the
    FM-refined cut from the order is 2 % above the exact order's, and on a 140k-node coarse graph
    (1.2M nonzeros, 113 iterations) 29 % below the CPD-TOPO seed's. Returns None below 3 nodes or
    when the eigensolver fails.
    """
    n = w.shape[0]
    if n < 3:
        return None
    rank = np.empty(n, dtype=np.int64)
    rank[chain] = np.arange(n)
    fiedler = _dense_fiedler(w, chain) if n <= SPECTRAL_DENSE_MAX_NODES else _sparse_fiedler(w, chain, rank)
    if fiedler is None:
        return None
    return np.lexsort((rank, fiedler))


def _dense_fiedler(w: sp.csr_matrix, chain: np.ndarray) -> np.ndarray | None:
    """The Fiedler vector of W plus the faint path, from the dense normalised Laplacian."""
    n = w.shape[0]
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
    return vectors[:, 1] * scale


def _sparse_fiedler(w: sp.csr_matrix, chain: np.ndarray, rank: np.ndarray) -> np.ndarray | None:
    """The approximate Fiedler vector of W plus the faint path: :func:`_locg` started from the
    cosine along ``chain`` (``rank``: position in it) of 1 to 4 half-waves with the lowest
    Rayleigh quotient, its sign that of the start."""
    n = w.shape[0]
    mean = float(w.data.mean()) if w.nnz else 0.0
    faint = 1e-3 * mean if mean > 0 else 1e-3
    path = sp.csr_matrix((np.full(n - 1, faint), (chain[:-1], chain[1:])), shape=(n, n))
    a = (w + path + path.T).tocsr()
    degree = np.asarray(a.sum(axis=1), dtype=np.float64).ravel()
    if not np.all(degree > 0):
        return None
    waves = np.cos(np.pi * np.arange(1, 5)[:, None] * (rank[None, :] + 0.5) / n)
    waves -= (waves @ degree / degree.sum())[:, None]  # D-orthogonal to the constant vector
    rayleigh = np.einsum("ij,ij->i", waves, waves * degree - (a @ waves.T).T) / (waves**2 @ degree)
    start = waves[int(np.argmin(rayleigh))]
    try:
        x = _locg(a.indptr.astype(np.int64), a.indices.astype(np.int64), a.data.astype(np.float64),
                  degree, start, max(SPECTRAL_MIN_ITERATIONS, SPECTRAL_WORK // (a.nnz + n)))
    except (np.linalg.LinAlgError, ZeroDivisionError):
        return None
    if not np.all(np.isfinite(x)):
        return None
    return x if float(x @ (degree * start)) >= 0 else -x


@jit
def _locg(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, degree: np.ndarray, start: np.ndarray,
          iterations: int) -> np.ndarray:
    """Smallest nonzero eigenvector of L x = λ D x (L = D - A, A in CSR, D = diag(``degree``))
    among vectors D-orthogonal to the constants, by at most ``iterations`` steps of locally
    optimal preconditioned conjugate gradient (Rayleigh–Ritz on the current vector, its
    D⁻¹-preconditioned residual and the previous direction; A. V. Knyazev, "Toward the optimal
    preconditioned eigensolver: LOBPCG", SIAM J. Sci. Comput. 23, 2001, with a block of one)."""
    n = len(start)
    basis = np.zeros((3, n))  # Rayleigh–Ritz basis: current vector, residual, previous direction
    images = np.zeros((3, n))  # L times each
    basis[0] = start / np.sqrt(_d_dot(start, start, degree))
    _laplacian(indptr, indices, data, degree, basis[0], images[0])
    direction, direction_image = np.zeros(n), np.zeros(n)
    size = 2
    for _ in range(iterations):
        residual = (images[0] - np.dot(basis[0], images[0]) * degree * basis[0]) / degree
        residual -= np.dot(degree, residual) / degree.sum()  # D-orthogonal to the constants
        if _d_dot(residual, residual, degree) <= 1e-24:
            break  # converged
        basis[1], basis[2], images[2] = residual, direction, direction_image
        _laplacian(indptr, indices, data, degree, basis[1], images[1])
        size = _orthonormalize(basis, images, size, degree)
        coef = np.linalg.eigh(_gram(basis, images, size))[1][:, 0]
        direction, direction_image = coef[1:] @ basis[1:size], coef[1:] @ images[1:size]
        x, image = coef[0] * basis[0] + direction, coef[0] * images[0] + direction_image
        norm = np.sqrt(_d_dot(x, x, degree))
        basis[0], images[0] = x / norm, image / norm
        size = 3 if size > 1 else 2
    return basis[0]


@jit
def _laplacian(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, degree: np.ndarray,
               v: np.ndarray, out: np.ndarray) -> None:
    """``out`` = (D - A) ``v`` for A in CSR and D = diag(``degree``)."""
    for i in range(len(v)):
        total = degree[i] * v[i]
        for jj in range(indptr[i], indptr[i + 1]):
            total -= data[jj] * v[indices[jj]]
        out[i] = total


@jit
def _d_dot(u: np.ndarray, v: np.ndarray, degree: np.ndarray) -> float:
    """The D-inner product Σ degree · u · v."""
    total = 0.0
    for i in range(len(u)):
        total += degree[i] * u[i] * v[i]
    return total


@jit
def _orthonormalize(basis: np.ndarray, images: np.ndarray, size: int, degree: np.ndarray) -> int:
    """D-orthonormalise rows 1..``size`` - 1 of ``basis`` against the rows before (modified
    Gram–Schmidt; row 0 already is), keeping ``images`` = L ``basis``; rows that vanish are
    dropped and the rest moved up. Returns the rows kept."""
    kept = 1
    for i in range(1, size):
        before = np.sqrt(_d_dot(basis[i], basis[i], degree))
        for j in range(kept):
            c = _d_dot(basis[j], basis[i], degree)
            basis[i] -= c * basis[j]
            images[i] -= c * images[j]
        norm = np.sqrt(_d_dot(basis[i], basis[i], degree))
        if norm > 1e-8 * before:
            basis[kept], images[kept] = basis[i] / norm, images[i] / norm
            kept += 1
    return kept


@jit
def _gram(basis: np.ndarray, images: np.ndarray, size: int) -> np.ndarray:
    """The symmetrised Rayleigh–Ritz matrix of the first ``size`` rows: basisᵀ L basis."""
    gram = np.empty((size, size))
    for i in range(size):
        for j in range(size):
            gram[i, j] = 0.5 * (np.dot(basis[i], images[j]) + np.dot(basis[j], images[i]))
    return gram


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
    tree = (np.empty((k, 2 * size)), np.empty((k, 2 * size), dtype=np.int64))  # (gain, node) per part
    locked = np.zeros(n, dtype=np.bool_)
    moves = np.empty((n, 3), dtype=np.int64)
    for _ in range(max_passes):
        locked[:] = False
        _fm_build(tree, links, parts, position, size)
        count = 0
        total = best_total = 0.0
        best_len = 0
        for _step in range(n):
            gain, v, target = _fm_best_move(tree, used, capacity, sorted_memory, locked, position, size)
            if v < 0:
                break
            source = parts[v]
            total += gain
            _fm_move(v, source, target, indptr, indices, data, memory, links, used, parts)
            locked[v] = True
            moves[count, 0], moves[count, 1], moves[count, 2] = v, source, target
            count += 1
            _fm_refresh(v, source, target, indptr, indices, links, parts, tree, position, locked, size)
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
def _fm_better(gain_a: float, a: int, gain_b: float, b: int) -> bool:
    """Whether entry (``gain_a`` µs, node ``a``) beats (``gain_b``, ``b``): larger gain, then lower
    node; an empty entry (gain -inf, node -1) beats nothing."""
    if gain_a != gain_b:
        return gain_a > gain_b
    return a >= 0 and (b < 0 or a < b)


@jit
def _fm_build(tree: tuple[np.ndarray, np.ndarray], links: np.ndarray, parts: np.ndarray,
              position: np.ndarray, size: int) -> None:
    """Fill every part's segment tree with all nodes' gains (leaves by memory rank, a node's own
    part empty); an inner entry is the better of its two children."""
    gains, nodes = tree
    k = gains.shape[0]
    gains[:, :] = -np.inf
    nodes[:, :] = -1
    for v in range(len(parts)):
        own = links[v, parts[v]]
        for t in range(k):
            if t != parts[v]:
                gains[t, size + position[v]] = links[v, t] - own
                nodes[t, size + position[v]] = v
    for t in range(k):
        for i in range(size - 1, 0, -1):
            c = _fm_child(gains, nodes, t, i)
            gains[t, i], nodes[t, i] = gains[t, c], nodes[t, c]


@jit
def _fm_child(gains: np.ndarray, nodes: np.ndarray, t: int, i: int) -> int:
    """The better child (index) of entry ``i`` of part ``t``'s tree."""
    left, right = 2 * i, 2 * i + 1
    return left if _fm_better(gains[t, left], nodes[t, left], gains[t, right], nodes[t, right]) else right


@jit
def _fm_update(tree: tuple[np.ndarray, np.ndarray], t: int, leaf: int, gain: float, node: int) -> None:
    """Set one leaf of part ``t``'s tree and recompute its ancestors up to the first unchanged one."""
    gains, nodes = tree
    gains[t, leaf], nodes[t, leaf] = gain, node
    i = leaf // 2
    while i >= 1:
        c = _fm_child(gains, nodes, t, i)
        if gains[t, c] == gains[t, i] and nodes[t, c] == nodes[t, i]:
            break
        gains[t, i], nodes[t, i] = gains[t, c], nodes[t, c]
        i //= 2


@jit
def _fm_refresh(v: int, source: int, target: int, indptr: np.ndarray, indices: np.ndarray,
                links: np.ndarray, parts: np.ndarray, tree: tuple[np.ndarray, np.ndarray],
                position: np.ndarray, locked: np.ndarray, size: int) -> None:
    """After moving ``v`` (now locked): update its unlocked neighbours' gains (toward ``source``
    and ``target``, or all parts when their own part is one of them)."""
    gains = tree[0]
    k = gains.shape[0]
    for jj in range(indptr[v], indptr[v + 1]):
        u = indices[jj]
        if locked[u]:
            continue
        own, leaf = links[u, parts[u]], size + position[u]
        own_changed = parts[u] in (source, target)
        for t in range(k):
            gain = links[u, t] - own
            if t != parts[u] and (own_changed or t in (source, target)) and gain != gains[t, leaf]:
                _fm_update(tree, t, leaf, gain, u)


@jit
def _fm_best_move(tree: tuple[np.ndarray, np.ndarray], used: np.ndarray, capacity: np.ndarray,
                  sorted_memory: np.ndarray, locked: np.ndarray, position: np.ndarray,
                  size: int) -> tuple[float, int, int]:
    """(gain µs, node, part) of the allowed move of largest gain (ties: lowest node, then lowest
    part), node -1 when none. Locked nodes leave a tree when they come out on top (lazily: most
    never do, which saves k root-to-leaf updates per move)."""
    gains, nodes = tree
    best_gain, best_v, best_t = -np.inf, -1, -1
    n = len(sorted_memory)
    for t in range(gains.shape[0]):
        fits = n  # the nodes that fit into t: a prefix by memory
        if used[t] + sorted_memory[n - 1] > capacity[t]:
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) // 2
                if used[t] + sorted_memory[mid] <= capacity[t]:
                    lo = mid + 1
                else:
                    hi = mid
            fits = lo
        gain, v = _fm_prefix_best(gains, nodes, t, fits, n, size)
        while v >= 0 and locked[v]:
            _fm_update(tree, t, size + position[v], -np.inf, -1)
            gain, v = _fm_prefix_best(gains, nodes, t, fits, n, size)
        if _fm_better(gain, v, best_gain, best_v):
            best_gain, best_v, best_t = gain, v, t
    return best_gain, best_v, best_t


@jit
def _fm_prefix_best(gains: np.ndarray, nodes: np.ndarray, t: int, count: int, n: int,
                    size: int) -> tuple[float, int]:
    """Best entry among the first ``count`` leaves (by memory) of part ``t``'s tree."""
    if count == n:
        return gains[t, 1], nodes[t, 1]
    gain, node = -np.inf, -1
    lo, hi = size, size + count
    while lo < hi:
        if lo & 1:
            if _fm_better(gains[t, lo], nodes[t, lo], gain, node):
                gain, node = gains[t, lo], nodes[t, lo]
            lo += 1
        if hi & 1:
            hi -= 1
            if _fm_better(gains[t, hi], nodes[t, hi], gain, node):
                gain, node = gains[t, hi], nodes[t, hi]
        lo //= 2
        hi //= 2
    return gain, node


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
    so refinement ends (after ``max_rounds`` at most). Moves into a part are taken best first
    while its free memory (bytes, before the round) lasts. ``incidence`` is binary (nets × units).

    Each unit's per-part sums over its nets are kept between rounds: recomputed (in the same
    order, so results do not depend on it) for the movers and the pins of nets whose pin count in
    a part crosses 0, 1 or 2; the other pins of touched nets only have their pull sum marked stale,
    recomputed if they are ever candidates. A round costs O(units · k) plus the pins of the nets
    of its candidates and movers: O(pins · k + max_rounds · (units · k + pins)) in all.
    """
    out = parts.copy()
    n, k = len(parts), len(capacity)
    if n == 0 or k < 2 or incidence.shape[0] == 0:
        return out
    pins_t = incidence.T.tocsr()  # units × nets
    weighted_t = pins_t.multiply(np.asarray(cost)[None, :]).tocsr()  # the sums' order: scipy's
    own_weight = np.asarray(weighted_t.sum(axis=1), dtype=np.float64).ravel()  # Σ cost of each unit's nets
    tolerance = 1e-9 * (float(cost.sum()) + 1.0)
    work = np.asarray(parts, dtype=np.int64).copy()
    index = (incidence.indptr, incidence.indices, pins_t.indptr, pins_t.indices, weighted_t.indptr,
             weighted_t.indices)
    _connectivity_rounds(*(a.astype(np.int64) for a in index), weighted_t.data.astype(np.float64),
                         own_weight, np.asarray(memory, dtype=np.float64),
                         np.asarray(capacity, dtype=np.float64), work, tolerance, max_rounds)
    out[:] = work
    return out


@jit
def _connectivity_rounds(net_ptr: np.ndarray, net_pins: np.ndarray, unit_ptr: np.ndarray,
                         unit_nets: np.ndarray, weighted_ptr: np.ndarray, weighted_nets: np.ndarray,
                         weighted_cost: np.ndarray, own_weight: np.ndarray, memory: np.ndarray,
                         capacity: np.ndarray, parts: np.ndarray, tolerance: float, max_rounds: int) -> None:
    """The rounds of :func:`connectivity_refine` on CSR arrays; updates ``parts`` in place."""
    n, k = len(parts), len(capacity)
    count = np.zeros((len(net_ptr) - 1, k), dtype=np.int64)  # pins of each net in each part
    for e in range(len(net_ptr) - 1):
        for jj in range(net_ptr[e], net_ptr[e + 1]):
            count[e, parts[net_pins[jj]]] += 1
    sums = np.zeros((n, 3, k))  # per unit and part: Σ cost of nets absent, alone, Σ cost × pins
    movable = np.zeros(n, dtype=np.bool_)
    pull_stale = np.zeros(n, dtype=np.bool_)  # sums[u, 2] out of date (the others are not)
    weighted = (weighted_ptr, weighted_nets, weighted_cost)
    for u in range(n):
        _unit_sums(u, weighted, count, parts, tolerance, sums, movable, pull_stale)
    target = np.zeros(n, dtype=np.int64)
    best = np.full(n, -np.inf)
    pulled = np.full(n, -np.inf)
    owner = np.full(len(net_ptr) - 1, -1, dtype=np.int64)
    stamp = np.full(n, -1, dtype=np.int64)
    stale = np.empty(n, dtype=np.int64)
    for round_ in range(max_rounds):
        used = np.zeros(k)
        for v in range(n):
            used[parts[v]] += memory[v]
        room = capacity - used
        candidates = _choose_moves(parts, memory, room, weighted, count, sums, movable, pull_stale,
                                   own_weight, tolerance, target, best, pulled)
        if len(candidates) == 0:
            break
        movers = _net_winners(candidates, unit_ptr, unit_nets, best, pulled, owner)
        movers = _within_room(movers, target, best, pulled, memory, room)
        if len(movers) == 0:
            break
        num_stale = _apply_moves(movers, target, parts, round_, net_ptr, net_pins, unit_ptr, unit_nets,
                                 count, stamp, stale, pull_stale)
        for u in stale[:num_stale]:
            _unit_sums(u, weighted, count, parts, tolerance, sums, movable, pull_stale)


@jit
def _unit_sums(u: int, weighted: tuple[np.ndarray, np.ndarray, np.ndarray], count: np.ndarray,
               parts: np.ndarray, tolerance: float, sums: np.ndarray, movable: np.ndarray,
               pull_stale: np.ndarray) -> None:
    """Unit ``u``'s sums (µs) per part over its nets: cost of those without a pin there (joining),
    with one pin there (leaving alone) and cost × pins there (pull), in CSR order; ``movable``:
    whether some move of ``u`` has gain ≥ -tolerance, memory aside (else it is no candidate)."""
    weighted_ptr, weighted_nets, weighted_cost = weighted
    k = count.shape[1]
    sums[u, :, :] = 0.0
    pull_stale[u] = False
    for jj in range(weighted_ptr[u], weighted_ptr[u + 1]):
        e, c = weighted_nets[jj], weighted_cost[jj]
        for p in range(k):
            pins = count[e, p]
            if pins == 0:
                sums[u, 0, p] += c
            elif pins == 1:
                sums[u, 1, p] += c
            sums[u, 2, p] += c * float(pins)
    movable[u] = False
    for p in range(k):
        if p != parts[u] and sums[u, 1, parts[u]] - sums[u, 0, p] >= -tolerance:
            movable[u] = True


@jit
def _choose_moves(parts: np.ndarray, memory: np.ndarray, room: np.ndarray,
                  weighted: tuple[np.ndarray, np.ndarray, np.ndarray], count: np.ndarray, sums: np.ndarray,
                  movable: np.ndarray, pull_stale: np.ndarray, own_weight: np.ndarray, tolerance: float,
                  target: np.ndarray, best: np.ndarray, pulled: np.ndarray) -> np.ndarray:
    """Every ``movable`` unit's best move (``target``, gain ``best`` µs, attraction ``pulled``) to a
    part with room (its sums brought up to date first); returns the units whose move is a candidate
    (gain > 0, or 0 and gathering pins)."""
    n, k = len(parts), len(room)
    gain = np.empty(k)
    chosen = np.zeros(n, dtype=np.bool_)
    for v in range(n):
        if not movable[v]:
            continue
        if pull_stale[v]:
            _unit_sums(v, weighted, count, parts, tolerance, sums, movable, pull_stale)
        own = parts[v]
        top = -np.inf
        for p in range(k):
            gain[p] = -np.inf if p == own or memory[v] > room[p] else sums[v, 1, own] - sums[v, 0, p]
            top = max(top, gain[p])
        target[v], pulled[v] = 0, -np.inf
        for p in range(k):
            if gain[p] > -np.inf and not gain[p] < top - tolerance:
                attraction = sums[v, 2, p] - sums[v, 2, own] + own_weight[v]
                if attraction > pulled[v]:
                    target[v], pulled[v] = p, attraction
        best[v] = gain[target[v]]
        chosen[v] = best[v] > tolerance or (best[v] >= -tolerance and pulled[v] > tolerance)
    return np.flatnonzero(chosen)


@jit
def _outranks(a: int, b: int, best: np.ndarray, pulled: np.ndarray) -> bool:
    """Whether candidate ``a`` ranks above ``b`` (-1: none) by (gain, attraction, index)."""
    if b < 0:
        return True
    if best[a] != best[b]:
        return best[a] > best[b]
    if pulled[a] != pulled[b]:
        return pulled[a] > pulled[b]
    return a > b


@jit
def _net_winners(candidates: np.ndarray, unit_ptr: np.ndarray, unit_nets: np.ndarray, best: np.ndarray,
                 pulled: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """The candidates that rank first on every one of their nets (``owner``: scratch, all -1)."""
    for v in candidates:
        for jj in range(unit_ptr[v], unit_ptr[v + 1]):
            e = unit_nets[jj]
            if _outranks(v, owner[e], best, pulled):
                owner[e] = v
    first = np.zeros(len(candidates), dtype=np.bool_)
    for i, v in enumerate(candidates):
        first[i] = True
        for jj in range(unit_ptr[v], unit_ptr[v + 1]):
            first[i] = first[i] and owner[unit_nets[jj]] == v
    for v in candidates:
        for jj in range(unit_ptr[v], unit_ptr[v + 1]):
            owner[unit_nets[jj]] = -1
    return candidates[first]


@jit
def _within_room(movers: np.ndarray, target: np.ndarray, best: np.ndarray, pulled: np.ndarray,
                 memory: np.ndarray, room: np.ndarray) -> np.ndarray:
    """Per target part, the best-ranked ``movers`` first while its ``room`` (bytes) lasts."""
    ranked = movers[::-1]  # stable sorts on descending keys: ties keep the higher index first
    ranked = ranked[np.argsort(-pulled[ranked], kind="mergesort")]
    ranked = ranked[np.argsort(-best[ranked], kind="mergesort")]
    ranked = ranked[np.argsort(target[ranked], kind="mergesort")]
    keep = np.zeros(len(ranked), dtype=np.bool_)
    total = base = 0.0  # bytes: a running sum over all parts, as cumsum, and its value before the part
    for i, v in enumerate(ranked):
        if i > 0 and target[v] != target[ranked[i - 1]]:
            base = total
        total += memory[v]
        keep[i] = total - base <= room[target[v]]
    return ranked[keep]


@jit
def _apply_moves(movers: np.ndarray, target: np.ndarray, parts: np.ndarray, round_: int,
                 net_ptr: np.ndarray, net_pins: np.ndarray, unit_ptr: np.ndarray, unit_nets: np.ndarray,
                 count: np.ndarray, stamp: np.ndarray, stale: np.ndarray, pull_stale: np.ndarray) -> int:
    """Move ``movers`` to their targets and update the nets' pin counts. A net whose count in a
    part crosses 0, 1 or 2 changes its pins' join and alone sums: they and the movers are listed
    in ``stale`` once (``stamp``: the round listed) and their number returned; the pins of the
    other touched nets only get ``pull_stale``, recomputed if they are ever candidates."""
    num_stale = 0
    for v in movers:
        num_stale = _list_stale(v, round_, stamp, stale, num_stale)  # its own part changes
        for jj in range(unit_ptr[v], unit_ptr[v + 1]):
            e = unit_nets[jj]
            crossing = count[e, parts[v]] <= 2 or count[e, target[v]] <= 1
            count[e, parts[v]] -= 1
            count[e, target[v]] += 1
            for ii in range(net_ptr[e], net_ptr[e + 1]):
                if crossing:
                    num_stale = _list_stale(net_pins[ii], round_, stamp, stale, num_stale)
                else:
                    pull_stale[net_pins[ii]] = True
        parts[v] = target[v]
    return num_stale


@jit
def _list_stale(u: int, round_: int, stamp: np.ndarray, stale: np.ndarray, num_stale: int) -> int:
    """Append ``u`` to ``stale`` unless already listed this round; the new length."""
    if stamp[u] == round_:
        return num_stale
    stamp[u] = round_
    stale[num_stale] = u
    return num_stale + 1


# ---------------------------------------------------------------------------- blocks onto a topology
#: The distinct device mappings tried exhaustively at most (:func:`device_permutation`): about
#: 10 ms of costing on the build machine; above, a steepest-descent search over swaps. Mappings
#: that differ only among interchangeable devices (:func:`interchangeable_groups`) count once, so
#: a node of 4 devices beside another is 70 mappings, not 8!.
EXACT_MAPPINGS = 5_040


def transfer_traffic(graph: Graph, assignment: np.ndarray, num_devices: int) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes, count)``, each ``(devices, devices)``: per ordered pair of devices, the bytes and the
    number of the transfers a replay of ``assignment`` makes between them (one per tensor and
    destination device, sized by its largest edge there, as the simulator groups edges)."""
    n = num_devices
    nbytes, count = np.zeros((n, n)), np.zeros((n, n))
    if graph.num_edges == 0:
        return nbytes, count
    view = graph.tensors
    dst = assignment[graph.edge_dst]
    cross = np.flatnonzero(assignment[graph.edge_src] != dst)
    if not len(cross):
        return nbytes, count
    keys, inverse = np.unique(view.edge_tensor[cross] * n + dst[cross], return_inverse=True)
    size = np.zeros(len(keys))
    np.maximum.at(size, inverse.reshape(-1), graph.edge_bytes[cross])
    src = assignment[view.producer[keys // n]]
    np.add.at(nbytes, (src, keys % n), size)
    np.add.at(count, (src, keys % n), 1.0)
    return nbytes, count


def traffic_by_link(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> list[tuple[str, int, float]]:
    """What a replay of ``assignment`` sends over each kind of link: ``(link name, transfers,
    bytes)``, slowest link (largest ``k``) first, links that carry nothing left out; on a flat
    cluster one row named ``""``. Transfers as :func:`transfer_traffic` counts them.

    Examples
    --------
    >>> from celeritas_core import Cluster, Graph
    >>> from celeritas_core.graphs.topology import parse_preset
    >>> graph = Graph.from_arrays(name="chain", node_names=["a", "b", "c"], time_us=[1.0] * 3,
    ...     memory_bytes=[1] * 3, edge_src=[0, 1], edge_dst=[1, 2], edge_bytes=[1000, 500])
    >>> flat = Cluster.homogeneous(4, 1e9)
    >>> cluster = flat.with_topology(parse_preset("2x2:nvlink,ib").topology(flat.device_names))
    >>> traffic_by_link(graph, cluster, np.array([0, 1, 2]))
    [('ib-ndr', 1, 500.0), ('nvlink4', 1, 1000.0)]
    """
    nbytes, count = transfer_traffic(graph, assignment, cluster.num_devices)
    if cluster.topology is None:
        return [("", int(count.sum()), float(nbytes.sum()))] if count.sum() else []
    link = cluster.topology.pair_link()
    rows = []
    for index in sorted(range(len(cluster.topology.links)),
                        key=lambda i: -cluster.topology.links[i].slope_us_per_byte):
        on = link == index
        if count[on].sum():
            rows.append((cluster.topology.links[index].name, int(count[on].sum()), float(nbytes[on].sum())))
    return rows


def device_classes(memory: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """Per device, the index of its class: devices of equal memory (bytes) and speed, between which
    a block can move without changing what fits or how long its ops run."""
    _, cls = np.unique(np.stack([memory, speed], axis=1), axis=0, return_inverse=True)
    return cls.reshape(-1).astype(np.int64)


def mapping_cost(nbytes: np.ndarray, count: np.ndarray, slope: np.ndarray, intercept: np.ndarray,
                 perms: np.ndarray) -> np.ndarray:
    """Per row of ``perms`` (block ``i`` onto device ``perm[i]``): ``Σ bytes[i, j]·k[perm i, perm j] +
    count[i, j]·b[perm i, perm j]``, the transfers' time (µs) alone on their links."""
    rows, cols = np.nonzero((nbytes > 0) | (count > 0))
    if not len(rows):
        return np.zeros(len(perms))
    pi, pj = perms[:, rows], perms[:, cols]
    timed = (slope[pi, pj] * nbytes[rows, cols]).sum(axis=1)
    return timed + (intercept[pi, pj] * count[rows, cols]).sum(axis=1)


def interchangeable_groups(slope: np.ndarray, intercept: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Per device, its group: devices of one class whose swap leaves every link (``slope``,
    ``intercept``, each ``(devices, devices)``) as it was, e.g. the devices of one NVLink island.

    A swap that changes nothing is an automorphism of the link matrices, and the swaps that are
    form an equivalence relation, so each device is compared with each group's first member only.
    Mappings that differ only within groups cost the same (:func:`mapping_cost`).
    """
    n = len(classes)
    group = np.full(n, -1, dtype=np.int64)
    first: list[int] = []
    for j in range(n):
        for g, i in enumerate(first):
            if classes[i] != classes[j]:
                continue
            swap = np.arange(n)
            swap[[i, j]] = swap[[j, i]]
            if (np.array_equal(slope[np.ix_(swap, swap)], slope)
                    and np.array_equal(intercept[np.ix_(swap, swap)], intercept)):
                group[j] = g
                break
        else:
            group[j] = len(first)
            first.append(j)
    return group


def device_permutation(nbytes: np.ndarray, count: np.ndarray, slope: np.ndarray, intercept: np.ndarray,
                       classes: np.ndarray) -> np.ndarray:
    """The permutation ``perm`` (block on device ``i`` → device ``perm[i]``, within ``classes``) that
    minimises :func:`mapping_cost`: heavy traffic onto fast links.

    Exact when the classes admit at most :data:`EXACT_MAPPINGS` distinct mappings (every one is
    costed; mappings that differ only among :func:`interchangeable_groups` count once);
    otherwise steepest descent from the identity over swaps of two devices of one class, to a
    local optimum. Only a strictly cheaper mapping (by more than 1e-9 of the cost) replaces the
    identity, so a topology where every pair costs the same keeps the placement as it is. This is
    the quadratic assignment problem (Koopmans and Beckmann 1957) of mapping process graphs onto
    machine topologies (e.g. Hoefler and Snir, "Generic topology mapping strategies for
    large-scale parallel architectures", ICS 2011).
    """
    n = len(classes)
    identity = np.arange(n, dtype=np.int64)
    members = [np.flatnonzero(classes == c) for c in np.unique(classes)]
    group = interchangeable_groups(slope, intercept, classes)
    count_maps = 1
    for m in members:
        count_maps *= _multinomial(np.unique(group[m], return_counts=True)[1])
        if count_maps > EXACT_MAPPINGS:
            break
    base = float(mapping_cost(nbytes, count, slope, intercept, identity[None, :])[0])
    if count_maps <= EXACT_MAPPINGS:
        perms = _distinct_mappings(members, group, n)
        costs = mapping_cost(nbytes, count, slope, intercept, perms)
        best = int(np.argmin(costs))
        return perms[best] if costs[best] < base - 1e-9 * abs(base) else identity
    current, cost = identity, base
    pairs = np.array([(a, b) for m in members for i, a in enumerate(m) for b in m[i + 1:]
                      if group[a] != group[b]], dtype=np.int64).reshape(-1, 2)
    for _ in range(4 * n * n):
        if not len(pairs):
            break
        trials = np.repeat(current[None, :], len(pairs), axis=0)
        rows = np.arange(len(pairs))
        trials[rows, pairs[:, 0]], trials[rows, pairs[:, 1]] = current[pairs[:, 1]], current[pairs[:, 0]]
        costs = mapping_cost(nbytes, count, slope, intercept, trials)
        best = int(np.argmin(costs))
        if not costs[best] < cost - 1e-9 * abs(cost):
            break
        current, cost = trials[best], float(costs[best])
    return current


def _multinomial(counts: np.ndarray) -> int:
    """The number of distinct orderings of a multiset with these multiplicities."""
    total = math.factorial(int(counts.sum()))
    for c in counts.tolist():
        total //= math.factorial(c)
    return total


def _distinct_mappings(members: list[np.ndarray], group: np.ndarray, n: int) -> np.ndarray:
    """Every permutation of ``n`` devices that keeps each device within its class (``members``),
    one per assignment of blocks to interchangeable ``group`` (within a group, blocks go to its
    devices in ascending order, so the identity is among them). They depend on the cluster alone,
    and a placer maps many partitions onto one cluster: computed once per (classes, groups)."""
    key = (tuple(tuple(m.tolist()) for m in members), tuple(group.tolist()), n)
    return _mappings_of(key)


@functools.lru_cache(maxsize=32)
def _mappings_of(key: tuple[tuple[tuple[int, ...], ...], tuple[int, ...], int]) -> np.ndarray:
    """:func:`_distinct_mappings` of a hashable ``(members, group, n)``; read-only."""
    members = [np.asarray(m, dtype=np.int64) for m in key[0]]
    group, n = np.asarray(key[1], dtype=np.int64), key[2]
    perms = np.arange(n, dtype=np.int64)[None, :]
    for m in members:
        labels = group[m]
        if len(np.unique(labels)) < 2:
            continue
        rows = []
        for arrangement in _multiset_permutations(sorted(labels.tolist())):
            target = np.empty(len(m), dtype=np.int64)
            for g in set(arrangement):
                target[[i for i, a in enumerate(arrangement) if a == g]] = m[labels == g]
            rows.append(target)
        inside = np.asarray(rows, dtype=np.int64)
        grown = np.repeat(perms, len(inside), axis=0)
        grown[:, m] = np.tile(inside, (len(perms), 1))
        perms = grown
    perms.setflags(write=False)
    return perms


def _multiset_permutations(items: list[int]) -> list[tuple[int, ...]]:
    """The distinct orderings of ``items`` (sorted), in lexicographic order."""
    if len(items) <= 1:
        return [tuple(items)]
    out = []
    for i, head in enumerate(items):
        if i and items[i - 1] == head:
            continue
        out.extend((head, *rest) for rest in _multiset_permutations(items[:i] + items[i + 1:]))
    return out


def topology_permutation(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> np.ndarray:
    """The device permutation (:func:`device_permutation`, among devices of equal memory and speed,
    unused devices included) that puts ``assignment``'s heaviest traffic on the fastest links; the
    identity on a flat cluster, where every pair costs the same."""
    if cluster.is_flat or cluster.num_devices < 2:
        return np.arange(cluster.num_devices, dtype=np.int64)
    nbytes, count = transfer_traffic(graph, assignment, cluster.num_devices)
    return device_permutation(nbytes, count, cluster.pair_slope_us_per_byte, cluster.pair_intercept_us,
                              device_classes(cluster.memory_bytes, cluster.speed))


def map_to_topology(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> np.ndarray:
    """``assignment`` with its device blocks moved by :func:`topology_permutation` (itself on a flat
    cluster)."""
    if cluster.is_flat:
        return assignment
    return topology_permutation(graph, cluster, assignment)[assignment]
