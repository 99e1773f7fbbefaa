"""The fusion-based placers: Order-Place and Celeritas's Adjusting Placement (paper, Algorithm 2).

Both fuse the graph first (:func:`celeritas_core.fusion.optimal_operation_fusion`), place the
coarse graph in its CPD-TOPO order, map clusters back to ops and move co-location group members
to their anchor's device.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from typing import Any

import numpy as np

from celeritas_core.cluster import Cluster
from celeritas_core.colocation import apply_colocation
from celeritas_core.fusion import DEFAULT_MEMORY_FRACTION, DEFAULT_R, Fusion, optimal_operation_fusion
from celeritas_core.graph import Graph
from celeritas_core.levels import cpath, edge_comm_us
from celeritas_core.orders import cpd_topo_order
from celeritas_core.placers.base import ParamSpec, PlacerOutput, PlacerSpec, register_placer


def order_place(graph: Graph, cluster: Cluster, order: np.ndarray,
                node_memory: np.ndarray | None = None) -> np.ndarray:
    """Order-Place: walk ``order``, fill a device up to its memory, then move to the next one.

    When no later device has room, the node goes to the device with the most free memory
    (best effort; the placement is then flagged OOM by evaluation). Returns device per node.
    """
    mem = (graph.memory_bytes if node_memory is None else node_memory).tolist()
    free = cluster.memory_bytes.astype(np.float64).copy()
    device = np.zeros(graph.num_nodes, dtype=np.int64)
    current = 0
    last = cluster.num_devices - 1
    for v in order.tolist():
        while current < last and free[current] < mem[v]:
            current += 1
        d = current if free[current] >= mem[v] else int(np.argmax(free))
        device[v] = d
        free[d] -= mem[v]
    return device


class _DeviceTimeline:
    """Busy intervals of one device, kept sorted, for insertion-based earliest start (µs)."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def earliest_start(self, ready: float, duration: float) -> float:
        """First time >= ``ready`` with an idle gap of ``duration`` (µs) on this device."""
        starts, ends = self.starts, self.ends
        k = bisect_right(ends, ready)  # intervals ending after `ready` start at k
        t = ready
        while k < len(starts):
            if starts[k] - t >= duration:
                return t
            t = max(t, ends[k])
            k += 1
        return t

    def insert(self, start: float, end: float) -> None:
        """Record ``[start, end)`` as busy."""
        k = bisect_right(self.starts, start)
        self.starts.insert(k, start)
        self.ends.insert(k, end)


def adjusting_placement(graph: Graph, cluster: Cluster, order: np.ndarray | None = None,
                        node_memory: np.ndarray | None = None) -> np.ndarray:
    """Adjusting Placement (paper, Algorithm 2): stay on the previous node's device unless another
    device starts the node earlier by more than ``back_cost``, the largest transfer (µs) of the
    node's outputs back. Returns the device index of every node of ``graph``.

    EST per device is insertion based: the node may fill an idle gap after its inputs arrive
    (inputs from another device arrive ``k·bytes + b`` µs after their producer finishes).
    A device without room for the node has EST = ∞; when no device has room, the node goes to
    the device with the most free memory (best effort).
    """
    n = graph.num_nodes
    comm = edge_comm_us(graph, cluster).tolist()
    if order is None:
        comm_arr = np.asarray(comm)
        order = cpd_topo_order(graph, comm_arr, cpath=cpath(graph, comm_arr))
    mem = (graph.memory_bytes if node_memory is None else node_memory).tolist()
    time_us = graph.time_us.tolist()
    speed = cluster.speed.tolist()
    num_dev = cluster.num_devices
    free = cluster.memory_bytes.astype(np.float64).tolist()
    pred_ptr, pred_idx, pred_edge = (a.tolist() for a in (graph.pred_ptr, graph.pred_idx, graph.pred_edge))
    succ_ptr, succ_edge = graph.succ_ptr.tolist(), graph.succ_edge.tolist()
    timelines = [_DeviceTimeline() for _ in range(num_dev)]
    finish = [0.0] * n
    device = [0] * n
    previous = 0
    inf = float("inf")
    for v in order.tolist():
        back_cost = max((comm[succ_edge[k]] for k in range(succ_ptr[v], succ_ptr[v + 1])), default=0.0)
        preds = range(pred_ptr[v], pred_ptr[v + 1])
        est = [inf] * num_dev
        for d in range(num_dev):
            if free[d] < mem[v]:
                continue
            ready = 0.0
            for k in preds:
                p = pred_idx[k]
                arrive = finish[p] if device[p] == d else finish[p] + comm[pred_edge[k]]
                if arrive > ready:
                    ready = arrive
            est[d] = timelines[d].earliest_start(ready, time_us[v] / speed[d])
        best = min(range(num_dev), key=est.__getitem__)
        if est[previous] - est[best] > back_cost:
            chosen = best
        elif est[previous] < inf:
            chosen = previous
        else:  # every device is full: best effort on the one with the most free memory
            chosen = max(range(num_dev), key=free.__getitem__)
            ready = max((finish[pred_idx[k]] + (0.0 if device[pred_idx[k]] == chosen
                                                else comm[pred_edge[k]]) for k in preds), default=0.0)
            est[chosen] = timelines[chosen].earliest_start(ready, time_us[v] / speed[chosen])
        start = est[chosen]
        end = start + time_us[v] / speed[chosen]
        timelines[chosen].insert(start, end)
        finish[v] = end
        device[v] = chosen
        free[chosen] -= mem[v]
        previous = chosen
    return np.asarray(device, dtype=np.int64)


def communication_refinement(graph: Graph, fusion: Fusion, cluster: Cluster, order: np.ndarray,
                             adjusted: np.ndarray) -> tuple[np.ndarray, str]:
    """Improve on Adjusting Placement by two-level min-cut partitioning; keep whatever the
    simulator finds fastest (placements that fit memory first). Returns fine devices and a name.

    The fused coarse graph is the coarse level. For every device count from the fewest whose
    memory holds the graph up to all devices (the largest ones), contiguous capacity-proportional
    runs of the coarse CPD-TOPO ``order`` and of the spectral order are refined by
    Fiduccia–Mattheyses passes on the transfer time (µs) of cut edges; the coarse simulation
    picks the better seed per device count (at the device count that wins on the ops, the other
    seeds are replayed on the ops too, since the coarse replay only approximates it). These
    candidates and Adjusting Placement's own placement ``adjusted`` (coarse devices) are replayed
    on the op graph (co-location applied), and the fastest is refined
    there, where co-location groups move as one unit and each tensor is a net whose cost is one
    transfer per extra device (:func:`~celeritas_core.partition.connectivity_refine`). The result
    is the fastest replay of all: ``adjusting``, ``min-cut/SEED/DEVICES`` or ``NAME+refined``.
    """
    from celeritas_core.partition import (
        connectivity_refine,
        fm_refine,
        parts_needed,
        spectral_order,
        split_order,
        tensor_nets,
        undirected_weights,
    )
    from celeritas_core.simulator import simulate

    coarse = fusion.coarse
    capacity = cluster.memory_bytes.astype(np.float64)
    num_dev = cluster.num_devices

    def to_fine(coarse_devices: np.ndarray) -> np.ndarray:
        return apply_colocation(coarse_devices[fusion.cluster_of], fusion.anchor)

    def score(fine: np.ndarray) -> tuple[bool, float]:
        used = np.bincount(fine, weights=graph.memory_bytes, minlength=num_dev)
        return bool(np.any(used > capacity)), simulate(graph, cluster, fine).step_time_us

    candidates = [("adjusting", to_fine(adjusted))]
    if coarse.num_nodes >= 2 and num_dev >= 2:
        # op level: co-location groups contracted to their anchor, tensors as nets
        units, unit_of = np.unique(fusion.anchor, return_inverse=True)
        nets, net_cost = tensor_nets(graph, edge_comm_us(graph, cluster), unit_of, len(units))
        unit_mem = np.bincount(unit_of, weights=graph.memory_bytes, minlength=len(units))

        def refine_fine(fine: np.ndarray) -> np.ndarray:
            return connectivity_refine(nets, net_cost, unit_mem, capacity, fine[units])[unit_of]

        memory = coarse.memory_bytes
        weights = undirected_weights(coarse, edge_comm_us(coarse, cluster))
        seeds = [("cpd", order)]
        spectral = spectral_order(weights, order)
        if spectral is not None:
            seeds.append(("spectral", spectral))
        by_capacity = np.argsort(-capacity, kind="stable")
        runners_up: dict[str, list[tuple[str, np.ndarray]]] = {}
        for k in range(parts_needed(memory, capacity), num_dev + 1):
            use = np.sort(by_capacity[:k])
            finalists = []
            for seed_name, seed in seeds:
                parts = fm_refine(weights, memory, capacity[use], split_order(seed, memory, capacity[use]))
                devices = use[parts]
                used = np.bincount(devices, weights=memory, minlength=num_dev)
                step = simulate(coarse, cluster, devices).step_time_us
                coarse_score = (bool(np.any(used > capacity)), step)
                finalists.append((coarse_score, f"min-cut/{seed_name}/{k}", devices))
            finalists.sort(key=lambda f: f[0])
            candidates.append((finalists[0][1], to_fine(finalists[0][2])))
            runners_up[finalists[0][1]] = [(name, devices) for _, name, devices in finalists[1:]]
        scored = [(score(fine), i) for i, (_, fine) in enumerate(candidates)]
        # the coarse replay only approximates the op-level one: at the winning device count, replay
        # the other seeds' partitions on the ops too
        for name, devices in runners_up.get(candidates[min(scored)[1]][0], []):
            candidates.append((name, to_fine(devices)))
            scored.append((score(candidates[-1][1]), len(candidates) - 1))
        scored.sort()
        name, fine = candidates[scored[0][1]]  # refine the fastest candidate on the op graph
        candidates.append((name + "+refined", refine_fine(fine)))
        scored.append((score(candidates[-1][1]), len(candidates) - 1))
    else:
        scored = [(score(candidates[0][1]), 0)]
    _, winner = min(scored)
    return candidates[winner][1], candidates[winner][0]


def _fused(graph: Graph, cluster: Cluster, params: Mapping[str, Any], *, adjust: bool) -> PlacerOutput:
    fusion = optimal_operation_fusion(
        graph, cluster, R=int(params["R"]), memory_fraction=float(params["memory_fraction"])
    )
    coarse = fusion.coarse
    comm = edge_comm_us(coarse, cluster)
    coarse_order = cpd_topo_order(coarse, comm, cpath=cpath(coarse, comm))
    extra: dict[str, Any] = {}
    if adjust:
        coarse_device = adjusting_placement(coarse, cluster, coarse_order)
        if int(params.get("refine", 0)):
            assignment, extra["chosen"] = communication_refinement(
                graph, fusion, cluster, coarse_order, coarse_device)
        else:
            assignment = apply_colocation(coarse_device[fusion.cluster_of], fusion.anchor)
    else:
        coarse_device = order_place(coarse, cluster, coarse_order)
        assignment = apply_colocation(coarse_device[fusion.cluster_of], fusion.anchor)
    return PlacerOutput(
        assignment=assignment,
        coarse_nodes=fusion.num_clusters,
        extra={"coarse_edges": coarse.num_edges, "cut_cost_us": fusion.cut_cost_us, **extra},
    )


def celeritas_placer(graph: Graph, cluster: Cluster, params: Mapping[str, Any]) -> PlacerOutput:
    """Celeritas: Optimal Operation Fusion, Adjusting Placement, then (``refine=1``) the
    communication refinement of :func:`communication_refinement`."""
    return _fused(graph, cluster, params, adjust=True)


def order_place_placer(graph: Graph, cluster: Cluster, params: Mapping[str, Any]) -> PlacerOutput:
    """Order-Place: Optimal Operation Fusion, then fill devices in CPD-TOPO order."""
    return _fused(graph, cluster, params, adjust=False)


FUSION_PARAMS = (
    ParamSpec("R", DEFAULT_R, "exploration range: at most R ops per fused cluster", int, minimum=1),
    ParamSpec("memory_fraction", DEFAULT_MEMORY_FRACTION,
              "per-cluster memory cap M as a fraction of the smallest device memory",
              float, minimum=0.0, maximum=1.0, exclusive_minimum=True),
)

REFINE_PARAM = ParamSpec(
    "refine", 1,
    "1: also try memory-capped min-cut partitions of the coarse graph and keep the placement the "
    "simulator finds fastest; 0: the paper's Adjusting Placement alone",
    int, minimum=0, maximum=1,
)

register_placer(PlacerSpec(
    "celeritas", celeritas_placer,
    "Optimal Operation Fusion over CPD-TOPO, Adjusting Placement, then communication refinement",
    (*FUSION_PARAMS, REFINE_PARAM),
))
register_placer(PlacerSpec(
    "order-place", order_place_placer,
    "Optimal Operation Fusion, then fill devices one after another in CPD-TOPO order",
    FUSION_PARAMS,
))
