"""A graph document's fields gathered column by column: what both graph readers build a
:class:`~celeritas_core.graph.Graph` from.

:func:`json_columns` is the fast path of the ``celeritas-graph/1`` reader
(:func:`celeritas_core.formats.graph_from_json`): it gathers every node and edge field of a parsed
document with list operations that run in C (``map``, ``set``, ``np.array``) and checks types,
names and ranges on whole columns. It never raises: on anything unexpected it returns None, and
the reader's node-by-node loop, which names the first offending node or edge, runs instead. So a
valid million-op document is checked in about two seconds (once parsed), and every error message
stays the same.
Units: time in µs, memory and tensor sizes in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from celeritas_core.graph import Liveness
from celeritas_core.limits import MAX_BYTES, MAX_SRC_OUTPUT, MAX_TIME_US

_NUMBER_TYPES = frozenset({int, float})
_NAME, _OP, _TIME, _MEMORY = (itemgetter(k) for k in ("name", "op", "time_us", "memory_bytes"))
_SRC, _DST, _BYTES = (itemgetter(k) for k in ("src", "dst", "bytes"))


@dataclass(frozen=True, eq=False)
class GraphColumns:
    """A graph's node and edge fields, checked one by one (costs within the limits, edges between
    known nodes, no self-loop), before the totals, the output aliases and the cycle check."""

    names: list[str]
    ops: list[str]
    groups: list[str | None]
    time_us: np.ndarray
    memory_bytes: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    edge_src_output: np.ndarray
    liveness: Liveness | None
    """Persistent, scratch and output bytes of the modelled nodes, without output aliases."""
    alias_rows: list[int]
    """The nodes that give ``output_aliases`` (JSON), in order."""
    index: dict[str, int]
    """Node name -> node index."""

    @property
    def live_total(self) -> float:
        """Total of every node's persistent, scratch and output bytes (bytes; 0 without liveness)."""
        live = self.liveness
        if live is None:
            return 0.0
        return float(live.persistent_bytes.sum() + live.scratch_bytes.sum() + live.output_bytes.sum())


def out_of_range(values: np.ndarray, limit: float = MAX_BYTES) -> np.ndarray:
    """Where ``values`` are not finite, negative or above ``limit``."""
    return ~np.isfinite(values) | (values < 0) | (values > limit)


def json_columns(nodes: list[Any], edges: list[Any]) -> GraphColumns | None:
    """The columns of a document's ``nodes`` and ``edges`` when every field is valid; None
    when anything is missing, of the wrong type, out of range, repeated or unknown (the caller
    then finds and names it)."""
    gathered = _node_columns(nodes)
    if gathered is None:
        return None
    names, ops, groups, time_us, memory, index = gathered
    keys = set(chain.from_iterable(nodes))
    liveness = _liveness_columns(nodes, keys)
    edge_arrays = _edge_columns(edges, index)
    if liveness is False or edge_arrays is None:
        return None
    alias_rows = [i for i, node in enumerate(nodes) if "output_aliases" in node] \
        if "output_aliases" in keys else []
    return GraphColumns(names, ops, groups, time_us, memory, *edge_arrays, liveness, alias_rows, index)


def _numbers(values: list[Any], limit: float) -> np.ndarray | None:
    """``values`` as float64 when each is an int or float (not a bool), finite, ``>= 0`` and at most
    ``limit``; else None."""
    if not set(map(type, values)) <= _NUMBER_TYPES:
        return None
    try:
        array = np.array(values, dtype=np.float64)
    except (OverflowError, ValueError):  # an integer beyond the float range
        return None
    return None if out_of_range(array, limit).any() else array


def _node_columns(nodes: list[Any]) -> tuple[list[str], list[str], list[str | None], np.ndarray, np.ndarray,
                                             dict[str, int]] | None:
    """Names (non-empty, unique), ops, co-location groups, time (µs) and memory (bytes) of the nodes."""
    if not nodes or set(map(type, nodes)) != {dict}:
        return None
    try:
        names, ops, times, memory = (list(map(get, nodes)) for get in (_NAME, _OP, _TIME, _MEMORY))
    except KeyError:
        return None
    if set(map(type, names)) != {str} or "" in names or set(map(type, ops)) != {str}:
        return None
    index = dict(zip(names, range(len(names)), strict=True))
    time_us, memory_bytes = _numbers(times, MAX_TIME_US), _numbers(memory, MAX_BYTES)
    if len(index) != len(names) or time_us is None or memory_bytes is None:
        return None
    groups = [node.get("colocation") for node in nodes]
    if not set(map(type, groups)) <= {str, type(None)} or "" in groups:
        return None
    return names, ops, groups, time_us, memory_bytes, index


def _present(nodes: list[dict[str, Any]], key: str) -> tuple[np.ndarray, list[Any]]:
    """Which nodes give ``key``, and its values on those nodes."""
    mask = np.fromiter((key in node for node in nodes), dtype=bool, count=len(nodes))
    return mask, [node[key] for node in nodes if key in node]


def _liveness_columns(nodes: list[dict[str, Any]], keys: set[str]) -> Liveness | bool | None:
    """The nodes' ``persistent_bytes``, ``scratch_bytes`` and ``output_bytes`` (None: no node gives
    any; False: a value is invalid)."""
    n = len(nodes)
    if not keys & {"persistent_bytes", "scratch_bytes", "output_bytes"}:
        return None
    modelled = np.zeros(n, dtype=bool)
    per_node = []
    for key in ("persistent_bytes", "scratch_bytes"):
        mask, raw = _present(nodes, key)
        values = _numbers(raw, MAX_BYTES)
        if values is None:
            return False
        full = np.zeros(n, dtype=np.float64)
        full[mask] = values
        per_node.append(full)
        modelled |= mask
    mask, lists = _present(nodes, "output_bytes")
    if lists and set(map(type, lists)) != {list}:
        return False
    flat = _numbers(list(chain.from_iterable(lists)), MAX_BYTES)
    if flat is None:
        return False
    counts = np.zeros(n, dtype=np.int64)
    counts[mask] = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return Liveness(modelled | mask, per_node[0], per_node[1], ptr, flat)


def _edge_columns(edges: list[Any], index: dict[str, int]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(src, dst, bytes, src_output)`` of the edges: known endpoints, no self-loop, bytes within
    the limits, ``src_output`` an integer from 0 to 2**31 - 1."""
    m = len(edges)
    if m and set(map(type, edges)) != {dict}:
        return None
    try:
        src, dst = (np.fromiter(map(index.__getitem__, map(get, edges)), dtype=np.int64, count=m)
                    for get in (_SRC, _DST))
        raw_bytes = list(map(_BYTES, edges))
    except (KeyError, TypeError):  # a missing field, an unknown or unhashable endpoint
        return None
    nbytes = _numbers(raw_bytes, MAX_BYTES)
    outputs = [edge.get("src_output", 0) for edge in edges]
    if nbytes is None or (src == dst).any() or not set(map(type, outputs)) <= {int}:
        return None
    try:
        out = np.array(outputs, dtype=np.int64)
    except OverflowError:
        return None
    if ((out < 0) | (out >= MAX_SRC_OUTPUT)).any():
        return None
    return src, dst, nbytes, out
