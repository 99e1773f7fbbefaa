"""HEFT, Heterogeneous Earliest Finish Time (Topcuoglu, Hariri, Wu, "Performance-effective and
low-complexity task scheduling for heterogeneous computing", IEEE TPDS 13(3), 2002), with memory.

Units: µs and bytes. With ``D`` devices of speeds ``s_d`` and the transfer model ``k·bytes + b``:

* **Upward rank.** ``rank_u(v) = w̄(v) + max over out-edges e = (v, w) of (c̄(e) + rank_u(w))``
  (0 for a sink's max), where ``w̄(v) = mean_d(time_us[v] / s_d)`` and the mean transfer time of an
  edge is ``c̄(e) = ((D − 1) / D)·(k·bytes_e + b)``: the paper's mean over all ordered device pairs,
  same-device pairs costing 0. Parallel edges of one pair count as their largest one, as arrivals
  below do (tensors travel side by side).
* **Order.** Ops by decreasing ``rank_u``, ties by ``graph.topological_rank``; this is a topological
  order because ``rank_u(v) ≥ rank_u(w)`` for every edge ``v -> w``.
* **Device choice.** Each op goes to the device minimising its earliest finish time (ties: the
  lower device index). On ``d`` its inputs arrive at ``max`` over in-edges of ``finish(p)`` (same
  device) or ``finish(p) + k·bytes + b`` (another device; classic HEFT: no channel contention, a
  tensor is not shared between consumers), and it starts at the first idle gap of ``d`` after that
  long enough for ``time_us / s_d`` (insertion policy); a zero-length op takes no device time.
* **Link topology.** On a cluster with one, an input from device ``p`` arrives on ``d`` at
  ``finish(p) + k[p, d]·bytes + b[p, d]`` (its pair's link) and ``c̄(e)`` is the mean over all
  ordered device pairs of ``k[p, q]·bytes_e + b[p, q]`` (0 for ``p = q``); the shared network
  ports are not modelled (classic HEFT has no contention).
* **Memory** (a constraint the paper does not have). ``node_memory`` (default
  ``graph.memory_bytes``) is charged to the device (sum model). A device without room for the op is
  not eligible; the first placed member of a co-location group needs room for the whole group, is
  charged all of it and pins the other members to its device. When no device has room the op goes,
  best effort, to the device with the most free memory (lowest index on ties) and is counted in
  ``best_effort_ops``; :func:`~celeritas_core.placers.base.place` then reports the OOM.

Speed: per device a sorted list of busy blocks (touching intervals are merged) searched with
``bisect``; per op, arrivals on every device come from one pass over its in-edges (the largest
local finish and the two largest remote arrivals).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import blevel, edge_comm_us
from celeritas_core.placers.base import PlacerOutput, PlacerSpec, param, register_placer
from celeritas_core.placers.grouping import baechi_fusion
from celeritas_core.simulation.timeline import DeviceTimeline


@dataclass(frozen=True, eq=False)
class HeftResult:
    """HEFT's schedule: device, start and finish (µs) per node, makespan (µs), best-effort count."""

    assignment: np.ndarray
    start_us: np.ndarray
    finish_us: np.ndarray
    makespan_us: float
    best_effort_ops: int


def upward_rank(graph: Graph, cluster: Cluster) -> np.ndarray:
    """HEFT's ``rank_u`` per node (µs): mean compute time plus the costliest path to a sink, with
    mean transfer time ``((D − 1) / D)·(k·bytes + b)`` per edge."""
    num_dev = cluster.num_devices
    mean_time = graph.time_us * float(np.mean(1.0 / cluster.speed))
    if cluster.is_flat:
        mean_comm = edge_comm_us(graph, cluster) * ((num_dev - 1) / num_dev)
    else:  # the mean over all ordered device pairs of each pair's link, same device free
        mean_comm = (float(cluster.pair_slope_us_per_byte.mean()) * graph.edge_bytes
                     + float(cluster.pair_intercept_us.mean()))
    return blevel(graph, mean_comm, time_us=mean_time)


def heft_order(graph: Graph, rank: np.ndarray) -> np.ndarray:
    """Nodes by decreasing ``rank`` (µs), ties by topological rank: HEFT's scheduling list."""
    return np.lexsort((graph.topological_rank, -rank))


class _Memory:
    """Free bytes per device and co-location pinning: a group is charged whole at its first member."""

    __slots__ = ("free", "group_dev", "group_of", "req")

    def __init__(self, graph: Graph, cluster: Cluster, node_memory: np.ndarray) -> None:
        gid = graph.colocation_ids
        req = np.asarray(node_memory, dtype=np.float64).copy()
        num_groups = int(gid.max()) + 1 if len(gid) and gid.max() >= 0 else 0
        if num_groups:
            grouped = gid >= 0
            totals = np.bincount(gid[grouped], weights=req[grouped], minlength=num_groups)
            req[grouped] = totals[gid[grouped]]
        self.req = req.tolist()
        self.group_of = gid.tolist()
        self.group_dev = [-1] * num_groups
        self.free = cluster.memory_bytes.astype(np.float64).tolist()

    def eligible(self, v: int) -> list[int]:
        """Devices ``v`` may go to: its group's device, else those with room (may be empty)."""
        g = self.group_of[v]
        if g >= 0 and self.group_dev[g] >= 0:
            return [self.group_dev[g]]
        need = self.req[v]
        return [d for d, f in enumerate(self.free) if f >= need]

    def fallback(self) -> int:
        """Best-effort device: the most free memory, lowest index on ties."""
        free = self.free
        return max(range(len(free)), key=lambda d: (free[d], -d))

    def charge(self, v: int, d: int) -> None:
        """Charge ``v`` (or its whole group, once) to device ``d`` and pin the group there."""
        g = self.group_of[v]
        if g >= 0:
            if self.group_dev[g] >= 0:
                return
            self.group_dev[g] = d
        self.free[d] -= self.req[v]


class _Heft:
    """The scheduling state over plain lists: one :meth:`step` places one node."""

    def __init__(self, graph: Graph, cluster: Cluster, node_memory: np.ndarray) -> None:
        n = graph.num_nodes
        self.num_dev = cluster.num_devices
        self.time_us = graph.time_us.tolist()
        self.speed = cluster.speed.tolist()
        self.comm = np.asarray(cluster.comm_time_us(graph.edge_bytes), dtype=np.float64).tolist()
        self.pred_ptr, self.pred_idx, self.pred_edge = (
            a.tolist() for a in (graph.pred_ptr, graph.pred_idx, graph.pred_edge))
        self.memory = _Memory(graph, cluster, node_memory)
        self.timelines = [DeviceTimeline() for _ in range(self.num_dev)]
        self.device = [-1] * n
        self.start = [0.0] * n
        self.finish = [0.0] * n
        self.best_effort = 0

    def arrivals(self, v: int) -> list[float]:
        """Per device, the time (µs) all of ``v``'s inputs are there (no channel contention)."""
        num_dev = self.num_dev
        local = [0.0] * num_dev
        remote = [0.0] * num_dev
        finish, device, comm = self.finish, self.device, self.comm
        pred_idx, pred_edge = self.pred_idx, self.pred_edge
        for k in range(self.pred_ptr[v], self.pred_ptr[v + 1]):
            p = pred_idx[k]
            d = device[p]
            f = finish[p]
            if f > local[d]:
                local[d] = f
            f += comm[pred_edge[k]]
            if f > remote[d]:
                remote[d] = f
        top = max(range(num_dev), key=remote.__getitem__)
        first = remote[top]
        second = max((remote[d] for d in range(num_dev) if d != top), default=0.0)
        return [max(local[d], second if d == top else first) for d in range(num_dev)]

    def step(self, v: int) -> None:
        """Place ``v`` on the eligible device with the earliest finish (insertion); µs."""
        devices = self.memory.eligible(v)
        if not devices:
            devices = [self.memory.fallback()]
            self.best_effort += 1
        ready = self.arrivals(v)
        best_d, best_s, best_f = -1, 0.0, float("inf")
        for d in devices:
            dur = self.time_us[v] / self.speed[d]
            s = self.timelines[d].earliest_start(ready[d], dur)
            if s + dur < best_f:
                best_d, best_s, best_f = d, s, s + dur
        if best_f > best_s:  # a zero-length op takes no device time
            self.timelines[best_d].insert(best_s, best_f)
        self.memory.charge(v, best_d)
        self.device[v], self.start[v], self.finish[v] = best_d, best_s, best_f


class _LinkedHeft(_Heft):
    """:class:`_Heft` on a cluster with a link topology: an input from device ``p`` arrives on
    ``d`` at ``finish + k[p, d]·bytes + b[p, d]`` (classic HEFT: no contention, no shared ports)."""

    def __init__(self, graph: Graph, cluster: Cluster, node_memory: np.ndarray) -> None:
        super().__init__(graph, cluster, node_memory)
        self.edge_bytes = graph.edge_bytes.tolist()
        self.slope = cluster.pair_slope_us_per_byte.tolist()
        self.intercept = cluster.pair_intercept_us.tolist()

    def arrivals(self, v: int) -> list[float]:
        """Per device, the time (µs) all of ``v``'s inputs are there (each over its pair's link)."""
        num_dev = self.num_dev
        ready = [0.0] * num_dev
        finish, device, nbytes = self.finish, self.device, self.edge_bytes
        for k in range(self.pred_ptr[v], self.pred_ptr[v + 1]):
            p = self.pred_idx[k]
            src, f, size = device[p], finish[p], nbytes[self.pred_edge[k]]
            slope, intercept = self.slope[src], self.intercept[src]
            for d in range(num_dev):
                t = f if d == src else f + slope[d] * size + intercept[d]
                if t > ready[d]:
                    ready[d] = t
        return ready


def heft_schedule(graph: Graph, cluster: Cluster, node_memory: np.ndarray | None = None) -> HeftResult:
    """HEFT with insertion and a memory constraint (module docstring); ``node_memory`` in bytes
    per node defaults to ``graph.memory_bytes``. Never raises for lack of memory (best effort)."""
    mem = graph.memory_bytes if node_memory is None else np.asarray(node_memory, dtype=np.float64)
    state = (_Heft if cluster.is_flat else _LinkedHeft)(graph, cluster, mem)
    for v in heft_order(graph, upward_rank(graph, cluster)).tolist():
        state.step(v)
    return HeftResult(
        assignment=np.asarray(state.device, dtype=np.int64),
        start_us=np.asarray(state.start),
        finish_us=np.asarray(state.finish),
        makespan_us=max(state.finish, default=0.0),
        best_effort_ops=state.best_effort,
    )


@dataclass(frozen=True)
class HEFTParams:
    """HEFT's parameters.

    Parameters
    ----------
    fusion : bool
        True: Baechi's co-placement grouping and operator fusion first; False (default): schedule
        the op graph.

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("heft").typed_params({"fusion": "true"})
    HEFTParams(fusion=True)
    """

    fusion: bool = param(False, "true: Baechi co-placement grouping and operator fusion first; false: "
                         "the op graph")


def heft_placer(graph: Graph, cluster: Cluster, params: HEFTParams) -> PlacerOutput:
    """HEFT on the ops (``fusion`` false) or on Baechi's fused co-placement graph (``fusion``); µs.

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : HEFTParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``extra`` the schedule's makespan (µs) and its best-effort ops
        (placed where they do not fit, when no device had room).

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> placement = place(graph, Cluster.homogeneous(2, 1e9), "heft")
    >>> placement.assignment.tolist(), placement.extra["schedule_makespan_us"]
    ([0, 1, 0, 1], 95.1)
    """
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    coarse_nodes = None
    if params.fusion:
        fused = baechi_fusion(graph)
        result = heft_schedule(fused.graph, cluster)
        assignment = fused.to_ops(result.assignment)
        coarse_nodes = fused.graph.num_nodes
        extra.update({"fused_nodes": fused.graph.num_nodes, "groups": fused.num_groups})
    else:
        result = heft_schedule(graph, cluster)
        assignment = result.assignment
    extra.update({
        "schedule_makespan_us": result.makespan_us,
        "schedule_seconds": time.perf_counter() - t0,
        "best_effort_ops": result.best_effort_ops,
    })
    return PlacerOutput(assignment=assignment, coarse_nodes=coarse_nodes, extra=extra)


register_placer(PlacerSpec(
    "heft", heft_placer,
    "HEFT (Topcuoglu et al. 2002): upward-rank order, earliest finish time with insertion, memory-capped",
    HEFTParams,
))
