"""The paper's placement of the fused graph: Order-Place and Adjusting Placement (Celeritas paper,
Algorithm 2), with the liveness-aware room of fusion's clusters (:func:`fusion_room`).

Both walk the coarse graph's CPD-TOPO order; Order-Place fills one device after another,
Adjusting Placement stays on the previous node's device unless another finishes the node earlier.
Units: µs and bytes.
"""

from __future__ import annotations

import numpy as np

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import cpath, edge_comm_us, planning_comm_us
from celeritas_core.graphs.orders import cpd_topo_order
from celeritas_core.placers.fusion import Fusion
from celeritas_core.simulation.live_estimate import GroupRoom
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
