"""Co-location groups: ops that must share a device (TensorFlow's ``_class`` constraints).

The rule, as in the paper and Baechi: the member that comes first in the placement order is the
group's *anchor*; every member goes to the anchor's device, and the group's memory is charged to
the anchor when placers check capacity.
"""

from __future__ import annotations

import numpy as np

from celeritas_core.graphs.graph import Graph


def colocation_anchor(graph: Graph, order: np.ndarray) -> np.ndarray:
    """Per node, the index of its group's first member in ``order`` (itself when ungrouped)."""
    anchor = np.arange(graph.num_nodes, dtype=np.int64)
    gid = graph.colocation_ids
    if not np.any(gid >= 0):
        return anchor
    gid_in_order = gid[order]
    grouped = gid_in_order >= 0
    # first occurrence of each group id along the order
    ids, first_pos = np.unique(gid_in_order[grouped], return_index=True)
    first_node = order[np.flatnonzero(grouped)[first_pos]]
    lookup = np.empty(int(gid.max()) + 1, dtype=np.int64)
    lookup[ids] = first_node
    members = gid >= 0
    anchor[members] = lookup[gid[members]]
    return anchor


def placement_units(graph: Graph) -> np.ndarray:
    """Unit id per op: a co-location group is one unit, every other op its own (ids 0..u-1, in
    order of group id, then of op index)."""
    gid = graph.colocation_ids
    key = np.where(gid >= 0, gid, int(gid.max(initial=-1)) + 1 + np.arange(graph.num_nodes))
    return np.unique(key, return_inverse=True)[1].astype(np.int64)


def anchored_memory(graph: Graph, anchor: np.ndarray) -> np.ndarray:
    """Memory (bytes) per node with each group's total charged to its anchor, 0 to other members."""
    return np.bincount(anchor, weights=graph.memory_bytes, minlength=graph.num_nodes)


def apply_colocation(assignment: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """Move every group member to its anchor's device."""
    return assignment[anchor]


def colocation_respected(graph: Graph, assignment: np.ndarray) -> bool:
    """True when all members of every co-location group share one device."""
    gid = graph.colocation_ids
    grouped = gid >= 0
    if not np.any(grouped):
        return True
    g = gid[grouped]
    d = assignment[grouped]
    lo = np.full(int(g.max()) + 1, np.iinfo(np.int64).max)
    hi = np.full(int(g.max()) + 1, -1)
    np.minimum.at(lo, g, d)
    np.maximum.at(hi, g, d)
    used = hi >= 0
    return bool(np.all(lo[used] == hi[used]))
