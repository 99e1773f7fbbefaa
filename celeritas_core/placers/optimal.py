"""Exact reference placer ``optimal``: a mixed-integer program solved by HiGHS (``scipy.optimize.milp``).

For small graphs only (a few dozen ops, 1–8 devices). It places *and* orders the ops so as to
minimise the makespan (µs) under this model:

- op ``v`` on device ``d`` runs ``time_us[v] / speed[d]`` µs; a device runs one op at a time,
  without preemption;
- an edge ``u → v`` whose ends sit on different devices makes ``v`` wait ``k·bytes + b`` µs after
  ``u`` finishes (:meth:`Cluster.comm_time_us`). Edges of one tensor ``(u, src_output)`` into one
  device arrive together, sized by their largest edge, as the simulator groups them;
- the sum of ``memory_bytes`` of the ops on device ``d`` is at most its ``memory_bytes[d]``
  (the static sum model of the rest of the code);
- the members of a co-location group share one device.

**No channel contention** (``channels=0``, the default). Transfers never wait for each other: each
starts when its producer finishes, the transfer semantics of ``simulate(graph, cluster, a,
channels=False)``. The MILP has one delay per edge; without contention all edges of one tensor
into one device arrive at the same time, so this equals the simulator's one transfer per (tensor,
destination device).

**Channel contention** (``channels=1``). One transfer per (tensor, destination device), lasting
``k·bytes + b`` for its largest edge into that device, holds the sender's send and the receiver's
receive channel, one transfer at a time per channel, in any order (:func:`_channel_rows`). The
simulator's replay of any assignment is one such schedule, so the optimum is a lower bound on
every placement's ``simulate(graph, cluster, a)`` step. Solved in two phases
(:func:`_solve_with_channels`): the no-channel MILP first, whose bound is a lower bound here too
and whose solution re-timed under channels seeds the upper bound; then the channel MILP, skipped
when the two already meet.

**Only the assignment is returned.** :func:`place` replays it in the regular simulator, which
reserves channels FIFO and dispatches ready ops greedily by (ready time, topological rank) instead
of in the MILP's order, so its step time can exceed ``extra["milp_makespan_us"]`` (even with
``channels=False`` in the simulator, or ``channels=1`` here). ``milp_makespan_us`` is the MILP
solution re-timed in the MILP's start order by :func:`model_schedule` (``channels=0``) or
:func:`channel_schedule` (``channels=1``).

Formulation: the standard disjunctive (big-M) model of multiprocessor scheduling with
communication delays (see the survey of Y.-K. Kwok and I. Ahmad, "Static scheduling algorithms
for allocating directed task graphs to multiprocessors", ACM Computing Surveys 31(4), 1999).
Binary ``x[v,d]`` (op on device), start ``s_v ≥ 0``, makespan ``C``, finish
``f_v = s_v + Σ_d x[v,d]·t_v/speed_d``. Per edge: ``s_v ≥ f_u + c_e·z_e`` with
``z_e ≥ x[u,d] − x[v,d]`` for every ``d``. Per unordered pair ``(i, j)`` *not related by a path*
(pairs on a path are already ordered by the edges): same-device indicator
``q_ij ≥ x[i,d] + x[j,d] − 1``, order binary ``y_ij`` and
``s_j ≥ f_i − M(1 − y_ij) − M(1 − q_ij)``, ``s_i ≥ f_j − M·y_ij − M(1 − q_ij)``.
``C ≥ f_v`` per sink and ``C ≥ Σ_v x[v,d]·t_v/speed_d`` per device (load cut). Memory:
``Σ_v memory_v·x[v,d] ≤ memory_d``; co-location: ``x[v,d] = x[anchor,d]``.

Tightening: all times are divided by an upper bound ``UB`` on the optimum (the makespan of a known
feasible schedule, :func:`_upper_bound_us`), so ``C ≤ 1``; with ``head_v``/``tail_v`` the longest
paths before/after ``v`` without communication on the fastest device, ``head_v ≤ s_v`` and
``f_v ≤ 1 − tail_v``, so the pair's big M is ``1 − tail_i − head_j`` (instead of the sum of all
durations and transfers). Identical devices (same speed and memory) are interchangeable: the op
at topological position ``i`` may use only the first ``i + 1`` devices of its class (valid by
relabelling devices in order of first use). scipy's ``milp`` takes no warm start.

**Link topology.** On a cluster with one the MILP is solved on :func:`fastest_link_model`: every
pair at the fastest link, no shared ports. Every transfer of the topology takes at least that
long and ports only delay, so with ``channels`` the optimum and the bound remain lower bounds on
every placement's replay on the topology; the returned placement is a good one, not the optimum
there (``extra["warning"]`` says so). Pricing each pair on its own link is not done: identical
devices would no longer be interchangeable (the symmetry breaking above would cut off optima),
and a transfer's length in the channel rows would depend on its sender's device too.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

if TYPE_CHECKING:  # scipy.optimize (0.15 s) loads when a MILP is built: not for every placement
    from scipy.optimize import Bounds, LinearConstraint

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import blevel, fastest_link, tlevel
from celeritas_core.placers.base import PlacerOutput, PlacerSpec, param, register_placer
from celeritas_core.placers.etf import list_schedule
from celeritas_core.simulation.simulator import simulate

#: Clusters with more devices than this are refused.
MAX_DEVICES = 8
#: Relative optimality gap at which HiGHS stops (and the result is reported "optimal").
MIP_REL_GAP = 1e-7
#: Smallest time limit (s) handed to HiGHS when the budget is already spent.
_MIN_TIME_LIMIT_S = 1e-3


@dataclass(frozen=True, eq=False)
class ChannelData:
    """The channel model's data: candidate transfers and the pairs that may share a channel.

    A tensor is ``(producer, src_output)``; a candidate transfer is a tensor and a destination
    device some consumer of it may use. Times are scaled like :class:`MilpProblem`'s.
    """

    tensor_src: np.ndarray  # producer op of each tensor
    tensor_output: np.ndarray  # src_output of each tensor
    consumers: tuple[tuple[tuple[int, float], ...], ...]  # per tensor: (consumer, scaled k·bytes + b)
    tr_tensor: np.ndarray  # per candidate transfer: its tensor
    tr_device: np.ndarray  # ... and its destination device
    tr_start_min: np.ndarray  # earliest start (the producer's earliest finish)
    tr_end_max: np.ndarray  # latest end in a schedule within the upper bound
    pair_a: np.ndarray  # candidate transfer pairs that may hold one channel together
    pair_b: np.ndarray
    pair_sender: np.ndarray  # -1: they share a channel whenever both exist; else a sender_pair index
    sender_pair: np.ndarray  # (k, 2) producer pairs whose same-device indicator a pair needs
    sender_q: np.ndarray  # per sender pair: index of the op pair reusing its q column, or -1

    @property
    def num_transfers(self) -> int:
        """Number of candidate transfers."""
        return len(self.tr_tensor)


@dataclass(frozen=True, eq=False)
class MilpProblem:
    """The MILP's data; every time is divided by ``scale_us`` (an upper bound on the optimum, µs)."""

    dur: np.ndarray  # (ops, devices): scaled duration of op v on device d
    edge_src: np.ndarray  # one entry per distinct (u, v) op pair with an edge
    edge_dst: np.ndarray
    edge_delay: np.ndarray  # scaled transfer delay of the pair when u and v are on different devices
    shared: tuple[tuple[int, int, int, float], ...]  # (u, v, w, delay): v waits for u's tensor sized for w
    pair_i: np.ndarray  # unordered op pairs not related by a path
    pair_j: np.ndarray
    memory: np.ndarray  # bytes per op
    capacity: np.ndarray  # bytes per device
    use_memory: bool  # False: the memory constraint is dropped
    anchor: np.ndarray  # co-location anchor of each op (itself when ungrouped)
    max_device: np.ndarray  # per (op, device): False where symmetry breaking forbids the device
    sinks: np.ndarray
    head: np.ndarray  # scaled earliest start of each op (longest path to it on the fastest device)
    tail: np.ndarray  # scaled longest path after each op's finish to a sink (fastest device)
    scale_us: float
    channels: ChannelData | None = None  # None: no channel contention
    makespan_min: float = 0.0  # scaled lower bound on the makespan (C's lower bound)

    @property
    def num_ops(self) -> int:
        """Number of ops."""
        return self.dur.shape[0]

    @property
    def num_devices(self) -> int:
        """Number of devices."""
        return self.dur.shape[1]


@dataclass(frozen=True)
class _Layout:
    """Column indices: x (ops × devices), s (ops), C, z (edges), q (pairs), y (pairs), then the
    channel model's w, ts, e (transfers), own same-sender indicators and order binaries (pairs)."""

    ops: int
    devices: int
    edges: int
    pairs: int
    transfers: int = 0
    senders: int = 0  # same-sender indicators not shared with an op pair's q
    chan_pairs: int = 0

    def x(self, v: int, d: int) -> int:
        """Column of ``x[v, d]``."""
        return v * self.devices + d

    @property
    def s0(self) -> int:
        """First start-time column."""
        return self.ops * self.devices

    @property
    def c(self) -> int:
        """Makespan column."""
        return self.s0 + self.ops

    @property
    def z0(self) -> int:
        """First edge-crossing column."""
        return self.c + 1

    @property
    def q0(self) -> int:
        """First same-device column."""
        return self.z0 + self.edges

    @property
    def y0(self) -> int:
        """First order column."""
        return self.q0 + self.pairs

    @property
    def w0(self) -> int:
        """First transfer-exists column."""
        return self.y0 + self.pairs

    @property
    def ts0(self) -> int:
        """First transfer-start column."""
        return self.w0 + self.transfers

    @property
    def e0(self) -> int:
        """First transfer-end column."""
        return self.ts0 + self.transfers

    @property
    def sq0(self) -> int:
        """First own same-sender column."""
        return self.e0 + self.transfers

    @property
    def cy0(self) -> int:
        """First channel order column."""
        return self.sq0 + self.senders

    @property
    def size(self) -> int:
        """Number of columns."""
        return self.cy0 + self.chan_pairs


class _Rows:
    """Sparse constraint rows ``lo ≤ a·x ≤ hi``, collected one at a time (duplicates are summed)."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, cols: Sequence[int], vals: Sequence[float], lo: float, hi: float = np.inf) -> None:
        """Append the row ``lo ≤ Σ vals·x[cols] ≤ hi``."""
        r = len(self.lo)
        self.rows.extend([r] * len(cols))
        self.cols.extend(cols)
        self.vals.extend(vals)
        self.lo.append(lo)
        self.hi.append(hi)

    def constraint(self, num_vars: int) -> LinearConstraint:
        """All rows as one scipy LinearConstraint."""
        from scipy.optimize import LinearConstraint  # lazy: only a MILP needs scipy.optimize

        a = sparse.coo_matrix((self.vals, (self.rows, self.cols)), shape=(len(self.lo), num_vars))
        return LinearConstraint(a.tocsr(), np.asarray(self.lo), np.asarray(self.hi))


@dataclass(frozen=True, eq=False)
class MilpResult:
    """One HiGHS solve: status, the rounded solution (if any), objective and bound (µs)."""

    status: str  # "optimal" | "time_limit" | "no_solution" | "infeasible" | "error (...)"
    assignment: np.ndarray | None
    start_us: np.ndarray | None
    objective_us: float | None
    bound_us: float | None
    seconds: float
    num_vars: int
    num_rows: int
    transfer_start_us: dict[tuple[int, int, int], float] | None = None  # channel model: (u, output, d)


# ---------------------------------------------------------------------------- problem data
def build_problem(graph: Graph, cluster: Cluster, *, use_memory: bool = True, channels: bool = False,
                  upper_bound_us: float | None = None, lower_bound_us: float = 0.0) -> MilpProblem:
    """Collect the MILP's data (scaled by an upper bound on the optimum) for ``graph`` on ``cluster``.

    ``channels=True`` adds the channel model (:class:`ChannelData`) and scales by an upper bound
    under that model. ``upper_bound_us``: the makespan of a known schedule that is feasible under
    the model (memory, co-location; channels when on), used when below the built-in bound.
    ``lower_bound_us``: a known lower bound on the optimum, the makespan's lower bound.
    """
    speed = np.asarray(cluster.speed, dtype=np.float64)
    dur_us = graph.time_us[:, None] / speed[None, :]
    src, dst, delay_us, shared_us = _edge_delays(graph, cluster)
    scale = _upper_bound_us(graph, cluster, use_memory, channels)
    if upper_bound_us is not None and 0 < upper_bound_us < scale:
        scale = upper_bound_us
    fastest = float(speed.max())
    pair_i, pair_j = _unrelated_pairs(graph)
    head = tlevel(graph) / fastest / scale
    tail = (blevel(graph) - graph.time_us) / fastest / scale
    mask = _symmetry_mask(graph, cluster)
    chan = (_channel_data(graph, cluster, scale, head, tail, mask, pair_i, pair_j) if channels
            else None)
    return MilpProblem(
        dur=dur_us / scale, edge_src=src, edge_dst=dst, edge_delay=delay_us / scale,
        shared=tuple((u, v, w, c / scale) for u, v, w, c in shared_us),
        pair_i=pair_i, pair_j=pair_j,
        memory=graph.memory_bytes.astype(np.float64), capacity=cluster.memory_bytes.astype(np.float64),
        use_memory=use_memory, anchor=_anchors(graph), max_device=mask,
        sinks=np.flatnonzero(graph.out_degree == 0), head=head, tail=tail, scale_us=scale,
        channels=chan, makespan_min=min(max(lower_bound_us / scale, 0.0), 1.0),
    )


def _channel_data(graph: Graph, cluster: Cluster, scale: float, head: np.ndarray, tail: np.ndarray,
                  mask: np.ndarray, pair_i: np.ndarray, pair_j: np.ndarray) -> ChannelData:
    """Candidate transfers and the transfer pairs that may hold a channel together.

    Pairs are skipped only where no schedule can have them overlap on a channel:

    - different destinations on 2 devices: a common sender would have to differ from both;
    - ``A = (t1, d1)`` before ``B = (t2, d2)`` is forced when every consumer of ``t1`` is ``t2``'s
      producer or reaches it: ``A`` ends before its consumer on ``d1`` starts, which finishes no
      later than ``t2``'s producer, before ``B`` starts.
    """
    fastest = float(cluster.speed.max())
    view = graph.tensors
    reach = _reach_bits(graph)
    t_src, t_out = view.producer, view.output
    ptr = view.consumer_ptr.tolist()
    slot_consumer = view.consumer.tolist()
    slot_comm = (np.asarray(cluster.comm_time_us(view.consumer_bytes), dtype=np.float64) / scale).tolist()
    consumers = tuple(tuple(zip(slot_consumer[ptr[t]:ptr[t + 1]], slot_comm[ptr[t]:ptr[t + 1]], strict=True))
                      for t in range(view.num_tensors))
    dur_fast = graph.time_us / fastest / scale
    tr_tensor: list[int] = []
    tr_device: list[int] = []
    for t, cons in enumerate(consumers):
        for d in range(cluster.num_devices):
            if any(mask[v, d] for v, _ in cons):
                tr_tensor.append(t)
                tr_device.append(d)
    start_min = [float(head[t_src[t]] + dur_fast[t_src[t]]) for t in tr_tensor]
    end_max = [1.0 - min(float(tail[v] + dur_fast[v]) for v, _ in consumers[t]) for t in tr_tensor]

    def forced_before(t1: int, t2: int) -> bool:  # every consumer of t1 is or reaches t2's producer
        u2 = int(t_src[t2])
        return all(v == u2 or (reach[v] >> u2) & 1 for v, _ in consumers[t1])

    q_index = {(int(i), int(j)): k for k, (i, j) in enumerate(zip(pair_i, pair_j, strict=True))}
    senders: dict[tuple[int, int], int] = {}
    pa: list[int] = []
    pb: list[int] = []
    ps: list[int] = []
    n_tr = len(tr_tensor)
    for a in range(n_tr):
        t1, d1 = tr_tensor[a], tr_device[a]
        for b in range(a + 1, n_tr):
            t2, d2 = tr_tensor[b], tr_device[b]
            u1, u2 = int(t_src[t1]), int(t_src[t2])
            if d1 != d2 and cluster.num_devices < 3:
                continue
            if forced_before(t1, t2) or forced_before(t2, t1):
                continue
            sender = -1  # same destination (receive channel) or same producer (send channel)
            if d1 != d2 and u1 != u2:
                key = (u1, u2) if graph.topological_rank[u1] < graph.topological_rank[u2] else (u2, u1)
                sender = senders.setdefault(key, len(senders))
            pa.append(a)
            pb.append(b)
            ps.append(sender)
    sender_pair = np.asarray(sorted(senders, key=senders.__getitem__), dtype=np.int64).reshape(-1, 2)
    return ChannelData(
        tensor_src=t_src, tensor_output=t_out, consumers=consumers,
        tr_tensor=np.asarray(tr_tensor, dtype=np.int64), tr_device=np.asarray(tr_device, dtype=np.int64),
        tr_start_min=np.asarray(start_min, dtype=np.float64),
        tr_end_max=np.asarray(end_max, dtype=np.float64),
        pair_a=np.asarray(pa, dtype=np.int64), pair_b=np.asarray(pb, dtype=np.int64),
        pair_sender=np.asarray(ps, dtype=np.int64), sender_pair=sender_pair,
        sender_q=np.asarray([q_index.get((int(i), int(j)), -1) for i, j in sender_pair], dtype=np.int64),
    )


def _edge_delays(
    graph: Graph, cluster: Cluster,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int, int, float]]]:
    """Distinct (u, v) pairs with their delay (µs), and the tensor-sharing rows (u, v, w, µs).

    A pair's delay is its largest edge's transfer time. When another consumer ``w`` of the same
    tensor needs more bytes, the shared transfer is sized for ``w`` whenever ``v`` and ``w`` share
    a device away from ``u``: the entry ``(u, v, w, k·bytes_w + b)`` models that (rare: the edges
    of one tensor usually carry equal bytes).
    """
    view = graph.tensors
    n = graph.num_nodes
    slot_tensor = np.repeat(np.arange(view.num_tensors), np.diff(view.consumer_ptr))
    slot_comm = np.asarray(cluster.comm_time_us(view.consumer_bytes), dtype=np.float64)
    keys, pair_of_slot = np.unique(view.producer[slot_tensor] * n + view.consumer, return_inverse=True)
    delay = np.zeros(len(keys))
    np.maximum.at(delay, pair_of_slot.reshape(-1), slot_comm)
    shared = _shared_rows(graph, slot_comm, delay[pair_of_slot.reshape(-1)])
    return keys // n, keys % n, delay, shared


def _shared_rows(graph: Graph, slot_comm: np.ndarray,
                 slot_delay: np.ndarray) -> list[tuple[int, int, int, float]]:
    """``(u, v, w, c)`` for every two consumers ``v ≠ w`` of one tensor of ``u`` where ``w``'s
    transfer time ``c`` exceeds the delay of the pair ``(u, v)``; tensors, then consumers, in the
    order of their first edge."""
    view = graph.tensors
    if not view.num_tensors:
        return []
    first = np.full(len(slot_comm), graph.num_edges, dtype=np.int64)
    np.minimum.at(first, view.edge_consumer_slot, np.arange(graph.num_edges))
    tensor_first = np.minimum.reduceat(first, view.consumer_ptr[:-1])
    ptr, producer, consumer = view.consumer_ptr.tolist(), view.producer.tolist(), view.consumer.tolist()
    comm, delay, first_l = slot_comm.tolist(), slot_delay.tolist(), first.tolist()
    shared: list[tuple[int, int, int, float]] = []
    for t in np.argsort(tensor_first, kind="stable").tolist():
        slots = sorted(range(ptr[t], ptr[t + 1]), key=first_l.__getitem__)
        for k in slots:
            for k2 in slots:
                if consumer[k2] != consumer[k] and comm[k2] > delay[k]:
                    shared.append((producer[t], consumer[k], consumer[k2], comm[k2]))
    return shared


def _upper_bound_us(graph: Graph, cluster: Cluster, use_memory: bool, channels: bool = False) -> float:
    """Makespan (µs) of a feasible schedule under the model: the MILP's big M and time scale.

    The smallest of: every op on the fastest device that holds the model (any device when memory
    is dropped); m-ETF's assignment replayed in its own start order when it fits memory (with
    ``channels``, its :func:`simulate` step, one schedule of the channel model); and the sum of
    all op durations on the slowest device plus all edge transfer times (each edge charged its
    tensor's largest bytes), which bounds any semi-active schedule, one job at a time.
    """
    view = graph.tensors
    tensor_comm = np.asarray(cluster.comm_time_us(view.nbytes), dtype=np.float64)
    comm = sum(tensor_comm[view.edge_tensor].tolist())  # each edge charged its tensor's largest bytes
    bounds = [graph.total_time_us / float(cluster.speed.min()) + comm]
    capacity = cluster.memory_bytes if use_memory else np.full(cluster.num_devices, np.inf)
    fits = capacity >= graph.total_memory_bytes
    if fits.any():
        bounds.append(graph.total_time_us / float(cluster.speed[fits].max()))
    etf = list_schedule(graph, cluster)
    used = np.bincount(etf.assignment, weights=graph.memory_bytes, minlength=cluster.num_devices)
    if np.all(used <= capacity):
        if channels:
            bounds.append(float(simulate(graph, cluster, etf.assignment).step_time_us))
        else:
            bounds.append(float(model_schedule(graph, cluster, etf.assignment, etf.start_us)[1].max()))
    bound = min(bounds)
    return bound if bound > 0 else 1.0


def _reach_bits(graph: Graph) -> list[int]:
    """Per op, the bitset of its descendants."""
    ptr, nbr = graph.succ_ptr.tolist(), graph.succ_idx.tolist()
    reach = [0] * graph.num_nodes
    for u in reversed(graph.topological_order.tolist()):
        bits = 0
        for k in range(ptr[u], ptr[u + 1]):
            v = nbr[k]
            bits |= reach[v] | (1 << v)
        reach[u] = bits
    return reach


def _unrelated_pairs(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j), i before j in topological order, with no path between them."""
    order = graph.topological_order.tolist()
    reach = _reach_bits(graph)
    pi: list[int] = []
    pj: list[int] = []
    for a, i in enumerate(order):
        for j in order[a + 1:]:
            if not (reach[i] >> j) & 1:  # j comes later in the order, so j never reaches i
                pi.append(i)
                pj.append(j)
    return np.asarray(pi, dtype=np.int64), np.asarray(pj, dtype=np.int64)


def _anchors(graph: Graph) -> np.ndarray:
    """Per op, the co-location group member first in topological order (itself when ungrouped)."""
    anchor = np.arange(graph.num_nodes, dtype=np.int64)
    first: dict[int, int] = {}
    for v in graph.topological_order.tolist():
        g = int(graph.colocation_ids[v])
        if g >= 0:
            anchor[v] = first.setdefault(g, v)
    return anchor


def _symmetry_mask(graph: Graph, cluster: Cluster) -> np.ndarray:
    """(ops × devices) True where op ``v`` may use device ``d`` after symmetry breaking.

    Devices with equal speed and memory are interchangeable (transfers cost the same between any
    two devices). Relabel each such class by order of first use along the topological order: the
    op at position ``i`` then uses one of the class's first ``i + 1`` devices, because at most
    ``i + 1`` of them are in use by ops ``0..i``. So forbidding a class's ``(i + 2)``-th and later
    devices to it keeps an optimal solution and removes the permuted copies of each one.
    """
    index_in_class = np.zeros(cluster.num_devices, dtype=np.int64)
    seen: dict[tuple[float, float], int] = {}
    for d in range(cluster.num_devices):
        key = (float(cluster.speed[d]), float(cluster.memory_bytes[d]))
        index_in_class[d] = seen.get(key, 0)
        seen[key] = index_in_class[d] + 1
    position = graph.topological_rank
    return index_in_class[None, :] <= position[:, None]


# ---------------------------------------------------------------------------- constraint blocks
def _finish(p: MilpProblem, lay: _Layout, v: int, sign: float) -> tuple[list[int], list[float]]:
    """Columns and coefficients of ``sign · f_v = sign · (s_v + Σ_d dur[v,d]·x[v,d])``."""
    cols = [lay.s0 + v] + [lay.x(v, d) for d in range(lay.devices)]
    vals = [sign] + [sign * float(t) for t in p.dur[v]]
    return cols, vals


def _assignment_rows(rows: _Rows, p: MilpProblem, lay: _Layout) -> None:
    """One device per op; co-location members on their anchor's device; memory per device."""
    for v in range(p.num_ops):
        rows.add([lay.x(v, d) for d in range(lay.devices)], [1.0] * lay.devices, 1.0, 1.0)
        a = int(p.anchor[v])
        if a != v:
            for d in range(lay.devices):
                rows.add([lay.x(v, d), lay.x(a, d)], [1.0, -1.0], 0.0, 0.0)
    if not p.use_memory:
        return
    heavy = np.flatnonzero(p.memory > 0).tolist()
    for d in range(lay.devices):  # Σ memory_v / capacity_d · x[v,d] ≤ 1 (scaled to O(1))
        rows.add([lay.x(v, d) for v in heavy], [float(p.memory[v] / p.capacity[d]) for v in heavy],
                 -np.inf, 1.0)


def _precedence_rows(rows: _Rows, p: MilpProblem, lay: _Layout) -> None:
    """``s_v ≥ f_u + c·z_e``, ``z_e ≥ x[u,d] − x[v,d]``, and the tensor-sharing rows."""
    for e, (u, v, c) in enumerate(zip(p.edge_src.tolist(), p.edge_dst.tolist(),
                                      p.edge_delay.tolist(), strict=True)):
        cols, vals = _finish(p, lay, u, -1.0)
        rows.add([lay.s0 + v, *cols, lay.z0 + e], [1.0, *vals, -c], 0.0)
        if c > 0:
            for d in range(lay.devices):
                rows.add([lay.z0 + e, lay.x(u, d), lay.x(v, d)], [1.0, -1.0, 1.0], 0.0)
    for u, v, w, c in p.shared:
        # v and w on d, u elsewhere: s_v ≥ f_u + c; any other placement makes the row slack.
        for d in range(lay.devices):
            cols, vals = _finish(p, lay, u, -1.0)
            rows.add([lay.s0 + v, *cols, lay.x(v, d), lay.x(w, d), lay.x(u, d)],
                     [1.0, *vals, -c, -c, c], -c)


def _disjunctive_rows(rows: _Rows, p: MilpProblem, lay: _Layout) -> None:
    """Unrelated ops on one device do not overlap.

    Big M per pair: in a schedule within the upper bound (1 in scaled time) ``f_i ≤ 1 − tail_i``
    and ``s_j ≥ head_j``, so ``f_i − s_j ≤ M_ij = 1 − tail_i − head_j``.
    """
    for k, (i, j) in enumerate(zip(p.pair_i.tolist(), p.pair_j.tolist(), strict=True)):
        q, y = lay.q0 + k, lay.y0 + k
        m_ij = max(0.0, 1.0 - float(p.tail[i] + p.head[j]))
        m_ji = max(0.0, 1.0 - float(p.tail[j] + p.head[i]))
        for d in range(lay.devices):  # q ≥ x[i,d] + x[j,d] − 1
            rows.add([q, lay.x(i, d), lay.x(j, d)], [1.0, -1.0, -1.0], -1.0)
        cols, vals = _finish(p, lay, i, -1.0)  # y = 1: i first: s_j ≥ f_i − M(1 − y) − M(1 − q)
        rows.add([lay.s0 + j, *cols, y, q], [1.0, *vals, -m_ij, -m_ij], -2.0 * m_ij)
        cols, vals = _finish(p, lay, j, -1.0)  # y = 0: j first: s_i ≥ f_j − M·y − M(1 − q)
        rows.add([lay.s0 + i, *cols, y, q], [1.0, *vals, m_ji, -m_ji], -m_ji)


def _channel_rows(rows: _Rows, p: MilpProblem, lay: _Layout) -> None:
    """The channel model: transfers exist, last, feed their consumers and share channels one at a time.

    Per candidate transfer ``(t, d)`` of tensor ``t = (u, o)`` and consumer ``v`` of ``t`` (``c_v``
    its edge's ``k·bytes + b``): ``w ≥ x[v,d] − x[u,d]`` (the transfer exists when some consumer
    sits on ``d`` and ``u`` does not), ``e − ts ≥ c_v·(x[v,d] − x[u,d])`` (it lasts as long as its
    largest edge into ``d``), ``ts ≥ f_u``, and ``s_v ≥ e − M(1 − x[v,d])`` (a consumer on ``d``
    waits for it; when ``u`` is on ``d`` too, ``e = ts = f_u`` satisfies this). Per pair sharing
    a channel (order binary ``y``; ``q`` the pair's same-sender indicator when only a common
    sender device makes them share one): ``ts_B ≥ e_A − M(1 − y) − M(2 − w_A − w_B) [− M(1 − q)]``
    and the converse with ``y``. Cut: each receive channel's transfers fit in the makespan,
    ``C ≥ Σ_t (e − ts)``.
    """
    ch = p.channels
    assert ch is not None
    tensor_of = ch.tr_tensor.tolist()
    device_of = ch.tr_device.tolist()
    for k, (t, d) in enumerate(zip(tensor_of, device_of, strict=True)):
        u = int(ch.tensor_src[t])
        w, ts, e = lay.w0 + k, lay.ts0 + k, lay.e0 + k
        cols, vals = _finish(p, lay, u, -1.0)
        rows.add([ts, *cols], [1.0, *vals], 0.0)  # ts ≥ f_u
        rows.add([e, ts], [1.0, -1.0], 0.0)
        for v, c in ch.consumers[t]:
            if not p.max_device[v, d]:
                continue
            rows.add([w, lay.x(v, d), lay.x(u, d)], [1.0, -1.0, 1.0], 0.0)
            rows.add([e, ts, lay.x(v, d), lay.x(u, d)], [1.0, -1.0, -c, c], 0.0)
            m = max(0.0, float(ch.tr_end_max[k] - p.head[v]))
            rows.add([lay.s0 + v, e, lay.x(v, d)], [1.0, -1.0, -m], -m)
    for d in range(lay.devices):
        ks = [k for k in range(ch.num_transfers) if device_of[k] == d]
        if ks:
            rows.add([lay.c, *(lay.e0 + k for k in ks), *(lay.ts0 + k for k in ks)],
                     [1.0] + [-1.0] * len(ks) + [1.0] * len(ks), 0.0)
    sender_cols = []
    own = 0
    for (u1, u2), q in zip(ch.sender_pair.tolist(), ch.sender_q.tolist(), strict=True):
        if q >= 0:
            sender_cols.append(lay.q0 + q)  # the op pair's same-device indicator
            continue
        col = lay.sq0 + own
        own += 1
        sender_cols.append(col)
        for d in range(lay.devices):
            rows.add([col, lay.x(u1, d), lay.x(u2, d)], [1.0, -1.0, -1.0], -1.0)
    for k, (a, b, s) in enumerate(zip(ch.pair_a.tolist(), ch.pair_b.tolist(), ch.pair_sender.tolist(),
                                      strict=True)):
        y = lay.cy0 + k
        act = [lay.w0 + a, lay.w0 + b] + ([sender_cols[s]] if s >= 0 else [])
        n_act = len(act)
        m_ab = max(0.0, float(ch.tr_end_max[a] - ch.tr_start_min[b]))
        m_ba = max(0.0, float(ch.tr_end_max[b] - ch.tr_start_min[a]))
        # y = 1: A first: ts_B − e_A − M·y − M·Σ act ≥ −M(1 + n_act)
        rows.add([lay.ts0 + b, lay.e0 + a, y, *act], [1.0, -1.0, -m_ab, *([-m_ab] * n_act)],
                 -m_ab * (1 + n_act))
        # y = 0: B first: ts_A − e_B + M·y − M·Σ act ≥ −M·n_act
        rows.add([lay.ts0 + a, lay.e0 + b, y, *act], [1.0, -1.0, m_ba, *([-m_ba] * n_act)],
                 -m_ba * n_act)


def _makespan_rows(rows: _Rows, p: MilpProblem, lay: _Layout) -> None:
    """``C ≥ f_v`` for every sink and ``C ≥`` each device's load."""
    for v in p.sinks.tolist():
        cols, vals = _finish(p, lay, v, -1.0)
        rows.add([lay.c, *cols], [1.0, *vals], 0.0)
    for d in range(lay.devices):
        rows.add([lay.c] + [lay.x(v, d) for v in range(p.num_ops)],
                 [1.0] + [-float(t) for t in p.dur[:, d]], 0.0)


# ---------------------------------------------------------------------------- solving
def _bounds_and_integrality(p: MilpProblem, lay: _Layout) -> tuple[Bounds, np.ndarray]:
    """Columns in [0, 1] (times scaled by the upper bound); ``head ≤ s ≤ 1 − tail − fastest duration``.

    x forbidden by symmetry breaking is fixed to 0. A transfer's start and end lie between its
    producer's earliest finish and the latest start of its consumers (fastest device).
    """
    from scipy.optimize import Bounds  # lazy: only a MILP needs scipy.optimize

    lower = np.zeros(lay.size)
    upper = np.ones(lay.size)
    upper[: lay.s0] = p.max_device.reshape(-1).astype(np.float64)
    lower[lay.s0: lay.c] = p.head
    upper[lay.s0: lay.c] = np.maximum(p.head, 1.0 - p.tail - p.dur.min(axis=1))
    integrality = np.zeros(lay.size, dtype=np.int64)
    integrality[: lay.s0] = 1
    integrality[lay.y0: lay.y0 + lay.pairs] = 1
    lower[lay.c] = p.makespan_min
    ch = p.channels
    if ch is not None:
        for first in (lay.ts0, lay.e0):
            lower[first: first + lay.transfers] = ch.tr_start_min
            upper[first: first + lay.transfers] = np.maximum(ch.tr_start_min, ch.tr_end_max)
        integrality[lay.w0: lay.w0 + lay.transfers] = 1  # implied by x; branching on it helps HiGHS
        integrality[lay.cy0: lay.size] = 1
    return Bounds(lower, upper), integrality


def solve_milp(p: MilpProblem, time_limit_s: float) -> MilpResult:
    """Build and solve the scheduling MILP with HiGHS; times in the result are µs."""
    ch = p.channels
    lay = _Layout(p.num_ops, p.num_devices, len(p.edge_src), len(p.pair_i),
                  *((ch.num_transfers, int(np.sum(ch.sender_q < 0)), len(ch.pair_a)) if ch else ()))
    rows = _Rows()
    _assignment_rows(rows, p, lay)
    _precedence_rows(rows, p, lay)
    _disjunctive_rows(rows, p, lay)
    if ch is not None:
        _channel_rows(rows, p, lay)
    _makespan_rows(rows, p, lay)
    cost = np.zeros(lay.size)
    cost[lay.c] = 1.0
    bounds, integrality = _bounds_and_integrality(p, lay)
    return _run_highs(cost, rows, bounds, integrality, time_limit_s, p.scale_us,
                      lambda x: _decode(x, p, lay))


def memory_feasible(p: MilpProblem, time_limit_s: float) -> bool | None:
    """Whether some assignment respects memory and co-location (None: unknown within the limit)."""
    if p.memory.sum() <= p.capacity.min():
        return True
    if p.memory.sum() > p.capacity.sum():
        return False
    from scipy.optimize import Bounds  # lazy: only a MILP needs scipy.optimize

    lay = _Layout(p.num_ops, p.num_devices, 0, 0)
    rows = _Rows()
    _assignment_rows(rows, p, lay)
    size = lay.s0
    bounds = Bounds(np.zeros(size), p.max_device.reshape(-1).astype(np.float64))
    res = _run_highs(np.zeros(size), rows, bounds, np.ones(size, dtype=np.int64), time_limit_s, 1.0,
                     lambda x: (None, None))
    return {"optimal": True, "infeasible": False}.get(res.status)


def _run_highs(cost: np.ndarray, rows: _Rows, bounds: Bounds, integrality: np.ndarray,
               time_limit_s: float, scale_us: float, decode: Any) -> MilpResult:
    """Call ``scipy.optimize.milp`` and translate its status; ``decode(x)`` → (assignment, start)."""
    from scipy.optimize import milp  # lazy: only a MILP needs scipy.optimize

    start = time.perf_counter()
    try:
        res = milp(cost, constraints=rows.constraint(len(cost)), integrality=integrality,
                   bounds=bounds, options={"time_limit": max(time_limit_s, _MIN_TIME_LIMIT_S),
                                           "mip_rel_gap": MIP_REL_GAP, "presolve": True})
    except (MemoryError, ValueError) as exc:
        return MilpResult(f"error ({type(exc).__name__}: {exc})", None, None, None, None,
                          time.perf_counter() - start, len(cost), len(rows.lo))
    seconds = time.perf_counter() - start
    has_x = res.x is not None
    if res.status in (0, 2):
        status = "optimal" if res.status == 0 else "infeasible"
    elif res.status == 1:  # time (or node) limit
        status = "time_limit" if has_x else "no_solution"
    else:
        status = f"error (HiGHS status {res.status}: {res.message})"
    assignment, start_us, *rest = decode(res.x) if has_x else (None, None)
    bound = getattr(res, "mip_dual_bound", None)
    bound_us = float(bound) * scale_us if bound is not None and np.isfinite(bound) else None
    objective = float(res.fun) * scale_us if has_x else None
    return MilpResult(status, assignment, start_us, objective, bound_us, seconds, len(cost), len(rows.lo),
                      rest[0] if rest else None)


def _decode(x: np.ndarray, p: MilpProblem, lay: _Layout) -> tuple[Any, ...]:
    """Device per op (largest x) and start time per op (µs) from a solution vector; with the
    channel model also each candidate transfer's start (µs) keyed by (producer, src_output, device)."""
    assignment = np.argmax(x[: lay.s0].reshape(p.num_ops, p.num_devices), axis=1).astype(np.int64)
    start_us = x[lay.s0: lay.c] * p.scale_us
    ch = p.channels
    if ch is None:
        return assignment, start_us
    transfer_start = {
        (int(ch.tensor_src[t]), int(ch.tensor_output[t]), int(d)): float(x[lay.ts0 + k]) * p.scale_us
        for k, (t, d) in enumerate(zip(ch.tr_tensor.tolist(), ch.tr_device.tolist(), strict=True))}
    return assignment, start_us, transfer_start


# ---------------------------------------------------------------------------- the model's schedule
def model_edge_delay_us(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> np.ndarray:
    """Per edge, the delay (µs) from its producer's finish to its data on the consumer's device.

    0 on one device; else ``k·bytes + b`` with ``bytes`` the largest edge of the same tensor
    ``(producer, src_output)`` into the same device (the simulator's transfer grouping).
    """
    transfer, _, _, nbytes = _transfers(graph, cluster, np.asarray(assignment, dtype=np.int64))
    comm = np.asarray(cluster.comm_time_us(nbytes), dtype=np.float64)
    delay = np.zeros(graph.num_edges)
    cross = transfer >= 0
    delay[cross] = comm[transfer[cross]]
    return delay


def _transfers(graph: Graph, cluster: Cluster,
               dev: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The transfers of the placement ``dev``: one per tensor (:attr:`Graph.tensors`) and
    destination device of a cross-device edge, numbered in the order of their first edge.

    Returns the transfer of each edge (-1 within a device) and per transfer its tensor, its
    destination device and its bytes (the largest of its edges)."""
    view = graph.tensors
    num_dev = cluster.num_devices
    dst_dev = dev[graph.edge_dst]
    cross = np.flatnonzero(dev[graph.edge_src] != dst_dev)
    keys, first, inverse = np.unique(view.edge_tensor[cross] * num_dev + dst_dev[cross],
                                     return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    renumber = np.empty(len(keys), dtype=np.int64)
    renumber[by_first] = np.arange(len(keys))
    transfer = np.full(graph.num_edges, -1, dtype=np.int64)
    transfer[cross] = renumber[inverse.reshape(-1)]
    nbytes = np.zeros(len(keys))
    np.maximum.at(nbytes, transfer[cross], graph.edge_bytes[cross])
    return transfer, keys[by_first] // num_dev, keys[by_first] % num_dev, nbytes


def model_schedule(graph: Graph, cluster: Cluster, assignment: np.ndarray,
                   priority: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Semi-active schedule under the MILP's model; returns start and finish per op (µs).

    Ops are taken one at a time: among those whose predecessors are all taken, the smallest
    ``(priority, topological rank)`` (default: topological order). Each starts at the later of its
    device's free time and its inputs' arrival (no channel contention). Ordering the ops of any
    schedule by start time reproduces it or an earlier one, so the MILP's makespan is checked here.
    """
    dev = np.asarray(assignment, dtype=np.int64).tolist()
    dur = (graph.time_us / cluster.speed[np.asarray(dev, dtype=np.int64)]).tolist()
    delay = model_edge_delay_us(graph, cluster, np.asarray(dev)).tolist()
    rank = graph.topological_rank.tolist()
    prio = rank if priority is None else np.asarray(priority, dtype=np.float64).tolist()
    ptr, nbr, eid = graph.succ_ptr.tolist(), graph.succ_idx.tolist(), graph.succ_edge.tolist()
    pending = graph.in_degree.tolist()
    arrival = [0.0] * graph.num_nodes
    start = [0.0] * graph.num_nodes
    finish = [0.0] * graph.num_nodes
    free = [0.0] * cluster.num_devices
    ready = [(prio[v], rank[v], v) for v in range(graph.num_nodes) if pending[v] == 0]
    heapq.heapify(ready)
    while ready:
        _, _, u = heapq.heappop(ready)
        start[u] = max(free[dev[u]], arrival[u])
        finish[u] = free[dev[u]] = start[u] + dur[u]
        for k in range(ptr[u], ptr[u + 1]):
            v = nbr[k]
            arrival[v] = max(arrival[v], finish[u] + delay[eid[k]])
            pending[v] -= 1
            if pending[v] == 0:
                heapq.heappush(ready, (prio[v], rank[v], v))
    return np.asarray(start), np.asarray(finish)


def channel_schedule(graph: Graph, cluster: Cluster, assignment: np.ndarray,
                     priority: np.ndarray | None = None,
                     transfer_priority: Mapping[tuple[int, int, int], float] | None = None,
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Semi-active schedule under the channel model; returns start and finish per op (µs).

    The jobs are the ops and the transfers (one per tensor ``(u, src_output)`` and destination
    device, lasting ``k·bytes + b`` for its largest edge there). They are taken one at a time:
    among the jobs whose predecessors are all taken, the smallest priority (an op's ``priority``,
    default its topological rank; a transfer's ``transfer_priority[(u, src_output, d)]``, default
    its producer's priority), ties by topological rank with a transfer right after its producer.
    An op starts at the later of its device's free time and its inputs' arrival, a transfer at the
    latest of its producer's finish and its sender's send and receiver's receive channels' free
    times. Taking the jobs of a schedule in start order reproduces it or an earlier one, so the
    channel MILP's makespan is checked here.
    """
    dev = np.asarray(assignment, dtype=np.int64).tolist()
    n = graph.num_nodes
    dur = (graph.time_us / cluster.speed[np.asarray(dev, dtype=np.int64)]).tolist() if n else []
    rank = graph.topological_rank.tolist()
    prio = [float(r) for r in rank] if priority is None else np.asarray(priority, dtype=np.float64).tolist()
    transfer, g_tensor, g_dst_arr, g_bytes = _transfers(graph, cluster, np.asarray(dev, dtype=np.int64))
    g_src = graph.tensors.producer[g_tensor].tolist()
    g_dst = g_dst_arr.tolist()
    num_groups = len(g_src)
    deps: list[set[int]] = [set() for _ in range(n)]  # per op: the jobs it waits for
    for u, v, g in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), transfer.tolist(), strict=True):
        deps[v].add(u if g < 0 else n + g)
    if transfer_priority is None:
        g_prio = [prio[u] for u in g_src]
    else:
        g_out = graph.tensors.output[g_tensor].tolist()
        g_prio = [float(transfer_priority[key]) for key in zip(g_src, g_out, g_dst, strict=True)]
    comm = np.asarray(cluster.comm_time_us(g_bytes), dtype=np.float64).tolist()
    dependents: list[list[int]] = [[] for _ in range(n + num_groups)]
    for g, u in enumerate(g_src):
        dependents[u].append(n + g)
    for v in range(n):
        for j in deps[v]:
            dependents[j].append(v)
    pending = [len(deps[v]) for v in range(n)] + [1] * num_groups
    ready = [0.0] * (n + num_groups)
    start = [0.0] * n
    finish = [0.0] * n
    free = [0.0] * cluster.num_devices
    send_free = [0.0] * cluster.num_devices
    recv_free = [0.0] * cluster.num_devices

    def key_of(j: int) -> tuple[float, float, int]:
        return (prio[j], rank[j], j) if j < n else (g_prio[j - n], rank[g_src[j - n]] + 0.5, j)

    heap = [key_of(v) for v in range(n) if pending[v] == 0]
    heapq.heapify(heap)
    while heap:
        *_, j = heapq.heappop(heap)
        if j < n:
            start[j] = max(free[dev[j]], ready[j])
            end = finish[j] = free[dev[j]] = start[j] + dur[j]
        else:
            g = j - n
            p, q = dev[g_src[g]], g_dst[g]
            end = max(ready[j], send_free[p], recv_free[q]) + comm[g]
            send_free[p] = recv_free[q] = end
        for k in dependents[j]:
            ready[k] = max(ready[k], end)
            pending[k] -= 1
            if pending[k] == 0:
                heapq.heappush(heap, key_of(k))
    return np.asarray(start, dtype=np.float64), np.asarray(finish, dtype=np.float64)


# ---------------------------------------------------------------------------- the placer
def check_size(graph: Graph, cluster: Cluster, max_ops: int) -> None:
    """Refuse graphs above ``max_ops`` ops and clusters above :data:`MAX_DEVICES` devices."""
    if graph.num_nodes > max_ops:
        raise CeleritasInputError(
            f"placer 'optimal': graph has {graph.num_nodes} ops, more than max_ops={max_ops} "
            "(the MILP grows quadratically; use a heuristic placer)")
    if cluster.num_devices > MAX_DEVICES:
        raise CeleritasInputError(
            f"placer 'optimal': cluster has {cluster.num_devices} devices, more than {MAX_DEVICES} "
            "(the MILP grows with devices × op pairs; use a heuristic placer)")


#: ``extra["milp_model"]`` per value of the ``channels`` parameter.
MILP_MODELS = {
    0: "no channel contention",
    1: "channel contention (send and receive channels, one transfer per tensor and destination device)",
}


@dataclass(frozen=True)
class OptimalParams:
    """The optimal placer's parameters.

    Parameters
    ----------
    time_limit : float
        HiGHS's wall-clock limit in seconds (default 60); the best solution found by then is used.
    max_ops : int
        Refuse graphs with more ops, at most 200 (default 40): the MILP grows quadratically.
    channels : bool
        True: model send and receive channel contention, so the optimum is a lower bound on every
        placement's simulated step time (a much larger MILP); False (default): transfers never
        wait for each other.

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("optimal").typed_params({"channels": 1, "time_limit": 10})
    OptimalParams(time_limit=10.0, max_ops=40, channels=True)
    """

    time_limit: float = param(60.0, "HiGHS wall-clock limit in seconds; the best solution found is used",
                              minimum=0.0, exclusive_minimum=True, maximum=86_400.0)
    max_ops: int = param(40, "refuse graphs with more ops (the MILP grows quadratically)", minimum=1,
                         maximum=200)
    channels: bool = param(False, "true: model send/receive channel contention, so the optimum is a lower "
                           "bound on every placement's simulated step time (a much larger MILP)")


def optimal_placer(graph: Graph, cluster: Cluster, params: OptimalParams) -> PlacerOutput:
    """Minimum-makespan placement (µs) from the MILP, without or with (``channels``) channel
    contention; see the module doc.

    If no assignment fits memory, the memory constraint is dropped (``milp_status``
    ``"infeasible_memory"``; the evaluation then reports OOM). If HiGHS finds no solution within
    ``time_limit`` seconds, every op goes to device 0 and ``extra["fallback"]`` says so.

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : OptimalParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``extra`` the MILP's status, makespan and bound (µs) and gap.

    Raises
    ------
    CeleritasInputError
        When the graph has more than ``max_ops`` ops or the cluster too many devices.

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> placement = place(graph, Cluster.homogeneous(2, 1e9), "optimal")
    >>> placement.assignment.tolist(), placement.extra["milp_status"], placement.extra["milp_makespan_us"]
    ([0, 0, 1, 1], 'optimal', 95.1)
    """
    check_size(graph, cluster, params.max_ops)
    time_limit = params.time_limit
    channels = params.channels
    start = time.perf_counter()
    extra: dict[str, Any] = {"milp_model": MILP_MODELS[int(channels)]}
    if not cluster.is_flat:
        cluster, extra["warning"] = fastest_link_model(cluster)
        extra["milp_model"] += "; every pair at the topology's fastest link, no shared ports"
    problem = build_problem(graph, cluster)
    fits = memory_feasible(problem, time_limit)
    if fits is False:
        problem = build_problem(graph, cluster, use_memory=False)
        extra["memory"] = "no assignment fits device memory: memory constraint dropped"
    left = time_limit - (time.perf_counter() - start)
    res = solve_milp(problem, left / 2 if channels else left)
    if channels:
        best, res = _solve_with_channels(graph, cluster, res, fits is not False, time_limit, start, extra)
    else:
        best = None
        if res.assignment is not None and res.start_us is not None:
            best = (float(model_schedule(graph, cluster, res.assignment, res.start_us)[1].max()),
                    res.assignment)
    extra.update(milp_seconds=time.perf_counter() - start, milp_solver_status=res.status,
                 milp_variables=res.num_vars, milp_constraints=res.num_rows)
    if best is None:
        extra.update(milp_status="time_limit" if res.status == "no_solution" else res.status,
                     milp_makespan_us=None, milp_bound_us=_best_bound(res, extra), milp_gap=None,
                     fallback=f"no MILP solution ({res.status}) within time_limit: all ops on device 0")
        return PlacerOutput(assignment=np.zeros(graph.num_nodes, dtype=np.int64), extra=extra)
    makespan, assignment = best  # re-timed exactly; at most HiGHS's objective (up to tolerance)
    bound = _best_bound(res, extra)
    if bound is None and res.status == "optimal":
        bound = makespan
    if bound is not None:
        bound = min(bound, makespan)
    gap = None if bound is None else (makespan - bound) / makespan if makespan > 0 else 0.0
    status = res.status
    if channels and gap is not None and gap <= MIP_REL_GAP:
        status = "optimal"  # e.g. the no-channel bound closed the gap
    extra.update(milp_status="infeasible_memory" if fits is False else status, milp_makespan_us=makespan,
                 milp_bound_us=bound, milp_gap=gap)
    return PlacerOutput(assignment=assignment, extra=extra)


def fastest_link_model(cluster: Cluster) -> tuple[Cluster, str]:
    """The flat cluster the MILP solves on a cluster with a link topology, and the warning for
    ``extra``: the same devices with every pair at the fastest link (the least slope and the least
    intercept over the pairs, :func:`~celeritas_core.graphs.levels.fastest_link`). Every transfer of the
    topology takes at least that long and shared ports only delay transfers, so the optimum and
    the bound stay lower bounds on every placement's replay on the topology (with ``channels``);
    the placement itself is not optimal there, since the MILP does not see which pairs are slow."""
    slope, intercept = fastest_link(cluster)
    model = Cluster.build(cluster.device_names, cluster.memory_bytes, cluster.speed,
                          slope_us_per_byte=slope, intercept_us=intercept)
    return model, (f"link topology: the MILP prices every pair at the fastest link ({slope:.3g} µs/B + "
                   f"{intercept:.3g} µs) without shared ports, so its optimum and bound are lower bounds "
                   "on this topology (channels=1) but the placement is not topology-optimal")


def _best_bound(res: MilpResult, extra: Mapping[str, Any]) -> float | None:
    """The larger of the solve's dual bound and the no-channel bound (a bound for channels too)."""
    bounds = [b for b in (res.bound_us, extra.get("milp_no_channel_bound_us")) if b is not None]
    return max(bounds) if bounds else None


def _solve_with_channels(graph: Graph, cluster: Cluster, first: MilpResult, use_memory: bool,
                         time_limit: float, start: float, extra: dict[str, Any],
                         ) -> tuple[tuple[float, np.ndarray] | None, MilpResult]:
    """Second phase of ``channels=1``: the channel MILP, seeded by the no-channel solve ``first``.

    The no-channel optimum (or bound) is a lower bound under channels (contention only delays
    transfers); ``first``'s solution re-timed under channels (in its own order, or replayed by
    the simulator) is a feasible schedule, an upper bound. When they meet, the channel MILP is
    skipped. Returns the best (makespan, assignment) under channels and the result to report.
    """
    lower = first.bound_us if first.bound_us is not None else None
    seed: tuple[float, np.ndarray] | None = None
    nochan = None
    if first.assignment is not None and first.start_us is not None:
        nochan = float(model_schedule(graph, cluster, first.assignment, first.start_us)[1].max())
        if first.status == "optimal":
            lower = nochan if lower is None else min(lower, nochan)
        retimed = float(channel_schedule(graph, cluster, first.assignment, first.start_us)[1].max())
        replay = float(simulate(graph, cluster, first.assignment).step_time_us)
        seed = (min(retimed, replay), first.assignment)
    extra.update(milp_no_channel_status=first.status, milp_no_channel_makespan_us=nochan,
                 milp_no_channel_bound_us=lower)
    if seed is not None and lower is not None and seed[0] <= lower * (1 + 1e-9):
        extra["milp_channel_skipped"] = ("the no-channel solution re-timed under channels meets the "
                                         "no-channel bound: optimal under channels too")
        return seed, dataclasses.replace(first, status="optimal", bound_us=lower)
    problem = build_problem(graph, cluster, use_memory=use_memory, channels=True,
                            upper_bound_us=None if seed is None else seed[0],
                            lower_bound_us=0.0 if lower is None else lower * (1 - 1e-7))
    res = solve_milp(problem, time_limit - (time.perf_counter() - start))
    best = seed
    if res.assignment is not None and res.start_us is not None:
        makespan = float(channel_schedule(graph, cluster, res.assignment, res.start_us,
                                          res.transfer_start_us)[1].max())
        if best is None or makespan < best[0]:
            best = (makespan, res.assignment)
    if best is not None and res.status == "no_solution":
        res = dataclasses.replace(res, status="time_limit")
    return best, res


register_placer(PlacerSpec(
    "optimal", optimal_placer,
    "exact reference for small graphs: MILP (HiGHS) minimising makespan, without channel contention "
    "or (channels=1) with it",
    OptimalParams,
))
