"""Baechi's m-ETF and m-SCT baselines (Jeon et al., "Baechi: fast device placement of machine
learning graphs", SoCC 2020): memory-constrained event-driven list scheduling.

Both share :func:`list_schedule`. Units: µs and bytes.

**Fusion** (parameter ``fusion``, default 1, Baechi's recommended ``--placer_type=fusion
--grouper=coplace``): the placers first build Baechi's co-placement groups and fuse ops inside them
(:mod:`celeritas_core.grouping`), schedule the fused graph, whose nodes of one group share a device
through co-location, and map the fused nodes' devices back to their ops. ``fusion=0`` schedules the
op graph itself. The description below is in terms of the scheduled graph's nodes ("ops").

**m-ETF** (earliest task first). Repeatedly, among *ready* ops (every predecessor scheduled) and the
devices with room for them, commit the (op, device) pair with the smallest start time; ties go to
the smaller ``graph.topological_rank``, then the lower device index. The start of ``v`` on ``d`` is
``max(free time of d, arrival of v's inputs on d)``. An input from the same device arrives when its
producer finishes. Inputs from another device arrive by transfers with the simulator's semantics
(docs/simulator.md): one transfer per (producer, src_output, destination device), lasting
``k·bytes + b`` with ``bytes`` the largest edge of that tensor, holding the sender's send channel
and the receiver's receive channel, one transfer at a time per channel, FIFO without
back-filling; a tensor already sent to ``d`` is reused. ``v``'s missing tensors are reserved one
after another in order of (producer finish, producer rank, tensor id), each starting at
``max(producer finish, send channel free, receive channel free)``; the estimate uses the same
rule without reserving, and the reservation is made when ``v`` is committed. ``v`` runs
``time_us / speed[d]``. Memory: an op's ``memory_bytes`` is charged to its device; the first
member of a co-location group to be placed charges the whole group's memory to its device and
pins every other member there (0 further bytes). An op that fits on no device goes, best effort,
to the device with the most free memory at that moment (lowest index on ties); ``place`` then
reports the OOM.

**m-SCT** (favourite children, see :mod:`celeritas_core.placers.sct_lp`). As m-ETF, except that a
device ``d`` whose last committed op ``u`` has a favourite child ``c`` that is ready, unscheduled,
allowed on ``d`` and starts on ``d`` no later than on any other device is *reserved* for ``c``:
``d`` then offers ``c`` (at its start time on ``d``), winning ties against the same start on
another device, unless ``d``'s m-ETF choice ``v ≠ c`` is *urgent*: it finishes on ``d``
(``start + duration``) no later than ``c`` could start on ``d``, so it runs in the idle gap
without delaying ``c``'s compute. (Baechi calls an op urgent when it could start on every device;
the gap rule is cheaper and never delays the favourite by computation; ``v``'s own transfers can
still delay ``c``'s inputs on the receive channel.)

Speed: per device, a heap of candidate ops keyed by (arrival lower bound, rank) and a heap keyed
by rank of ops whose arrival may be at most the device's free time. Arrivals only grow as devices
and channels fill up, except when a tensor an op needs is sent to that device for another op:
those consumers are re-evaluated at once. Popping, re-evaluating exactly and re-pushing stale
entries therefore yields the exact minimum without scanning all ready ops × devices.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeritas_core.cluster import Cluster
from celeritas_core.graph import Graph
from celeritas_core.grouping import FusedGraph, baechi_fusion
from celeritas_core.placers.base import ParamSpec, PlacerOutput, PlacerSpec, register_placer
from celeritas_core.placers.sct_lp import solve_favourite_children

_DEAD = -2.0  # (op, device) not a candidate
_RIPE = -1.0  # (op, device) in the device's rank heap (arrival maybe <= device free time)


@dataclass(frozen=True, eq=False)
class ScheduleResult:
    """Outcome of :func:`list_schedule`: device, start and finish (µs) per op, plus counters."""

    assignment: np.ndarray
    start_us: np.ndarray
    finish_us: np.ndarray
    makespan_us: float
    best_effort_ops: int
    num_transfers: int
    favourites_kept: int


@dataclass(frozen=True, eq=False)
class _Tensors:
    """Distinct (producer, src_output) tensors, their transfer time and consumers (CSR)."""

    src: list[int]
    comm_us: list[float]
    consumers_ptr: list[int]
    consumers: list[int]
    inputs_ptr: list[int]
    inputs: list[int]


def _tensors(graph: Graph, cluster: Cluster) -> _Tensors:
    """Group edges into tensors keyed by (src node, src_output); size = largest edge (bytes)."""
    n = graph.num_nodes
    if graph.num_edges == 0:
        zeros = [0] * (n + 1)
        return _Tensors([], [], [0], [], zeros, [])
    key = np.stack([graph.edge_src, graph.edge_src_output], axis=1)
    uniq, tid = np.unique(key, axis=0, return_inverse=True)
    tid = tid.reshape(-1)
    nbytes = np.zeros(len(uniq))
    np.maximum.at(nbytes, tid, graph.edge_bytes)
    comm = np.asarray(cluster.comm_time_us(nbytes), dtype=np.float64)
    pairs = np.unique(np.stack([tid, graph.edge_dst], axis=1), axis=0)  # (tensor, consumer)
    cptr = np.zeros(len(uniq) + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs[:, 0], minlength=len(uniq)), out=cptr[1:])
    by_consumer = pairs[np.lexsort((pairs[:, 0], pairs[:, 1]))]
    iptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(by_consumer[:, 1], minlength=n), out=iptr[1:])
    return _Tensors(uniq[:, 0].tolist(), comm.tolist(), cptr.tolist(), pairs[:, 1].tolist(),
                    iptr.tolist(), by_consumer[:, 0].tolist())


def list_schedule(graph: Graph, cluster: Cluster, favourite: np.ndarray | None = None) -> ScheduleResult:
    """m-ETF list scheduling, or m-SCT when ``favourite`` (child per op, -1 if none) is given."""
    n = graph.num_nodes
    num_dev = cluster.num_devices
    tens = _tensors(graph, cluster)
    t_src, t_comm = tens.src, tens.comm_us
    c_ptr, c_nodes = tens.consumers_ptr, tens.consumers
    i_ptr, i_tids = tens.inputs_ptr, tens.inputs
    rank = graph.topological_rank.tolist()
    time_us = graph.time_us.tolist()
    speed = cluster.speed.tolist()
    succ_ptr, succ_idx = graph.succ_ptr.tolist(), graph.succ_idx.tolist()
    pending = graph.in_degree.tolist()
    fav = favourite.tolist() if favourite is not None else None

    # Memory: a grouped op needs its whole group's memory until the group is placed, then 0.
    gid = graph.colocation_ids
    group_of = gid.tolist()
    num_groups = int(gid.max()) + 1 if n and gid.max() >= 0 else 0
    req = graph.memory_bytes.astype(np.float64).copy()
    members: list[list[int]] = [[] for _ in range(num_groups)]
    if num_groups:
        totals = np.bincount(gid[gid >= 0], weights=graph.memory_bytes[gid >= 0], minlength=num_groups)
        req[gid >= 0] = totals[gid[gid >= 0]]
        for v in np.flatnonzero(gid >= 0).tolist():
            members[group_of[v]].append(v)
    req_l = req.tolist()
    group_dev = [-1] * num_groups
    free = cluster.memory_bytes.astype(np.float64).tolist()

    device = [-1] * n
    start = [0.0] * n
    finish = [0.0] * n
    ready = [False] * n
    done = [False] * n
    forced = [False] * n  # best effort: memory is not checked
    alive = [0] * n  # devices on which the op is still a candidate
    inputs: list[list[tuple[float, int, int, int, float]]] = [[] for _ in range(n)]
    loc = [_DEAD] * (n * num_dev)
    dev_free = [0.0] * num_dev
    send_free = [0.0] * num_dev
    recv_free = [0.0] * num_dev
    sent = [-1.0] * (len(t_src) * num_dev)  # end (µs) of tensor t's transfer to device d
    arr_heaps: list[list[tuple[float, int, int]]] = [[] for _ in range(num_dev)]
    rank_heaps: list[list[tuple[int, int]]] = [[] for _ in range(num_dev)]
    last_op = [-1] * num_dev
    heappush, heappop = heapq.heappush, heapq.heappop
    best_effort = 0
    transfers = 0
    forced_push = False  # set when a best-effort op joins a device's heap mid-round

    def arrival(v: int, d: int) -> float:
        """Time (µs) all of v's inputs are on d if v were committed there now (no reservation)."""
        a = 0.0
        rf = recv_free[d]
        sf: list[float] | None = None
        for f, _, p, t, c in inputs[v]:
            if p == d:
                if f > a:
                    a = f
                continue
            e = sent[t * num_dev + d]
            if e < 0.0:
                if sf is None:
                    sf = send_free[:]
                s = f
                if sf[p] > s:
                    s = sf[p]
                if rf > s:
                    s = rf
                e = s + c
                sf[p] = e
                rf = e
            if e > a:
                a = e
        return a

    def push(v: int, d: int) -> None:
        """Make v a candidate on d, keyed by its exact arrival (µs) now."""
        a = arrival(v, d)
        loc[v * num_dev + d] = a
        heappush(arr_heaps[d], (a, rank[v], v))

    def force(v: int) -> None:
        """Best effort: v fits nowhere; make it a candidate on the device with most free memory
        (on its group's device when its co-location group is already placed)."""
        nonlocal best_effort, forced_push
        g = group_of[v]
        d = group_dev[g] if g >= 0 and group_dev[g] >= 0 else max(range(num_dev), key=lambda k: (free[k], -k))
        forced[v] = True
        alive[v] = 1
        best_effort += 1
        push(v, d)
        forced_push = True

    def drop(v: int, d: int) -> None:
        """v no longer fits on d (free memory only shrinks): never a candidate there again."""
        loc[v * num_dev + d] = _DEAD
        alive[v] -= 1
        if alive[v] == 0:
            force(v)

    def make_ready(v: int) -> None:
        """All of v's predecessors are scheduled: fix its input order, offer it to devices."""
        ready[v] = True
        lst = []
        for k in range(i_ptr[v], i_ptr[v + 1]):
            t = i_tids[k]
            u = t_src[t]
            lst.append((finish[u], rank[u], device[u], t, t_comm[t]))
        lst.sort()
        inputs[v] = lst
        g = group_of[v]
        if g >= 0 and group_dev[g] >= 0:
            alive[v] = 1
            push(v, group_dev[g])
            return
        count = 0
        for d in range(num_dev):
            if req_l[v] <= free[d]:
                push(v, d)
                count += 1
        alive[v] = count
        if count == 0:
            force(v)

    def etf_candidate(d: int) -> tuple[float, int, int] | None:
        """(start µs, rank, op) minimising (start, rank) among candidates on d, or None."""
        fd = dev_free[d]
        ah, rh = arr_heaps[d], rank_heaps[d]
        while True:
            while ah and ah[0][0] <= fd:
                k, r, v = heappop(ah)
                i = v * num_dev + d
                if loc[i] == k:
                    loc[i] = _RIPE
                    heappush(rh, (r, v))
            while rh:
                r, v = rh[0]
                i = v * num_dev + d
                if loc[i] != _RIPE:
                    heappop(rh)
                    continue
                if not forced[v] and req_l[v] > free[d]:
                    heappop(rh)
                    drop(v, d)
                    continue
                a = arrival(v, d)
                if a <= fd:
                    return fd, r, v
                heappop(rh)
                loc[i] = a
                heappush(ah, (a, r, v))
            back_to_ripe = False
            while ah:
                k, r, v = ah[0]
                i = v * num_dev + d
                if loc[i] != k:
                    heappop(ah)
                    continue
                if not forced[v] and req_l[v] > free[d]:
                    heappop(ah)
                    drop(v, d)
                    continue
                a = arrival(v, d)
                if a == k:
                    return a, r, v
                heappop(ah)
                loc[i] = a
                heappush(ah, (a, r, v))
                if a <= fd:
                    back_to_ripe = True
                    break
            if not back_to_ripe:
                return None

    def fits(v: int, d: int) -> bool:
        """v is still a candidate on d and has room there (bytes)."""
        return loc[v * num_dev + d] != _DEAD and (forced[v] or req_l[v] <= free[d])

    def candidate(d: int) -> tuple[float, int, int, int, int] | None:
        """d's offer as (start µs, rank, 0 if reserved favourite else 1, device, op)."""
        etf = etf_candidate(d)
        if fav is not None and last_op[d] >= 0:
            c = fav[last_op[d]]
            if c >= 0 and ready[c] and not done[c] and fits(c, d):
                est_c = max(dev_free[d], arrival(c, d))
                best_elsewhere = min((max(dev_free[k], arrival(c, k)) for k in range(num_dev)
                                      if k != d and fits(c, k)), default=float("inf"))
                if est_c <= best_elsewhere:
                    urgent = etf is not None and etf[2] != c and \
                        etf[0] + time_us[etf[2]] / speed[d] <= est_c
                    if not urgent:
                        return est_c, rank[c], 0, d, c
        if etf is None:
            return None
        return etf[0], etf[1], 1, d, etf[2]

    def commit(v: int, d: int) -> None:
        """Schedule v on d: reserve its transfers, charge its memory, release its successors."""
        nonlocal transfers
        a = 0.0
        new: list[int] = []
        for f, _, p, t, c in inputs[v]:
            if p == d:
                e = f
            else:
                j = t * num_dev + d
                e = sent[j]
                if e < 0.0:
                    s = f
                    if send_free[p] > s:
                        s = send_free[p]
                    if recv_free[d] > s:
                        s = recv_free[d]
                    e = s + c
                    send_free[p] = e
                    recv_free[d] = e
                    sent[j] = e
                    new.append(t)
                    transfers += 1
            if e > a:
                a = e
        st = dev_free[d] if dev_free[d] > a else a
        fin = st + time_us[v] / speed[d]
        start[v], finish[v], device[v] = st, fin, d
        dev_free[d] = fin
        last_op[d] = v
        done[v] = True
        for k in range(num_dev):
            loc[v * num_dev + k] = _DEAD
        free[d] -= req_l[v]
        g = group_of[v]
        if g >= 0 and group_dev[g] < 0:
            group_dev[g] = d
            for m in members[g]:
                req_l[m] = 0.0
                if m == v or not ready[m] or done[m]:
                    continue
                for k in range(num_dev):
                    if k != d:
                        loc[m * num_dev + k] = _DEAD
                alive[m] = 1
                if loc[m * num_dev + d] == _DEAD:
                    push(m, d)
        # A tensor now on d may bring other consumers' arrival on d forward: re-evaluate them.
        for t in new:
            for k in range(c_ptr[t], c_ptr[t + 1]):
                w = c_nodes[k]
                if ready[w] and not done[w]:
                    old = loc[w * num_dev + d]
                    if old >= 0.0:
                        a2 = arrival(w, d)
                        if a2 < old:
                            loc[w * num_dev + d] = a2
                            heappush(arr_heaps[d], (a2, rank[w], w))
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[k]
            pending[w] -= 1
            if pending[w] == 0:
                make_ready(w)

    for v in graph.topological_order.tolist():
        if pending[v] == 0:
            make_ready(v)
    for _ in range(n):
        while True:
            forced_push = False
            offers = [o for o in (candidate(d) for d in range(num_dev)) if o is not None]
            if not forced_push:
                break
        best = min(offers)
        commit(best[4], best[3])

    kept = 0
    if fav is not None:
        kept = sum(1 for u in range(n) if fav[u] >= 0 and device[fav[u]] == device[u])
    return ScheduleResult(
        assignment=np.asarray(device, dtype=np.int64),
        start_us=np.asarray(start),
        finish_us=np.asarray(finish),
        makespan_us=max(finish) if n else 0.0,
        best_effort_ops=best_effort,
        num_transfers=transfers,
        favourites_kept=kept,
    )


def _extra(result: ScheduleResult, seconds: float) -> dict[str, Any]:
    """PlacerOutput.extra common to both placers (µs, s, counts)."""
    return {
        "schedule_makespan_us": result.makespan_us,
        "schedule_seconds": seconds,
        "best_effort_ops": result.best_effort_ops,
        "scheduled_transfers": result.num_transfers,
    }


def _target(graph: Graph, params: Mapping[str, Any]) -> tuple[Graph, FusedGraph | None, float]:
    """The graph to schedule: Baechi's fused co-placement graph (``fusion=1``) or the ops; seconds."""
    if not int(params["fusion"]):
        return graph, None, 0.0
    t0 = time.perf_counter()
    fused = baechi_fusion(graph)
    return fused.graph, fused, time.perf_counter() - t0


def _output(result: ScheduleResult, fused: FusedGraph | None, seconds: float,
            extra: dict[str, Any]) -> PlacerOutput:
    """Map a schedule of the fused graph back to ops (device per op); note fusion sizes and seconds."""
    if fused is None:
        return PlacerOutput(assignment=result.assignment, extra=extra)
    extra.update({"fused_nodes": fused.graph.num_nodes, "groups": fused.num_groups,
                  "fusion_seconds": seconds})
    return PlacerOutput(assignment=fused.to_ops(result.assignment), coarse_nodes=fused.graph.num_nodes,
                        extra=extra)


def m_etf_placer(graph: Graph, cluster: Cluster, params: Mapping[str, Any]) -> PlacerOutput:
    """m-ETF: memory-constrained earliest-task-first list scheduling (Baechi); times in µs."""
    target, fused, fuse_seconds = _target(graph, params)
    t0 = time.perf_counter()
    result = list_schedule(target, cluster)
    return _output(result, fused, fuse_seconds, _extra(result, time.perf_counter() - t0))


def m_sct_placer(graph: Graph, cluster: Cluster, params: Mapping[str, Any]) -> PlacerOutput:
    """m-SCT: favourite children from the SCT LP, then m-ETF that waits for them (Baechi); µs."""
    target, fused, fuse_seconds = _target(graph, params)
    fc = solve_favourite_children(target, cluster, float(params["threshold"]))
    t0 = time.perf_counter()
    result = list_schedule(target, cluster, fc.favourite)
    extra = _extra(result, time.perf_counter() - t0)
    extra.update({
        "lp_seconds": fc.lp_seconds,
        "lp_status": fc.status,
        "lp_makespan_us": fc.lp_makespan_us,
        "lp_pairs": fc.num_pairs,
        "favourite_children": fc.num_favourites,
        "favourites_kept": result.favourites_kept,
    })
    if fc.warning:
        extra["warning"] = fc.warning
    return _output(result, fused, fuse_seconds, extra)


_FUSION = ParamSpec("fusion", 1, "1: Baechi co-placement grouping and operator fusion before scheduling "
                    "(Baechi's --placer_type=fusion --grouper=coplace); 0: schedule the ops",
                    int, minimum=0, maximum=1)

register_placer(PlacerSpec(
    "m-etf", m_etf_placer,
    "Baechi m-ETF: memory-constrained earliest-task-first list scheduling with FIFO transfer channels",
    (_FUSION,),
))
register_placer(PlacerSpec(
    "m-sct", m_sct_placer,
    "Baechi m-SCT: m-ETF that keeps a device waiting for the op's favourite child from the SCT LP",
    (ParamSpec("threshold", 0.5, "an edge is a favourite-child candidate when its LP value x_e < threshold",
               float, minimum=0.0, maximum=1.0), _FUSION),
))
