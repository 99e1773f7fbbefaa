"""Refinements of a candidate placement on the ops and along the links: two-level min-cut partitions
of the fused graph (:func:`communication_refinement`), the op-level connectivity refinement of the
best candidate (:func:`refine_best_on_ops`) and, on a cluster of several nodes, the refinement
along the link hierarchy (:func:`refine_along_links`). docs/algorithms.md, "Communication
refinement" and "Link topology". Units: µs and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import edge_comm_us
from celeritas_core.placers.fusion import Fusion
from celeritas_core.placers.local_search import (
    CandidatePool,
)
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
from celeritas_core.simulation.simulator import simulate


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
