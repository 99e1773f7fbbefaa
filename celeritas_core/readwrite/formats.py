"""Reading and writing the JSON formats: celeritas-graph/1, celeritas-cluster/1 and /2, celeritas-placement/1.

Every reader validates fully and raises :class:`CeleritasInputError` with the file and the
offending node or field; every writer writes a temporary file and renames it into place, so a
failed run leaves no half-written output. The formats are documented in docs/formats.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from celeritas_core.defaults import DOCUMENTED_DISPATCH, ENFORCED_ORDER, FREE_ORDER, ORDER_MODES
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE, Cluster
from celeritas_core.graphs.graph import Graph, Liveness
from celeritas_core.graphs.levels import ccr
from celeritas_core.graphs.opkeys import MAX_KEY_CHARS, KeyedFits, fits_op_keys, read_op_keys
from celeritas_core.graphs.placement import Placement
from celeritas_core.graphs.topology import topology_from_json, topology_to_json
from celeritas_core.limits import (
    MAX_BATCH_SIZE,
    MAX_BYTES,
    MAX_DEVICES,
    MAX_INPUT_FILE_BYTES,
    MAX_SLOPE_US_PER_BYTE,
    MAX_SPEED,
    MAX_SRC_OUTPUT,
    MAX_TIME_US,
    MIN_SPEED,
    as_float,
    check_cost,
    check_total,
    is_number,
    short_repr,
)
from celeritas_core.readwrite.columnar import ZIP_MAGICS, graph_from_npz, npz_bytes
from celeritas_core.readwrite.format_tags import (  # re-exported: readers and writers import them from here
    CLUSTER_FORMAT,
    CLUSTER_FORMAT_V2,
    COMPARE_FORMAT,
    FITS_FORMAT,
    FITS_FORMAT_V2,
    GRAPH_FORMAT,
    PLACEMENT_FORMAT,
    PROFILE_FORMAT,
)
from celeritas_core.readwrite.graph_columns import (
    GraphColumns,
    check_graph_limits,
    check_graph_totals,
    first_out_of_range,
    graph_from_columns,
    json_columns,
)
from celeritas_core.readwrite.json_io import (
    gc_paused,
    json_bytes,
    parse_json,
    read_json,
    write_json_atomic,
    write_json_bytes,
)
from celeritas_core.readwrite.json_io import write_text_atomic as write_text_atomic  # re-exported
from celeritas_core.readwrite.pipeline_json import pipeline_from_json, pipeline_to_json
from celeritas_core.readwrite.safe_io import read_input_bytes, write_atomic
from celeritas_core.simulation.simulator import order_indices
from celeritas_core.statistics.estimation import MODEL_PARAMS, TIME_MODELS, TimeModels
from celeritas_core.statistics.regression import CostFits

# Every document's ``format`` tag is declared once in celeritas_core.readwrite.format_tags (re-exported here).
#: Where a cluster file's transfer model comes from (``comm.source``, optional; docs/formats.md).
COMM_SOURCES = ("calibrated", "default")


# ---------------------------------------------------------------------------- field checks
def _positive(x: Any) -> bool:
    return is_number(x) and math.isfinite(as_float(x)) and x > 0


def _check_format(doc: Any, expected: str) -> None:
    if not isinstance(doc, dict):
        raise CeleritasInputError(f"expected a JSON object with \"format\": \"{expected}\"")
    tag = doc.get("format")
    if tag is None:
        raise CeleritasInputError(f"missing field 'format' (expected {expected!r})")
    if tag != expected:
        raise CeleritasInputError(f"unknown format tag {short_repr(tag)} (expected {expected!r})")


def _time(value: Any, where: str, field_name: str) -> float:
    return check_cost(value, where, field_name, limit=MAX_TIME_US, unit=" µs")


# ---------------------------------------------------------------------------- graph
def graph_from_json(doc: Any) -> Graph:
    """Validate a ``celeritas-graph/1`` document and build a :class:`Graph`.

    The node and edge fields are gathered and checked column by column
    (:func:`~celeritas_core.readwrite.graph_columns.json_columns`); when that finds anything wrong, the
    node-by-node loop runs instead and names the first offending node or edge.
    """
    name, meta, raw_nodes, raw_edges = _graph_header(doc)
    with gc_paused():
        cols = json_columns(raw_nodes, raw_edges) or _read_columns(raw_nodes, raw_edges)
    check_graph_totals(cols.time_us, cols.memory_bytes, cols.edge_bytes, cols.live_total)
    liveness = _with_aliases(cols.liveness, _alias_fields(raw_nodes, cols))
    return graph_from_columns(name, meta, cols, liveness)


def _read_columns(raw_nodes: list[Any], raw_edges: list[Any]) -> GraphColumns:
    """The node-by-node reading of :func:`graph_from_json`: raises at the first bad node or edge."""
    nodes = _read_nodes(raw_nodes)
    src, dst, nbytes, out = _read_edges(raw_edges, nodes.index)
    modelled = any(p is not None or s is not None or o is not None
                   for p, s, o in zip(nodes.persistent, nodes.scratch, nodes.outputs, strict=True))
    liveness = Liveness.from_lists(nodes.persistent, nodes.scratch, nodes.outputs) if modelled else None
    rows = [i for i, node in enumerate(raw_nodes) if "output_aliases" in node]
    return GraphColumns(nodes.names, nodes.ops, nodes.groups, nodes.time_us, nodes.memory, src, dst, nbytes,
                        out, liveness, rows, nodes.index)


def _graph_header(doc: Any) -> tuple[str, dict[str, Any], list[Any], list[Any]]:
    """``(name, meta, nodes, edges)`` of a graph document, each of the right JSON type."""
    _check_format(doc, GRAPH_FORMAT)
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise CeleritasInputError("field 'name' must be a non-empty string")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise CeleritasInputError("field 'meta' must be an object")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise CeleritasInputError("field 'nodes' must be a list")
    if not nodes:
        raise CeleritasInputError("graph is empty: 'nodes' has no entries")
    edges = doc.get("edges", None)
    if not isinstance(edges, list):
        raise CeleritasInputError("field 'edges' must be a list")
    return name, meta, nodes, edges


@dataclass
class _NodeColumns:
    """The node fields of a graph document, column by column (µs, bytes)."""

    names: list[str]
    ops: list[str]
    groups: list[str | None]
    time_us: np.ndarray
    memory: np.ndarray
    persistent: list[float | None]
    scratch: list[float | None]
    outputs: list[list[float] | None]
    index: dict[str, int]

    @classmethod
    def empty(cls, n: int) -> _NodeColumns:
        """Columns for ``n`` nodes, to be filled by :func:`_read_nodes`."""
        return cls([""] * n, [""] * n, [None] * n, np.empty(n, dtype=np.float64),
                   np.empty(n, dtype=np.float64), [None] * n, [None] * n, [None] * n, {})


def _read_nodes(nodes: list[Any]) -> _NodeColumns:
    """Check every node object (name unique, op, costs within the limits, liveness fields,
    co-location group) and gather the columns."""
    cols = _NodeColumns.empty(len(nodes))
    index = cols.index
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise CeleritasInputError(f"nodes[{i}]: expected an object")
        node_name = node.get("name")
        if not isinstance(node_name, str) or not node_name:
            raise CeleritasInputError(f"nodes[{i}]: field 'name' must be a non-empty string")
        where = f"node {node_name!r}"
        if node_name in index:
            raise CeleritasInputError(
                f"{where}: duplicate node name (nodes[{index[node_name]}] and nodes[{i}])"
            )
        index[node_name] = i
        cols.names[i] = node_name
        op = node.get("op")
        if not isinstance(op, str):
            raise CeleritasInputError(f"{where}: field 'op' must be a string")
        cols.ops[i] = op
        if "time_us" not in node:
            raise CeleritasInputError(f"{where}: missing field 'time_us'")
        if "memory_bytes" not in node:
            raise CeleritasInputError(f"{where}: missing field 'memory_bytes'")
        cols.time_us[i] = _time(node["time_us"], where, "time_us")
        cols.memory[i] = check_cost(node["memory_bytes"], where, "memory_bytes")
        cols.persistent[i], cols.scratch[i], cols.outputs[i] = _liveness_fields(node, where)
        group = node.get("colocation")
        if group is not None:
            if not isinstance(group, str) or not group:
                raise CeleritasInputError(f"{where}: field 'colocation' must be a non-empty string")
            cols.groups[i] = group
    return cols


def _read_edges(edges: list[Any], index: Mapping[str, int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, bytes, src_output)`` arrays of the edge objects, each checked (known
    endpoints, no self-loop, bytes within the limits, ``src_output`` a small integer)."""
    m = len(edges)
    src = np.empty(m, dtype=np.int64)
    dst = np.empty(m, dtype=np.int64)
    nbytes = np.empty(m, dtype=np.float64)
    out = np.zeros(m, dtype=np.int64)
    for k, edge in enumerate(edges):
        if not isinstance(edge, dict):
            raise CeleritasInputError(f"edges[{k}]: expected an object")
        s = edge.get("src")
        d = edge.get("dst")
        if not isinstance(s, str) or not isinstance(d, str):
            raise CeleritasInputError(f"edges[{k}]: fields 'src' and 'dst' must be node names")
        si = index.get(s)
        if si is None:
            raise CeleritasInputError(f"edges[{k}]: src {s!r} is not a node of the graph")
        di = index.get(d)
        if di is None:
            raise CeleritasInputError(f"edges[{k}]: dst {d!r} is not a node of the graph")
        if si == di:
            raise CeleritasInputError(f"edges[{k}]: self-loop on node {s!r}")
        src[k] = si
        dst[k] = di
        if "bytes" not in edge:
            raise CeleritasInputError(f"edges[{k}] ({s!r} -> {d!r}): missing field 'bytes'")
        nbytes[k] = check_cost(edge["bytes"], f"edges[{k}] ({s!r} -> {d!r})", "bytes")
        so = edge.get("src_output", 0)
        if not isinstance(so, int) or isinstance(so, bool) or not 0 <= so < MAX_SRC_OUTPUT:
            raise CeleritasInputError(
                f"edges[{k}] ({s!r} -> {d!r}): field 'src_output' must be an integer >= 0 and "
                f"< 2**31, got {short_repr(so)}"
            )
        out[k] = so
    return src, dst, nbytes, out


def _alias_fields(nodes: list[Any], cols: GraphColumns) -> dict[int, list[tuple[int, int] | None]]:
    """The optional ``output_aliases`` of the nodes that give them, as ``(producer index, output)``
    pairs per declared output (None: the output's own buffer)."""
    ptr = cols.liveness.output_ptr if cols.liveness is not None else None
    result: dict[int, list[tuple[int, int] | None]] = {}
    for i in cols.alias_rows:
        node = nodes[i]
        where = f"node {node['name']!r}"
        raw = node["output_aliases"]
        declared = int(ptr[i + 1] - ptr[i]) if ptr is not None else 0
        if not isinstance(raw, list) or len(raw) != declared:
            raise CeleritasInputError(f"{where}: field 'output_aliases' must be a list with one entry per "
                                      f"output_bytes entry ({declared})")
        result[i] = [_alias_entry(x, cols.index, where, k) for k, x in enumerate(raw)]
    return result


def _with_aliases(liveness: Liveness | None,
                  aliases: Mapping[int, list[tuple[int, int] | None]]) -> Liveness | None:
    """``liveness`` with the output aliases of :func:`_alias_fields` (unchanged when no node lists any)."""
    if liveness is None or not any(aliases.values()):
        return liveness
    node = np.full(len(liveness.output_bytes), -1, dtype=np.int64)
    output = np.full(len(liveness.output_bytes), -1, dtype=np.int64)
    for i, entries in aliases.items():
        start = int(liveness.output_ptr[i])
        for o, target in enumerate(entries):
            if target is not None:
                node[start + o], output[start + o] = target
    return dataclasses.replace(liveness, alias_node=node, alias_output=output)


def _alias_entry(raw: Any, index: Mapping[str, int], where: str, k: int) -> tuple[int, int] | None:
    """One ``output_aliases`` entry: null, or ``{"node": NAME, "output": K}``."""
    if raw is None:
        return None
    node, output = (raw.get("node"), raw.get("output")) if isinstance(raw, dict) else (None, None)
    known = isinstance(node, str) and node in index
    if (not known or not isinstance(output, int) or isinstance(output, bool)
            or not 0 <= output < MAX_SRC_OUTPUT):
        raise CeleritasInputError(f"{where}: output_aliases[{k}] must be null or {{\"node\": NAME, "
                                  f"\"output\": K}} naming an input tensor, got {short_repr(raw)}")
    return index[node], output


def _liveness_fields(node: dict[str, Any],
                     where: str) -> tuple[float | None, float | None, list[float] | None]:
    """The optional ``persistent_bytes``, ``scratch_bytes`` and ``output_bytes`` of a node (bytes)."""
    persistent, scratch = (check_cost(node[key], where, key) if key in node else None
                           for key in ("persistent_bytes", "scratch_bytes"))
    outputs = None
    if "output_bytes" in node:
        raw = node["output_bytes"]
        if not isinstance(raw, list):
            raise CeleritasInputError(
                f"{where}: field 'output_bytes' must be a list of numbers, got {short_repr(raw)}")
        outputs = [check_cost(x, where, f"output_bytes[{k}]") for k, x in enumerate(raw)]
    return persistent, scratch, outputs


def graph_to_json(graph: Graph) -> dict[str, Any]:
    """The ``celeritas-graph/1`` document of ``graph``."""
    names = graph.node_names
    with gc_paused():
        nodes = [{"name": node, "op": op, "time_us": t, "memory_bytes": m}
                 for node, op, t, m in zip(names, graph.ops, graph.time_us.tolist(),
                                           _json_numbers(graph.memory_bytes), strict=True)]
        for i, group in enumerate(graph.colocation):
            if group is not None:
                nodes[i]["colocation"] = group
        if graph.liveness is not None:
            _liveness_to_json(graph.liveness, names, nodes)
        edges = [{"src": s, "dst": d, "bytes": b}
                 for s, d, b in zip(map(names.__getitem__, graph.edge_src.tolist()),
                                    map(names.__getitem__, graph.edge_dst.tolist()),
                                    _json_numbers(graph.edge_bytes), strict=True)]
        out = graph.edge_src_output
        for k in np.flatnonzero(out).tolist():
            edges[k]["src_output"] = int(out[k])
    return {"format": GRAPH_FORMAT, "name": graph.name, "meta": dict(graph.meta),
            "nodes": nodes, "edges": edges}


def _liveness_to_json(live: Liveness, names: tuple[str, ...], nodes: list[dict[str, Any]]) -> None:
    """Add the liveness fields of the modelled nodes to their ``nodes`` entries."""
    for i in np.flatnonzero(live.modelled).tolist():
        entry = nodes[i]
        entry["persistent_bytes"] = _json_number(live.persistent_bytes[i])
        entry["output_bytes"] = [_json_number(x) for x in live.outputs(i)]
        if live.scratch_bytes[i]:
            entry["scratch_bytes"] = _json_number(live.scratch_bytes[i])
        aliases = live.aliases(i)
        if any(a is not None for a in aliases):
            entry["output_aliases"] = [None if a is None else {"node": names[a[0]], "output": a[1]}
                                       for a in aliases]


def _json_number(x: float) -> int | float:
    """An integral float as an int (bytes read back exactly), any other as a float."""
    return int(x) if float(x).is_integer() else float(x)


def _json_numbers(values: np.ndarray) -> list[int | float]:
    """:func:`_json_number` of each value (a whole column of integral floats at once)."""
    if len(values) and np.isfinite(values).all() and np.abs(values).max() < 2**62 \
            and (values == np.floor(values)).all():
        return values.astype(np.int64).tolist()
    return [int(x) if x.is_integer() else x for x in values.tolist()]


def graph_from_bytes(data: bytes, source: str | None = None) -> Graph:
    """Validate a graph file's content and build the :class:`Graph`: the columnar format when it
    is a zip archive (it starts with ``PK\\x03\\x04``), ``celeritas-graph/1`` JSON otherwise.
    Errors name ``source``."""
    try:
        if data[:4] in ZIP_MAGICS:
            return graph_from_npz(data)
        return graph_from_json(parse_json(data, source))
    except CeleritasInputError as exc:
        raise exc.with_source(source) if source else exc from None


def load_graph(path: str | os.PathLike[str]) -> Graph:
    """Read and validate a graph file, JSON or columnar (:func:`graph_from_bytes`).

    Parameters
    ----------
    path : str or os.PathLike
        A regular file of at most :data:`~celeritas_core.limits.MAX_INPUT_FILE_BYTES` bytes:
        ``celeritas-graph/1`` JSON, or the columnar ``celeritas-graph-columns/1`` (a zip archive,
        told by its first bytes, whatever the extension); docs/formats.md.

    Returns
    -------
    Graph
        The validated graph.

    Raises
    ------
    CeleritasInputError
        One line naming the file and the first problem: missing or unreadable, too large, not
        the format, a bad field, node or edge, a cycle, or a value beyond the limits.

    See Also
    --------
    save_graph : writes either format.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from celeritas_core import Graph, load_graph, save_graph
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     again = load_graph(save_graph(graph, pathlib.Path(tmp) / "diamond.json"))
    >>> again.name, again.node_names, again.edge_bytes.tolist()
    ('diamond', ('a', 'b', 'c', 'd'), [1000.0, 1000.0, 1000.0, 1000.0])
    >>> load_graph("no-such-graph.json")
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: no-such-graph.json: file not found
    """
    source = os.fspath(path)
    return graph_from_bytes(read_input_bytes(source), source)


#: The graph file formats :func:`save_graph` writes, by name.
GRAPH_FILE_FORMATS = ("json", "npz")


def graph_file_format(path: str | os.PathLike[str], file_format: str | None = None) -> str:
    """``file_format`` when given, else the format of ``path``'s extension: ``npz`` for ``.npz``
    (any case), ``json`` for anything else."""
    if file_format is not None:
        if file_format not in GRAPH_FILE_FORMATS:
            raise CeleritasInputError(f"unknown graph file format {file_format!r} (expected json or npz)")
        return file_format
    return "npz" if os.fspath(path).lower().endswith(".npz") else "json"


def save_graph(graph: Graph, path: str | os.PathLike[str], *,
               inputs: Iterable[str | os.PathLike[str] | None] = (), file_format: str | None = None) -> Path:
    """Write ``graph`` atomically as ``celeritas-graph/1`` JSON, or as the columnar
    ``celeritas-graph-columns/1`` when ``path`` ends in ``.npz`` (or ``file_format`` says so). A
    graph beyond the limits, which the reader would refuse, is refused here.

    Parameters
    ----------
    graph : Graph
        The graph to write.
    path : str or os.PathLike
        The file to write (replaced whole, or left as it was on an error).
    inputs : iterable of paths or None, optional
        The command's input files, which the output may not overwrite.
    file_format : {"json", "npz"}, optional
        The format, whatever the extension; default ``npz`` for a ``.npz`` path, else ``json``.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    CeleritasInputError
        When ``path`` may not be written (a folder, a symbolic link, a read-only folder, one of
        ``inputs``: :func:`~celeritas_core.readwrite.safe_io.check_output_path`).
        Also when the graph is beyond the limits a reader accepts, or its JSON would exceed the
        input size limit (write the columnar format then).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from celeritas_core import Graph, load_graph, save_graph
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     json_path = save_graph(graph, pathlib.Path(tmp) / "diamond.json")
    ...     npz_path = save_graph(graph, pathlib.Path(tmp) / "diamond.npz")
    ...     print(json_path.read_text()[:46])
    ...     print(load_graph(npz_path).time_us.tolist())
    {"format":"celeritas-graph/1","name":"diamond"
    [10.0, 50.0, 50.0, 10.0]
    """
    if graph_file_format(path, file_format) == "npz":
        data = npz_bytes(graph)
        return write_atomic(path, lambda fh: fh.write(data), binary=True, inputs=inputs)
    check_graph_limits(graph)
    json_bytes(dict(graph.meta))  # the one part whose floats check_graph_limits does not check
    data = json_bytes(graph_to_json(graph), finite=True)
    if len(data) + 1 > MAX_INPUT_FILE_BYTES:  # with its final line break
        raise CeleritasInputError(
            f"{os.fspath(path)}: the graph's JSON would be {len(data) + 1:,} bytes, above the "
            f"{MAX_INPUT_FILE_BYTES:,} bytes a reader accepts; write the columnar format (a .npz path)")
    return write_atomic(path, lambda fh: write_json_bytes(fh, data), binary=True, inputs=inputs)


# ---------------------------------------------------------------------------- cluster
def cluster_from_json(doc: Any) -> Cluster:
    """Validate a ``celeritas-cluster/1`` or ``/2`` document and build a :class:`Cluster` (with its
    ``topology`` when a ``/2`` document has one)."""
    if isinstance(doc, dict) and doc.get("format") == CLUSTER_FORMAT_V2:
        pass
    else:
        try:
            _check_format(doc, CLUSTER_FORMAT)
        except CeleritasInputError as exc:
            raise CeleritasInputError(exc.message.replace(
                f"{CLUSTER_FORMAT!r})", f"{CLUSTER_FORMAT!r} or {CLUSTER_FORMAT_V2!r})")) from None
        if doc.get("topology") is not None:
            raise CeleritasInputError(f"field 'topology' needs \"format\": \"{CLUSTER_FORMAT_V2}\" "
                                      f"(a reader of {CLUSTER_FORMAT} alone would ignore it)")
    devices = doc.get("devices")
    if not isinstance(devices, list):
        raise CeleritasInputError("field 'devices' must be a list")
    if not devices:
        raise CeleritasInputError("devices: the cluster has no devices (zero devices)")
    if len(devices) > MAX_DEVICES:
        raise CeleritasInputError(f"devices: {len(devices):,} devices, above the limit of {MAX_DEVICES:,}")
    names: list[str] = []
    seen: dict[str, int] = {}
    memory: list[float] = []
    speed: list[float] = []
    for i, dev in enumerate(devices):
        if not isinstance(dev, dict):
            raise CeleritasInputError(f"devices[{i}]: expected an object")
        dev_name = dev.get("name")
        if not isinstance(dev_name, str) or not dev_name:
            raise CeleritasInputError(f"devices[{i}]: field 'name' must be a non-empty string")
        where = f"devices[{i}] ({dev_name!r})"
        mem = dev.get("memory_bytes")
        if not _positive(mem):
            raise CeleritasInputError(
                f"{where}: field 'memory_bytes' must be a positive number, got {short_repr(mem)}"
            )
        check_cost(mem, where, "memory_bytes")
        spd = dev.get("speed", 1.0)
        if not _positive(spd):
            raise CeleritasInputError(
                f"{where}: field 'speed' must be a positive number, got {short_repr(spd)}")
        if not MIN_SPEED <= spd <= MAX_SPEED:
            raise CeleritasInputError(f"{where}: field 'speed' must be from {MIN_SPEED:g} to {MAX_SPEED:g} "
                                      f"(the limits), got {short_repr(spd)}")
        if dev_name in seen:
            raise CeleritasInputError(
                f"devices[{i}]: duplicate device name {dev_name!r} (devices[{seen[dev_name]}])"
            )
        seen[dev_name] = i
        names.append(dev_name)
        memory.append(float(mem))
        speed.append(float(spd))
    comm = doc.get("comm", {})
    if not isinstance(comm, dict):
        raise CeleritasInputError("field 'comm' must be an object")
    topology = topology_from_json(doc["topology"], names) if doc.get("topology") is not None else None
    flat = topology.mean_link() if topology is not None else (DEFAULT_SLOPE_US_PER_BYTE, DEFAULT_INTERCEPT_US)
    slope = comm.get("slope_us_per_byte", flat[0])
    intercept = comm.get("intercept_us", flat[1])
    for field_name, value, limit, unit in (("slope_us_per_byte", slope, MAX_SLOPE_US_PER_BYTE, " µs/B"),
                                           ("intercept_us", intercept, MAX_TIME_US, " µs")):
        if not is_number(value) or not math.isfinite(as_float(value)) or value < 0:
            raise CeleritasInputError(
                f"comm: field '{field_name}' must be a finite number >= 0, got {short_repr(value)}"
            )
        check_cost(value, "comm", field_name, limit=limit, unit=unit)
    _check_comm_provenance(comm)
    return Cluster.build(names, memory, speed, slope_us_per_byte=slope, intercept_us=intercept,
                         topology=topology)


def _check_comm_provenance(comm: dict[str, Any]) -> None:
    """The optional ``comm.source`` (one of :data:`COMM_SOURCES`) and ``comm.calibration`` (an
    object, informational) of a cluster document."""
    source = comm.get("source")
    if source is not None and source not in COMM_SOURCES:
        allowed = ", ".join(map(repr, COMM_SOURCES))
        raise CeleritasInputError(f"comm: field 'source' must be one of {allowed}, got {short_repr(source)}")
    calibration = comm.get("calibration")
    if calibration is not None and not isinstance(calibration, dict):
        raise CeleritasInputError(
            f"comm: field 'calibration' must be an object, got {short_repr(calibration)}")


def cluster_to_json(cluster: Cluster, *, source: str | None = None,
                    calibration: Mapping[str, Any] | None = None,
                    link_records: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The ``celeritas-cluster/1`` document of a flat ``cluster``, or the ``/2`` document with its
    ``topology``; ``source`` (``calibrated`` or ``default``) and ``calibration`` (what was measured)
    record where its transfer model comes from, ``link_records`` (link name → ``source``,
    ``calibration``) where each link's does."""
    comm: dict[str, Any] = {"slope_us_per_byte": cluster.slope_us_per_byte,
                            "intercept_us": cluster.intercept_us}
    if source is not None:
        comm["source"] = source
    if calibration is not None:
        comm["calibration"] = dict(calibration)
    _check_comm_provenance(comm)
    if link_records and cluster.topology is None:
        raise CeleritasInputError("link_records: a flat cluster has no links to record")
    doc: dict[str, Any] = {
        "format": CLUSTER_FORMAT if cluster.topology is None else CLUSTER_FORMAT_V2,
        "devices": [
            {"name": n, "memory_bytes": int(m) if float(m).is_integer() else float(m), "speed": float(s)}
            for n, m, s in zip(cluster.device_names, cluster.memory_bytes, cluster.speed, strict=True)
        ],
        "comm": comm,
    }
    if cluster.topology is not None:
        doc["topology"] = topology_to_json(cluster.topology, cluster.device_names, link_records)
    return doc


def load_cluster(path: str | os.PathLike[str]) -> Cluster:
    """Read and validate a cluster file.

    Parameters
    ----------
    path : str or os.PathLike
        A ``celeritas-cluster/1`` JSON file (docs/formats.md).

    Returns
    -------
    Cluster
        The validated cluster.

    Raises
    ------
    CeleritasInputError
        One line naming the file and the first problem (missing, not JSON, a bad device or
        transfer model field).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from celeritas_core import Cluster, load_cluster, save_cluster
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = pathlib.Path(tmp) / "cluster.json"
    ...     _ = path.write_text('{"format": "celeritas-cluster/1", "devices": ['
    ...                         '{"name": "gpu:0", "memory_bytes": 1e9}, '
    ...                         '{"name": "gpu:1", "memory_bytes": 5e8}]}')
    ...     cluster = load_cluster(path)
    >>> cluster.device_names, cluster.memory_bytes.tolist(), cluster.intercept_us
    (('gpu:0', 'gpu:1'), [1000000000.0, 500000000.0], 25.0)
    """
    try:
        return cluster_from_json(read_json(path))
    except CeleritasInputError as exc:
        raise exc.with_source(str(path)) from None


def save_cluster(cluster: Cluster, path: str | os.PathLike[str], *,
                 inputs: Iterable[str | os.PathLike[str] | None] = (), source: str | None = None,
                 calibration: Mapping[str, Any] | None = None,
                 link_records: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """Write ``cluster`` atomically as ``celeritas-cluster/1``, or ``/2`` with a topology
    (``source``, ``calibration`` and ``link_records``: see :func:`cluster_to_json`).

    Parameters
    ----------
    cluster : Cluster
        The devices and transfer model to write.
    path : str or os.PathLike
        The file to write (replaced whole, or left as it was on an error).
    inputs : iterable of paths or None, optional
        The command's input files, which the output may not overwrite.
    source : {"calibrated", "default"}, optional
        Where the transfer model comes from, recorded in ``comm.source``.
    calibration : mapping, optional
        What a calibration measured, recorded in ``comm.calibration``.
    link_records : mapping, optional
        Per topology link, what its calibration measured (``/2`` files only).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    CeleritasInputError
        When ``path`` may not be written (a folder, a symbolic link, a read-only folder, one of
        ``inputs``: :func:`~celeritas_core.readwrite.safe_io.check_output_path`).

    Examples
    --------
    >>> import json, pathlib, tempfile
    >>> from celeritas_core import Cluster, load_cluster, save_cluster
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = save_cluster(Cluster.homogeneous(2, 1e9), pathlib.Path(tmp) / "cluster.json",
    ...                         source="default")
    ...     doc = json.loads(path.read_text())
    ...     again = load_cluster(path)
    >>> doc["devices"][1]
    {'name': 'gpu:1', 'memory_bytes': 1000000000, 'speed': 1.0}
    >>> doc["comm"]
    {'slope_us_per_byte': 0.0001, 'intercept_us': 25.0, 'source': 'default'}
    >>> again.device_names
    ('gpu:0', 'gpu:1')
    """
    doc = cluster_to_json(cluster, source=source, calibration=calibration, link_records=link_records)
    return write_json_atomic(path, doc, indent=2, inputs=inputs)


# ---------------------------------------------------------------------------- placement
def placement_from_json(doc: Any, graph: Graph, cluster: Cluster | None = None) -> Placement:
    """Validate a ``celeritas-placement/1`` document against ``graph`` (and ``cluster``)."""
    _check_format(doc, PLACEMENT_FORMAT)
    devices = doc.get("devices")
    if not isinstance(devices, list) or not devices or not all(isinstance(d, str) for d in devices):
        raise CeleritasInputError("field 'devices' must be a non-empty list of device names")
    if len(devices) > MAX_DEVICES:
        raise CeleritasInputError(
            f"field 'devices': {len(devices):,} devices, above the limit of {MAX_DEVICES:,}")
    _check_placement_devices(doc, devices)
    if cluster is not None and len(devices) != cluster.num_devices:
        raise CeleritasInputError(
            f"placement uses {len(devices)} devices but the cluster has {cluster.num_devices}"
        )
    assignment = doc.get("assignment")
    if not isinstance(assignment, Mapping):
        raise CeleritasInputError("field 'assignment' must be an object mapping node name to device")
    result = _assignment(assignment, graph, len(devices))
    missing = np.flatnonzero(result < 0)
    if len(missing):
        raise CeleritasInputError(
            f"assignment: node {graph.node_names[int(missing[0])]!r} is not placed "
            f"({len(missing)} nodes missing)"
        )
    placer = doc.get("placer", "unknown")
    if not isinstance(placer, str):
        raise CeleritasInputError(f"field 'placer' must be a string, got {short_repr(placer)}")
    params = doc.get("params", {})
    if not isinstance(params, dict):
        raise CeleritasInputError("field 'params' must be an object")
    seconds = doc.get("placement_seconds")
    if seconds is not None and (not is_number(seconds) or not math.isfinite(as_float(seconds))
                                or seconds < 0):
        raise CeleritasInputError(
            f"field 'placement_seconds' must be a number >= 0, got {short_repr(seconds)}")
    placement_op_keys_digest(doc)
    placement_batch_size(doc)
    coarse_nodes = doc.get("coarse_nodes")
    if coarse_nodes is not None and (not isinstance(coarse_nodes, int) or isinstance(coarse_nodes, bool)
                                     or not 1 <= coarse_nodes < MAX_SRC_OUTPUT):
        raise CeleritasInputError(
            f"field 'coarse_nodes' must be an integer >= 1 and < 2**31, got {short_repr(coarse_nodes)}")
    return Placement(
        placer=placer,
        params=dict(params),
        devices=tuple(devices),
        node_names=graph.node_names,
        assignment=result,
        graph_name=graph.name,
        placement_seconds=float(seconds or 0.0),
        coarse_nodes=coarse_nodes,
        device_order=_device_order_indices(doc, graph, result),
        order_mode=placement_order_mode(doc),
        pipeline=pipeline_from_json(doc, graph.index, devices),
    )


def _check_placement_devices(doc: Mapping[str, Any], devices: list[str]) -> None:
    """A placement's device names are distinct and non-empty, and its ``device_capacity_bytes``,
    when recorded, gives each a number of bytes ``>= 0`` (checked whatever cluster replays it)."""
    for i, name in enumerate(devices):
        if not name.strip():
            raise CeleritasInputError(f"field 'devices[{i}]' must be a non-empty device name")
    if len(set(devices)) != len(devices):
        twice = next(name for i, name in enumerate(devices) if name in devices[:i])
        raise CeleritasInputError(f"field 'devices': device {twice!r} is listed twice")
    caps = doc.get("device_capacity_bytes")
    if caps is None or caps == []:  # not recorded (an unevaluated placement writes [])
        return
    if not isinstance(caps, list) or len(caps) != len(devices):
        raise CeleritasInputError(f"field 'device_capacity_bytes' must be an array of {len(devices)} "
                                  f"byte counts (one per device), got {short_repr(caps)}")
    for i, cap in enumerate(caps):
        if not is_number(cap) or not math.isfinite(as_float(cap)) or cap < 0 or cap > MAX_BYTES:
            raise CeleritasInputError(f"field 'device_capacity_bytes[{i}]' must be a number of bytes >= 0, "
                                      f"got {short_repr(cap)}")


def _device_order_indices(doc: Mapping[str, Any], graph: Graph,
                          assignment: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """The document's ``device_order`` as node indices, checked against ``assignment`` (every
    node once, on its own device); None when the document records none. Dependencies are
    checked by the replay (:func:`~celeritas_core.simulation.simulator.simulate`)."""
    names = placement_device_order(doc)
    if names is None:
        return None
    index = graph.index
    order = []
    for ops in names:
        try:
            order.append(np.fromiter(map(index.__getitem__, ops), dtype=np.int64, count=len(ops)))
        except KeyError as exc:
            raise CeleritasInputError(
                f"device_order: op {exc.args[0]!r} is not in graph {graph.name!r}") from None
    order_indices(graph, assignment, len(names), order)
    return tuple(order)


def placement_batch_size(doc: Any, source: str | None = None) -> int | None:
    """A placement document's optional ``batch_size``: the training batch the placed graph's costs
    and memory were measured at (its ``meta.batch_size``); None when not recorded.

    Examples
    --------
    >>> placement_batch_size({"batch_size": 16}), placement_batch_size({})
    (16, None)
    """
    batch = doc.get("batch_size") if isinstance(doc, dict) else None
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool)
                              or not 1 <= batch <= MAX_BATCH_SIZE):
        raise CeleritasInputError(f"field 'batch_size' must be an integer from 1 to {MAX_BATCH_SIZE:,}, "
                                  f"got {short_repr(batch)}", source=source)
    return batch


def placement_op_keys_digest(doc: Any, source: str | None = None) -> str | None:
    """A placement document's optional ``op_keys_digest`` (the structure of the graph it was made
    for; None when absent), checked: a string of 1 to :data:`~celeritas_core.graphs.opkeys.MAX_KEY_CHARS`."""
    digest = doc.get("op_keys_digest") if isinstance(doc, dict) else None
    if digest is not None and not (isinstance(digest, str) and 0 < len(digest) <= MAX_KEY_CHARS):
        raise CeleritasInputError(f"field 'op_keys_digest' must be a string of 1 to {MAX_KEY_CHARS} "
                                  f"characters, got {short_repr(digest)}", source=source)
    return digest


def placement_order_mode(doc: Any, source: str | None = None) -> str:
    """A placement document's ``order_mode`` (docs/formats.md): ``"enforced"`` or ``"free"``.

    Absent, it is ``"enforced"`` when the document records a ``device_order`` and ``"free"``
    otherwise (files written before the order was recorded).

    Examples
    --------
    >>> placement_order_mode({}), placement_order_mode({"device_order": [["a"]]})
    ('free', 'enforced')
    >>> placement_order_mode({"order_mode": "sorted"})
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: field 'order_mode' must be one of enforced, free, got 'sorted'
    """
    mode = doc.get("order_mode") if isinstance(doc, dict) else None
    if mode is None:
        return ENFORCED_ORDER if isinstance(doc, dict) and doc.get("device_order") is not None else FREE_ORDER
    if mode not in ORDER_MODES:
        raise CeleritasInputError(f"field 'order_mode' must be one of {', '.join(ORDER_MODES)}, "
                                  f"got {short_repr(mode)}", source=source)
    return str(mode)


def placement_device_order(doc: Any, source: str | None = None) -> tuple[tuple[str, ...], ...] | None:
    """A placement document's ``device_order``: per device index, the names of its ops in the
    order they run (None when absent). Checks the shape only: one array of strings per device of
    ``devices``; :func:`check_device_order` checks the names against an assignment.

    Examples
    --------
    >>> placement_device_order({"devices": ["g0", "g1"], "device_order": [["a", "b"], ["c"]]})
    (('a', 'b'), ('c',))
    >>> placement_device_order({"devices": ["g0", "g1"], "device_order": [["a", "b"]]})
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: field 'device_order' has 1 entries for 2 devices
    """
    order = doc.get("device_order") if isinstance(doc, dict) else None
    if order is None:
        return None
    devices = doc.get("devices")
    if not isinstance(order, list):
        raise CeleritasInputError("field 'device_order' must be an array of arrays of op names, one per "
                                  "device", source=source)
    if isinstance(devices, list) and len(order) != len(devices):
        raise CeleritasInputError(f"field 'device_order' has {len(order)} entries for {len(devices)} devices",
                                  source=source)
    for d, ops in enumerate(order):
        if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
            raise CeleritasInputError(f"field 'device_order[{d}]' must be an array of op names, got "
                                      f"{short_repr(ops)}", source=source)
    return tuple(tuple(ops) for ops in order)


def check_device_order(order: Sequence[Sequence[str]], assignment: Mapping[str, int],
                       source: str | None = None) -> None:
    """Check that ``order`` lists every op of ``assignment`` exactly once, on its own device.

    ``order[d]`` names device ``d``'s ops in the order they run; ``assignment`` maps every op name
    to its device index. Dependencies are checked by whoever holds them
    (:func:`~celeritas_core.simulation.simulator.order_indices` for a graph).

    Raises
    ------
    CeleritasInputError
        One line naming the first op that is unknown, listed twice, listed on another device than
        its assignment's, or missing.

    Examples
    --------
    >>> check_device_order([["a", "b"], ["c"]], {"a": 0, "b": 0, "c": 1})
    >>> check_device_order([["a"], ["c", "b"]], {"a": 0, "b": 0, "c": 1})
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: device_order: op 'b' is listed on device 1, assigned to 0
    """
    seen: set[str] = set()
    for d, ops in enumerate(order):
        for op in ops:
            device = assignment.get(op)
            if device is None:
                raise CeleritasInputError(f"device_order: op {op!r} is not an op of the placement",
                                          source=source)
            if op in seen:
                raise CeleritasInputError(f"device_order: op {op!r} is listed twice", source=source)
            if device != d:
                raise CeleritasInputError(f"device_order: op {op!r} is listed on device {d}, assigned to "
                                          f"{device}", source=source)
            seen.add(op)
    if len(seen) != len(assignment):
        missing = next(op for op in assignment if op not in seen)
        raise CeleritasInputError(f"device_order: op {missing!r} is not listed "
                                  f"({len(assignment) - len(seen)} ops missing)", source=source)


def _assignment(assignment: Mapping[Any, Any], graph: Graph, num_devices: int) -> np.ndarray:
    """Each node's device index from an ``assignment`` object (-1: not placed). Gathered column by
    column; on any problem the loop below names the first offending node."""
    result = np.full(graph.num_nodes, -1, dtype=np.int64)
    index = graph.index
    values = list(assignment.values())
    if set(map(type, values)) <= {int}:
        with contextlib.suppress(KeyError, TypeError, OverflowError):
            rows = np.fromiter(map(index.__getitem__, assignment), dtype=np.int64, count=len(values))
            devices = np.array(values, dtype=np.int64)
            if not ((devices < 0) | (devices >= num_devices)).any():
                result[rows] = devices
                return result
    for node, dev in assignment.items():
        i = index.get(node)
        if i is None:
            raise CeleritasInputError(f"assignment: node {node!r} is not in graph {graph.name!r}")
        if not isinstance(dev, int) or isinstance(dev, bool) or not 0 <= dev < num_devices:
            raise CeleritasInputError(
                f"assignment: node {node!r} has device {short_repr(dev)}, "
                f"expected an index 0..{num_devices - 1}"
            )
        result[i] = dev
    return result


def placement_to_json(placement: Placement, *, op_keys_digest: str | None = None,
                      batch_size: int | None = None) -> dict[str, Any]:
    """The ``celeritas-placement/1`` document of ``placement`` (evaluation figures null or empty
    when it has no evaluation; the evaluation's busy times and OOM excess under ``extra``);
    ``op_keys_digest``: the digest of the placed graph's op keys (its ``meta``), which validation
    compares with the step it runs."""
    p = placement
    doc: dict[str, Any] = {
        "format": PLACEMENT_FORMAT,
        "graph": p.graph_name,
        "placer": p.placer,
        "params": p.params,
        "devices": list(p.devices),
        "assignment": dict(zip(p.node_names, p.assignment.tolist(), strict=True)),
        "predicted_step_time_us": _finite_or_none(p.predicted_step_time_us),
        "single_device_time_us": _finite_or_none(p.single_device_time_us),
        "lower_bound_us": _finite_or_none(p.lower_bound_us),
        "gap_to_lower_bound": _finite_or_none(p.gap_to_lower_bound),
        "device_memory_bytes": [int(x) for x in p.device_memory_bytes],
        "device_peak_memory_bytes": [int(x) for x in p.device_peak_memory_bytes],
        "single_device_peak_memory_bytes": _finite_or_none(p.single_device_peak_memory_bytes),
        "device_capacity_bytes": [int(x) for x in p.device_capacity_bytes],
        "oom": p.oom,
        "oom_devices": list(p.oom_devices),
        "placement_seconds": p.placement_seconds,
    }
    if p.coarse_nodes is not None:
        doc["coarse_nodes"] = p.coarse_nodes
    if op_keys_digest:
        doc["op_keys_digest"] = str(op_keys_digest)
    if batch_size is not None:
        doc["batch_size"] = int(batch_size)
    doc["order_mode"] = p.order_mode
    if p.device_order is not None:
        names = p.node_names
        doc["device_order"] = [[names[i] for i in order.tolist()] for order in p.device_order]
    if p.pipeline is not None:
        doc["pipeline"] = pipeline_to_json(p.pipeline, p.node_names)
    extra = dict(p.extra)
    if p.evaluation is not None:
        extra.update(p.evaluation.extra_json())
    if extra:
        doc["extra"] = extra
    return doc


def _finite_or_none(x: float) -> float | None:
    """``x`` as a JSON number, or null when it is not finite (not evaluated, no bound)."""
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class CompareRow:
    """One placer's entry of a ``celeritas-compare/1`` document, as plain values (the comparison
    that has them builds these: :meth:`celeritas_core.placers.compare.Comparison.to_json`)."""

    #: The placer's CSV row (column name -> value), written first; a float that is not finite is null.
    figures: Mapping[str, Any]
    params: Mapping[str, Any]
    device_memory_bytes: Sequence[int]
    device_peak_memory_bytes: Sequence[int]
    oom_devices: Sequence[str]
    #: The step (µs) replayed under each other dispatch order: ``(order name, step)`` pairs.
    other_orders_step_us: Sequence[tuple[str, float]]


def compare_document(graph: Graph, cluster: Cluster, rows: Sequence[CompareRow], *, best: str,
                     other_orders: Sequence[str], single_device_time_us: float,
                     lower_bound_us: float) -> dict[str, Any]:
    """The ``celeritas-compare/1`` document: the graph and cluster, the reference times, the
    dispatch orders replayed besides the documented one (``other_orders``), the ``best`` placer and
    one entry per placer (``rows``, in run order: its figures, null where not finite, with its
    parameters, per-device memory and step (µs) under each other dispatch order)."""
    return {
        "format": COMPARE_FORMAT,
        "graph": graph.name,
        "nodes": graph.num_nodes,
        "edges": graph.num_edges,
        "ccr": _finite_or_none(ccr(graph, cluster)),
        "devices": list(cluster.device_names),
        "device_capacity_bytes": [int(x) for x in cluster.memory_bytes],
        "comm": {"slope_us_per_byte": cluster.slope_us_per_byte, "intercept_us": cluster.intercept_us},
        **({"topology": cluster.topology.describe()} if cluster.topology is not None else {}),
        "single_device_time_us": _finite_or_none(single_device_time_us),
        "lower_bound_us": _finite_or_none(lower_bound_us),
        "best": best,
        "dispatch": DOCUMENTED_DISPATCH,
        "other_orders": list(other_orders),
        "placers": [
            {**{k: _finite_or_none(v) if isinstance(v, float) else v for k, v in row.figures.items()},
             "params": row.params,
             "device_memory_bytes": [int(x) for x in row.device_memory_bytes],
             "device_peak_memory_bytes": [int(x) for x in row.device_peak_memory_bytes],
             "oom_devices": list(row.oom_devices),
             "other_orders_step_us": {name: _finite_or_none(t) for name, t in row.other_orders_step_us}}
            for row in rows
        ],
    }


def load_placement(path: str | os.PathLike[str], graph: Graph, cluster: Cluster | None = None) -> Placement:
    """Read a placement file and check that it places exactly the nodes of ``graph``.

    Parameters
    ----------
    path : str or os.PathLike
        A ``celeritas-placement/1`` JSON file (docs/formats.md).
    graph : Graph
        The graph it places: every node, and no other, must have a device.
    cluster : Cluster, optional
        When given, the placement must use as many devices as it has.

    Returns
    -------
    Placement
        The placement as written, without an evaluation (figures NaN):
        :func:`~celeritas_core.placers.evaluate_placement` replays it.

    Raises
    ------
    CeleritasInputError
        One line naming the file and the first problem (missing, not JSON, a node of the graph
        without a device or an unknown one, a device out of range).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from celeritas_core import (Cluster, Graph, evaluate_placement, load_placement, place,
    ...                             save_placement)
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> cluster = Cluster.homogeneous(2, 1e9)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = save_placement(place(graph, cluster, "heft"), pathlib.Path(tmp) / "heft.json")
    ...     placement = load_placement(path, graph, cluster)
    >>> placement.placer, placement.assignment.tolist(), placement.predicted_step_time_us
    ('heft', [0, 1, 0, 1], nan)
    >>> evaluate_placement(graph, cluster, placement).predicted_step_time_us
    95.1
    """
    try:
        return placement_from_json(read_json(path), graph, cluster)
    except CeleritasInputError as exc:
        raise exc.with_source(str(path)) from None


def save_placement(placement: Placement, path: str | os.PathLike[str], *,
                   inputs: Iterable[str | os.PathLike[str] | None] = (), graph: Graph | None = None) -> Path:
    """Write ``placement`` atomically as ``celeritas-placement/1``, with the op keys digest of
    ``graph``'s meta when given and recorded (``celeritas validate`` checks it).

    Parameters
    ----------
    placement : Placement
        The placement to write, with its evaluation's figures when it has one.
    path : str or os.PathLike
        The file to write (replaced whole, or left as it was on an error).
    inputs : iterable of paths or None, optional
        The command's input files, which the output may not overwrite.
    graph : Graph or None, optional
        The placed graph; its ``meta['op_keys_digest']`` (TensorFlow steps) and
        ``meta['batch_size']`` (a positive integer) are copied.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    CeleritasInputError
        When ``path`` may not be written (a folder, a symbolic link, a read-only folder, one of
        ``inputs``: :func:`~celeritas_core.readwrite.safe_io.check_output_path`).

    Examples
    --------
    >>> import json, pathlib, tempfile
    >>> from celeritas_core import Cluster, Graph, place, save_placement
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> placement = place(graph, Cluster.homogeneous(2, 1e9), "m-topo")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     doc = json.loads(save_placement(placement, pathlib.Path(tmp) / "p.json").read_text())
    >>> doc["format"], doc["assignment"], doc["predicted_step_time_us"]
    ('celeritas-placement/1', {'a': 0, 'b': 0, 'c': 0, 'd': 1}, 145.1)
    """
    meta = graph.meta if graph is not None else {}
    digest, batch = meta.get("op_keys_digest"), meta.get("batch_size")
    batch_ok = isinstance(batch, int) and not isinstance(batch, bool) and 1 <= batch <= MAX_BATCH_SIZE
    doc = placement_to_json(placement, op_keys_digest=digest if isinstance(digest, str) else None,
                            batch_size=batch if batch_ok else None)
    return write_json_atomic(path, doc, indent=1, inputs=inputs)


# ---------------------------------------------------------------------------- profiles and fits
#: Largest magnitude of a fitted slope or intercept in a ``celeritas-fits/1`` document. Fits of
#: in-limit profiles stay far below it; predictions are checked against the cost limits where a
#: graph is built from them.
MAX_FIT_COEFFICIENT = 1e30


def _cost_map(raw: Any, where: str, field_name: str, limit: float, unit: str) -> None:
    """An object of op name -> cost, every cost within ``limit``, their sum too."""
    if not isinstance(raw, dict):
        raise CeleritasInputError(f"{where}: field '{field_name}' must be an object of op name -> number")
    total = 0.0
    for name, value in raw.items():
        total += check_cost(value, f"{where}: op {name!r}", field_name, limit=limit, unit=unit)
    check_total(total, limit, f"{where}: the total of '{field_name}'", unit)


def check_profile_document(doc: Any, source: str | None = None) -> None:
    """Validate a ``celeritas-profile/1`` document strictly: at least two profiles, each with an
    integer ``batch_size`` from 1 to :data:`~celeritas_core.limits.MAX_BATCH_SIZE` (no repeats)
    and per-op ``time_us`` / ``memory_bytes`` (and optional ``scratch_bytes``) numbers within
    the limits, at least one op in ``time_us`` or ``memory_bytes``; ``op_keys`` (op name → key
    string) in every profile or in none. Raises a one-line
    :class:`CeleritasInputError` naming the profile and field."""
    try:
        if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
            raise CeleritasInputError(f"not a {PROFILE_FORMAT} document (field 'format')")
        profiles = doc.get("profiles")
        if not isinstance(profiles, list):
            raise CeleritasInputError("field 'profiles' must be a list")
        if len(profiles) < 2:
            raise CeleritasInputError("field 'profiles': need at least two batch sizes to fit")
        seen: dict[int, int] = {}
        for k, p in enumerate(profiles):
            where = f"profiles[{k}]"
            if not isinstance(p, dict):
                raise CeleritasInputError(f"{where}: expected an object")
            batch = p.get("batch_size")
            if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= MAX_BATCH_SIZE:
                raise CeleritasInputError(f"{where}: field 'batch_size' must be an integer from 1 to "
                                          f"{MAX_BATCH_SIZE:,}, got {short_repr(batch)}")
            if batch in seen:
                raise CeleritasInputError(f"{where}: batch size {batch} repeats profiles[{seen[batch]}]")
            seen[batch] = k
            for key, limit, unit in (("time_us", MAX_TIME_US, " µs"), ("memory_bytes", MAX_BYTES, " bytes")):
                if key not in p:
                    raise CeleritasInputError(f"{where}: missing field '{key}'")
                _cost_map(p[key], where, key, limit, unit)
            if not p["time_us"] and not p["memory_bytes"]:  # nothing to fit: fits of no op
                raise CeleritasInputError(f"{where}: no ops (fields 'time_us' and 'memory_bytes' are empty)")
            if p.get("scratch_bytes") is not None:
                _cost_map(p["scratch_bytes"], where, "scratch_bytes", MAX_BYTES, " bytes")
            if "output_aliases" in p and not isinstance(p["output_aliases"], dict):
                raise CeleritasInputError(f"{where}: field 'output_aliases' must be an object")
            if "op_keys" in p:
                read_op_keys(p["op_keys"], where)
        keyed = ["op_keys" in p for p in profiles]
        if any(keyed) and not all(keyed):
            raise CeleritasInputError(f"profiles[{keyed.index(False)}]: field 'op_keys' missing (the other "
                                      f"profiles have it: every profile records its ops' keys, or none)")
    except CeleritasInputError as exc:
        raise exc.with_source(source) if source else exc from None


def check_fits_document(doc: Any, source: str | None = None) -> None:
    """Validate a ``celeritas-fits/1`` or ``/2`` document strictly: ``batch_sizes`` integers from 1
    to :data:`~celeritas_core.limits.MAX_BATCH_SIZE`, a non-empty ``ops`` whose ``time_us`` and
    ``memory_bytes`` are ``[slope, intercept]`` pairs of finite numbers of magnitude at most
    :data:`MAX_FIT_COEFFICIENT`, R² values null or numbers, ``output_aliases`` an object,
    ``op_keys`` (optional) an object of op name → key string; in ``/2`` every op's
    ``time_model`` too (:func:`_check_time_model`)."""
    try:
        if not isinstance(doc, dict) or doc.get("format") not in (FITS_FORMAT, FITS_FORMAT_V2):
            raise CeleritasInputError(f"not a {FITS_FORMAT} or {FITS_FORMAT_V2} document (field 'format')")
        ops = doc.get("ops")
        if not isinstance(ops, dict) or not ops:
            raise CeleritasInputError("field 'ops' must be a non-empty object")
        batches = doc.get("batch_sizes")
        if not isinstance(batches, list) or not batches or not all(
                isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= MAX_BATCH_SIZE for b in batches):
            raise CeleritasInputError(f"field 'batch_sizes' must be a non-empty list of integers from 1 to "
                                      f"{MAX_BATCH_SIZE:,}")
        for name, fit in ops.items():
            where = f"op {name!r}"
            if not isinstance(fit, dict):
                raise CeleritasInputError(f"{where}: expected an object")
            for key in ("time_us", "memory_bytes"):
                pair = fit.get(key)
                if not (isinstance(pair, list) and len(pair) == 2 and all(
                        is_number(v) and math.isfinite(as_float(v))
                        and abs(as_float(v)) <= MAX_FIT_COEFFICIENT for v in pair)):
                    raise CeleritasInputError(
                        f"{where}: field '{key}' must be [slope, intercept], finite numbers of magnitude "
                        f"at most {MAX_FIT_COEFFICIENT:g}, got {short_repr(pair)}")
            for key in ("time_r2", "memory_r2"):
                r2 = fit.get(key)
                if r2 is not None and not (is_number(r2) and math.isfinite(as_float(r2))):
                    raise CeleritasInputError(f"{where}: field '{key}' must be a number or null, "
                                              f"got {short_repr(r2)}")
            if doc["format"] == FITS_FORMAT_V2:
                _check_time_model(fit.get("time_model"), where)
        if not isinstance(doc.get("output_aliases", {}), dict):
            raise CeleritasInputError("field 'output_aliases' must be an object")
        if "op_keys" in doc:
            read_op_keys(doc["op_keys"], "fits")
    except CeleritasInputError as exc:
        raise exc.with_source(source) if source else exc from None


def _check_time_model(raw: Any, where: str) -> None:
    """A ``celeritas-fits/2`` op's ``time_model``: a known ``kind`` and its parameters, finite
    numbers of magnitude at most :data:`MAX_FIT_COEFFICIENT` (the power law's exponent within
    0 and 1), ``loo_error`` (optional) an object of model → number >= 0 or null."""
    if not isinstance(raw, dict) or raw.get("kind") not in TIME_MODELS:
        raise CeleritasInputError(f"{where}: field 'time_model' must be an object with 'kind' one of "
                                  f"{', '.join(TIME_MODELS)}, got {short_repr(raw)}")
    for key in MODEL_PARAMS[raw["kind"]]:
        v = raw.get(key)
        if not (is_number(v) and math.isfinite(as_float(v)) and abs(as_float(v)) <= MAX_FIT_COEFFICIENT):
            raise CeleritasInputError(f"{where}: time_model field '{key}' must be a finite number of "
                                      f"magnitude at most {MAX_FIT_COEFFICIENT:g}, got {short_repr(v)}")
    if raw["kind"] == "power" and not 0.0 <= as_float(raw["exponent"]) <= 1.0:
        raise CeleritasInputError(f"{where}: time_model field 'exponent' must be within 0 and 1, "
                                  f"got {short_repr(raw['exponent'])}")
    loo = raw.get("loo_error", {})
    if not isinstance(loo, dict) or not all(
            k in TIME_MODELS and (v is None or (is_number(v) and as_float(v) >= 0)) for k, v in loo.items()):
        raise CeleritasInputError(f"{where}: time_model field 'loo_error' must be an object of model -> "
                                  f"number >= 0 or null, got {short_repr(loo)}")


def _time_model_json(models: TimeModels, j: int) -> dict[str, Any]:
    """Op ``j``'s ``time_model`` object (``celeritas-fits/2``)."""
    kind = models.kinds[j]
    out: dict[str, Any] = {"kind": kind}
    out.update({key: float(models.params[j, c]) for c, key in enumerate(MODEL_PARAMS[kind])})
    out["loo_error"] = {k: _finite_or_none(float(models.loo_error[j, m])) for m, k in enumerate(TIME_MODELS)}
    return out


def _read_time_models(names: tuple[str, ...], raw_ops: Iterable[Mapping[str, Any]]) -> TimeModels:
    """The :class:`TimeModels` of a checked ``celeritas-fits/2`` document's ops."""
    kinds, params, loo = [], [], []
    for fit in raw_ops:
        model = fit["time_model"]
        kinds.append(str(model["kind"]))
        row = [as_float(model[key]) for key in MODEL_PARAMS[model["kind"]]]
        params.append(row + [0.0] * (3 - len(row)))
        errors = model.get("loo_error", {})
        loo.append([math.nan if errors.get(k) is None else as_float(errors[k]) for k in TIME_MODELS])
    return TimeModels(names, tuple(kinds), np.array(params, dtype=np.float64).reshape(len(names), 3),
                      np.array(loo, dtype=np.float64).reshape(len(names), len(TIME_MODELS)))


def fits_to_json(fits: CostFits) -> dict[str, Any]:
    """The ``celeritas-fits/1`` document of ``fits`` (R² null where undefined; ``op_keys``
    when the fits carry structure keys); with per-op time models (:attr:`CostFits.time_models`),
    ``celeritas-fits/2``: each op also has its ``time_model``."""
    ops = {n: {"time_us": [float(a), float(b)], "memory_bytes": [float(c), float(d)],
               "time_r2": _finite_or_none(e), "memory_r2": _finite_or_none(f)}
           for n, a, b, c, d, e, f in zip(fits.names, fits.time_slope, fits.time_intercept,
                                          fits.memory_slope, fits.memory_intercept, fits.time_r2,
                                          fits.memory_r2, strict=True)}
    doc: dict[str, Any] = {"format": FITS_FORMAT, "batch_sizes": list(fits.batch_sizes), "ops": ops}
    if fits.time_models is not None:
        doc["format"] = FITS_FORMAT_V2
        for j, fit in enumerate(ops.values()):
            fit["time_model"] = _time_model_json(fits.time_models, j)
    if fits.output_aliases:
        doc["output_aliases"] = {n: [list(e) if isinstance(e, tuple) else e for e in a]
                                 for n, a in fits.output_aliases.items()}
    keys = fits_op_keys(fits)
    if keys:
        doc["op_keys"] = keys
    return doc


def fits_from_json(doc: Any, source: str | None = None) -> CostFits:
    """Read a ``celeritas-fits/1`` or ``/2`` document, checked by :func:`check_fits_document`
    (raises CeleritasInputError naming the bad field), as :class:`~celeritas_core.graphs.opkeys.KeyedFits`
    carrying its ``op_keys`` ({} when it has none) and, from ``/2``, its time models."""
    check_fits_document(doc, source)
    fits = doc["ops"].values()
    coefficients = (np.array([float(fit[key][j]) for fit in fits], dtype=np.float64)
                    for key, j in (("time_us", 0), ("time_us", 1), ("memory_bytes", 0), ("memory_bytes", 1)))
    r2 = (np.array([math.nan if fit.get(key) is None else float(fit[key]) for fit in fits], dtype=np.float64)
          for key in ("time_r2", "memory_r2"))
    names = tuple(doc["ops"])
    models = _read_time_models(names, fits) if doc["format"] == FITS_FORMAT_V2 else None
    return KeyedFits(names, tuple(doc["batch_sizes"]), *coefficients, *r2, time_models=models,
                     op_keys=dict(doc.get("op_keys", {}))).with_aliases(
        read_output_aliases(doc.get("output_aliases", {}), source))


def read_output_aliases(raw: Any, source: str | None = None) -> dict[str, tuple[Any, ...]]:
    """Check an ``output_aliases`` object (op → list of null, ``[producer, output]`` or
    ``"external"``) and return it with pairs as tuples."""
    if not isinstance(raw, dict):
        raise CeleritasInputError("field 'output_aliases' must be an object", source=source)
    out: dict[str, tuple[Any, ...]] = {}
    for name, entries in raw.items():
        if not isinstance(entries, list):
            raise CeleritasInputError(f"output_aliases of op {name!r} must be a list", source=source)
        row: list[Any] = []
        for k, e in enumerate(entries):
            if e is None or e == "external":
                row.append(e)
            elif (isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], int)
                  and not isinstance(e[1], bool) and 0 <= e[1] < MAX_SRC_OUTPUT):
                row.append((e[0], e[1]))
            else:
                raise CeleritasInputError(f"output_aliases of op {name!r}[{k}]: expected null, \"external\" "
                                          f"or [producer, output], got {e!r}", source=source)
        out[str(name)] = tuple(row)
    return out


def check_predicted_costs(names: Any, time_us: np.ndarray, memory_bytes: np.ndarray, what: str) -> None:
    """Raise unless predicted per-op costs (e.g. fits at a batch size) are within the limits of a
    graph: every time and memory and their totals. ``what`` says where they come from."""
    for values, field_name, limit, unit in ((time_us, "time_us", MAX_TIME_US, " µs"),
                                            (memory_bytes, "memory_bytes", MAX_BYTES, " bytes")):
        values = np.asarray(values, dtype=np.float64)
        i = first_out_of_range(values, limit)
        if i is not None:
            raise CeleritasInputError(f"{what}: op {names[i]!r}: predicted {field_name} "
                                      f"{values[i]:.6g}{unit} is not within 0 and the limit {limit:g}{unit}")
        check_total(float(values.sum()), limit, f"{what}: the predicted total {field_name}", unit)
