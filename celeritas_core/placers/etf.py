"""Baechi's m-ETF and m-SCT baselines (Jeon et al., "Baechi: fast device placement of machine
learning graphs", SoCC 2020): memory-constrained event-driven list scheduling.

Both share :func:`list_schedule`. Units: µs and bytes.

**Fusion** (parameter ``fusion``, default 1, Baechi's recommended ``--placer_type=fusion
--grouper=coplace``): the placers first build Baechi's co-placement groups and fuse ops inside them
(:mod:`celeritas_core.placers.grouping`), schedule the fused graph, whose nodes of one group share a device
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
rule without reserving, and the reservation is made when ``v`` is committed. On a cluster with a
link topology a transfer from ``p`` to ``d`` takes that pair's link, ``k[p, d]·bytes + b[p, d]``,
and between nodes also waits for the shared network port sides it holds, as in the simulator
(docs/simulator.md, "Links and shared ports"). ``v`` runs
``time_us / speed[d]``. Memory: an op's ``memory_bytes`` is charged to its device; the first
member of a co-location group to be placed charges the whole group's memory to its device and
pins every other member there (0 further bytes). An op that fits on no device goes, best effort,
to the device with the most free memory at that moment (lowest index on ties); ``place`` then
reports the OOM. That is the static model (``live_memory=0``); by default, on graphs with
liveness fields, memory follows Baechi's ``m_etf`` (:meth:`_ListScheduler._init_live_memory`:
outputs freed after their last consumer, ops waiting for memory, best effort only when nothing
can start). ``baechi_model`` (default on) makes the rest Baechi's too (:func:`list_schedule`):
ties by its FIFO topological order, one channel per device, whole-µs times.

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
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers.base import PlacerOutput, PlacerSpec, param, register_placer
from celeritas_core.placers.grouping import FusedGraph, baechi_fusion
from celeritas_core.placers.sct_lp import solve_favourite_children
from celeritas_core.simulation.simulator import dispatch_order

_DEAD = -2.0  # (op, device) not a candidate
_RIPE = -1.0  # (op, device) in the device's rank heap (arrival maybe <= device free time)
_BLOCKED = -3.0  # live memory: (op, device) waits on the device's blocked heap for memory to be freed
#: Returned (by identity) when a device's late candidates turn up a ripe op: look at the ripe ones again.
_AGAIN: tuple[float, int, int] = (-1.0, -1, -1)


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


class _Device:
    """One device's state: when it is next free (µs), its free memory (bytes), its send and
    receive channels (free at, µs), the op it ran last and its two heaps of candidate ops.

    ``by_arrival`` holds ``(arrival lower bound µs, rank, op)``; ``by_rank`` holds ``(rank, op)``
    of the *ripe* ops, whose arrival may be at most :attr:`free_at`. Entries go stale when the
    op's state changes; the scheduler's ``loc`` tells a live entry from a stale one.
    """

    __slots__ = ("blocked", "by_arrival", "by_rank", "free_at", "free_bytes", "index", "last_op", "recv_free",
                 "send_free")

    def __init__(self, index: int, memory_bytes: float) -> None:
        self.index = index
        self.free_at = 0.0
        self.free_bytes = memory_bytes
        self.send_free = 0.0
        self.recv_free = 0.0
        self.last_op = -1
        self.by_arrival: list[tuple[float, int, int]] = []
        self.by_rank: list[tuple[int, int]] = []
        self.blocked: list[tuple[float, int, int]] = []  # live memory: (bytes needed, rank, op)


class _ListScheduler:
    """m-ETF / m-SCT list scheduling (module docstring) over plain lists: :meth:`run` commits
    one (op, device) per :meth:`step`.

    Per op: ``loc[v * D + d]`` is v's arrival key on device d's ``by_arrival`` heap, ``_RIPE``
    while it sits on ``by_rank``, ``_DEAD`` when v is no candidate on d. ``sent[t * D + d]`` is
    the end (µs) of tensor t's transfer to d, -1 while none.
    """

    #: Whether a device holds the copies it receives until their last consumer there has run.
    copies_held = True

    def __init__(self, graph: Graph, cluster: Cluster, favourite: np.ndarray | None,
                 live_memory: bool = False, rank: np.ndarray | None = None) -> None:
        n = graph.num_nodes
        # without liveness fields nothing is ever freed: the live model would only make ops wait
        self.live = live_memory and graph.liveness is not None
        self.n = n
        self.num_dev = cluster.num_devices
        self._init_tensors(graph, cluster)
        self.rank = (graph.topological_rank if rank is None else rank).tolist()
        self.time_us = graph.time_us.tolist()
        self.speed = cluster.speed.tolist()
        self.succ_ptr, self.succ_idx = graph.succ_ptr.tolist(), graph.succ_idx.tolist()
        self.pending = graph.in_degree.tolist()
        self.fav = favourite.tolist() if favourite is not None else None
        self._init_memory(graph)
        if self.live:
            self._init_live_memory(graph)
        self.devices = [_Device(d, m) for d, m in enumerate(cluster.memory_bytes.astype(np.float64).tolist())]
        self.device = [-1] * n
        self.start = [0.0] * n
        self.finish = [0.0] * n
        self.ready = [False] * n
        self.done = [False] * n
        self.forced = [False] * n  # best effort: memory is not checked
        self.alive = [0] * n  # devices on which the op is still a candidate
        self.inputs: list[list[tuple[float, int, int, int, float]]] = [[] for _ in range(n)]
        self.loc = [_DEAD] * (n * self.num_dev)
        self.sent = [-1.0] * (len(self.t_src) * self.num_dev)
        self.best_effort = 0
        self.transfers = 0
        self.forced_push = False  # set when a best-effort op joins a device's heap mid-round
        for v in graph.topological_order.tolist():
            if self.pending[v] == 0:
                self._make_ready(v)

    def _init_tensors(self, graph: Graph, cluster: Cluster) -> None:
        """Tensors (:attr:`Graph.tensors`): producer, transfer time (µs), consumers and inputs."""
        view = graph.tensors
        self.t_src = view.producer.tolist()
        self.t_comm = np.asarray(cluster.comm_time_us(view.nbytes), dtype=np.float64).tolist()
        self.c_ptr, self.c_nodes = view.consumer_ptr.tolist(), view.consumer.tolist()
        self.i_ptr, self.i_tids = view.input_ptr.tolist(), view.input_tensor.tolist()

    def _init_memory(self, graph: Graph) -> None:
        """A grouped op needs its whole group's memory until the group is placed, then 0 (bytes)."""
        gid = graph.colocation_ids
        self.group_of = gid.tolist()
        num_groups = int(gid.max()) + 1 if self.n and gid.max() >= 0 else 0
        req = graph.memory_bytes.astype(np.float64).copy()
        self.members: list[list[int]] = [[] for _ in range(num_groups)]
        if num_groups:
            grouped = gid >= 0
            totals = np.bincount(gid[grouped], weights=graph.memory_bytes[grouped], minlength=num_groups)
            req[grouped] = totals[gid[grouped]]
            for v in np.flatnonzero(grouped).tolist():
                self.members[self.group_of[v]].append(v)
        self.req = req.tolist()
        self.group_dev = [-1] * num_groups

    def _init_live_memory(self, graph: Graph) -> None:
        """Baechi's memory model (``m_etf`` without reservation) on our liveness fields (bytes): an
        op needs room for its persistent bytes, outputs and scratch to start, and the first of a
        co-location group also room for the group's persistent bytes together; it is charged its
        persistent bytes and outputs when it runs; outputs stay charged until every consumer has
        run, received copies likewise; persistent bytes stay. A node without liveness fields
        holds its ``memory_bytes`` all step."""
        n, live = self.n, graph.liveness
        view = graph.tensors
        pers = graph.memory_bytes.astype(np.float64).copy()
        scratch = np.zeros(n)
        t_live = np.zeros(view.num_tensors)
        out_total = np.zeros(n)
        if live is not None:
            modelled = live.modelled.astype(bool)
            pers[modelled] = live.persistent_bytes[modelled]
            scratch[modelled] = live.scratch_bytes[modelled]
            for v in np.flatnonzero(modelled).tolist():
                out_total[v] = float(live.outputs(v).sum())
            sizes = np.zeros(view.num_tensors)
            for t, (u, o) in enumerate(zip(view.producer.tolist(), view.output.tolist(), strict=True)):
                if modelled[u]:
                    declared = live.outputs(u)
                    sizes[t] = declared[o] if o < len(declared) else view.nbytes[t]
            t_live = sizes
        self.t_live = t_live.tolist()
        self.t_left = np.diff(view.consumer_ptr).tolist()  # consumers still to run, per tensor
        self.charge = (pers + np.bincount(view.producer, weights=t_live, minlength=n)).tolist()
        own = pers + out_total + scratch
        self.own_need = own.tolist()  # what a member needs once its group is placed
        gid = graph.colocation_ids
        grouped = gid >= 0
        req = own.copy()
        if grouped.any():
            group_pers = np.bincount(gid[grouped], weights=pers[grouped], minlength=len(self.members))
            req[grouped] = np.maximum(group_pers[gid[grouped]], own[grouped])
        self.req = req.tolist()

    # ------------------------------------------------------------------ the main loop
    def run(self) -> ScheduleResult:
        """Commit every op; return the schedule."""
        for _ in range(self.n):
            self.step()
        n, fav, device = self.n, self.fav, self.device
        kept = 0
        if fav is not None:
            kept = sum(1 for u in range(n) if fav[u] >= 0 and device[fav[u]] == device[u])
        return ScheduleResult(
            assignment=np.asarray(device, dtype=np.int64),
            start_us=np.asarray(self.start),
            finish_us=np.asarray(self.finish),
            makespan_us=max(self.finish) if n else 0.0,
            best_effort_ops=self.best_effort,
            num_transfers=self.transfers,
            favourites_kept=kept,
        )

    def step(self) -> None:
        """Collect every device's offer (again, when a best-effort op joined a device meanwhile)
        and commit the smallest (start, rank, not-favourite, device)."""
        while True:
            self.forced_push = False
            offers = [o for o in (self._offer(d) for d in range(self.num_dev)) if o is not None]
            if not offers and self.live:  # every ready op waits for memory: best effort
                self._force(self._first_blocked())
                continue
            if not self.forced_push:
                break
        best = min(offers)
        self._commit(best[4], best[3])

    # ------------------------------------------------------------------ candidates
    def _arrival(self, v: int, d: int) -> float:
        """Time (µs) all of v's inputs are on d if v were committed there now (no reservation)."""
        num_dev, sent, devices = self.num_dev, self.sent, self.devices
        a = 0.0
        rf = devices[d].recv_free
        sf: list[float] | None = None
        for f, _, p, t, c in self.inputs[v]:
            if p == d:
                if f > a:
                    a = f
                continue
            e = sent[t * num_dev + d]
            if e < 0.0:
                if sf is None:
                    sf = [device.send_free for device in devices]
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

    def _push(self, v: int, d: int) -> None:
        """Make v a candidate on d, keyed by its exact arrival (µs) now."""
        a = self._arrival(v, d) if self.inputs[v] else 0.0
        self.loc[v * self.num_dev + d] = a
        heapq.heappush(self.devices[d].by_arrival, (a, self.rank[v], v))

    def _force(self, v: int) -> None:
        """Best effort: v fits nowhere; make it a candidate on the device with most free memory
        (on its group's device when its co-location group is already placed)."""
        g = self.group_of[v]
        if g >= 0 and self.group_dev[g] >= 0:
            d = self.group_dev[g]
        else:
            devices = self.devices
            d = max(range(self.num_dev), key=lambda k: (devices[k].free_bytes, -k))
        self.forced[v] = True
        self.alive[v] = 1
        self.best_effort += 1
        self._push(v, d)
        self.forced_push = True

    def _drop(self, v: int, d: int) -> None:
        """v does not fit on d. Static memory (free memory only shrinks): never a candidate there
        again. Live memory: wait on d's blocked heap until d frees enough."""
        if self.live:
            self.loc[v * self.num_dev + d] = _BLOCKED
            heapq.heappush(self.devices[d].blocked, (self.req[v], self.rank[v], v))
            self.alive[v] -= 1
            return
        self.loc[v * self.num_dev + d] = _DEAD
        self.alive[v] -= 1
        if self.alive[v] == 0:
            self._force(v)

    def _first_blocked(self) -> int:
        """Live memory, nothing can start: the blocked op of smallest rank (best effort next)."""
        loc, num_dev, done = self.loc, self.num_dev, self.done
        best = (len(self.rank), -1)
        for device in self.devices:
            for _, r, v in device.blocked:
                if r < best[0] and not done[v] and loc[v * num_dev + device.index] == _BLOCKED:
                    best = (r, v)
        return best[1]

    def _revive(self, d: int) -> None:
        """Live memory: d freed bytes; its blocked ops that now fit become candidates again."""
        device = self.devices[d]
        heap, loc, num_dev, done = device.blocked, self.loc, self.num_dev, self.done
        while heap and heap[0][0] <= device.free_bytes:
            _, _, v = heapq.heappop(heap)
            if not done[v] and loc[v * num_dev + d] == _BLOCKED:
                self.alive[v] += 1
                self._push(v, d)

    def _make_ready(self, v: int) -> None:
        """All of v's predecessors are scheduled: fix its input order, offer it to devices."""
        self.ready[v] = True
        finish, rank, device, t_src, t_comm = self.finish, self.rank, self.device, self.t_src, self.t_comm
        i_tids = self.i_tids
        lst = []
        for k in range(self.i_ptr[v], self.i_ptr[v + 1]):
            t = i_tids[k]
            u = t_src[t]
            lst.append((finish[u], rank[u], device[u], t, t_comm[t]))
        lst.sort()
        self.inputs[v] = lst
        g = self.group_of[v]
        if g >= 0 and self.group_dev[g] >= 0:
            self.alive[v] = 1
            self._push(v, self.group_dev[g])
            return
        count = 0
        need = self.req[v]
        for device in self.devices:
            if need <= device.free_bytes:
                self._push(v, device.index)
                count += 1
            elif self.live:
                self.loc[v * self.num_dev + device.index] = _BLOCKED
                heapq.heappush(device.blocked, (need, self.rank[v], v))
        self.alive[v] = count
        if count == 0 and not self.live:
            self._force(v)

    def _fits(self, v: int, d: int) -> bool:
        """v is still a candidate on d and has room there (bytes)."""
        return self.loc[v * self.num_dev + d] != _DEAD and (
            self.forced[v] or self.req[v] <= self.devices[d].free_bytes)

    def _etf_candidate(self, d: int) -> tuple[float, int, int] | None:
        """(start µs, rank, op) minimising (start, rank) among candidates on d, or None.

        Ripe ops (arrival at most the device's free time) start when the device is free, so the
        smallest rank among them wins; otherwise the smallest exact arrival. Stale heap keys are
        re-evaluated and pushed back until the top is exact."""
        device = self.devices[d]
        while True:
            ah = device.by_arrival
            if ah and ah[0][0] <= device.free_at:
                self._ripen(device)
            if device.by_rank:
                best = self._best_ripe(device)
                if best is not None:
                    return best
            if not device.by_arrival:
                return None
            best = self._best_late(device)
            if best is not _AGAIN:  # identity: a real candidate is a new tuple
                return best

    def _ripen(self, device: _Device) -> None:
        """Move the live entries with arrival key <= the device's free time to its rank heap."""
        fd, ah, rh = device.free_at, device.by_arrival, device.by_rank
        loc, num_dev, d = self.loc, self.num_dev, device.index
        while ah and ah[0][0] <= fd:
            k, r, v = heapq.heappop(ah)
            i = v * num_dev + d
            if loc[i] == k:
                loc[i] = _RIPE
                heapq.heappush(rh, (r, v))

    def _best_ripe(self, device: _Device) -> tuple[float, int, int] | None:
        """The smallest-rank ripe op whose inputs are there by the device's free time, as
        (free time µs, rank, op); ops found to arrive later go back to the arrival heap."""
        fd, ah, rh = device.free_at, device.by_arrival, device.by_rank
        loc, num_dev, d = self.loc, self.num_dev, device.index
        forced, req = self.forced, self.req
        while rh:
            r, v = rh[0]
            i = v * num_dev + d
            if loc[i] != _RIPE:
                heapq.heappop(rh)
                continue
            if not forced[v] and req[v] > device.free_bytes:
                heapq.heappop(rh)
                self._drop(v, d)
                continue
            a = self._arrival(v, d)
            if a <= fd:
                return fd, r, v
            heapq.heappop(rh)
            loc[i] = a
            heapq.heappush(ah, (a, r, v))
        return None

    def _best_late(self, device: _Device) -> tuple[float, int, int] | None:
        """The op with the smallest exact arrival (µs) after the device's free time, as
        (arrival, rank, op); None when there is none, ``_AGAIN`` when a re-evaluated op turned
        out ripe (then the ripe ops must be looked at first)."""
        fd, ah = device.free_at, device.by_arrival
        loc, num_dev, d = self.loc, self.num_dev, device.index
        forced, req = self.forced, self.req
        while ah:
            k, r, v = ah[0]
            i = v * num_dev + d
            if loc[i] != k:
                heapq.heappop(ah)
                continue
            if not forced[v] and req[v] > device.free_bytes:
                heapq.heappop(ah)
                self._drop(v, d)
                continue
            a = self._arrival(v, d)
            if a == k:
                return a, r, v
            heapq.heappop(ah)
            loc[i] = a
            heapq.heappush(ah, (a, r, v))
            if a <= fd:
                return _AGAIN
        return None

    def _offer(self, d: int) -> tuple[float, int, int, int, int] | None:
        """d's offer as (start µs, rank, 0 if reserved favourite else 1, device, op)."""
        etf = self._etf_candidate(d)
        if self.fav is not None:
            favourite = self._favourite_offer(d, etf)
            if favourite is not None:
                return favourite
        if etf is None:
            return None
        return etf[0], etf[1], 1, d, etf[2]

    def _favourite_offer(self, d: int, etf: tuple[float, int, int] | None,
                         ) -> tuple[float, int, int, int, int] | None:
        """m-SCT: the favourite child ``c`` of d's last op when d is reserved for it (it is ready,
        fits on d and starts there no later than elsewhere) and d's m-ETF choice is not urgent."""
        fav, last = self.fav, self.devices[d].last_op
        if fav is None or last < 0:
            return None
        c = fav[last]
        if not (c >= 0 and self.ready[c] and not self.done[c] and self._fits(c, d)):
            return None
        devices = self.devices
        est_c = max(devices[d].free_at, self._arrival(c, d))
        best_elsewhere = min((max(devices[k].free_at, self._arrival(c, k)) for k in range(self.num_dev)
                              if k != d and self._fits(c, k)), default=float("inf"))
        if est_c > best_elsewhere:
            return None
        urgent = etf is not None and etf[2] != c and \
            etf[0] + self.time_us[etf[2]] / self.speed[d] <= est_c
        if urgent:
            return None
        return est_c, self.rank[c], 0, d, c

    # ------------------------------------------------------------------ commit
    def _commit(self, v: int, d: int) -> None:
        """Schedule v on d: reserve its transfers, charge its memory, release its successors."""
        arrival, new = self._reserve_inputs(v, d)
        device = self.devices[d]
        st = device.free_at if device.free_at > arrival else arrival
        fin = st + self.time_us[v] / self.speed[d]
        self.start[v], self.finish[v], self.device[v] = st, fin, d
        device.free_at = fin
        device.last_op = v
        self.done[v] = True
        num_dev = self.num_dev
        self.loc[v * num_dev:(v + 1) * num_dev] = [_DEAD] * num_dev
        if self.live:
            self._charge_live(v, d, new)
        else:
            device.free_bytes -= self.req[v]
        self._pin_group(v, d)
        if new:
            self._refresh_consumers(new, d)
        succ_idx, pending = self.succ_idx, self.pending
        for k in range(self.succ_ptr[v], self.succ_ptr[v + 1]):
            w = succ_idx[k]
            pending[w] -= 1
            if pending[w] == 0:
                self._make_ready(w)

    def _charge_live(self, v: int, d: int, new: list[int]) -> None:
        """Live memory: charge v's persistent bytes and outputs and its newly received copies on d;
        free every tensor whose last consumer is v
        (the output on its producer's device and its copies), then revive what now fits."""
        devices, t_live, num_dev, sent = self.devices, self.t_live, self.num_dev, self.sent
        charge = self.charge[v]
        if self.copies_held:
            for t in new:
                charge += t_live[t]
        devices[d].free_bytes -= charge
        freed: set[int] = set()
        t_left, device_of, t_src = self.t_left, self.device, self.t_src
        for k in range(self.i_ptr[v], self.i_ptr[v + 1]):
            t = self.i_tids[k]
            t_left[t] -= 1
            if t_left[t] or not t_live[t]:
                continue
            home = device_of[t_src[t]]
            devices[home].free_bytes += t_live[t]
            freed.add(home)
            for k2 in range(num_dev) if self.copies_held else ():
                if k2 != home and sent[t * num_dev + k2] >= 0.0:
                    devices[k2].free_bytes += t_live[t]
                    freed.add(k2)
        for k2 in sorted(freed):
            self._revive(k2)

    def _reserve_inputs(self, v: int, d: int) -> tuple[float, list[int]]:
        """Reserve the transfers of v's inputs missing on d, in input order (FIFO channels, each
        booked by :meth:`_book_transfer`); return when all are there (µs) and the tensors newly
        sent to d."""
        num_dev, sent, devices = self.num_dev, self.sent, self.devices
        target = devices[d]
        a = 0.0
        new: list[int] = []
        for f, _, p, t, c in self.inputs[v]:
            if p == d:
                e = f
            else:
                j = t * num_dev + d
                e = sent[j]
                if e < 0.0:
                    e = sent[j] = self._book_transfer(devices[p], target, f, c)
                    new.append(t)
                    self.transfers += 1
            if e > a:
                a = e
        return a, new

    @staticmethod
    def _book_transfer(sender: _Device, target: _Device, ready_us: float, cost_us: float) -> float:
        """Book one transfer of ``cost_us`` from ``sender`` to ``target``, ready at ``ready_us``, on
        the sender's send channel and the target's receive channel; returns when it arrives (µs)."""
        s = ready_us
        if sender.send_free > s:
            s = sender.send_free
        if target.recv_free > s:
            s = target.recv_free
        e = s + cost_us
        sender.send_free = e
        target.recv_free = e
        return e

    def _pin_group(self, v: int, d: int) -> None:
        """The first placed member of a co-location group pins the other members to d (0 bytes)."""
        g = self.group_of[v]
        if g < 0 or self.group_dev[g] >= 0:
            return
        self.group_dev[g] = d
        loc, num_dev = self.loc, self.num_dev
        for m in self.members[g]:
            self.req[m] = self.own_need[m] if self.live else 0.0
            if m == v or not self.ready[m] or self.done[m]:
                continue
            for k in range(num_dev):
                if k != d:
                    loc[m * num_dev + k] = _DEAD
            self.alive[m] = 1
            if loc[m * num_dev + d] in (_DEAD, _BLOCKED):
                self._push(m, d)

    def _refresh_consumers(self, new: list[int], d: int) -> None:
        """A tensor now on d may bring other consumers' arrival on d forward: re-evaluate them."""
        loc, num_dev, ready, done = self.loc, self.num_dev, self.ready, self.done
        heap = self.devices[d].by_arrival
        for t in new:
            for k in range(self.c_ptr[t], self.c_ptr[t + 1]):
                w = self.c_nodes[k]
                if ready[w] and not done[w]:
                    old = loc[w * num_dev + d]
                    if old >= 0.0:
                        a2 = self._arrival(w, d)
                        if a2 < old:
                            loc[w * num_dev + d] = a2
                            heapq.heappush(heap, (a2, self.rank[w], w))


class _BaechiListScheduler(_ListScheduler):
    """:class:`_ListScheduler` as Baechi's ``m_etf`` runs on a flat cluster: one channel per device
    carries its sends and its receives (``send_free``, kept equal to ``recv_free``), times are
    whole µs (an op at least 1, transfers rounded, as Baechi's graphs carry them) and devices do
    not hold the copies they receive."""

    copies_held = False

    def __init__(self, graph: Graph, cluster: Cluster, favourite: np.ndarray | None,
                 live_memory: bool = False, rank: np.ndarray | None = None) -> None:
        super().__init__(graph, cluster, favourite, live_memory, rank)
        self.time_us = [max(1.0, float(round(t))) for t in self.time_us]
        self.t_comm = [float(round(c)) for c in self.t_comm]

    def _arrival(self, v: int, d: int) -> float:
        """Time (µs) all of v's inputs are on d if v were committed there now: a transfer from ``p``
        is sent at ``max(producer finish, p's channel)`` and received from ``max(that, d's
        channel)`` for its duration (no reservation)."""
        num_dev, sent, devices = self.num_dev, self.sent, self.devices
        a = 0.0
        chan: list[float] | None = None
        for f, _, p, t, c in self.inputs[v]:
            if p == d:
                if f > a:
                    a = f
                continue
            e = sent[t * num_dev + d]
            if e < 0.0:
                if chan is None:
                    chan = [device.send_free for device in devices]
                s = f if f > chan[p] else chan[p]
                r = s if s > chan[d] else chan[d]
                chan[p] = s + c
                e = chan[d] = r + c
            if e > a:
                a = e
        return a

    @staticmethod
    def _book_transfer(sender: _Device, target: _Device, ready_us: float, cost_us: float) -> float:
        """Book one transfer on the devices' one channel each: sent from ``max(ready, the sender's
        channel)``, received from ``max(that, the target's channel)``; returns when it arrives (µs)."""
        s = ready_us if ready_us > sender.send_free else sender.send_free
        r = s if s > target.send_free else target.send_free
        sender.send_free = sender.recv_free = s + cost_us
        target.send_free = target.recv_free = r + cost_us
        return r + cost_us


class _LinkedListScheduler(_ListScheduler):
    """:class:`_ListScheduler` on a cluster with a link topology: a transfer from device ``p`` to
    ``d`` lasts ``k[p, d]·bytes + b[p, d]`` and, between nodes, also holds the shared network port
    sides the simulator gives it (``pair_egress``/``pair_ingress``), one transfer at a time per
    side, FIFO, like the channels. The inputs' last field is then the tensor's bytes, not its time."""

    def _init_tensors(self, graph: Graph, cluster: Cluster) -> None:
        """As the flat scheduler, keeping each tensor's bytes and the per-pair links and ports."""
        super()._init_tensors(graph, cluster)
        self.t_comm = graph.tensors.nbytes.astype(np.float64).tolist()  # bytes, timed per pair
        self.slope = cluster.pair_slope_us_per_byte.tolist()
        self.intercept = cluster.pair_intercept_us.tolist()
        self.egress = cluster.pair_egress.tolist()
        self.ingress = cluster.pair_ingress.tolist()
        self.port_free = [0.0] * cluster.num_ports

    def _arrival(self, v: int, d: int) -> float:
        """Time (µs) all of v's inputs are on d if v were committed there now (no reservation)."""
        num_dev, sent, devices = self.num_dev, self.sent, self.devices
        a = 0.0
        rf = devices[d].recv_free
        sf: list[float] | None = None
        pf: list[float] | None = None
        for f, _, p, t, nbytes in self.inputs[v]:
            if p == d:
                if f > a:
                    a = f
                continue
            e = sent[t * num_dev + d]
            if e < 0.0:
                if sf is None or pf is None:
                    sf = [device.send_free for device in devices]
                    pf = list(self.port_free)
                out, into = self.egress[p][d], self.ingress[p][d]
                s = max(f, sf[p], rf, pf[out] if out >= 0 else 0.0, pf[into] if into >= 0 else 0.0)
                e = s + self.slope[p][d] * nbytes + self.intercept[p][d]
                sf[p] = rf = e
                if out >= 0:
                    pf[out] = e
                if into >= 0:
                    pf[into] = e
            if e > a:
                a = e
        return a

    def _reserve_inputs(self, v: int, d: int) -> tuple[float, list[int]]:
        """Reserve the transfers of v's inputs missing on d, in input order (FIFO channels and
        ports); return when all are there (µs) and the tensors newly sent to d."""
        num_dev, sent, devices, pf = self.num_dev, self.sent, self.devices, self.port_free
        target = devices[d]
        a = 0.0
        new: list[int] = []
        for f, _, p, t, nbytes in self.inputs[v]:
            if p == d:
                e = f
            else:
                j = t * num_dev + d
                e = sent[j]
                if e < 0.0:
                    sender = devices[p]
                    out, into = self.egress[p][d], self.ingress[p][d]
                    s = max(f, sender.send_free, target.recv_free, pf[out] if out >= 0 else 0.0,
                            pf[into] if into >= 0 else 0.0)
                    e = s + self.slope[p][d] * nbytes + self.intercept[p][d]
                    sender.send_free = target.recv_free = e
                    if out >= 0:
                        pf[out] = e
                    if into >= 0:
                        pf[into] = e
                    sent[j] = e
                    new.append(t)
                    self.transfers += 1
            if e > a:
                a = e
        return a, new


def list_schedule(graph: Graph, cluster: Cluster, favourite: np.ndarray | None = None, *,
                  live_memory: bool = False, baechi_ties: bool = False) -> ScheduleResult:
    """m-ETF list scheduling, or m-SCT when ``favourite`` (child per op, -1 if none) is given; on a
    cluster with a link topology transfers take their pair's link and the shared network ports.
    ``live_memory``: Baechi's memory model (outputs freed after their last consumer) on the
    graph's liveness fields instead of every op's ``memory_bytes`` held all step. ``baechi_ties``:
    ties between equal starts go by Baechi's topological order (Kahn's algorithm with a FIFO
    queue) instead of :attr:`Graph.topological_rank`, and, on a flat cluster, a device has one
    channel for its sends and receives, as in Baechi's ``DeviceWrapper``."""
    rank = dispatch_order(graph, "fifo")[1] if baechi_ties else None
    if not cluster.is_flat:
        return _LinkedListScheduler(graph, cluster, favourite, live_memory, rank).run()
    scheduler = _BaechiListScheduler if baechi_ties else _ListScheduler
    return scheduler(graph, cluster, favourite, live_memory, rank).run()


def _extra(result: ScheduleResult, seconds: float) -> dict[str, Any]:
    """PlacerOutput.extra common to both placers (µs, s, counts)."""
    return {
        "schedule_makespan_us": result.makespan_us,
        "schedule_seconds": seconds,
        "best_effort_ops": result.best_effort_ops,
        "scheduled_transfers": result.num_transfers,
    }


_FUSION_DOC = ("true: Baechi co-placement grouping and operator fusion before scheduling (Baechi's "
               "--placer_type=fusion --grouper=coplace); false: schedule the ops")
_BAECHI_DOC = ("true: Baechi's scheduler model: ties between equal starts by its topological order (Kahn's "
               "algorithm, FIFO), one channel per device for sends and receives, times in whole µs, received "
               "copies not charged to memory; false: ties by the graph's topological rank, a send and a "
               "receive channel per device as the simulator has, copies held")
_LIVE_DOC = ("true: Baechi's memory model on the graph's liveness fields (an op's outputs are held from its "
             "start until its last consumer has run, persistent bytes all step); false: every op holds its "
             "planning bytes all step. The same without liveness fields")


@dataclass(frozen=True)
class ETFParams:
    """m-ETF's parameters.

    Parameters
    ----------
    fusion : bool
        True (default): Baechi's co-placement grouping and operator fusion before scheduling
        (Baechi's ``--placer_type=fusion --grouper=coplace``); False: schedule the ops.
    live_memory : bool
        True (default): Baechi's memory model, outputs freed after their last consumer ran
        (on graphs with liveness fields); False: every op's planning bytes held all step.
    baechi_model : bool
        True (default): Baechi's own scheduler model (ties by its FIFO topological order, one
        channel per device, whole µs, received copies not charged), so the placement is the one
        Baechi's code makes; False: the simulator's channels and the graph's topological rank.

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("m-etf").typed_params({"fusion": "0"})
    ETFParams(fusion=False, live_memory=True, baechi_model=True)
    """

    fusion: bool = param(True, _FUSION_DOC)
    live_memory: bool = param(True, _LIVE_DOC)
    baechi_model: bool = param(True, _BAECHI_DOC)


@dataclass(frozen=True)
class SCTParams:
    """m-SCT's parameters: the favourite-child threshold of the LP, and fusion as m-ETF's.

    Parameters
    ----------
    threshold : float
        An edge is a favourite-child candidate when its LP value ``x_e`` is below it, in [0, 1]
        (default 0.1, the default of Baechi's ``--sct_threshold``).
    fusion : bool
        As :class:`ETFParams` (default True).
    live_memory : bool
        As :class:`ETFParams` (default True).
    baechi_model : bool
        As :class:`ETFParams` (default True).

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("m-sct").typed_params({"threshold": 0.3})
    SCTParams(threshold=0.3, fusion=True, live_memory=True, baechi_model=True)
    """

    threshold: float = param(0.1, "an edge is a favourite-child candidate when its LP value x_e < threshold "
                             "(default: Baechi's --sct_threshold)",
                             minimum=0.0, maximum=1.0)
    fusion: bool = param(True, _FUSION_DOC)
    live_memory: bool = param(True, _LIVE_DOC)
    baechi_model: bool = param(True, _BAECHI_DOC)


def _target(graph: Graph, fusion: bool) -> tuple[Graph, FusedGraph | None, float]:
    """The graph to schedule: Baechi's fused co-placement graph (``fusion``) or the ops; seconds."""
    if not fusion:
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


def m_etf_placer(graph: Graph, cluster: Cluster, params: ETFParams) -> PlacerOutput:
    """m-ETF: memory-constrained earliest-task-first list scheduling (Baechi); times in µs.

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : ETFParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``coarse_nodes`` the fused graph's nodes (with ``fusion``); ``extra``
        the schedule's makespan (µs), its best-effort ops (placed where they do not fit, when no
        device had room) and its transfers.

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> cluster = Cluster.homogeneous(2, 1e9)
    >>> place(graph, cluster, "m-etf").assignment.tolist()   # fused: b and c stay with their producer
    [0, 0, 0, 0]
    >>> placement = place(graph, cluster, "m-etf", {"fusion": False})
    >>> placement.assignment.tolist(), placement.extra["schedule_makespan_us"]   # whole µs, as Baechi's
    ([0, 0, 1, 1], 95.0)
    """
    target, fused, fuse_seconds = _target(graph, params.fusion)
    t0 = time.perf_counter()
    result = list_schedule(target, cluster, live_memory=params.live_memory,
                           baechi_ties=params.baechi_model)
    return _output(result, fused, fuse_seconds, _extra(result, time.perf_counter() - t0))


def m_sct_placer(graph: Graph, cluster: Cluster, params: SCTParams) -> PlacerOutput:
    """m-SCT: favourite children from the SCT LP, then m-ETF that waits for them (Baechi); µs.

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : SCTParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        As :func:`m_etf_placer`, and in ``extra`` the LP's status, makespan (µs) and favourite children.

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> placement = place(graph, Cluster.homogeneous(2, 1e9), "m-sct", {"fusion": False})
    >>> placement.assignment.tolist(), placement.extra["lp_status"], placement.extra["favourite_children"]
    ([0, 1, 0, 1], 'optimal', 2)
    """
    target, fused, fuse_seconds = _target(graph, params.fusion)
    fc = solve_favourite_children(target, cluster, params.threshold)
    t0 = time.perf_counter()
    result = list_schedule(target, cluster, fc.favourite, live_memory=params.live_memory,
                           baechi_ties=params.baechi_model)
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


register_placer(PlacerSpec(
    "m-etf", m_etf_placer,
    "Baechi m-ETF: memory-constrained earliest-task-first list scheduling with FIFO transfer channels",
    ETFParams,
))
register_placer(PlacerSpec(
    "m-sct", m_sct_placer,
    "Baechi m-SCT: m-ETF that keeps a device waiting for the op's favourite child from the SCT LP",
    SCTParams,
))
