"""Favourite children for m-SCT: the LP relaxation of Hanen & Munier's SCT formulation (HiGHS).

Reference: C. Hanen and A. Munier, "An approximation algorithm for scheduling dependent tasks on
m processors with small communication delays", Discrete Applied Mathematics 108, 2001, as used by
Baechi's m-SCT (Jeon et al., SoCC 2020). Parallel edges between the same two ops are collapsed
into one *pair*; its communication cost is the sum, over the distinct tensors (``src_output``) it
carries, of ``k·bytes + b`` with ``bytes`` the largest edge of that tensor, i.e. the time to ship
all of them one after another, as the simulator would. Op weights are ``time_us`` on the fastest
device. On a cluster with a link topology ``k·bytes + b`` is its flat model (by default the mean link over
the pairs, :meth:`~celeritas_core.graphs.cluster.Cluster.comm_time_us`): the LP chooses favourites before
any device is known; the list schedule that follows times each transfer on its pair's link.
Units: µs and bytes.

Variables: ``x_p ∈ [0, 1]`` per pair (``x_p = 0`` ⇔ the child is the parent's favourite and the
pair's communication is zeroed), start ``s_v ≥ 0`` per op, makespan ``w``. Minimise ``w`` s.t.
``s_dst ≥ s_src + w_src + c_p·x_p`` per pair, ``s_v + w_v ≤ w`` per sink (implies it for every op),
``Σ_{out pairs} x ≥ outdeg − 1`` and ``Σ_{in pairs} x ≥ indeg − 1`` per op with degree ≥ 2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph

#: LPs with more constraint-matrix nonzeros than this are not attempted (no favourites instead).
MAX_LP_NONZEROS = 20_000_000
#: Wall-clock limit (s) handed to HiGHS; on time-out m-SCT runs without favourites.
LP_TIME_LIMIT_S = 600.0


@dataclass(frozen=True, eq=False)
class FavouriteChildren:
    """Rounded LP result: favourite child per op (-1 if none) and how the LP went."""

    favourite: np.ndarray
    status: str
    lp_seconds: float
    lp_makespan_us: float | None
    num_pairs: int
    warning: str | None = None

    @property
    def num_favourites(self) -> int:
        """Number of ops with a favourite child."""
        return int(np.count_nonzero(self.favourite >= 0))


@dataclass(frozen=True, eq=False)
class _Pairs:
    """Distinct (src, dst) op pairs with their collapsed communication cost (µs)."""

    src: np.ndarray
    dst: np.ndarray
    comm_us: np.ndarray


def collapse_pairs(graph: Graph, cluster: Cluster) -> _Pairs:
    """One pair per distinct (src, dst); cost = Σ over the distinct tensors ``src`` sends ``dst``
    (:attr:`Graph.tensors` consumer slots, each sized by its largest edge) of k·bytes + b (µs)."""
    if graph.num_edges == 0:
        empty = np.zeros(0, dtype=np.int64)
        return _Pairs(empty, empty, np.zeros(0))
    view = graph.tensors
    slot_comm = np.asarray(cluster.comm_time_us(view.consumer_bytes), dtype=np.float64)
    slot_pairs = np.stack([view.producer[view.consumer_tensor], view.consumer], axis=1)
    pairs, pair_of_slot = np.unique(slot_pairs, axis=0, return_inverse=True)
    comm = np.bincount(pair_of_slot.reshape(-1), weights=slot_comm, minlength=len(pairs))
    return _Pairs(pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64), comm)


def _degree_rows(node: np.ndarray, n: int, row0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Rows ``-Σ x_p ≤ 1 − deg`` for ops of degree ≥ 2 (by ``node`` of each pair): rows, cols, rhs."""
    deg = np.bincount(node, minlength=n)
    keep = deg[node] >= 2
    ops_kept = np.flatnonzero(deg >= 2)
    row_of = np.full(n, -1, dtype=np.int64)
    row_of[ops_kept] = row0 + np.arange(len(ops_kept))
    rows = row_of[node[keep]]
    cols = np.flatnonzero(keep)
    rhs = 1.0 - deg[ops_kept].astype(np.float64)
    return rows, cols, rhs, len(ops_kept)


def solve_favourite_children(graph: Graph, cluster: Cluster, threshold: float = 0.5) -> FavouriteChildren:
    """Solve the SCT LP relaxation with HiGHS and round it to at most one favourite child per op.

    A pair is a favourite candidate when ``x_p < threshold``; candidates are taken by increasing
    ``x_p`` (then pair index) and kept while the parent has no favourite child yet and the child no
    favourite parent. On solver failure, time-out or an oversized LP, every op gets -1 and
    ``warning`` says why (the caller then schedules like m-ETF).
    """
    n = graph.num_nodes
    none = np.full(n, -1, dtype=np.int64)
    pairs = collapse_pairs(graph, cluster)
    num_pairs = len(pairs.src)
    if num_pairs == 0:
        return FavouriteChildren(none, "no edges", 0.0, None, 0)
    start = time.perf_counter()
    dur = graph.time_us / float(cluster.speed.max())
    sinks = np.flatnonzero(graph.out_degree == 0)
    nnz_estimate = 5 * num_pairs + 2 * len(sinks)
    if nnz_estimate > MAX_LP_NONZEROS:
        msg = (f"SCT LP too large ({nnz_estimate} nonzeros > {MAX_LP_NONZEROS}); "
               "scheduled without favourite children (as m-ETF)")
        return FavouriteChildren(none, "too large", 0.0, None, num_pairs, msg)
    x0, s0, w_col = 0, num_pairs, num_pairs + n
    num_vars = num_pairs + n + 1
    p_idx = np.arange(num_pairs)
    # 1) s_src − s_dst + c_p·x_p ≤ −w_src
    rows = [p_idx, p_idx, p_idx]
    cols = [s0 + pairs.src, s0 + pairs.dst, x0 + p_idx]
    vals = [np.ones(num_pairs), -np.ones(num_pairs), pairs.comm_us]
    rhs = [-dur[pairs.src]]
    row = num_pairs
    # 2) s_v − w ≤ −w_v for every sink
    sink_rows = row + np.arange(len(sinks))
    rows += [sink_rows, sink_rows]
    cols += [s0 + sinks, np.full(len(sinks), w_col)]
    vals += [np.ones(len(sinks)), -np.ones(len(sinks))]
    rhs.append(-dur[sinks])
    row += len(sinks)
    # 3) at most one favourite child, 4) at most one favourite parent
    for node in (pairs.src, pairs.dst):
        r, c, b, count = _degree_rows(node, n, row)
        rows.append(r)
        cols.append(x0 + c)
        vals.append(-np.ones(len(r)))
        rhs.append(b)
        row += count
    from scipy.optimize import linprog  # lazy: 0.15 s to import, needed by m-SCT only

    try:
        a_ub = sparse.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(row, num_vars))
        cost = np.zeros(num_vars)
        cost[w_col] = 1.0
        bounds = np.zeros((num_vars, 2))
        bounds[:num_pairs, 1] = 1.0
        bounds[num_pairs:, 1] = np.inf
        res = linprog(cost, A_ub=a_ub, b_ub=np.concatenate(rhs), bounds=bounds, method="highs",
                      options={"time_limit": LP_TIME_LIMIT_S})
    except (MemoryError, ValueError) as exc:
        seconds = time.perf_counter() - start
        msg = f"SCT LP failed ({type(exc).__name__}: {exc}); scheduled without favourite children"
        return FavouriteChildren(none, "error", seconds, None, num_pairs, msg)
    seconds = time.perf_counter() - start
    if res.status != 0 or res.x is None:
        msg = (f"SCT LP not solved (HiGHS status {res.status}: {res.message}); "
               "scheduled without favourite children (as m-ETF)")
        return FavouriteChildren(none, f"failed ({res.status})", seconds, None, num_pairs, msg)
    x = res.x[:num_pairs]
    favourite = round_favourites(pairs.src, pairs.dst, x, n, threshold)
    return FavouriteChildren(favourite, "optimal", seconds, float(res.x[w_col]), num_pairs)


def round_favourites(src: np.ndarray, dst: np.ndarray, x: np.ndarray, n: int, threshold: float) -> np.ndarray:
    """Favourite child per op from LP values ``x`` per pair: ``x < threshold``, smallest ``x`` first."""
    favourite = [-1] * n
    has_parent = [False] * n
    cand = np.flatnonzero(x < threshold)
    cand = cand[np.lexsort((cand, x[cand]))]
    src_l, dst_l = src.tolist(), dst.tolist()
    for p in cand.tolist():
        u, v = src_l[p], dst_l[p]
        if favourite[u] < 0 and not has_parent[v]:
            favourite[u] = v
            has_parent[v] = True
    return np.asarray(favourite, dtype=np.int64)
