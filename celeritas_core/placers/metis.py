"""The ``metis`` baseline: a k-way METIS partition of the undirected op graph, then memory repair.

Steps: contract each co-location group to one vertex (so groups stay whole), partition the
undirected graph into ``k = num_devices`` parts with pymetis (vertex weight = memory bytes, or
time µs with ``balance_time=1``; edge weight = tensor bytes), map parts to devices (bigger parts
to bigger devices, among equal devices in topological order), then move vertices off over-full
devices, cheapest cut increase per byte first. On a cluster with a link topology the parts are then
moved, among devices of equal memory and speed, so that the heaviest cuts take the fastest links
(:func:`~celeritas_core.placers.partition.map_to_topology`). pymetis is imported lazily: the rest of
``celeritas_core`` stays pure numpy/networkx/scipy.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import placement_units
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers.base import PlacerOutput, PlacerSpec, param, register_placer
from celeritas_core.placers.partition import map_to_topology

#: METIS weights are integers: vertex and edge weights are each scaled so that their total is
#: about this much (then rounded, at least 1), which fits a 32-bit ``idx_t`` with room to spare.
WEIGHT_SCALE = 2**28
#: Smallest share of the vertex weight METIS is asked to put in one part: one unit of the scaled
#: weights. METIS keeps target shares as 32-bit floats and refuses a share of 0 (pymetis then
#: raises "Caught an unknown exception!"), which a device with a tiny memory beside a large one
#: would round to.
MIN_TARGET_SHARE = 1.0 / WEIGHT_SCALE


@dataclass(frozen=True)
class UnitGraph:
    """Ops contracted to placement units (a co-location group is one unit), as undirected CSR."""

    unit_of: np.ndarray  # unit index per op; units are numbered by their first topological rank
    memory_bytes: np.ndarray  # bytes per unit
    time_us: np.ndarray  # µs per unit
    ptr: np.ndarray  # CSR row pointers (num_units + 1)
    nbr: np.ndarray  # neighbour unit per slot; each undirected pair is stored in both rows
    weight_bytes: np.ndarray  # bytes per slot (sum over the distinct tensors between the pair)
    weight_tensors: np.ndarray | None = None  # distinct tensors per slot (the transfers between the pair)

    @property
    def num_units(self) -> int:
        """Number of units."""
        return len(self.memory_bytes)


def unit_graph(graph: Graph) -> UnitGraph:
    """Contract co-location groups and drop edge directions; parallel tensors add their bytes.

    Several edges carrying one producer output (``src_output``) into the same unit count once.
    """
    n = graph.num_nodes
    rank = graph.topological_rank
    raw = placement_units(graph)
    num_units = int(raw.max()) + 1
    first = np.full(num_units, n, dtype=np.int64)
    np.minimum.at(first, raw, rank)
    renumber = np.empty(num_units, dtype=np.int64)
    renumber[np.argsort(first, kind="stable")] = np.arange(num_units)
    unit_of = renumber[raw]
    memory = np.bincount(unit_of, weights=graph.memory_bytes, minlength=num_units)
    time_us = np.bincount(unit_of, weights=graph.time_us, minlength=num_units)

    a = unit_of[graph.edge_src]
    b = unit_of[graph.edge_dst]
    keep = a != b
    tensor, a, b, nbytes = (x[keep] for x in (graph.tensors.edge_tensor, a, b, graph.edge_bytes))
    # one transfer per (tensor, destination unit): its first edge, in (producer, output, unit) order
    first = np.unique(tensor * num_units + b, return_index=True)[1]
    a, b, nbytes = a[first], b[first], nbytes[first]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    pairs, inverse = np.unique(lo * num_units + hi, return_inverse=True)
    pair_bytes = np.bincount(inverse, weights=nbytes, minlength=len(pairs))
    pair_tensors = np.bincount(inverse, minlength=len(pairs)).astype(np.float64)
    lo, hi = pairs // num_units, pairs % num_units
    rows = np.concatenate([lo, hi])
    cols = np.concatenate([hi, lo])
    weights = np.concatenate([pair_bytes, pair_bytes])
    order = np.lexsort((cols, rows))
    ptr = np.zeros(num_units + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_units), out=ptr[1:])
    return UnitGraph(unit_of, memory, time_us, ptr, cols[order], weights[order],
                     np.concatenate([pair_tensors, pair_tensors])[order])


def metis_weights(values: np.ndarray) -> np.ndarray:
    """Positive integer METIS weights: ``max(1, round(value · 2^28 / total))`` (all 1 if total is 0)."""
    total = float(values.sum())
    if total <= 0:
        return np.ones(len(values), dtype=np.int64)
    return np.maximum(1, np.rint(values * (WEIGHT_SCALE / total))).astype(np.int64)


def metis_target_shares(target: np.ndarray) -> list[float] | None:
    """METIS's ``tpwgts``: each part's share of ``target``, at least :data:`MIN_TARGET_SHARE`
    and summing to 1 (None when the shares are equal: METIS's default).

    Parameters
    ----------
    target : numpy.ndarray
        Positive size per part (device memory in bytes, or device speed).

    Returns
    -------
    list of float or None
        The shares, each representable as a positive 32-bit float, or None.
    """
    share = target / target.sum()
    if np.all(share == share[0]):
        return None
    share = np.maximum(share, MIN_TARGET_SHARE)
    return (share / share.sum()).tolist()


def _partition(units: UnitGraph, k: int, vertex_weight: np.ndarray, target: np.ndarray,
               seed: int, edge_weight: np.ndarray | None = None) -> np.ndarray:
    """Part per unit from pymetis (k parts, target shares ``target``; edge weights the bytes per
    slot, or ``edge_weight``); one unit per part if ≤ k units."""
    if k == 1:
        return np.zeros(units.num_units, dtype=np.int64)
    if units.num_units <= k:  # METIS refuses more parts than vertices
        return np.arange(units.num_units, dtype=np.int64)
    try:
        # lazy: pymetis is optional: only this placer needs it, and says so
        import pymetis
    except ImportError:
        raise CeleritasInputError(
            "placer 'metis' needs the pymetis package (pip install 'pymetis>=2023.1')"
        ) from None
    dtype = pymetis.zero_copy_dtype() if hasattr(pymetis, "zero_copy_dtype") else np.int64
    xadj = units.ptr.astype(dtype)
    adjncy = units.nbr.astype(dtype)
    kwargs: dict[str, Any] = {
        "vweights": metis_weights(vertex_weight).astype(dtype),
        "eweights": (metis_weights(units.weight_bytes if edge_weight is None else edge_weight).astype(dtype)
                     if len(adjncy) else None),
        "tpwgts": metis_target_shares(target),
        "options": pymetis.Options(seed=seed),
    }
    with metis_warnings_dropped():
        if hasattr(pymetis, "CSRAdjacency"):
            result = pymetis.part_graph(k, pymetis.CSRAdjacency(xadj, adjncy), **kwargs)
        else:  # pymetis < 2025.2
            result = pymetis.part_graph(k, xadj=xadj, adjncy=adjncy, **kwargs)
    return np.asarray(result[1], dtype=np.int64)


@contextmanager
def metis_warnings_dropped() -> Iterator[None]:
    """Drop METIS's own warnings from the process's standard output and error while the block runs.

    METIS (C code, under pymetis) prints ``***Cannot bisect a graph with 0 vertices!`` and
    ``***You are trying to partition a graph into too many parts!`` with ``printf`` when its
    recursive bisection meets a few units that outweigh the others (VGG16's dense layers onto 16
    devices); it still returns a partition, which the caller repairs. On standard output the
    lines would corrupt what a command prints there (a JSON document). File descriptors 1 and 2
    go to temporary files meanwhile; lines that start with ``***`` are dropped and anything else
    is written back to ``sys.stdout`` or ``sys.stderr``.
    """
    streams = ((1, sys.stdout), (2, sys.stderr))
    try:
        for _, stream in streams:
            stream.flush()
        saved = [os.dup(fd) for fd, _ in streams]
    except (OSError, ValueError, AttributeError):  # no descriptors to borrow: leave everything as it is
        yield
        return
    with ExitStack() as files:
        caught = [files.enter_context(tempfile.TemporaryFile()) for _ in streams]
        try:
            for (fd, _), file in zip(streams, caught, strict=True):
                os.dup2(file.fileno(), fd)
            yield
        finally:
            for (fd, stream), file, old in zip(streams, caught, saved, strict=True):
                os.dup2(old, fd)
                os.close(old)
                file.seek(0)
                text = file.read().decode(errors="replace")
                kept = [line for line in text.splitlines(keepends=True)
                        if not line.lstrip().startswith("***")]
                if kept:
                    stream.write("".join(kept))


def map_parts_to_devices(part_size: np.ndarray, device_size: np.ndarray,
                         first_unit: np.ndarray) -> np.ndarray:
    """Device per part: the i-th largest part to the i-th largest device; among devices of equal
    size, the part whose first unit is earliest (``first_unit``, topological) gets the lowest index.
    """
    k = len(device_size)
    devices = np.lexsort((np.arange(k), -device_size))
    parts = np.lexsort((first_unit, -part_size))
    device_of_part = np.empty(k, dtype=np.int64)
    device_of_part[parts] = devices
    for size in np.unique(device_size):
        same = np.flatnonzero(device_size == size)
        held = np.flatnonzero(np.isin(device_of_part, same))
        device_of_part[held[np.argsort(first_unit[held], kind="stable")]] = same
    return device_of_part


def repair_memory(units: UnitGraph, device: np.ndarray, capacity: np.ndarray) -> int:
    """Move units off over-full devices (``device`` is updated in place); returns the number of moves.

    The most over-full device is drained first: while it is over its memory (bytes), move its unit
    and a target device with room for it that add the fewest cut bytes per byte moved (a negative
    increase is a gain; ties: lowest unit, then lowest device). Then the next over-full device,
    until every device fits or no unit of an over-full device fits anywhere (best effort). Units
    of 0 bytes never move; a unit moves at most once, since targets never become over-full.
    """
    k = len(capacity)
    mem = units.memory_bytes
    used = np.bincount(device, weights=mem, minlength=k)
    rows = np.repeat(np.arange(units.num_units), np.diff(units.ptr))
    conn = np.zeros((units.num_units, k))  # bytes from each unit to each device
    np.add.at(conn, (rows, device[units.nbr]), units.weight_bytes)
    moves = 0
    progress = True
    while progress:
        progress = False
        over = np.flatnonzero(used > capacity)
        for d in over[np.argsort(capacity[over] - used[over], kind="stable")].tolist():
            done = _drain(units, device, capacity, used, conn, d)
            moves += done
            progress = progress or done > 0
    return moves


def _drain(units: UnitGraph, device: np.ndarray, capacity: np.ndarray, used: np.ndarray,
           conn: np.ndarray, d: int) -> int:
    """Move units off device ``d`` (see :func:`repair_memory`) until it fits or none fits elsewhere."""
    cand = np.flatnonzero((device == d) & (units.memory_bytes > 0))
    cand_mem = units.memory_bytes[cand]
    pos = np.full(units.num_units, -1, dtype=np.int64)
    pos[cand] = np.arange(len(cand))

    def best_moves(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per candidate position: the smallest cut increase per byte (∞ if none fits), its device."""
        u = cand[idx]
        score = (conn[u, d][:, None] - conn[u]) / cand_mem[idx, None]
        fits = cand_mem[idx, None] <= (capacity - used)[None, :]
        fits[:, d] = False
        score[~fits] = np.inf
        target = np.argmin(score, axis=1)
        return score[np.arange(len(idx)), target], target

    best, best_t = best_moves(np.arange(len(cand)))
    moves = 0
    while used[d] > capacity[d]:
        i = int(np.argmin(best))
        if not np.isfinite(best[i]):
            break
        u, t = int(cand[i]), int(best_t[i])
        lo, hi = units.ptr[u], units.ptr[u + 1]
        nbr, w = units.nbr[lo:hi], units.weight_bytes[lo:hi]
        np.subtract.at(conn, (nbr, d), w)
        np.add.at(conn, (nbr, t), w)
        device[u] = t
        used[d] -= cand_mem[i]
        used[t] += cand_mem[i]
        moves += 1
        pos[u] = -1
        best[i] = np.inf
        # rescore the neighbours (their cut changed) and the units whose best target just filled up
        near = pos[nbr]
        full = np.flatnonzero((best_t == t) & (cand_mem > capacity[t] - used[t]) & np.isfinite(best))
        stale = np.unique(np.concatenate([near[near >= 0], full]))
        if len(stale):
            best[stale], best_t[stale] = best_moves(stale)
    return moves


def _cut_bytes(units: UnitGraph, device: np.ndarray) -> float:
    rows = np.repeat(np.arange(units.num_units), np.diff(units.ptr))
    return float(units.weight_bytes[device[rows] != device[units.nbr]].sum() / 2)


def metis_partition(units: UnitGraph, cluster: Cluster, devices: np.ndarray, *,
                    balance_time: bool = False, seed: int = 0) -> np.ndarray:
    """Device per unit: a METIS partition into ``len(devices)`` parts mapped onto ``devices``.

    Parts are balanced by memory (bytes) in proportion to the devices' memory, or by time (µs) in
    proportion to their speed with ``balance_time``; no memory repair (see :func:`repair_memory`).
    """
    devices = np.asarray(devices, dtype=np.int64)
    k = len(devices)
    vertex_weight = units.time_us if balance_time else units.memory_bytes
    device_size = (cluster.speed if balance_time else cluster.memory_bytes)[devices].astype(np.float64)
    part = _partition(units, k, vertex_weight, device_size, seed)
    part_size = np.bincount(part, weights=vertex_weight, minlength=k)
    first_unit = np.full(k, units.num_units, dtype=np.int64)  # units are numbered topologically
    np.minimum.at(first_unit, part, np.arange(units.num_units))
    return devices[map_parts_to_devices(part_size, device_size, first_unit)[part]]


def hierarchical_partition(units: UnitGraph, cluster: Cluster, devices: np.ndarray, *,
                           seed: int = 0) -> np.ndarray:
    """Device per unit: METIS along the cluster's link hierarchy, onto ``devices`` (a topology needed).

    The units are first split among the nodes that hold ``devices`` (target shares their devices'
    memory), then each node's units among its islands, then each island's among its devices
    (levels with one group are skipped). At every level the edge weight is the transfer time (µs)
    of the tensors between two units over the link between the groups being split (the mean over
    their pairs: the network between nodes, the host link between islands, the island link
    between devices), so the cut at the slowest level is the smallest it can be rather than a
    share of one flat cut, as topology-aware partitioners do (recursive bisection along the
    machine's hierarchy). Parts go to groups by size as in :func:`map_parts_to_devices`. No
    memory repair (:func:`repair_memory`).
    """
    topology = cluster.topology
    if topology is None:
        raise ValueError("hierarchical_partition needs a cluster with a topology")
    keys = (topology.node_of, topology.island_of, np.arange(cluster.num_devices))
    device = np.full(units.num_units, -1, dtype=np.int64)
    memory = cluster.memory_bytes.astype(np.float64)
    stack = [(np.arange(units.num_units, dtype=np.int64), np.sort(np.asarray(devices, dtype=np.int64)), 0)]
    while stack:
        members, devs, level = stack.pop()
        while level < len(keys) - 1 and len(np.unique(keys[level][devs])) == 1:
            level += 1
        if len(devs) == 1 or len(members) == 0:
            device[members] = devs[0]
            continue
        groups = [devs[keys[level][devs] == g] for g in np.unique(keys[level][devs])]
        group_of = np.concatenate([np.full(len(g), i) for i, g in enumerate(groups)])
        cross = group_of[:, None] != group_of[None, :]
        flat_devs = np.concatenate(groups)
        slope = float(cluster.pair_slope_us_per_byte[np.ix_(flat_devs, flat_devs)][cross].mean())
        intercept = float(cluster.pair_intercept_us[np.ix_(flat_devs, flat_devs)][cross].mean())
        sub = _induced(units, members)
        size = np.array([memory[g].sum() for g in groups])
        weight = slope * sub.weight_bytes + intercept * (sub.weight_tensors if sub.weight_tensors is not None
                                                         else 1.0)
        part = _partition(sub, len(groups), sub.memory_bytes, size, seed, edge_weight=weight)
        part_size = np.bincount(part, weights=sub.memory_bytes, minlength=len(groups))
        first_unit = np.full(len(groups), sub.num_units, dtype=np.int64)
        np.minimum.at(first_unit, part, np.arange(sub.num_units))
        group_of_part = map_parts_to_devices(part_size, size, first_unit)[part]
        for i, g in enumerate(groups):
            stack.append((members[group_of_part == i], g, level + 1))
    return device


def _induced(units: UnitGraph, members: np.ndarray) -> UnitGraph:
    """The units ``members`` (ascending) and the edges among them, renumbered 0..len - 1 (its
    ``unit_of`` stays the whole graph's: only the partition reads the result)."""
    new = np.full(units.num_units, -1, dtype=np.int64)
    new[members] = np.arange(len(members))
    rows = np.repeat(np.arange(units.num_units), np.diff(units.ptr))
    keep = (new[rows] >= 0) & (new[units.nbr] >= 0)
    ptr = np.zeros(len(members) + 1, dtype=np.int64)
    np.cumsum(np.bincount(new[rows[keep]], minlength=len(members)), out=ptr[1:])
    tensors = units.weight_tensors[keep] if units.weight_tensors is not None else None
    return UnitGraph(units.unit_of, units.memory_bytes[members], units.time_us[members], ptr,
                     new[units.nbr[keep]], units.weight_bytes[keep], tensors)


@dataclass(frozen=True)
class MetisParams:
    """The metis placer's parameters.

    Parameters
    ----------
    balance_time : bool
        True: balance op time (µs) across devices by speed; False (default): balance memory
        (bytes) by device memory.
    seed : int
        METIS's random seed, >= 0 (default 0): the same seed gives the same partition.

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("metis").typed_params({"seed": 7})
    MetisParams(balance_time=False, seed=7)
    """

    balance_time: bool = param(False, "true: balance op time (µs) across devices by speed; false: "
                               "balance memory (bytes) by device memory")
    seed: int = param(0, "METIS random seed (same seed, same partition)", minimum=0, maximum=2**31 - 1)


def metis_placer(graph: Graph, cluster: Cluster, params: MetisParams) -> PlacerOutput:
    """METIS k-way partition (vertex weight bytes or µs, edge weight bytes), then memory repair.

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : MetisParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``extra`` the cut bytes before and after the repair and its moves.

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> placement = place(graph, Cluster.homogeneous(2, 1e9), "metis")
    >>> placement.assignment.tolist(), placement.extra["cut_bytes"]
    ([0, 0, 1, 1], 2000.0)
    """
    units = unit_graph(graph)
    device = metis_partition(units, cluster, np.arange(cluster.num_devices),
                             balance_time=params.balance_time, seed=params.seed)
    cut_before = _cut_bytes(units, device)
    moves = repair_memory(units, device, cluster.memory_bytes.astype(np.float64))
    extra: dict[str, Any] = {"units": units.num_units, "cut_bytes_before_repair": cut_before,
                             "cut_bytes": _cut_bytes(units, device), "repair_moves": moves}
    assignment = device[units.unit_of]
    if not cluster.is_flat:  # parts onto devices: the heavy cuts onto the fast links
        mapped = map_to_topology(graph, cluster, assignment)
        extra["topology_remapped"] = bool(np.any(mapped != assignment))
        assignment = mapped
    return PlacerOutput(assignment=assignment, extra=extra)


register_placer(PlacerSpec(
    "metis", metis_placer,
    "METIS k-way partition (co-location groups contracted), then move ops off over-full devices",
    MetisParams,
))
