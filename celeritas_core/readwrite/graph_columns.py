"""A graph document's fields gathered column by column: what both graph readers (JSON,
:mod:`celeritas_core.readwrite.formats`; columnar, :mod:`celeritas_core.readwrite.columnar`) build a
:class:`~celeritas_core.graphs.graph.Graph` from, the limits both check the columns against, and the
check both writers run first (:func:`check_graph_limits`).

:func:`json_columns` is the fast path of the ``celeritas-graph/1`` reader
(:func:`celeritas_core.readwrite.formats.graph_from_json`): it gathers every node and edge field of a parsed
document with list operations that run in C (``map``, ``set``, ``np.array``) and checks types,
names and ranges on whole columns. It never raises: on anything unexpected it returns None, and
the reader's node-by-node loop, which names the first offending node or edge, runs instead. So a
valid million-op document is checked in about two seconds (once parsed), and every error message
stays the same.
Units: time in µs, memory and tensor sizes in bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.graph import Graph, Liveness
from celeritas_core.limits import MAX_BYTES, MAX_SRC_OUTPUT, MAX_TIME_US, check_cost, check_total

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


# ---------------------------------------------------------------------------- checks and the Graph
def graph_from_columns(name: str, meta: Mapping[str, Any], cols: GraphColumns,
                       liveness: Liveness | None) -> Graph:
    """The :class:`Graph` of checked columns (raises on output aliases that name no input, and on
    a cycle)."""
    return Graph.from_arrays(
        name=name,
        node_names=cols.names,
        ops=cols.ops,
        time_us=cols.time_us,
        memory_bytes=cols.memory_bytes,
        colocation=cols.groups,
        edge_src=cols.edge_src,
        edge_dst=cols.edge_dst,
        edge_bytes=cols.edge_bytes,
        edge_src_output=cols.edge_src_output,
        meta=meta,
        liveness=liveness,
    )


def check_graph_totals(time_us: np.ndarray, memory: np.ndarray, nbytes: np.ndarray,
                        live_total: float) -> None:
    """The graph's sums stay within the limits: total time, total memory, total edge bytes and
    ``live_total``, the total of the liveness fields (docs/formats.md, "Limits")."""
    check_total(float(time_us.sum()), MAX_TIME_US, "the graph's total time_us", " µs")
    check_total(float(memory.sum()), MAX_BYTES, "the graph's total memory_bytes", " bytes")
    check_total(float(nbytes.sum()), MAX_BYTES, "the graph's total edge bytes", " bytes")
    check_total(live_total, MAX_BYTES,
                "the graph's total persistent_bytes + output_bytes + scratch_bytes", " bytes")


def first_out_of_range(values: np.ndarray, limit: float) -> int | None:
    """The index of the first value that is not finite, negative or above ``limit`` (None: none)."""
    bad = np.flatnonzero(out_of_range(values, limit))
    return int(bad[0]) if len(bad) else None


def check_cost_column(values: np.ndarray, where: Callable[[int], str], field_name: str, *,
                      limit: float = MAX_BYTES, unit: str = " bytes",
                      field_of: Callable[[int], str] | None = None) -> None:
    """Raise at the first value of ``values`` that is not finite, negative or above ``limit``,
    with the reader's message: ``where(i)`` names entry ``i`` (``node 'X'``), ``field_of(i)`` its
    field (default ``field_name``)."""
    i = first_out_of_range(values, limit)
    if i is not None:
        check_cost(float(values[i]), where(i), field_of(i) if field_of else field_name, limit=limit,
                   unit=unit)


def check_graph_limits(graph: Graph) -> None:
    """Raise unless every cost of ``graph`` (built in memory, e.g. generated) is within the limits
    the reader enforces, so that what :func:`celeritas_core.readwrite.formats.save_graph` writes can be read
    back."""
    names = graph.node_names

    def node(i: int) -> str:
        return f"node {names[i]!r}"

    check_cost_column(graph.time_us, node, "time_us", limit=MAX_TIME_US, unit=" µs")
    check_cost_column(graph.memory_bytes, node, "memory_bytes")
    check_cost_column(graph.edge_bytes, lambda k: f"edges[{k}]", "bytes")
    bad = np.flatnonzero((graph.edge_src_output < 0) | (graph.edge_src_output >= MAX_SRC_OUTPUT))
    if len(bad):
        raise CeleritasInputError(f"edges[{int(bad[0])}]: field 'src_output' must be an integer >= 0 and "
                                  f"< 2**31, got {int(graph.edge_src_output[int(bad[0])])}")
    live_total = 0.0
    live = graph.liveness
    if live is not None:
        modelled = np.asarray(live.modelled, dtype=bool)
        owner = np.repeat(np.arange(graph.num_nodes), np.diff(live.output_ptr))
        bad_node = modelled & (out_of_range(live.persistent_bytes) | out_of_range(live.scratch_bytes))
        bad_node[owner[out_of_range(live.output_bytes) & modelled[owner]]] = True
        if bad_node.any():  # the first such node's first bad value, named as the reader names it
            i = int(np.flatnonzero(bad_node)[0])
            own = [float(live.persistent_bytes[i]), float(live.scratch_bytes[i]), *live.outputs(i).tolist()]
            for k, x in enumerate(own):
                check_cost(x, node(i), "liveness bytes" if k < 2 else "output_bytes")
        live_total = float(live.persistent_bytes[modelled].sum() + live.scratch_bytes[modelled].sum()
                           + live.output_bytes[modelled[owner]].sum())
    check_graph_totals(graph.time_us, graph.memory_bytes, graph.edge_bytes, live_total)
