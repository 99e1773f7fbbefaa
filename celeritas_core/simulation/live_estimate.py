"""Liveness-aware memory estimates for placers that group ops, without replaying each grouping.

A device's memory is not the sum of its ops' bytes: activations are freed after their last
consumer. Placers that build placements group by group (fusion's clusters, stages, Adjusting
Placement's devices) need to know what a group would hold at its peak. Both estimates here come
from one replay of the graph on one device, whose buffers are split among the ops that keep them
live (:func:`~celeritas_core.simulation.memory.owned_intervals`): a group holds the pieces of its ops.

* :class:`SequenceMemory`: groups that are contiguous runs of a sequence (fusion's clusters along
  CPD-TOPO, pipeline stages). A window slides along the sequence with a segment tree over the
  replay's event times (range add, global max), so the longest run that fits a capacity from every
  start costs O((ops + edges) log ops) in all.
* :class:`GroupRoom`: groups placed one by one on devices (Adjusting Placement, Order-Place on the
  coarse graph). Each group's pieces are summed into time buckets that start at the replay's
  allocation times (all of them when there are at most :data:`BUCKETS`, then every bucket is
  exact; else equal shares of them): a piece counts in every bucket it touches, so bucket sums
  never understate. A device fits a group when its persistent bytes plus the largest bucket of
  the summed usage stay within its capacity.

Both ignore the copies a device receives from others, which the callers' replays check. Units:
µs and bytes.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from celeritas_core.compiled.jit import jit
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.simulation.memory import OwnedIntervals, owned_intervals
from celeritas_core.simulation.simulator import simulate

_OWNED: weakref.WeakKeyDictionary[Graph, OwnedIntervals] = weakref.WeakKeyDictionary()


def one_device_pieces(graph: Graph) -> OwnedIntervals:
    """:func:`~celeritas_core.simulation.memory.owned_intervals` of ``graph`` replayed on one device (once per
    graph: fusion, the stage splits and Adjusting Placement all read it)."""
    if graph not in _OWNED:
        one = np.zeros(graph.num_nodes, dtype=np.int64)
        if graph.liveness is None or not graph.liveness.modelled.any():  # the sum model: no timing needed
            _OWNED[graph] = owned_intervals(graph, None)
        else:
            _OWNED[graph] = owned_intervals(graph, simulate(graph, Cluster.homogeneous(1, 1.0), one))
    return _OWNED[graph]


# ---------------------------------------------------------------------------- sequences
@dataclass(frozen=True, eq=False)
class SequenceMemory:
    """The buffers charged to each position of a sequence: position ``i``'s pieces are
    ``lo/hi/size[ptr[i]:ptr[i + 1]]`` (index ranges over the one-device replay's distinct event
    times), its persistent bytes ``static[i]``."""

    ptr: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    size: np.ndarray
    static: np.ndarray
    num_points: int

    @classmethod
    def build(cls, graph: Graph, position_of_op: np.ndarray, num_positions: int) -> SequenceMemory:
        """Charge every op's pieces (:func:`one_device_pieces`) to ``position_of_op`` (0 … n-1).

        Examples
        --------
        >>> from celeritas_core.generators.synthetic import small_training_graph
        >>> g = small_training_graph(0, liveness=True)
        >>> from celeritas_core.simulation.memory import one_device_peak_bytes
        >>> memory = SequenceMemory.build(g, g.topological_rank, g.num_nodes)
        >>> whole, peak = memory.peak(0, g.num_nodes), one_device_peak_bytes(g)
        >>> bool(abs(whole - peak) <= 1e-6 * peak)
        True
        """
        owned = one_device_pieces(graph)
        keep = owned.size_bytes > 0
        start, end = owned.start_us[keep], owned.end_us[keep]
        points = np.unique(np.concatenate([start, end]))
        lo = np.searchsorted(points, start)
        hi = np.maximum(np.searchsorted(points, end), lo + 1)
        where = position_of_op[owned.owner[keep]]
        by_position = np.argsort(where, kind="stable")
        ptr = np.zeros(num_positions + 1, dtype=np.int64)
        np.cumsum(np.bincount(where, minlength=num_positions), out=ptr[1:])
        static = np.bincount(position_of_op, weights=owned.static_bytes, minlength=num_positions)
        return cls(ptr, lo[by_position].astype(np.int64), hi[by_position].astype(np.int64),
                   owned.size_bytes[keep][by_position], static.astype(np.float64), max(len(points), 1))

    def window_ends(self, capacity: float) -> np.ndarray:
        """Per start position ``a``, the largest ``e`` such that positions ``a..e-1`` fit
        ``capacity`` (bytes) by the estimate; ``e == a`` when ``a`` alone does not. Non-decreasing."""
        return _window_ends(self.ptr, self.lo, self.hi, self.size, self.static, float(capacity),
                            self.num_points)

    def peak(self, begin: int, end: int) -> float:
        """Estimated peak (bytes) of positions ``begin..end-1``."""
        usage = np.zeros(self.num_points + 1)
        span = slice(self.ptr[begin], self.ptr[end])
        np.add.at(usage, self.lo[span], self.size[span])
        np.add.at(usage, self.hi[span], -self.size[span])
        return float(self.static[begin:end].sum() + np.cumsum(usage).max(initial=0.0))


@jit
def _window_ends(ptr: np.ndarray, lo: np.ndarray, hi: np.ndarray, size: np.ndarray, static: np.ndarray,
                 capacity: float, num_points: int) -> np.ndarray:
    """Two pointers over the positions; a segment tree over time keeps the window's usage (range
    add, global max), so each position enters and leaves it once."""
    num_units = len(static)
    leaves = 1
    while leaves < num_points:
        leaves *= 2
    tree, lazy = np.zeros(2 * leaves), np.zeros(2 * leaves)
    ends = np.empty(num_units, dtype=np.int64)
    limit = capacity * (1.0 + 1e-12)
    e, held = 0, 0.0
    for a in range(num_units):
        if e < a:
            e = a
        while e < num_units:
            for k in range(ptr[e], ptr[e + 1]):
                _range_add(tree, lazy, leaves, lo[k], hi[k], size[k])
            if held + static[e] + tree[1] > limit:
                for k in range(ptr[e], ptr[e + 1]):
                    _range_add(tree, lazy, leaves, lo[k], hi[k], -size[k])
                break
            held += static[e]
            e += 1
        ends[a] = e
        if e > a:
            for k in range(ptr[a], ptr[a + 1]):
                _range_add(tree, lazy, leaves, lo[k], hi[k], -size[k])
            held -= static[a]
    return ends


@jit
def _range_add(tree: np.ndarray, lazy: np.ndarray, leaves: int, lo: int, hi: int, value: float) -> None:
    """Add ``value`` to points ``lo..hi-1``; ``tree[1]`` stays the maximum over all points."""
    left, right = lo + leaves, hi + leaves
    first, last = left, right - 1
    while left < right:
        if left & 1:
            tree[left] += value
            lazy[left] += value
            left += 1
        if right & 1:
            right -= 1
            tree[right] += value
            lazy[right] += value
        left >>= 1
        right >>= 1
    for node in (first, last):
        node >>= 1
        while node >= 1:
            tree[node] = max(tree[2 * node], tree[2 * node + 1]) + lazy[node]
            node >>= 1


# ---------------------------------------------------------------------------- groups on devices
#: At most this many time buckets per group in :class:`GroupRoom` (fewer when there are fewer
#: distinct event times, then each bucket is exact), and at most this many bucket values in all.
BUCKETS = 1024
MAX_BUCKET_VALUES = 20_000_000


class GroupRoom:
    """What each device holds while groups are placed on it one by one (bytes).

    Without liveness fields a group holds its ``memory`` for the whole step (the sum model, as the
    placers have always checked); with them, the pieces of its ops summed into :data:`BUCKETS`
    time buckets, plus their persistent bytes (see the module docstring).
    """

    def __init__(self, cluster: Cluster, memory: np.ndarray, profiles: np.ndarray | None = None,
                 static: np.ndarray | None = None) -> None:
        self.capacity = cluster.memory_bytes.astype(np.float64)
        self.memory = np.asarray(memory, dtype=np.float64)
        self.profiles, self.static = profiles, static
        self.free = self.capacity.copy()
        """Sum model: bytes left per device; with profiles: capacity less persistent bytes."""
        self.usage = None if profiles is None else np.zeros((cluster.num_devices, profiles.shape[1]))

    @classmethod
    def for_groups(cls, graph: Graph, cluster: Cluster, group_of: np.ndarray, num_groups: int,
                   memory: np.ndarray) -> GroupRoom:
        """The room of ``cluster`` for groups ``group_of`` (per op) of ``graph``; ``memory`` (bytes per
        group) is what the sum model charges when the graph has no liveness fields."""
        if graph.liveness is None or not graph.liveness.modelled.any():
            return cls(cluster, memory)
        owned = one_device_pieces(graph)
        first, last, buckets = _buckets(owned.start_us, owned.end_us, num_groups)
        group = group_of[owned.owner]
        diff = np.zeros((num_groups, buckets + 1))
        np.add.at(diff, (group, first), owned.size_bytes)
        np.add.at(diff, (group, last + 1), -owned.size_bytes)
        profiles = np.cumsum(diff, axis=1)[:, :buckets]
        static = np.bincount(group_of, weights=owned.static_bytes, minlength=num_groups)
        return cls(cluster, memory, profiles, static)

    def room(self, group: int, device: int) -> float:
        """Bytes ``device`` would have left at its peak with ``group`` added (negative: over)."""
        if self.usage is None or self.profiles is None or self.static is None:
            return float(self.free[device] - self.memory[group])
        peak = float(np.max(self.usage[device] + self.profiles[group]))
        return float(self.free[device] - self.static[group] - peak)

    def fits(self, group: int, device: int) -> bool:
        """Whether ``device`` still holds ``group`` within its capacity."""
        if self.usage is None:
            return bool(self.free[device] >= self.memory[group])
        return self.room(group, device) >= 0.0

    def add(self, group: int, device: int) -> None:
        """Put ``group`` on ``device``."""
        if self.usage is None or self.profiles is None or self.static is None:
            self.free[device] -= self.memory[group]
        else:
            self.free[device] -= self.static[group]
            self.usage[device] += self.profiles[group]

    def roomiest(self, group: int) -> int:
        """The device with the most room left after taking ``group`` (best effort; the lowest
        index on ties)."""
        if self.usage is None:
            return int(np.argmax(self.free))
        return int(np.argmax([self.room(group, d) for d in range(len(self.capacity))]))


def _buckets(start: np.ndarray, end: np.ndarray, num_groups: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The first and last time bucket each piece ``[start, end)`` touches, and the number of
    buckets: the distinct start times when there are few enough (exact), else equal shares of
    them. A piece ending where another starts does not touch that one's bucket (frees come before
    allocations); a piece of zero length touches the bucket of its instant."""
    limit = max(8, min(BUCKETS, MAX_BUCKET_VALUES // max(num_groups, 1)))
    starts = np.unique(start)
    if len(starts) > limit:
        starts = np.unique(starts[np.linspace(0, len(starts) - 1, limit).astype(np.int64)])
    bounds = starts
    first = np.maximum(np.searchsorted(bounds, start, side="right") - 1, 0)
    last = np.maximum(np.searchsorted(bounds, end, side="left") - 1, first)
    return first, last, max(len(bounds), 1)
