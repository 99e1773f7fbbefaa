"""The fusion-based placers: Order-Place and Celeritas's Adjusting Placement (paper, Algorithm 2).

Both fuse the graph first (:func:`celeritas_core.fusion.optimal_operation_fusion`), place the
coarse graph in its CPD-TOPO order, map clusters back to ops and move co-location group members
to their anchor's device.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from celeritas_core.cluster import Cluster
from celeritas_core.fusion import DEFAULT_MEMORY_FRACTION, DEFAULT_R, Fusion, optimal_operation_fusion
from celeritas_core.graph import Graph
from celeritas_core.levels import cpath, edge_comm_us
from celeritas_core.local_search import CandidatePool, critical_path_search, peak_memory_repair
from celeritas_core.orders import cpd_topo_order
from celeritas_core.placers.base import PlacerOutput, PlacerSpec, param, register_placer
from celeritas_core.timeline import DeviceTimeline


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
    timelines = [DeviceTimeline() for _ in range(num_dev)]
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
                             pool: CandidatePool, op_nets: OpNets | None = None) -> None:
    """Offer ``pool`` two-level min-cut partitions that keep heavy tensors on one device.

    The fused coarse graph is the coarse level. For every device count from the fewest whose
    memory holds the graph up to all devices (the largest ones), contiguous capacity-proportional
    runs of the coarse CPD-TOPO ``order`` and of the spectral order are refined by
    Fiduccia–Mattheyses passes on the transfer time (µs) of cut edges; the coarse simulation
    picks the better seed per device count (at the device count that wins on the ops, the other
    seeds are replayed on the ops too, since the coarse replay only approximates it). The fastest
    candidate in ``pool`` so far (Adjusting Placement's among them) is then refined on the op
    graph, where co-location groups move as one unit and each tensor is a net whose cost is one
    transfer per extra device (:func:`~celeritas_core.partition.connectivity_refine`; ``op_nets``
    as :func:`refine_best_on_ops` takes them). Offers ``min-cut/SEED/DEVICES`` and ``NAME+refined``.
    """
    if fusion.coarse.num_nodes < 2 or cluster.num_devices < 2:
        return
    runners_up = _min_cut_candidates(fusion, cluster, order, pool)
    winner = pool.best
    for name, fine in runners_up.get(winner.name, []):
        pool.add(name, fine)
    refine_best_on_ops(graph, fusion.anchor, cluster, pool, op_nets)


@dataclass(frozen=True, eq=False)
class OpNets:
    """The ops as the op-level refinement sees them: ``units`` (co-location groups contracted to
    their anchor; ``unit_of`` per op), every tensor a net over units costing its transfer time
    (µs, ``net_cost``) and each unit's memory (bytes). Built once per placement."""

    units: np.ndarray
    unit_of: np.ndarray
    nets: sp.csr_matrix
    net_cost: np.ndarray
    unit_mem: np.ndarray

    @classmethod
    def build(cls, graph: Graph, anchor: np.ndarray, cluster: Cluster) -> OpNets:
        """The nets of ``graph`` with co-location ``anchor`` and ``cluster``'s transfer model."""
        from celeritas_core.partition import tensor_nets

        units, unit_of = np.unique(anchor, return_inverse=True)
        nets, net_cost = tensor_nets(graph, edge_comm_us(graph, cluster), unit_of, len(units))
        unit_mem = np.bincount(unit_of, weights=graph.memory_bytes, minlength=len(units))
        return cls(units, unit_of, nets, net_cost, unit_mem)


def refine_best_on_ops(graph: Graph, anchor: np.ndarray, cluster: Cluster, pool: CandidatePool,
                       op_nets: OpNets | None = None) -> None:
    """Offer ``pool.best`` improved by :func:`~celeritas_core.partition.connectivity_refine` on the
    ops (co-location groups contracted to their ``anchor``, tensors as nets: ``op_nets``, built
    here when not given), unless it already is."""
    from celeritas_core.partition import connectivity_refine

    winner = pool.best
    if cluster.num_devices < 2 or winner.name.endswith("+refined"):
        return
    ops = OpNets.build(graph, anchor, cluster) if op_nets is None else op_nets
    capacity = cluster.memory_bytes.astype(np.float64)
    refined = connectivity_refine(ops.nets, ops.net_cost, ops.unit_mem, capacity,
                                  winner.assignment[ops.units])
    pool.add(winner.name + "+refined", refined[ops.unit_of])


#: Estimated cost of the optional stages, in µs per op plus edge of the graph, measured on the
#: 2-core build machine (one core, a 36k-op training step; HEFT grows faster than linearly, so its
#: figure is the one at that size). A stage starts only if its estimate fits in the time left.
STAGE_US_PER_ITEM: dict[str, float] = {
    "multilevel": 1.0, "heft": 46.0, "etf/fused": 3.5, "sct/fused": 9.5, "etf": 5.0,
}


def stage_fits(graph: Graph, stage: str, deadline: float) -> bool:
    """Whether the optional ``stage``'s estimated cost (:data:`STAGE_US_PER_ITEM`) ends before the
    wall-clock ``deadline`` (``time.perf_counter()`` seconds)."""
    estimate = STAGE_US_PER_ITEM[stage] * 1e-6 * (graph.num_nodes + graph.num_edges)
    return time.perf_counter() + estimate <= deadline


def multilevel_candidates(graph: Graph, cluster: Cluster, pool: CandidatePool, deadline: float) -> None:
    """Offer a multilevel (METIS, through pymetis) memory-repaired partition of the op graph onto
    the largest ``k`` devices, for every ``k`` from the fewest that hold the graph to all.

    The coarse min-cut candidates cut only between fusion clusters; a multilevel partition of the
    ops finds cuts inside them (recurrent and attention graphs). The first (fewest devices) and
    the one onto all devices (what the ``metis`` placer returns) always run; the others only
    while the wall-clock ``deadline`` (s) leaves room for one (:func:`stage_fits`). Skipped
    without pymetis.
    """
    from celeritas_core.partition import parts_needed
    from celeritas_core.placers.metis import metis_partition, repair_memory, unit_graph

    try:
        import pymetis  # noqa: F401
    except ImportError:
        return
    if cluster.num_devices < 2:
        return
    units = unit_graph(graph)
    capacity = cluster.memory_bytes.astype(np.float64)
    by_capacity = np.argsort(-capacity, kind="stable")
    first = max(2, parts_needed(units.memory_bytes, capacity))
    for k in range(first, cluster.num_devices + 1):
        if first < k < cluster.num_devices and not stage_fits(graph, "multilevel", deadline):
            continue
        device = metis_partition(units, cluster, np.sort(by_capacity[:k]))
        repair_memory(units, device, capacity)
        pool.add(f"multilevel/{k}", device[units.unit_of])


def _min_cut_candidates(fusion: Fusion, cluster: Cluster, order: np.ndarray,
                        pool: CandidatePool) -> dict[str, list[tuple[str, np.ndarray]]]:
    """Offer the best coarse min-cut partition per device count; return the other seeds' ones."""
    from celeritas_core.partition import (
        fm_refine,
        parts_needed,
        spectral_order,
        split_order,
        undirected_weights,
    )
    from celeritas_core.simulator import simulate

    coarse = fusion.coarse
    capacity = cluster.memory_bytes.astype(np.float64)
    memory = coarse.memory_bytes
    weights = undirected_weights(coarse, edge_comm_us(coarse, cluster))
    seeds = [("cpd", order)]
    spectral = spectral_order(weights, order)
    if spectral is not None:
        seeds.append(("spectral", spectral))
    by_capacity = np.argsort(-capacity, kind="stable")
    runners_up: dict[str, list[tuple[str, np.ndarray]]] = {}
    for k in range(parts_needed(memory, capacity), cluster.num_devices + 1):
        use = np.sort(by_capacity[:k])
        finalists = []
        for seed_name, seed in seeds:
            parts = fm_refine(weights, memory, capacity[use], split_order(seed, memory, capacity[use]))
            devices = use[parts]
            used = np.bincount(devices, weights=memory, minlength=cluster.num_devices)
            step = simulate(coarse, cluster, devices).step_time_us
            finalists.append(((bool(np.any(used > capacity)), step), f"min-cut/{seed_name}/{k}", devices))
        finalists.sort(key=lambda f: f[0])
        pool.add(finalists[0][1], fusion.to_fine(finalists[0][2]))
        runners_up[finalists[0][1]] = [(name, fusion.to_fine(devices)) for _, name, devices in finalists[1:]]
    return runners_up


def single_device_candidate(graph: Graph, cluster: Cluster, pool: CandidatePool) -> None:
    """Offer every op on the fastest device whose memory holds the whole graph (if any).

    On one device there is never idle time, so the step is ``Σ time_us / speed`` exactly (µs).
    """
    fits = np.flatnonzero(cluster.memory_bytes >= graph.total_memory_bytes)
    if len(fits) == 0:
        return
    device = int(fits[np.argmax(cluster.speed[fits])])
    pool.add(f"single/{device}", np.full(graph.num_nodes, device, dtype=np.int64),
             step_time_us=graph.total_time_us / float(cluster.speed[device]))


def list_schedule_candidates(graph: Graph, cluster: Cluster, pool: CandidatePool, deadline: float) -> None:
    """Offer list schedules that use parallel work: the ``heft`` placer on the ops, the ``m-etf``
    and ``m-sct`` placers on Baechi's fused co-placement graph (their defaults) and ``m-etf`` on the
    ops, each with its default parameters.

    Each runs only while the wall-clock ``deadline`` (s) leaves room for its estimated cost
    (:func:`stage_fits`), so large graphs skip them.
    """
    from celeritas_core.placers.base import get_placer

    schedules = (("heft", "heft", {}), ("etf/fused", "m-etf", {}), ("sct/fused", "m-sct", {}),
                 ("etf", "m-etf", {"fusion": False}))
    for name, placer, params in schedules:
        if stage_fits(graph, name, deadline):
            spec = get_placer(placer)
            pool.add(name, spec.func(graph, cluster, spec.typed_params(params)).assignment)


def memory_repair(graph: Graph, cluster: Cluster, pool: CandidatePool, deadline: float,
                  budget: int) -> dict[str, Any]:
    """Offer ``pool`` its candidates that do not fit, best first, repaired by
    :func:`peak_memory_repair` (moves off devices whose replayed peak exceeds their capacity),
    until one fits or the ``budget`` (replayed ops, shared) or the wall-clock ``deadline``
    (perf_counter, s) runs out. Returns the pool best's total excess (bytes, against ``cluster``,
    i.e. the planning capacity) before and after, the moves kept, the starts repaired, the trial
    replays and why the last repair stopped.
    """
    before = pool.best.excess_bytes
    report: dict[str, Any] = {"moves": 0, "starts": 0, "replays": 0, "stopped": "fits"}
    starts = {c.assignment.tobytes(): c for c in sorted(pool.candidates, key=lambda c: c.key)}
    for start in starts.values():
        stats: dict[str, Any] = {}
        left = budget - report["replays"] * graph.num_nodes
        repaired = peak_memory_repair(graph, cluster, start, deadline=deadline, budget=left,
                                      replay_seconds=pool.replay_seconds, stats=stats)
        if repaired is not start:
            pool.add_candidate(repaired)
        report.update(moves=report["moves"] + stats["moves"], starts=report["starts"] + 1,
                      replays=report["replays"] + stats["replays"], stopped=stats["stopped"])
        if repaired.fits or stats["stopped"] in ("budget", "deadline"):
            break
    return {"excess_before_bytes": before, "excess_after_bytes": pool.best.excess_bytes, **report}


@dataclass(frozen=True)
class FusionParams:
    """Order-Place's parameters: those of Optimal Operation Fusion."""

    R: int = param(DEFAULT_R, "exploration range: at most R ops per fused cluster", minimum=1,
                   maximum=2**31 - 1)
    memory_fraction: float = param(
        DEFAULT_MEMORY_FRACTION, "per-cluster memory cap M as a fraction of the smallest device memory",
        minimum=0.0, maximum=1.0, exclusive_minimum=True)


@dataclass(frozen=True)
class CeleritasParams(FusionParams):
    """The celeritas placer's parameters: fusion's, and the candidates and search beyond the paper."""

    refine: bool = param(
        True, "true: also try min-cut and multilevel partitions, list schedules and one device, keep "
        "the fastest replay and improve it by a critical-path search; false: the paper's Adjusting "
        "Placement alone")
    search_seconds: float = param(
        1.0, "refine: wall-clock budget (s) of the whole placer after which the optional stages "
        "(multilevel partitions, list schedules, critical-path search) stop; fusion, Adjusting "
        "Placement, min-cut and its op-level refinement always run", minimum=0.0, maximum=3600.0)
    search_budget: int = param(
        300_000, "refine: work budget of the critical-path search in replayed ops (at most "
        "ceil(budget / ops) replays), so results do not depend on machine speed; the peak-memory "
        "repair, which runs first when the best candidate's replayed peak exceeds a device, has a "
        "budget of its own of the same size", minimum=0, maximum=10**12)


def _fused(graph: Graph, cluster: Cluster, params: FusionParams) -> tuple[Fusion, np.ndarray, dict[str, Any]]:
    """Optimal Operation Fusion of ``graph``, the CPD-TOPO order of its coarse graph, and the
    fusion's figures for ``extra``."""
    fusion = optimal_operation_fusion(graph, cluster, R=params.R, memory_fraction=params.memory_fraction)
    coarse = fusion.coarse
    comm = edge_comm_us(coarse, cluster)
    coarse_order = cpd_topo_order(coarse, comm, cpath=cpath(coarse, comm))
    return fusion, coarse_order, {"coarse_edges": coarse.num_edges, "cut_cost_us": fusion.cut_cost_us}


def _refined(graph: Graph, cluster: Cluster, fusion: Fusion, coarse_order: np.ndarray,
             params: CeleritasParams, started: float, extra: dict[str, Any]) -> np.ndarray:
    """The fastest replay among Adjusting Placement and the other candidates, repaired when none
    fits and improved by the critical-path search, within the placer's time and work budgets."""
    pool = CandidatePool(graph, cluster)
    pool.add("adjusting", fusion.to_fine(adjusting_placement(fusion.coarse, cluster, coarse_order)))
    op_nets = OpNets.build(graph, fusion.anchor, cluster) if cluster.num_devices > 1 else None
    communication_refinement(graph, fusion, cluster, coarse_order, pool, op_nets)
    single_device_candidate(graph, cluster, pool)
    deadline = started + params.search_seconds
    multilevel_candidates(graph, cluster, pool, deadline)
    list_schedule_candidates(graph, cluster, pool, deadline)
    refine_best_on_ops(graph, fusion.anchor, cluster, pool, op_nets)
    budget = params.search_budget
    if graph.liveness is not None and not pool.best.fits:
        extra["memory_repair"] = memory_repair(graph, cluster, pool, deadline, budget)
    best = critical_path_search(graph, cluster, pool.best, deadline=deadline,
                                replay_seconds=pool.replay_seconds,
                                max_replays=-(-budget // graph.num_nodes), start_replay=pool.best_replay())
    extra.update(chosen=best.name, candidates=pool.summary())
    return best.assignment


def celeritas_placer(graph: Graph, cluster: Cluster, params: CeleritasParams) -> PlacerOutput:
    """Celeritas: Optimal Operation Fusion and Adjusting Placement (``refine`` false: the paper), or
    (``refine``) the fastest replay among Adjusting Placement, min-cut partitions, list
    schedules and one device (repaired by moves when, on a graph with liveness fields, none fits
    by its replayed peak), improved by the simulator-guided critical-path search."""
    started = time.perf_counter()
    fusion, coarse_order, extra = _fused(graph, cluster, params)
    if params.refine:
        assignment = _refined(graph, cluster, fusion, coarse_order, params, started, extra)
    else:
        assignment = fusion.to_fine(adjusting_placement(fusion.coarse, cluster, coarse_order))
    return PlacerOutput(assignment=assignment, coarse_nodes=fusion.num_clusters, extra=extra)


def order_place_placer(graph: Graph, cluster: Cluster, params: FusionParams) -> PlacerOutput:
    """Order-Place: Optimal Operation Fusion, then fill devices in CPD-TOPO order."""
    fusion, coarse_order, extra = _fused(graph, cluster, params)
    return PlacerOutput(assignment=fusion.to_fine(order_place(fusion.coarse, cluster, coarse_order)),
                        coarse_nodes=fusion.num_clusters, extra=extra)


register_placer(PlacerSpec(
    "celeritas", celeritas_placer,
    "Optimal Operation Fusion over CPD-TOPO and Adjusting Placement, then the fastest of min-cut, "
    "multilevel, list-schedule and one-device candidates, improved by a critical-path search",
    CeleritasParams,
))
register_placer(PlacerSpec(
    "order-place", order_place_placer,
    "Optimal Operation Fusion, then fill devices one after another in CPD-TOPO order",
    FusionParams,
))
