"""The columnar graph format ``celeritas-graph-columns/1``: a graph as a NumPy ``.npz`` archive
of flat arrays, for graphs of millions of ops (docs/formats.md, "celeritas-graph-columns/1").

Everything a ``celeritas-graph/1`` document expresses is stored: names and op types as one UTF-8
byte string plus int64 offsets each (op types and co-location groups as a table of distinct
strings and an index per node), costs as float64 columns (µs, bytes), edges as index columns, the
liveness fields and output aliases as CSR arrays, ``meta`` as a JSON text. There are no object
arrays, and reading never unpickles: each member's ``.npy`` header is parsed and its dtype, shape
and size are checked before its data is read, the members' uncompressed sizes are bounded before
anything is decompressed, and then every column is validated as strictly as the JSON reader does
(:func:`graph_from_npz`), with one-line :class:`CeleritasInputError` messages naming the member,
node or edge. Writing (:func:`npz_bytes`) is deterministic: the same graph gives the same bytes.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable, Mapping
from itertools import pairwise
from typing import Any

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.graph import Graph, Liveness
from celeritas_core.limits import MAX_INPUT_FILE_BYTES, MAX_SRC_OUTPUT, MAX_TIME_US, short_repr
from celeritas_core.readwrite.format_tags import GRAPH_COLUMNS_FORMAT as GRAPH_COLUMNS_FORMAT  # re-exported
from celeritas_core.readwrite.graph_columns import (
    GraphColumns,
    check_cost_column,
    check_graph_limits,
    check_graph_totals,
    graph_from_columns,
)
from celeritas_core.readwrite.json_io import gc_paused, json_bytes, parse_json

#: The first bytes of a zip archive (a local file header, or the end record of an empty archive).
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
#: Deflate level of the members: 1 compresses the repetitive columns about 3x at ~100 MB/s.
COMPRESS_LEVEL = 1
_TEXT, _INDEX, _FLOAT, _BOOL = "|u1", "<i8", "<f8", "|b1"
_DTYPE_NAMES = {_TEXT: "uint8", _INDEX: "int64", _FLOAT: "float64", _BOOL: "bool"}

#: Every member the format defines, with its dtype (``numpy.dtype.str``), in writing order.
REQUIRED: dict[str, str] = {
    "format": _TEXT, "name": _TEXT, "meta": _TEXT,
    "node_names": _TEXT, "node_name_offsets": _INDEX,
    "op_names": _TEXT, "op_name_offsets": _INDEX, "node_op": _INDEX,
    "time_us": _FLOAT, "memory_bytes": _FLOAT,
    "colocation_names": _TEXT, "colocation_name_offsets": _INDEX, "node_colocation": _INDEX,
    "edge_src": _INDEX, "edge_dst": _INDEX, "edge_bytes": _FLOAT, "edge_src_output": _INDEX,
}
#: The liveness members: all of them, or none (the graph has no liveness fields).
LIVENESS: dict[str, str] = {
    "live_modelled": _BOOL, "live_persistent_bytes": _FLOAT, "live_scratch_bytes": _FLOAT,
    "live_output_offsets": _INDEX, "live_output_bytes": _FLOAT,
}
#: The output alias members: both or neither, only with the liveness members.
ALIASES: dict[str, str] = {"live_alias_node": _INDEX, "live_alias_output": _INDEX}

Arrays = dict[str, np.ndarray]


# ---------------------------------------------------------------------------- writing
def npz_bytes(graph: Graph) -> bytes:
    """The ``celeritas-graph-columns/1`` archive of ``graph`` (a graph beyond the limits, a
    non-finite ``meta`` value or a name that is not valid Unicode is refused, as by the JSON writer)."""
    check_graph_limits(graph)
    with gc_paused():
        arrays = graph_arrays(graph)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", allowZip64=True) as archive:
        for key, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, member.getvalue(), compress_type=zipfile.ZIP_DEFLATED,
                             compresslevel=COMPRESS_LEVEL)
    return buffer.getvalue()


def graph_arrays(graph: Graph) -> Arrays:
    """The members of ``graph``'s archive, by name (without ``.npy``)."""
    node_blob, node_offsets = _encode(graph.node_names, "node")
    op_table: dict[str, int] = {}
    node_op = np.fromiter((op_table.setdefault(op, len(op_table)) for op in graph.ops), dtype=np.int64,
                          count=graph.num_nodes)
    op_blob, op_offsets = _encode(tuple(op_table), "op type")
    group_blob, group_offsets = _encode(graph.colocation_names, "co-location group")
    arrays: Arrays = {
        "format": _utf8(GRAPH_COLUMNS_FORMAT), "name": _utf8(graph.name),
        "meta": np.frombuffer(json_bytes(dict(graph.meta)), dtype=np.uint8),
        "node_names": node_blob, "node_name_offsets": node_offsets,
        "op_names": op_blob, "op_name_offsets": op_offsets, "node_op": node_op,
        "time_us": graph.time_us, "memory_bytes": graph.memory_bytes,
        "colocation_names": group_blob, "colocation_name_offsets": group_offsets,
        "node_colocation": graph.colocation_ids,
        "edge_src": graph.edge_src, "edge_dst": graph.edge_dst, "edge_bytes": graph.edge_bytes,
        "edge_src_output": graph.edge_src_output,
    }
    if graph.liveness is not None:
        arrays.update(_liveness_arrays(graph.liveness))
    dtypes = REQUIRED | LIVENESS | ALIASES
    return {key: np.asarray(value, dtype=dtypes[key]) for key, value in arrays.items()}


def _utf8(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def _encode(strings: tuple[str, ...], what: str) -> tuple[np.ndarray, np.ndarray]:
    """``strings`` as one UTF-8 byte string and the int64 offsets of each (``len + 1`` of them)."""
    try:
        blob = "".join(strings).encode("utf-8")
    except UnicodeEncodeError:
        bad = next(s for s in strings if not _encodable(s))
        raise CeleritasInputError(f"{what} {bad!r} is not valid Unicode (a lone surrogate): it cannot be "
                                  "written as UTF-8") from None
    sizes = map(len, strings) if blob.isascii() else (len(s.encode("utf-8")) for s in strings)
    lengths = np.fromiter(sizes, dtype=np.int64, count=len(strings))
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.frombuffer(blob, dtype=np.uint8), offsets


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _liveness_arrays(live: Liveness) -> Arrays:
    """The liveness members; an op that is not modelled keeps no bytes and no outputs (what the
    JSON format can express)."""
    modelled = np.asarray(live.modelled, dtype=bool)
    counts = np.diff(live.output_ptr) * modelled
    kept = np.repeat(modelled, np.diff(live.output_ptr))
    ptr = np.zeros(len(modelled) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    arrays: Arrays = {
        "live_modelled": modelled,
        "live_persistent_bytes": np.where(modelled, live.persistent_bytes, 0.0),
        "live_scratch_bytes": np.where(modelled, live.scratch_bytes, 0.0),
        "live_output_offsets": ptr,
        "live_output_bytes": live.output_bytes[kept],
    }
    if live.alias_node is not None and live.alias_output is not None:
        arrays["live_alias_node"] = live.alias_node[kept]
        arrays["live_alias_output"] = live.alias_output[kept]
    return arrays


# ---------------------------------------------------------------------------- reading
def graph_from_npz(data: bytes) -> Graph:
    """Validate a ``celeritas-graph-columns/1`` archive and build its :class:`Graph` (raises a
    one-line CeleritasInputError naming the member, node or edge at the first problem)."""
    with gc_paused():
        arrays = read_members(data)
        return graph_from_arrays(arrays)


def read_members(data: bytes) -> Arrays:
    """The archive's members that the format defines, each checked against its dtype and shape
    before its data is read. Unknown members are ignored."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise CeleritasInputError(f"not a valid .npz (zip) archive ({_reason(exc)})") from None
    names = [info.filename for info in infos]
    if len(set(names)) != len(names):
        twice = next(x for x in names if names.count(x) > 1)
        raise CeleritasInputError(f"member {twice!r} appears twice in the archive")
    total = sum(info.file_size for info in infos)
    if total > MAX_INPUT_FILE_BYTES:
        raise CeleritasInputError(f"the archive's members hold {total:,} bytes uncompressed, above the limit "
                                  f"of {MAX_INPUT_FILE_BYTES:,} bytes")
    by_name = {info.filename: info for info in infos}
    if "format.npy" not in by_name:
        raise CeleritasInputError(f"missing member 'format.npy': not a {GRAPH_COLUMNS_FORMAT} archive")
    arrays = {"format": _member(archive, by_name["format.npy"], "format", _TEXT)}
    tag = _text(arrays["format"], "format")
    if tag != GRAPH_COLUMNS_FORMAT:
        raise CeleritasInputError(f"unknown format tag {short_repr(tag)} (expected {GRAPH_COLUMNS_FORMAT!r})")
    for group in (REQUIRED, LIVENESS, ALIASES):
        present = [key for key in group if f"{key}.npy" in by_name]
        if group is not REQUIRED and not present:
            continue
        missing = [key for key in group if key not in present]
        if missing:
            together = "" if group is REQUIRED else f" (the members {', '.join(group)} go together)"
            raise CeleritasInputError(f"missing member '{missing[0]}.npy'{together}")
        arrays.update((key, _member(archive, by_name[f"{key}.npy"], key, group[key])) for key in present)
    if "live_alias_node" in arrays and "live_modelled" not in arrays:
        raise CeleritasInputError("members 'live_alias_node' and 'live_alias_output' need the liveness "
                                  "members")
    return arrays


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, dtype: str) -> np.ndarray:
    """One member as a 1-D array of ``dtype``: its ``.npy`` header is checked (version, dtype,
    one dimension, size) before its data is used; nothing is ever unpickled."""
    where = f"member '{info.filename}'"
    try:
        raw = archive.read(info)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError,
            RuntimeError) as exc:  # a bad CRC, a truncated or encrypted member, an unknown method
        raise CeleritasInputError(f"{where}: cannot be read ({_reason(exc)})") from None
    stream = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read_header is None:
            raise ValueError(f"unsupported .npy version {version[0]}.{version[1]}")
        shape, _, found = read_header(stream)
    except (ValueError, TypeError, SyntaxError, EOFError, OSError) as exc:
        raise CeleritasInputError(f"{where}: not a .npy array ({_reason(exc)})") from None
    if found.str != dtype:
        raise CeleritasInputError(f"{where}: dtype must be {_DTYPE_NAMES[dtype]} ({dtype!r}), "
                                  f"got {found.str!r}")
    if len(shape) != 1:
        raise CeleritasInputError(f"{where}: must be one-dimensional, got shape {shape}")
    body = memoryview(raw)[stream.tell():]
    if len(body) != shape[0] * found.itemsize:
        raise CeleritasInputError(f"{where}: holds {len(body):,} bytes of data for {shape[0]:,} values "
                                  f"of {found.itemsize} bytes")
    array = np.frombuffer(body, dtype=found).copy()
    if dtype == _BOOL and (array.view(np.uint8) > 1).any():
        raise CeleritasInputError(f"{where}: a bool array must hold only 0 and 1 bytes")
    return array


def _text(array: np.ndarray, key: str) -> str:
    """A member holding one UTF-8 string."""
    try:
        return array.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        raise CeleritasInputError(f"member '{key}': not valid UTF-8 text") from None


def graph_from_arrays(a: Mapping[str, np.ndarray]) -> Graph:
    """Validate the members of an archive (:func:`read_members`) and build the graph: sizes that
    agree, offsets that never decrease, names unique and valid UTF-8, indices in range, costs
    within the limits, liveness of modelled ops only, no self-loop, aliases of inputs, no cycle."""
    name = _text(a["name"], "name")
    if not name:
        raise CeleritasInputError("member 'name': the graph's name must be a non-empty string")
    try:
        meta = parse_json(a["meta"].tobytes())
    except CeleritasInputError as exc:
        raise CeleritasInputError(f"member 'meta': {exc.message}") from None
    if not isinstance(meta, dict):
        raise CeleritasInputError("member 'meta': must be the UTF-8 text of a JSON object")
    n = len(a["time_us"])
    if n == 0:
        raise CeleritasInputError("graph is empty: member 'time_us' has no entries")
    _same_length(a, ("memory_bytes", "node_op", "node_colocation"), n, "node", "time_us")
    names = _strings(a, "node_names", n, non_empty=True)
    index = dict(zip(names, range(n), strict=True))
    if len(index) != n:
        _duplicate(names)
    ops = _table_column(a, "op_names", "node_op", names, "op", allow_none=False, non_empty=False)
    groups = _table_column(a, "colocation_names", "node_colocation", names, "colocation", allow_none=True,
                           non_empty=True)
    node = _node_namer(names)
    check_cost_column(a["time_us"], node, "time_us", limit=MAX_TIME_US, unit=" µs")
    check_cost_column(a["memory_bytes"], node, "memory_bytes")
    src, dst, nbytes, out = _edges(a, names)
    liveness = _liveness(a, names) if "live_modelled" in a else None
    cols = GraphColumns(names, ops, groups, a["time_us"], a["memory_bytes"], src, dst, nbytes, out, liveness,
                        [], index)
    check_graph_totals(cols.time_us, cols.memory_bytes, cols.edge_bytes, cols.live_total)
    return graph_from_columns(name, meta, cols, liveness)


def _node_namer(names: list[str]) -> Callable[[int], str]:
    return lambda i: f"node {names[i]!r}"


def _same_length(a: Mapping[str, np.ndarray], keys: tuple[str, ...], count: int, what: str, ref: str) -> None:
    for key in keys:
        if len(a[key]) != count:
            raise CeleritasInputError(f"member '{key}': {len(a[key]):,} entries, expected one per {what} "
                                      f"({count:,}, the length of '{ref}')")


def _strings(a: Mapping[str, np.ndarray], key: str, count: int | None, *, non_empty: bool) -> list[str]:
    """The strings of member ``key`` cut at ``{key}_offsets`` (``count + 1`` of them when given)."""
    blob, offsets = a[key].tobytes(), a[f"{key[:-1]}_offsets"]
    expected = len(offsets) - 1 if count is None else count
    if (len(offsets) != expected + 1 or offsets[0] != 0 or offsets[-1] != len(blob)
            or (np.diff(offsets) < 0).any()):
        raise CeleritasInputError(f"member '{key[:-1]}_offsets': must hold {expected + 1:,} offsets that "
                                  f"start at 0, never decrease and end at the size of '{key}' "
                                  f"({len(blob):,} bytes)")
    empty = np.flatnonzero(np.diff(offsets) == 0) if non_empty else ()
    if len(empty):
        raise CeleritasInputError(f"{key}[{int(empty[0])}]: must be a non-empty string")
    bounds = offsets.tolist()
    if blob.isascii():
        text = blob.decode("ascii")
        return [text[lo:hi] for lo, hi in pairwise(bounds)]
    strings = []
    for i, (lo, hi) in enumerate(pairwise(bounds)):
        try:
            strings.append(blob[lo:hi].decode("utf-8"))
        except UnicodeDecodeError:
            raise CeleritasInputError(f"{key}[{i}]: not valid UTF-8") from None
    return strings


def _duplicate(names: list[str]) -> None:
    """Raise naming the first repeated node name, as the JSON reader does."""
    seen: dict[str, int] = {}
    for i, node in enumerate(names):
        if node in seen:
            raise CeleritasInputError(
                f"node {node!r}: duplicate node name (nodes[{seen[node]}] and nodes[{i}])")
        seen[node] = i


def _table_column(a: Mapping[str, np.ndarray], table_key: str, code_key: str, names: list[str], field: str,
                  *, allow_none: bool, non_empty: bool) -> list[Any]:
    """Each node's entry of a table of distinct strings (op types, co-location groups); -1 is
    None where ``allow_none``."""
    table = _strings(a, table_key, None, non_empty=non_empty)
    if len(set(table)) != len(table):
        seen: set[str] = set()
        twice = next(x for x in table if x in seen or seen.add(x))  # type: ignore[func-returns-value]
        raise CeleritasInputError(f"member '{table_key}': {twice!r} appears twice")
    codes = a[code_key]
    low = -1 if allow_none else 0
    bad = np.flatnonzero((codes < low) | (codes >= len(table)))
    if len(bad):
        i = int(bad[0])
        none = "-1 or " if allow_none else ""
        raise CeleritasInputError(f"node {names[i]!r}: field '{field}' ({code_key}) must be {none}an index "
                                  f"into "
                                  f"'{table_key}' (0..{len(table) - 1}), got {int(codes[i])}")
    lookup = np.array([*table, None] if allow_none else table, dtype=object)
    return lookup[codes].tolist()


def _edges(a: Mapping[str, np.ndarray], names: list[str]) -> tuple[np.ndarray, ...]:
    """The edge columns: endpoints in range, no self-loop, bytes within the limits, ``src_output``
    from 0 to 2**31 - 1."""
    src, dst, nbytes, out = (a[key] for key in ("edge_src", "edge_dst", "edge_bytes", "edge_src_output"))
    _same_length(a, ("edge_dst", "edge_bytes", "edge_src_output"), len(src), "edge", "edge_src")
    n = len(names)
    for column, end in ((src, "src"), (dst, "dst")):
        bad = np.flatnonzero((column < 0) | (column >= n))
        if len(bad):
            k = int(bad[0])
            raise CeleritasInputError(f"edges[{k}]: {end} {int(column[k])} is not a node index (0..{n - 1})")
    loops = np.flatnonzero(src == dst)
    if len(loops):
        raise CeleritasInputError(f"edges[{int(loops[0])}]: self-loop on node {names[int(src[loops[0]])]!r}")

    def edge(k: int) -> str:
        return f"edges[{k}] ({names[int(src[k])]!r} -> {names[int(dst[k])]!r})"

    check_cost_column(nbytes, edge, "bytes")
    bad = np.flatnonzero((out < 0) | (out >= MAX_SRC_OUTPUT))
    if len(bad):
        k = int(bad[0])
        raise CeleritasInputError(f"{edge(k)}: field 'src_output' must be an integer >= 0 and < 2**31, "
                                  f"got {int(out[k])}")
    return src, dst, nbytes, out


def _liveness(a: Mapping[str, np.ndarray], names: list[str]) -> Liveness:
    """The liveness members: one row per node, outputs in CSR form, bytes within the limits, none
    on an op that is not modelled, aliases -1 or an output of a node."""
    n = len(names)
    modelled, persistent, scratch, ptr, outputs = (a[key] for key in LIVENESS)
    _same_length(a, ("live_modelled", "live_persistent_bytes", "live_scratch_bytes"), n, "node", "time_us")
    if len(ptr) != n + 1 or ptr[0] != 0 or ptr[-1] != len(outputs) or (np.diff(ptr) < 0).any():
        raise CeleritasInputError(f"member 'live_output_offsets': must hold {n + 1:,} offsets that start "
                                  f"at 0, "
                                  f"never decrease and end at the length of 'live_output_bytes' "
                                  f"({len(outputs):,})")
    idle = np.flatnonzero(~modelled & ((persistent != 0) | (scratch != 0) | (np.diff(ptr) != 0)))
    if len(idle):
        raise CeleritasInputError(f"node {names[int(idle[0])]!r}: not modelled (live_modelled is false) but "
                                  "gives persistent, scratch or output bytes")
    node = _node_namer(names)
    check_cost_column(persistent, node, "persistent_bytes")
    check_cost_column(scratch, node, "scratch_bytes")
    owner = np.repeat(np.arange(n), np.diff(ptr))
    check_cost_column(outputs, lambda k: node(int(owner[k])), "output_bytes",
                      field_of=lambda k: f"output_bytes[{k - int(ptr[owner[k]])}]")
    live = Liveness(modelled, persistent, scratch, ptr, outputs)
    if "live_alias_node" not in a:
        return live
    alias_node, alias_output = a["live_alias_node"], a["live_alias_output"]
    _same_length(a, ("live_alias_node", "live_alias_output"), len(outputs), "declared output",
                 "live_output_bytes")
    none = alias_node == -1
    bad = np.flatnonzero(np.where(none, alias_output != -1,
                                  (alias_node < 0) | (alias_node >= n) | (alias_output < 0)
                                  | (alias_output >= MAX_SRC_OUTPUT)))
    if len(bad):
        k = int(bad[0])
        raise CeleritasInputError(f"{node(int(owner[k]))}: output_aliases[{k - int(ptr[owner[k]])}] must be "
                                  f"-1/-1 or "
                                  f"a node index and an output from 0 to 2**31 - 1, got "
                                  f"{int(alias_node[k])}/{int(alias_output[k])}")
    return Liveness(modelled, persistent, scratch, ptr, outputs, alias_node, alias_output)
