"""The fusion-based placers: Order-Place and Celeritas's Adjusting Placement (paper, Algorithm 2),
and the default ``celeritas`` placer built on them.

Both fuse the graph first (:func:`celeritas_core.placers.fusion.optimal_operation_fusion`), place the
coarse graph in its CPD-TOPO order, map clusters back to ops and move co-location group members
to their anchor's device; on graphs with liveness fields their capacity checks are liveness-aware
(:class:`~celeritas_core.simulation.live_estimate.GroupRoom`). The ``celeritas`` placer (``refine``) adds the
candidates, repair and robust search of docs/algorithms.md, "Parallel work, pipeline stages,
repair and a robust search", under work budgets (:class:`~celeritas_core.placers.budget.StageBudget`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import scipy.sparse as sp

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import cpath, edge_comm_us, planning_comm_us
from celeritas_core.graphs.orders import cpd_topo_order
from celeritas_core.placers.base import PlacerOutput, PlacerSpec, get_placer, param, register_placer
from celeritas_core.placers.budget import StageBudget
from celeritas_core.placers.fusion import DEFAULT_MEMORY_FRACTION, DEFAULT_R, Fusion, optimal_operation_fusion
from celeritas_core.placers.local_search import (
    ROBUST_DISPATCH,
    Candidate,
    CandidatePool,
    critical_path_search,
    peak_memory_repair,
    robust_step_us,
)
from celeritas_core.placers.metis import hierarchical_partition, metis_partition, repair_memory, unit_graph
from celeritas_core.placers.partition import (
    connectivity_refine,
    fm_refine,
    map_to_topology,
    parts_needed,
    spectral_order,
    split_order,
    tensor_nets,
    undirected_weights,
)
from celeritas_core.placers.stages import STAGE_US_PER_SPLIT, StagePlan, stage_candidates, stage_devices
from celeritas_core.simulation.live_estimate import GroupRoom
from celeritas_core.simulation.memory import peak_lower_bound
from celeritas_core.simulation.simulator import SimulationResult, simulate
from celeritas_core.simulation.timeline import DeviceTimeline


def order_place(graph: Graph, cluster: Cluster, order: np.ndarray,
                node_memory: np.ndarray | None = None, room: GroupRoom | None = None) -> np.ndarray:
    """Order-Place: walk ``order``, fill a device up to its memory, then move to the next one.

    When no later device has room, the node goes to the device with the most room (best effort;
    the placement is then flagged OOM by evaluation). ``room`` checks capacity (default: the sum of
    ``node_memory``, else the graph's memory, per device). Returns device per node.
    """
    if room is None:
        room = GroupRoom(cluster, graph.memory_bytes if node_memory is None else node_memory)
    device = np.zeros(graph.num_nodes, dtype=np.int64)
    current = 0
    last = cluster.num_devices - 1
    for v in order.tolist():
        while current < last and not room.fits(v, current):
            current += 1
        d = current if room.fits(v, current) else room.roomiest(v)
        device[v] = d
        room.add(v, d)
    return device


def adjusting_placement(graph: Graph, cluster: Cluster, order: np.ndarray | None = None,
                        node_memory: np.ndarray | None = None, room: GroupRoom | None = None) -> np.ndarray:
    """Adjusting Placement (paper, Algorithm 2): stay on the previous node's device unless another
    device starts the node earlier by more than ``back_cost``, the largest transfer (µs) of the
    node's outputs back. Returns the device index of every node of ``graph``.

    EST per device is insertion based: the node may fill an idle gap after its inputs arrive
    (inputs from another device arrive ``k·bytes + b`` µs after their producer finishes; with a
    link topology, ``k`` and ``b`` of the link between the two devices, and ``back_cost`` is timed
    on the link from the earliest device back to the previous one). A device without room for the
    node (``room``, default the sum of ``node_memory`` or the graph's memory per device) has
    EST = ∞; when no device has room, the node goes to the device with the most room (best effort).
    """
    n = graph.num_nodes
    comm = edge_comm_us(graph, cluster).tolist()
    if order is None:
        comm_arr = planning_comm_us(graph, cluster)
        order = cpd_topo_order(graph, comm_arr, cpath=cpath(graph, comm_arr))
    if room is None:
        room = GroupRoom(cluster, graph.memory_bytes if node_memory is None else node_memory)
    link = _PairLinks(graph, cluster)
    time_us = graph.time_us.tolist()
    speed = cluster.speed.tolist()
    num_dev = cluster.num_devices
    pred_ptr, pred_idx, pred_edge = (a.tolist() for a in (graph.pred_ptr, graph.pred_idx, graph.pred_edge))
    succ_ptr, succ_edge = graph.succ_ptr.tolist(), graph.succ_edge.tolist()
    timelines = [DeviceTimeline() for _ in range(num_dev)]
    finish = [0.0] * n
    device = [0] * n
    previous = 0
    inf = float("inf")
    for v in order.tolist():
        outputs = range(succ_ptr[v], succ_ptr[v + 1])
        preds = range(pred_ptr[v], pred_ptr[v + 1])
        est = [inf] * num_dev
        for d in range(num_dev):
            if not room.fits(v, d):
                continue
            ready = 0.0
            for k in preds:
                p = pred_idx[k]
                if device[p] == d:
                    arrive = finish[p]
                elif link.flat:
                    arrive = finish[p] + comm[pred_edge[k]]
                else:
                    arrive = finish[p] + link.time(pred_edge[k], device[p], d)
                if arrive > ready:
                    ready = arrive
            est[d] = timelines[d].earliest_start(ready, time_us[v] / speed[d])
        best = min(range(num_dev), key=est.__getitem__)
        if link.flat:
            back_cost = max((comm[succ_edge[k]] for k in outputs), default=0.0)
        else:
            back_cost = max((link.time(succ_edge[k], best, previous) for k in outputs), default=0.0)
        if est[previous] - est[best] > back_cost:
            chosen = best
        elif est[previous] < inf:
            chosen = previous
        else:  # every device is full: best effort on the one with the most room
            chosen = room.roomiest(v)
            ready = 0.0
            for k in preds:
                p = pred_idx[k]
                delay = 0.0 if device[p] == chosen else (
                    comm[pred_edge[k]] if link.flat else link.time(pred_edge[k], device[p], chosen))
                ready = max(ready, finish[p] + delay)
            est[chosen] = timelines[chosen].earliest_start(ready, time_us[v] / speed[chosen])
        start = est[chosen]
        end = start + time_us[v] / speed[chosen]
        timelines[chosen].insert(start, end)
        finish[v] = end
        device[v] = chosen
        room.add(v, chosen)
        previous = chosen
    return np.asarray(device, dtype=np.int64)


class _PairLinks:
    """Per-edge transfer times between two given devices (µs) on a cluster with a topology:
    ``k[src, dst]·bytes + b[src, dst]``, as the simulator times them; ``flat`` when the cluster
    has none (the callers then keep the flat model's per-edge times)."""

    __slots__ = ("edge_bytes", "flat", "intercept", "slope")

    def __init__(self, graph: Graph, cluster: Cluster) -> None:
        self.flat = cluster.is_flat
        self.edge_bytes = graph.edge_bytes.tolist()
        self.slope = cluster.pair_slope_us_per_byte.tolist()
        self.intercept = cluster.pair_intercept_us.tolist()

    def time(self, edge: int, src: int, dst: int) -> float:
        """Transfer time (µs) of ``edge`` from device ``src`` to device ``dst`` (0 when equal)."""
        return self.slope[src][dst] * self.edge_bytes[edge] + self.intercept[src][dst]


def fusion_room(graph: Graph, cluster: Cluster, fusion: Fusion) -> GroupRoom:
    """What each device holds as fusion's clusters are placed on it: liveness-aware when ``graph``
    has liveness fields (each cluster with its co-location groups' ops), else the coarse graph's
    summed memory (:class:`~celeritas_core.simulation.live_estimate.GroupRoom`)."""
    return GroupRoom.for_groups(graph, cluster, fusion.cluster_of[fusion.anchor], fusion.num_clusters,
                                fusion.coarse.memory_bytes)


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
    transfer per extra device (:func:`~celeritas_core.placers.partition.connectivity_refine`; ``op_nets``
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
        units, unit_of = np.unique(anchor, return_inverse=True)
        nets, net_cost = tensor_nets(graph, edge_comm_us(graph, cluster), unit_of, len(units))
        unit_mem = np.bincount(unit_of, weights=graph.memory_bytes, minlength=len(units))
        return cls(units, unit_of, nets, net_cost, unit_mem)


def refine_best_on_ops(graph: Graph, anchor: np.ndarray, cluster: Cluster, pool: CandidatePool,
                       op_nets: OpNets | None = None) -> None:
    """Offer ``pool.best`` improved by :func:`~celeritas_core.placers.partition.connectivity_refine` on the
    ops (co-location groups contracted to their ``anchor``, tensors as nets: ``op_nets``, built
    here when not given), unless it already is."""
    winner = pool.best
    if cluster.num_devices < 2 or winner.name.endswith("+refined"):
        return
    ops = OpNets.build(graph, anchor, cluster) if op_nets is None else op_nets
    capacity = cluster.memory_bytes.astype(np.float64)
    refined = connectivity_refine(ops.nets, ops.net_cost, ops.unit_mem, capacity,
                                  winner.assignment[ops.units])
    pool.add(winner.name + "+refined", map_to_topology(graph, cluster, refined[ops.unit_of]))


def refine_along_links(graph: Graph, cluster: Cluster, pool: CandidatePool, ops: OpNets) -> None:
    """On a cluster of several nodes, offer ``pool.best`` refined along the link hierarchy
    (``NAME+links``): :func:`~celeritas_core.placers.partition.connectivity_refine` first with the
    nodes as parts and every tensor priced on the network link (:func:`_refine_nodes`), then inside
    each node among its devices, priced on the mean link between them. The slowest links are cut
    least first, as :func:`~celeritas_core.placers.metis.hierarchical_partition` does for
    partitions. Nothing on a flat cluster or a single node."""
    topology = cluster.topology
    winner = pool.best
    if topology is None or topology.num_nodes < 2 or winner.name.endswith("+links"):
        return
    _, net_bytes = tensor_nets(graph, graph.edge_bytes.astype(np.float64), ops.unit_of, len(ops.units))
    device = _refine_nodes(cluster, ops, net_bytes, winner.assignment[ops.units])
    capacity = cluster.memory_bytes.astype(np.float64)
    slope, intercept = cluster.pair_slope_us_per_byte, cluster.pair_intercept_us
    for n in range(topology.num_nodes):
        inside = np.flatnonzero(topology.node_of == n)
        members = np.flatnonzero(topology.node_of[device] == n)
        if len(inside) < 2 or len(members) < 2:
            continue
        pairs, off = np.ix_(inside, inside), ~np.eye(len(inside), dtype=bool)
        k, b = float(slope[pairs][off].mean()), float(intercept[pairs][off].mean())
        sub = ops.nets[:, members].tocsr()
        keep = np.diff(sub.indptr) > 1
        refined = connectivity_refine(sub[keep], k * net_bytes[keep] + b, ops.unit_mem[members],
                                      capacity[inside], np.searchsorted(inside, device[members]))
        device[members] = inside[refined]
    pool.add(winner.name + "+links", device[ops.unit_of])


def _refine_nodes(cluster: Cluster, ops: OpNets, net_bytes: np.ndarray, device: np.ndarray) -> np.ndarray:
    """Device per unit after :func:`~celeritas_core.placers.partition.connectivity_refine` with the
    nodes as parts (each net of ``ops`` priced on the network link for its ``net_bytes``; a node's
    memory the sum of its devices'): a unit that changes node goes to the device of its new node
    with the most room, and stays where it was when even that one has none (the summed memory is
    not a bin packing)."""
    topology = cluster.topology
    assert topology is not None
    capacity = cluster.memory_bytes.astype(np.float64)
    node_of = topology.node_of
    node_capacity = np.bincount(node_of, weights=capacity, minlength=topology.num_nodes)
    cost = topology.links[topology.network].time_us(net_bytes)
    node = connectivity_refine(ops.nets, cost, ops.unit_mem, node_capacity, node_of[device])
    device = device.copy()
    load = np.bincount(device, weights=ops.unit_mem, minlength=cluster.num_devices)
    for u in np.flatnonzero(node != node_of[device]).tolist():
        inside = np.flatnonzero(node_of == node[u])
        target = int(inside[np.argmax(capacity[inside] - load[inside])])
        if load[target] + ops.unit_mem[u] <= capacity[target]:
            load[device[u]] -= ops.unit_mem[u]
            load[target] += ops.unit_mem[u]
            device[u] = target
    return device


#: Estimated cost of the optional stages, in µs per op plus edge of the graph: the largest of one
#: core of the 2-core build machine on the real Keras training steps of ``bench/bench_real.py``
#: (4-25k ops) and the 36k-op transformer-shaped step (HEFT's insertion search is superlinear there:
#: 51, against about 2 on the real steps; SCT's LP grows with the graph: 13-82 on the ops). The
#: placer's work budget (``work_seconds``) admits a stage when its estimate fits in what is left
#: (:class:`~celeritas_core.placers.budget.StageBudget`): a property of the graph's size, never of the
#: machine's speed or load.
STAGE_US_PER_ITEM: dict[str, float] = {
    "multilevel": 1.7, "heft": 51.0, "etf/fused": 4.6, "sct/fused": 30.0, "etf": 10.3, "sct": 82.0,
    "stages": STAGE_US_PER_SPLIT, "order-place": 0.5, "m-topo": 0.5,
}


#: The same on a cluster with a link topology (the largest measured on the real Keras steps and the
#: 36k-op step on the presets ``2x4:nvlink,ib`` and ``2x8:nvlink,ib``): the list schedules time each
#: transfer on its pair's link and ports, ETF's device scan grows with the devices (16 there), and
#: every partition and stage split is mapped onto the topology
#: (:func:`~celeritas_core.placers.partition.map_to_topology`).
TOPOLOGY_STAGE_US_PER_ITEM: dict[str, float] = {
    "multilevel": 2.6, "heft": 51.0, "etf/fused": 9.7, "sct/fused": 32.4, "etf": 19.4, "sct": 101.0,
    "stages": 5.8, "order-place": 1.8, "m-topo": 0.9,
}
#: The devices :data:`TOPOLOGY_STAGE_US_PER_ITEM` was measured with; the list schedules' estimates
#: grow in proportion above it.
TOPOLOGY_MEASURED_DEVICES = 16
_LIST_SCHEDULES = ("heft", "etf/fused", "sct/fused", "etf", "sct")


#: Estimated cost of one replay (µs per op plus edge) on that machine, for stages that replay
#: (0.07 measured on the same graphs, 0.14-0.19 for the memory repair's replays with their memory
#: profiles; a replay's setup makes small graphs dearer per item).
REPLAY_US_PER_ITEM = 0.3


def stage_estimate_us(graph: Graph, stage: str, cluster: Cluster | None = None) -> float:
    """Estimated cost (nominal µs) of the optional ``stage`` on ``graph``: :data:`STAGE_US_PER_ITEM`,
    or :data:`TOPOLOGY_STAGE_US_PER_ITEM` on a ``cluster`` with a link topology."""
    items = graph.num_nodes + graph.num_edges
    if cluster is None or cluster.is_flat:
        return STAGE_US_PER_ITEM[stage] * items
    scale = max(1.0, cluster.num_devices / TOPOLOGY_MEASURED_DEVICES) if stage in _LIST_SCHEDULES else 1.0
    return TOPOLOGY_STAGE_US_PER_ITEM[stage] * items * scale


def multilevel_candidates(graph: Graph, cluster: Cluster,
                          pool: CandidatePool) -> list[tuple[str, Callable[[], None]]]:
    """Offer a multilevel (METIS, through pymetis) memory-repaired partition of the op graph onto
    the largest ``k`` devices, for every ``k`` from the fewest that hold the graph to all.

    The coarse min-cut candidates cut only between fusion clusters; a multilevel partition of the
    ops finds cuts inside them (recurrent and attention graphs). The first (fewest devices) and
    the one onto all devices (what the ``metis`` placer returns) run now; the others are returned
    as ``(name, run)`` for the caller's work budget. Nothing without pymetis.
    """
    try:
        # lazy: pymetis is optional: without it there are no multilevel candidates
        import pymetis  # noqa: F401
    except ImportError:
        return []
    if cluster.num_devices < 2:
        return []
    units = unit_graph(graph)
    capacity = cluster.memory_bytes.astype(np.float64)
    by_capacity = np.argsort(-capacity, kind="stable")

    def offer(k: int) -> None:
        device = metis_partition(units, cluster, np.sort(by_capacity[:k]))
        repair_memory(units, device, capacity)
        pool.add(f"multilevel/{k}", map_to_topology(graph, cluster, device[units.unit_of]))

    first = max(2, parts_needed(units.memory_bytes, capacity))
    for k in dict.fromkeys((min(first, cluster.num_devices), cluster.num_devices)):
        offer(k)
    def along_links(k: int) -> None:
        device = hierarchical_partition(units, cluster, stage_devices(cluster, k))
        repair_memory(units, device, capacity)
        pool.add(f"hierarchical/{k}", map_to_topology(graph, cluster, device[units.unit_of]))

    if cluster.is_flat:
        return [(f"multilevel/{k}", partial(offer, k)) for k in range(first + 1, cluster.num_devices)]
    for k in dict.fromkeys((min(first, cluster.num_devices), cluster.num_devices)):
        along_links(k)  # the cut along the link hierarchy: the slowest links cut least
    return [entry for k in range(first + 1, cluster.num_devices)
            for entry in ((f"multilevel/{k}", partial(offer, k)),
                          (f"hierarchical/{k}", partial(along_links, k)))]


def _min_cut_candidates(fusion: Fusion, cluster: Cluster, order: np.ndarray,
                        pool: CandidatePool) -> dict[str, list[tuple[str, np.ndarray]]]:
    """Offer the best coarse min-cut partition per device count; return the other seeds' ones."""
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
            devices = map_to_topology(coarse, cluster, use[parts])
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


def list_schedule_candidates(graph: Graph, cluster: Cluster,
                             pool: CandidatePool) -> list[tuple[str, Callable[[], None]]]:
    """List schedules that use parallel work, as ``(name, run)`` for the caller's work budget: the
    ``heft`` placer on the ops, the ``m-etf`` and ``m-sct`` placers on Baechi's fused co-placement
    graph (their defaults) and both on the ops, each with its default parameters."""
    def offer(name: str, placer: str, params: dict[str, Any]) -> None:
        spec = get_placer(placer)
        pool.add(name, spec.func(graph, cluster, spec.typed_params(params)).assignment)

    schedules = (("heft", "heft", {}), ("etf/fused", "m-etf", {}), ("sct/fused", "m-sct", {}),
                 ("etf", "m-etf", {"fusion": False}), ("sct", "m-sct", {"fusion": False}))
    return [(name, partial(offer, name, placer, params)) for name, placer, params in schedules]


#: The list schedules that :func:`headroom_candidates` runs again with memory kept free: each
#: plans with a memory model that cannot see everything the replay charges (HEFT the planning
#: bytes; m-ETF outputs and lifetimes but not received copies held until a far consumer, such as
#: the saved activations a weight gradient reads).
HEADROOM_SCHEDULES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("heft", "heft", {}), ("etf", "m-etf", {"fusion": False}))
#: The shares of each device's memory (:meth:`~celeritas_core.graphs.cluster.Cluster.with_headroom`)
#: that :func:`headroom_candidates` keeps free, tried in this order until a schedule fits by its
#: replayed peak: a fixed ladder of equal steps, not fitted to any graph.
HEADROOM_LADDER: tuple[float, ...] = (0.15, 0.3, 0.45, 0.6)
#: Suffix of the optional stages of :func:`headroom_candidates`.
HEADROOM_STAGE = "headroom"


def headroom_candidates(graph: Graph, cluster: Cluster,
                        pool: CandidatePool) -> list[tuple[str, Callable[[], None]]]:
    """The list schedules of :data:`HEADROOM_SCHEDULES` again on devices that keep a share of their
    memory free (:data:`HEADROOM_LADDER`, the first share whose schedule fits by its replayed peak
    wins), as ``(name, run)`` for the work budget: a list schedule overlaps independent branches
    at the price of received copies and long lifetimes its memory model does not see, so on a
    tight graph with liveness fields it overflows while the placements that fit are slower.
    Each runs only when :func:`headroom_worth` (its plain schedule overflows and replays faster than
    every candidate that fits)."""
    def run(name: str, placer: str, params: dict[str, Any]) -> None:
        spec = get_placer(placer)
        for share in HEADROOM_LADDER:
            roomy = cluster.with_headroom(share)
            assignment = spec.func(graph, roomy, spec.typed_params(params)).assignment
            if pool.add(f"{name}/{HEADROOM_STAGE}{round(share * 100)}", assignment).fits:
                return

    if graph.liveness is None or cluster.num_devices < 2:
        return []
    return [(f"{name}/{HEADROOM_STAGE}", partial(run, name, placer, params))
            for name, placer, params in HEADROOM_SCHEDULES]


def headroom_worth(pool: CandidatePool, stage: str) -> bool:
    """Whether the plain schedule of headroom ``stage`` (``NAME/headroom``) is in the pool, overflows,
    and replays faster than every candidate that fits."""
    plain = stage.rsplit("/", 1)[0]
    fastest_fitting = min((c.step_time_us for c in pool.candidates if c.fits), default=math.inf)
    return any(c.name == plain and not c.fits and c.step_time_us < fastest_fitting for c in pool.candidates)


def simple_candidates(graph: Graph, cluster: Cluster, fusion: Fusion, coarse_order: np.ndarray,
                      pool: CandidatePool) -> list[tuple[str, Callable[[], None]]]:
    """The cheap baselines a user would try first, as ``(name, run)`` for the caller's work budget:
    Order-Place on the fused graph and Baechi's ``m-topo`` (each linear in ops, plus a replay)."""
    def ordered() -> None:
        room = fusion_room(graph, cluster, fusion)
        pool.add("order-place", fusion.to_fine(order_place(fusion.coarse, cluster, coarse_order, room=room)))

    def topo() -> None:
        spec = get_placer("m-topo")
        pool.add("m-topo", spec.func(graph, cluster, spec.typed_params({})).assignment)

    return [("order-place", ordered), ("m-topo", topo)]


def memory_repair(graph: Graph, cluster: Cluster, pool: CandidatePool, budget: int,
                  unit_rank: np.ndarray | None = None) -> dict[str, Any]:
    """Offer ``pool`` its candidates that do not fit, repaired by :func:`peak_memory_repair`.

    Starts go least excess first (then the faster replay), each with at most a quarter of
    ``budget`` (replayed ops, shared); a start no faster than the best placement that fits so far
    is skipped (a repair rarely speeds a placement up), so every candidate that could still win is
    repaired, not only the best. ``unit_rank`` is the order along which the repair moves runs
    of units. Returns the pool best's total excess (bytes, against ``cluster``, i.e. the planning
    capacity) before and after, the moves kept, the starts repaired, the trial replays and why
    the last repair stopped. No clock is read: the same input gives the same repair.
    """
    before = pool.best.excess_bytes
    report: dict[str, Any] = {"moves": 0, "starts": 0, "replays": 0, "stopped": "fits"}
    starts = {c.assignment.tobytes(): c for c in sorted(pool.candidates, key=lambda c: c.key)}
    for start in starts.values():
        fitting = [c.step_time_us for c in pool.candidates if c.fits]
        left = budget - report["replays"] * graph.num_nodes
        if left < graph.num_nodes:
            break
        if start.fits or (fitting and start.step_time_us >= min(fitting)):
            continue
        stats: dict[str, Any] = {}
        repaired = peak_memory_repair(graph, cluster, start, budget=min(left, budget // 4),
                                      unit_rank=unit_rank, stats=stats)
        if repaired is not start:
            pool.add_candidate(repaired)
        report.update(moves=report["moves"] + stats["moves"], starts=report["starts"] + 1,
                      replays=report["replays"] + stats["replays"], stopped=stats["stopped"])
    return {"excess_before_bytes": before, "excess_after_bytes": pool.best.excess_bytes, **report}


@dataclass(frozen=True)
class FusionParams:
    """Order-Place's parameters: those of Optimal Operation Fusion.

    Parameters
    ----------
    R : int
        Exploration range: at most ``R`` ops per fused cluster (default 200).
    memory_fraction : float
        Per-cluster memory cap M as a fraction in (0, 1] of the smallest device's memory
        (default 0.25).

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("order-place").typed_params({"R": "50"})
    FusionParams(R=50, memory_fraction=0.25)
    """

    R: int = param(DEFAULT_R, "exploration range: at most R ops per fused cluster", minimum=1,
                   maximum=2**31 - 1)
    memory_fraction: float = param(
        DEFAULT_MEMORY_FRACTION, "per-cluster memory cap M as a fraction of the smallest device memory",
        minimum=0.0, maximum=1.0, exclusive_minimum=True)


@dataclass(frozen=True)
class CeleritasParams(FusionParams):
    """The celeritas placer's parameters: fusion's, and the candidates and search beyond the paper.

    Parameters
    ----------
    R, memory_fraction
        Optimal Operation Fusion's, as in :class:`FusionParams`.
    refine : bool
        True (default): also try min-cut and multilevel partitions, pipeline-stage splits, list
        schedules and one device, repair those that overflow a device, keep the fastest replay
        and improve it by a critical-path search; False: the paper's Adjusting Placement alone.
    work_seconds : float
        With ``refine``: work budget (nominal seconds) of the optional stages, each estimated
        from the graph's size, never read off a clock, so the same input gives the same
        placement on any machine (default 1.0).
    search_seconds : float
        With ``refine``: wall-clock safety net (s) past which the optional stages and the
        critical-path search stop early (default 60).
    search_budget : int
        With ``refine``: work budget of the critical-path search in replayed ops (default
        1,200,000).
    repair_budget : int
        With ``refine``: work budget in replayed ops of the peak-memory repair, which runs when
        no candidate fits by its replayed peak (default 4,000,000).

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> params = get_placer("celeritas").typed_params({"R": 100, "refine": "false"})
    >>> params.R, params.refine, params.work_seconds
    (100, False, 1.0)
    """

    refine: bool = param(
        True, "true: also try min-cut and multilevel partitions, pipeline-stage splits, list schedules "
        "and one device, repair those that overflow a device, keep the fastest replay and improve it "
        "by a critical-path search; false: the paper's Adjusting Placement alone")
    work_seconds: float = param(
        1.0, "refine: work budget (nominal seconds) of the optional stages (more multilevel "
        "partitions and stage splits, list schedules, ranking the best candidates over several "
        "dispatch orders): each stage's cost is estimated from the graph's size, never read off a "
        "clock, so the same input gives the same placement on any machine and under any load",
        minimum=0.0, maximum=3600.0)
    search_seconds: float = param(
        60.0, "refine: wall-clock safety net (s): past it the optional stages and the critical-path "
        "search stop early (extra.stages.cut_by_clock names them); fusion, the always-run candidates "
        "and the memory repair never stop on a clock", minimum=0.0, maximum=86_400.0)
    search_budget: int = param(
        1_200_000, "refine: work budget of the critical-path search in replayed ops (each trial "
        "replays every op once per dispatch order it is judged on)", minimum=0, maximum=10**12)
    repair_budget: int = param(
        4_000_000, "refine: work budget in replayed ops of the peak-memory repair, which runs when "
        "no candidate fits by its replayed peak (shared by the candidates it repairs)",
        minimum=0, maximum=10**12)


def _fused(graph: Graph, cluster: Cluster, params: FusionParams) -> tuple[Fusion, np.ndarray, dict[str, Any]]:
    """Optimal Operation Fusion of ``graph``, the CPD-TOPO order of its coarse graph, and the
    fusion's figures for ``extra``."""
    fusion = optimal_operation_fusion(graph, cluster, R=params.R, memory_fraction=params.memory_fraction)
    coarse = fusion.coarse
    comm = planning_comm_us(coarse, cluster)
    coarse_order = cpd_topo_order(coarse, comm, cpath=cpath(coarse, comm))
    return fusion, coarse_order, {"coarse_edges": coarse.num_edges, "cut_cost_us": fusion.cut_cost_us}


def _refined(graph: Graph, cluster: Cluster, fusion: Fusion, coarse_order: np.ndarray,
             params: CeleritasParams, started: float, extra: dict[str, Any]) -> np.ndarray:
    """The fastest replay among Adjusting Placement and the other candidates, repaired when none
    fits and improved by the critical-path search, within the placer's work budgets."""
    budget = StageBudget(work_us=params.work_seconds * 1e6, deadline=started + params.search_seconds)
    robust = budget.reserve("robust ranking", ROBUST_FINALISTS * len(ROBUST_DISPATCH) * REPLAY_US_PER_ITEM
                            * (graph.num_nodes + graph.num_edges))
    pool = CandidatePool(graph, cluster)
    plans = _candidates(graph, cluster, fusion, coarse_order, pool, budget, params, extra)
    if graph.liveness is not None and not pool.best.fits:
        if peak_lower_bound(graph).cannot_fit(cluster.memory_bytes):
            extra["memory_repair"] = {"skipped": "no placement fits these devices (memory lower bound)"}
        else:
            unit_rank = plans[0].seq.position if plans else None
            extra["memory_repair"] = memory_repair(graph, cluster, pool, params.repair_budget, unit_rank)
    start, start_replay = robust_start(graph, cluster, pool) if robust else (pool.best, pool.best_replay())
    search: dict[str, Any] = {}
    best = critical_path_search(graph, cluster, start, deadline=budget.deadline,
                                replay_seconds=pool.replay_seconds,
                                max_replays=-(-params.search_budget // graph.num_nodes),
                                start_replay=start_replay, stats=search)
    if search["stopped"] == "clock":
        budget.cut.append("critical-path search")
    extra.update(chosen=best.name, candidates=pool.summary(), search=search, stages=budget.report())
    return best.assignment


#: On a cluster with a link topology, the share of the work budget (``work_seconds``) that the
#: optional repair of candidates that overflow but replay faster than the best one that fits may
#: use, in trial replays of :data:`REPLAY_US_PER_ITEM` each (never more than ``repair_budget``).
FITTING_REPAIR_SHARE = 0.25

#: An optional stage: its name, its estimated cost (nominal µs) and what runs it.
OptionalStage = tuple[str, float, Callable[[], None]]


def _candidates(graph: Graph, cluster: Cluster, fusion: Fusion, coarse_order: np.ndarray,
                pool: CandidatePool, budget: StageBudget, params: CeleritasParams,
                extra: dict[str, Any]) -> list[StagePlan]:
    """Fill ``pool``: the candidates that always run, then the optional ones in order of what they
    usually add, each when the work ``budget`` admits it; refine the best on the ops. Returns the
    pipeline orders' stage plans (the paired one first, when the graph has it)."""
    room = fusion_room(graph, cluster, fusion)
    adjusting = adjusting_placement(fusion.coarse, cluster, coarse_order, room=room)
    pool.add("adjusting", fusion.to_fine(adjusting))
    op_nets = OpNets.build(graph, fusion.anchor, cluster) if cluster.num_devices > 1 else None
    communication_refinement(graph, fusion, cluster, coarse_order, pool, op_nets)
    single_device_candidate(graph, cluster, pool)
    more_multilevel = multilevel_candidates(graph, cluster, pool)
    plans, first_split, more_splits = [], [], []
    if graph.liveness is not None or stage_estimate_us(graph, "stages", cluster) <= budget.work_us:
        plans, first_split, more_splits = stage_candidates(graph, cluster, pool,
                                                           first_always=graph.liveness is not None,
                                                           nearest_first=not cluster.is_flat)
    else:  # not even one split fits the work budget: do not build the orders either
        budget.skipped.append("stages")

    def estimated(entries: list[tuple[str, Callable[[], Any]]]) -> list[OptionalStage]:
        return [(name, stage_estimate_us(graph, _stage_kind(name), cluster), run) for name, run in entries]

    simple = estimated(simple_candidates(graph, cluster, fusion, coarse_order, pool))
    schedules = estimated(list_schedule_candidates(graph, cluster, pool))
    replay_us = REPLAY_US_PER_ITEM * (graph.num_nodes + graph.num_edges)
    headroom = [(name, len(HEADROOM_LADDER) * (estimate_us + replay_us), run)
                for name, estimate_us, run in estimated(headroom_candidates(graph, cluster, pool))]
    if cluster.is_flat:
        optional = (simple + estimated(first_split) + schedules + headroom + estimated(more_multilevel)
                    + estimated(more_splits))
    else:  # a repair of fast candidates that overflow, the cheap partitions, list schedules cheapest first
        unit_rank = plans[0].seq.position if plans else None
        optional = (simple + estimated(first_split)
                    + _fitting_repair(graph, cluster, pool, params, unit_rank, extra)
                    + estimated(more_multilevel) + sorted(schedules, key=lambda entry: entry[1]) + headroom
                    + estimated(more_splits))
    for name, estimate_us, run in optional:
        if name == FITTING_REPAIR and not _worth_repairing(pool):
            continue
        if name.endswith(f"/{HEADROOM_STAGE}") and not headroom_worth(pool, name):
            continue
        if budget.allow(name, estimate_us):
            run()
    refine_best_on_ops(graph, fusion.anchor, cluster, pool, op_nets)
    if op_nets is not None:
        refine_along_links(graph, cluster, pool, op_nets)
    return plans


def _stage_kind(name: str) -> str:
    """The key of an optional stage's estimate: ``multilevel/K``, ``hierarchical/K`` (a multilevel
    partition per level) and ``stages/ORDER/K`` by their kind, the others by name."""
    kind = name.split("/")[0]
    if name.endswith(f"/{HEADROOM_STAGE}"):
        return kind
    if kind in ("multilevel", "hierarchical"):
        return "multilevel"
    return kind if kind == "stages" else name


#: The optional stage that repairs, within a share of the work budget, the candidates that
#: overflow a device but replay faster than the best that fits (:func:`_fitting_repair`).
FITTING_REPAIR = "memory repair"


def _fitting_repair(graph: Graph, cluster: Cluster, pool: CandidatePool, params: CeleritasParams,
                    unit_rank: np.ndarray | None, extra: dict[str, Any]) -> list[OptionalStage]:
    """The optional repair stage: :func:`memory_repair` with :data:`FITTING_REPAIR_SHARE` of the
    work budget in trial replays, run when :func:`_worth_repairing` (else it is not listed); none
    without liveness fields or when the share pays for no replay."""
    if graph.liveness is None:
        return []
    estimate_us = FITTING_REPAIR_SHARE * params.work_seconds * 1e6
    per_replay_us = REPLAY_US_PER_ITEM * (graph.num_nodes + graph.num_edges)
    replayed_ops = min(params.repair_budget, int(estimate_us // per_replay_us) * graph.num_nodes)
    if replayed_ops < graph.num_nodes:  # not one replay
        return []

    def run() -> None:
        extra["memory_repair"] = memory_repair(graph, cluster, pool, replayed_ops, unit_rank)

    return [(FITTING_REPAIR, estimate_us, run)]


def _worth_repairing(pool: CandidatePool) -> bool:
    """Whether a candidate fits and another, which overflows, replays faster than every one that fits."""
    fastest_fitting = min((c.step_time_us for c in pool.candidates if c.fits), default=None)
    return fastest_fitting is not None and any(not c.fits and c.step_time_us < fastest_fitting
                                               for c in pool.candidates)


#: How many of the pool's best candidates are ranked again by their robust step over the dispatch
#: orders (:data:`~celeritas_core.placers.local_search.ROBUST_DISPATCH`) before the search starts.
ROBUST_FINALISTS = 3


def robust_start(graph: Graph, cluster: Cluster,
                 pool: CandidatePool) -> tuple[Candidate, SimulationResult | None]:
    """The search's start: of the pool's :data:`ROBUST_FINALISTS` best (fitting first, least excess,
    then fastest) and its one-device candidates, the one with the shortest robust step
    (:func:`~celeritas_core.placers.local_search.robust_step_us` over
    :data:`~celeritas_core.placers.local_search.ROBUST_DISPATCH`), with its documented replay. A one-device
    candidate's robust step is its documented step, so the result is never slower than it."""
    ranked = sorted({c.assignment.tobytes(): c for c in pool.candidates}.values(), key=lambda c: c.key)
    one_device = [c for c in ranked[ROBUST_FINALISTS:] if np.all(c.assignment == c.assignment[0])]
    finalists = [c for c in ranked[:ROBUST_FINALISTS] + one_device if c.fits == ranked[0].fits]
    if len(finalists) < 2:
        return pool.best, pool.best_replay()
    scored = []
    for candidate in finalists:
        result = simulate(graph, cluster, candidate.assignment)
        robust = robust_step_us(graph, cluster, candidate.assignment, result)
        scored.append(((candidate.excess_bytes, robust), candidate, result))
    _, best, result = min(scored, key=lambda s: s[0])
    return best, result


def celeritas_placer(graph: Graph, cluster: Cluster, params: CeleritasParams) -> PlacerOutput:
    """Celeritas: Optimal Operation Fusion and Adjusting Placement (``refine`` false: the paper), or
    (``refine``) the fastest replay among Adjusting Placement, min-cut and multilevel partitions,
    pipeline-stage splits, list schedules and one device (repaired by trades when, on a graph with
    liveness fields, none fits by its replayed peak), improved by the simulator-guided critical-path
    search on the robust step (docs/algorithms.md).

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : CeleritasParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``coarse_nodes`` the fused clusters; ``extra`` the fusion's figures
        and, with ``refine``, each candidate's replayed step (µs) and the one ``chosen``.

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> cluster = Cluster.homogeneous(2, 1e9)
    >>> placement = place(graph, cluster, "celeritas")
    >>> placement.assignment.tolist(), placement.predicted_step_time_us
    ([0, 0, 1, 1], 95.1)
    >>> placement.extra["chosen"], placement.extra["candidates"]["single/0"]
    ('multilevel/2', 120.0)
    >>> place(graph, cluster, "celeritas", {"refine": False}).assignment.tolist()   # the paper's
    [0, 0, 0, 0]
    """
    started = time.perf_counter()
    fusion, coarse_order, extra = _fused(graph, cluster, params)
    if params.refine:
        assignment = _refined(graph, cluster, fusion, coarse_order, params, started, extra)
    else:
        room = fusion_room(graph, cluster, fusion)
        assignment = fusion.to_fine(adjusting_placement(fusion.coarse, cluster, coarse_order, room=room))
    return PlacerOutput(assignment=assignment, coarse_nodes=fusion.num_clusters, extra=extra)


def order_place_placer(graph: Graph, cluster: Cluster, params: FusionParams) -> PlacerOutput:
    """Order-Place: Optimal Operation Fusion, then fill devices in CPD-TOPO order.

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : FusionParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``coarse_nodes`` the fused clusters; ``extra`` the coarse graph's
        edges and the fusion's cut cost (µs).

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> placement = place(graph, Cluster.homogeneous(2, 350), "order-place")   # 350 bytes each
    >>> placement.assignment.tolist(), placement.predicted_step_time_us, placement.coarse_nodes
    ([0, 0, 1, 1], 95.1, 4)
    """
    fusion, coarse_order, extra = _fused(graph, cluster, params)
    room = fusion_room(graph, cluster, fusion)
    ordered = order_place(fusion.coarse, cluster, coarse_order, room=room)
    return PlacerOutput(assignment=fusion.to_fine(ordered),
                        coarse_nodes=fusion.num_clusters, extra=extra)


register_placer(PlacerSpec(
    "celeritas", celeritas_placer,
    "Optimal Operation Fusion over CPD-TOPO and Adjusting Placement, then the fastest of min-cut, "
    "multilevel, pipeline-stage, list-schedule and one-device candidates (repaired when they overflow "
    "a device), improved by a critical-path search judged over several dispatch orders",
    CeleritasParams,
))
register_placer(PlacerSpec(
    "order-place", order_place_placer,
    "Optimal Operation Fusion, then fill devices one after another in CPD-TOPO order",
    FusionParams,
))
