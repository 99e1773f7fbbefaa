"""Reading and writing the JSON formats: celeritas-graph/1, celeritas-cluster/1, celeritas-placement/1.

Every reader validates fully and raises :class:`CeleritasInputError` with the file and the
offending node or field; every writer writes a temporary file and renames it into place, so a
failed run leaves no half-written output. The formats are documented in docs/formats.md.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from celeritas_core.cluster import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE, Cluster
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graph import Graph, Liveness
from celeritas_core.placement import Placement

GRAPH_FORMAT = "celeritas-graph/1"
CLUSTER_FORMAT = "celeritas-cluster/1"
PLACEMENT_FORMAT = "celeritas-placement/1"


# ---------------------------------------------------------------------------- file helpers
def read_json(path: str | os.PathLike[str]) -> Any:
    """Parse a JSON file, turning I/O and syntax problems into one-line input errors."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise CeleritasInputError("file not found", source=str(p)) from None
    except IsADirectoryError:
        raise CeleritasInputError("is a directory, expected a JSON file", source=str(p)) from None
    except json.JSONDecodeError as exc:
        raise CeleritasInputError(
            f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", source=str(p)
        ) from None
    except UnicodeDecodeError:
        raise CeleritasInputError("not valid JSON (not UTF-8 text)", source=str(p)) from None
    except RecursionError:
        raise CeleritasInputError("not valid JSON (nested too deeply)", source=str(p)) from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CeleritasInputError(f"not valid JSON ({reason})", source=str(p)) from None
    except OSError as exc:
        raise CeleritasInputError(f"cannot read: {exc.strerror}", source=str(p)) from None


def write_json_atomic(path: str | os.PathLike[str], doc: Any, *, indent: int | None = None) -> Path:
    """Write ``doc`` as JSON to ``path`` through a temporary file and an atomic rename."""
    return write_atomic(path, lambda fh: (json.dump(doc, fh, indent=indent, allow_nan=False),
                                           fh.write("\n")))


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and an atomic rename."""
    return write_atomic(path, lambda fh: fh.write(text))


def write_atomic(path: str | os.PathLike[str], write: Any, *, binary: bool = False) -> Path:
    """Call ``write(fh)`` on a temporary file next to ``path``, then rename it into place; on any
    error nothing is left behind. Text files are UTF-8."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        # mkstemp creates the file with mode 0600; give the output the mode a plain open() would.
        os.chmod(tmp, 0o666 & ~_current_umask())
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")) as fh:
            write(fh)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------------- field checks
def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _as_float(x: int | float) -> float:
    """``float(x)``, with integers beyond the float range (valid JSON) read as infinity."""
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def _positive(x: Any) -> bool:
    return _is_number(x) and math.isfinite(_as_float(x)) and x > 0


def _check_format(doc: Any, expected: str) -> None:
    if not isinstance(doc, dict):
        raise CeleritasInputError(f"expected a JSON object with \"format\": \"{expected}\"")
    tag = doc.get("format")
    if tag is None:
        raise CeleritasInputError(f"missing field 'format' (expected {expected!r})")
    if tag != expected:
        raise CeleritasInputError(f"unknown format tag {tag!r} (expected {expected!r})")


def _cost(value: Any, where: str, field_name: str) -> float:
    if not _is_number(value):
        raise CeleritasInputError(f"{where}: field '{field_name}' must be a number, got {value!r}")
    v = _as_float(value)
    if not math.isfinite(v) or v < 0:
        raise CeleritasInputError(f"{where}: field '{field_name}' must be finite and >= 0, got {value!r}")
    return v


# ---------------------------------------------------------------------------- graph
def graph_from_json(doc: Any) -> Graph:
    """Validate a ``celeritas-graph/1`` document and build a :class:`Graph`."""
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

    n = len(nodes)
    names: list[str] = [""] * n
    ops: list[str] = [""] * n
    groups: list[str | None] = [None] * n
    time_us = np.empty(n, dtype=np.float64)
    memory = np.empty(n, dtype=np.float64)
    persistent: list[float | None] = [None] * n
    scratch: list[float | None] = [None] * n
    outputs: list[list[float] | None] = [None] * n
    index: dict[str, int] = {}
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
        names[i] = node_name
        op = node.get("op")
        if not isinstance(op, str):
            raise CeleritasInputError(f"{where}: field 'op' must be a string")
        ops[i] = op
        if "time_us" not in node:
            raise CeleritasInputError(f"{where}: missing field 'time_us'")
        if "memory_bytes" not in node:
            raise CeleritasInputError(f"{where}: missing field 'memory_bytes'")
        time_us[i] = _cost(node["time_us"], where, "time_us")
        memory[i] = _cost(node["memory_bytes"], where, "memory_bytes")
        persistent[i], scratch[i], outputs[i] = _liveness_fields(node, where)
        group = node.get("colocation")
        if group is not None:
            if not isinstance(group, str) or not group:
                raise CeleritasInputError(f"{where}: field 'colocation' must be a non-empty string")
            groups[i] = group

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
        nbytes[k] = _cost(edge["bytes"], f"edges[{k}] ({s!r} -> {d!r})", "bytes")
        so = edge.get("src_output", 0)
        if not isinstance(so, int) or isinstance(so, bool) or not 0 <= so < 2**63:
            raise CeleritasInputError(
                f"edges[{k}] ({s!r} -> {d!r}): field 'src_output' must be an integer >= 0, got {so!r}"
            )
        out[k] = so
    modelled = any(p is not None or s is not None or o is not None
                   for p, s, o in zip(persistent, scratch, outputs, strict=True))
    aliases = _alias_fields(nodes, index, outputs)
    return Graph.from_arrays(
        name=name,
        node_names=names,
        ops=ops,
        time_us=time_us,
        memory_bytes=memory,
        colocation=groups,
        edge_src=src,
        edge_dst=dst,
        edge_bytes=nbytes,
        edge_src_output=out,
        meta=meta,
        liveness=Liveness.from_lists(persistent, scratch, outputs, aliases) if modelled else None,
    )


def _alias_fields(nodes: list[Any], index: Mapping[str, int],
                  outputs: list[list[float] | None]) -> list[list[tuple[int, int] | None] | None] | None:
    """Each node's optional ``output_aliases`` as ``(producer index, output)`` pairs (None: none)."""
    result: list[list[tuple[int, int] | None] | None] = [None] * len(nodes)
    for i, node in enumerate(nodes):
        if "output_aliases" not in node:
            continue
        where = f"node {node['name']!r}"
        raw = node["output_aliases"]
        declared = outputs[i] or []
        if not isinstance(raw, list) or len(raw) != len(declared):
            raise CeleritasInputError(f"{where}: field 'output_aliases' must be a list with one entry per "
                                      f"output_bytes entry ({len(declared)})")
        result[i] = [_alias_entry(x, index, where, k) for k, x in enumerate(raw)]
    return result if any(r for r in result) else None


def _alias_entry(raw: Any, index: Mapping[str, int], where: str, k: int) -> tuple[int, int] | None:
    """One ``output_aliases`` entry: null, or ``{"node": NAME, "output": K}``."""
    if raw is None:
        return None
    node, output = (raw.get("node"), raw.get("output")) if isinstance(raw, dict) else (None, None)
    known = isinstance(node, str) and node in index
    if not known or not isinstance(output, int) or isinstance(output, bool) or not 0 <= output < 2**31:
        raise CeleritasInputError(f"{where}: output_aliases[{k}] must be null or {{\"node\": NAME, "
                                  f"\"output\": K}} naming an input tensor, got {raw!r}")
    return index[node], output


def _liveness_fields(node: dict[str, Any],
                     where: str) -> tuple[float | None, float | None, list[float] | None]:
    """The optional ``persistent_bytes``, ``scratch_bytes`` and ``output_bytes`` of a node (bytes)."""
    persistent, scratch = (_cost(node[key], where, key) if key in node else None
                           for key in ("persistent_bytes", "scratch_bytes"))
    outputs = None
    if "output_bytes" in node:
        raw = node["output_bytes"]
        if not isinstance(raw, list):
            raise CeleritasInputError(f"{where}: field 'output_bytes' must be a list of numbers, got {raw!r}")
        outputs = [_cost(x, where, f"output_bytes[{k}]") for k, x in enumerate(raw)]
    return persistent, scratch, outputs


def graph_to_json(graph: Graph) -> dict[str, Any]:
    """The ``celeritas-graph/1`` document of ``graph``."""
    names = graph.node_names
    nodes = []
    for i, node in enumerate(names):
        entry: dict[str, Any] = {
            "name": node,
            "op": graph.ops[i],
            "time_us": float(graph.time_us[i]),
            "memory_bytes": int(graph.memory_bytes[i])
            if float(graph.memory_bytes[i]).is_integer() else float(graph.memory_bytes[i]),
        }
        if graph.colocation[i] is not None:
            entry["colocation"] = graph.colocation[i]
        live = graph.liveness
        if live is not None and live.modelled[i]:
            entry["persistent_bytes"] = _json_number(live.persistent_bytes[i])
            entry["output_bytes"] = [_json_number(x) for x in live.outputs(i)]
            if live.scratch_bytes[i]:
                entry["scratch_bytes"] = _json_number(live.scratch_bytes[i])
            aliases = live.aliases(i)
            if any(a is not None for a in aliases):
                entry["output_aliases"] = [None if a is None else {"node": names[a[0]], "output": a[1]}
                                           for a in aliases]
        nodes.append(entry)
    edges = []
    for s, d, b, o in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(),
                          graph.edge_bytes.tolist(), graph.edge_src_output.tolist(), strict=True):
        edge: dict[str, Any] = {"src": names[s], "dst": names[d],
                                "bytes": int(b) if float(b).is_integer() else b}
        if o:
            edge["src_output"] = o
        edges.append(edge)
    return {"format": GRAPH_FORMAT, "name": graph.name, "meta": dict(graph.meta),
            "nodes": nodes, "edges": edges}


def _json_number(x: float) -> int | float:
    """An integral float as an int (bytes read back exactly), any other as a float."""
    return int(x) if float(x).is_integer() else float(x)


def load_graph(path: str | os.PathLike[str]) -> Graph:
    """Read and validate a graph file."""
    try:
        return graph_from_json(read_json(path))
    except CeleritasInputError as exc:
        raise exc.with_source(str(path)) from None


def save_graph(graph: Graph, path: str | os.PathLike[str]) -> Path:
    """Write ``graph`` atomically as ``celeritas-graph/1``."""
    return write_json_atomic(path, graph_to_json(graph))


# ---------------------------------------------------------------------------- cluster
def cluster_from_json(doc: Any) -> Cluster:
    """Validate a ``celeritas-cluster/1`` document and build a :class:`Cluster`."""
    _check_format(doc, CLUSTER_FORMAT)
    devices = doc.get("devices")
    if not isinstance(devices, list):
        raise CeleritasInputError("field 'devices' must be a list")
    if not devices:
        raise CeleritasInputError("devices: the cluster has no devices (zero devices)")
    names: list[str] = []
    memory: list[float] = []
    speed: list[float] = []
    for i, dev in enumerate(devices):
        if not isinstance(dev, dict):
            raise CeleritasInputError(f"devices[{i}]: expected an object")
        dev_name = dev.get("name")
        if not isinstance(dev_name, str) or not dev_name:
            raise CeleritasInputError(f"devices[{i}]: field 'name' must be a non-empty string")
        mem = dev.get("memory_bytes")
        if not _positive(mem):
            raise CeleritasInputError(
                f"devices[{i}] ({dev_name!r}): field 'memory_bytes' must be a positive number, got {mem!r}"
            )
        spd = dev.get("speed", 1.0)
        if not _positive(spd):
            raise CeleritasInputError(
                f"devices[{i}] ({dev_name!r}): field 'speed' must be a positive number, got {spd!r}"
            )
        if dev_name in names:
            raise CeleritasInputError(
                f"devices[{i}]: duplicate device name {dev_name!r} (devices[{names.index(dev_name)}])"
            )
        names.append(dev_name)
        memory.append(float(mem))
        speed.append(float(spd))
    comm = doc.get("comm", {})
    if not isinstance(comm, dict):
        raise CeleritasInputError("field 'comm' must be an object")
    slope = comm.get("slope_us_per_byte", DEFAULT_SLOPE_US_PER_BYTE)
    intercept = comm.get("intercept_us", DEFAULT_INTERCEPT_US)
    for field_name, value in (("slope_us_per_byte", slope), ("intercept_us", intercept)):
        if not _is_number(value) or not math.isfinite(_as_float(value)) or value < 0:
            raise CeleritasInputError(
                f"comm: field '{field_name}' must be a finite number >= 0, got {value!r}"
            )
    return Cluster.build(names, memory, speed, slope_us_per_byte=slope, intercept_us=intercept)


def cluster_to_json(cluster: Cluster) -> dict[str, Any]:
    """The ``celeritas-cluster/1`` document of ``cluster``."""
    return {
        "format": CLUSTER_FORMAT,
        "devices": [
            {"name": n, "memory_bytes": int(m) if float(m).is_integer() else float(m), "speed": float(s)}
            for n, m, s in zip(cluster.device_names, cluster.memory_bytes, cluster.speed, strict=True)
        ],
        "comm": {"slope_us_per_byte": cluster.slope_us_per_byte, "intercept_us": cluster.intercept_us},
    }


def load_cluster(path: str | os.PathLike[str]) -> Cluster:
    """Read and validate a cluster file."""
    try:
        return cluster_from_json(read_json(path))
    except CeleritasInputError as exc:
        raise exc.with_source(str(path)) from None


def save_cluster(cluster: Cluster, path: str | os.PathLike[str]) -> Path:
    """Write ``cluster`` atomically as ``celeritas-cluster/1``."""
    return write_json_atomic(path, cluster_to_json(cluster), indent=2)


# ---------------------------------------------------------------------------- placement
def placement_from_json(doc: Any, graph: Graph, cluster: Cluster | None = None) -> Placement:
    """Validate a ``celeritas-placement/1`` document against ``graph`` (and ``cluster``)."""
    _check_format(doc, PLACEMENT_FORMAT)
    devices = doc.get("devices")
    if not isinstance(devices, list) or not devices or not all(isinstance(d, str) for d in devices):
        raise CeleritasInputError("field 'devices' must be a non-empty list of device names")
    if cluster is not None and len(devices) != cluster.num_devices:
        raise CeleritasInputError(
            f"placement uses {len(devices)} devices but the cluster has {cluster.num_devices}"
        )
    assignment = doc.get("assignment")
    if not isinstance(assignment, Mapping):
        raise CeleritasInputError("field 'assignment' must be an object mapping node name to device")
    result = np.full(graph.num_nodes, -1, dtype=np.int64)
    index = graph.index
    for node, dev in assignment.items():
        i = index.get(node)
        if i is None:
            raise CeleritasInputError(f"assignment: node {node!r} is not in graph {graph.name!r}")
        if not isinstance(dev, int) or isinstance(dev, bool) or not 0 <= dev < len(devices):
            raise CeleritasInputError(
                f"assignment: node {node!r} has device {dev!r}, expected an index 0..{len(devices) - 1}"
            )
        result[i] = dev
    missing = np.flatnonzero(result < 0)
    if len(missing):
        raise CeleritasInputError(
            f"assignment: node {graph.node_names[int(missing[0])]!r} is not placed "
            f"({len(missing)} nodes missing)"
        )
    placer = doc.get("placer", "unknown")
    if not isinstance(placer, str):
        raise CeleritasInputError(f"field 'placer' must be a string, got {placer!r}")
    params = doc.get("params", {})
    if not isinstance(params, dict):
        raise CeleritasInputError("field 'params' must be an object")
    seconds = doc.get("placement_seconds")
    if seconds is not None and (not _is_number(seconds) or not math.isfinite(_as_float(seconds))
                                or seconds < 0):
        raise CeleritasInputError(f"field 'placement_seconds' must be a number >= 0, got {seconds!r}")
    coarse_nodes = doc.get("coarse_nodes")
    if coarse_nodes is not None and (not isinstance(coarse_nodes, int) or isinstance(coarse_nodes, bool)
                                     or coarse_nodes < 1):
        raise CeleritasInputError(f"field 'coarse_nodes' must be an integer >= 1, got {coarse_nodes!r}")
    return Placement(
        placer=placer,
        params=dict(params),
        devices=tuple(devices),
        node_names=graph.node_names,
        assignment=result,
        graph_name=graph.name,
        placement_seconds=float(seconds or 0.0),
        coarse_nodes=coarse_nodes,
    )


def load_placement(path: str | os.PathLike[str], graph: Graph, cluster: Cluster | None = None) -> Placement:
    """Read a placement file and check that it places exactly the nodes of ``graph``."""
    try:
        return placement_from_json(read_json(path), graph, cluster)
    except CeleritasInputError as exc:
        raise exc.with_source(str(path)) from None


def save_placement(placement: Placement, path: str | os.PathLike[str]) -> Path:
    """Write ``placement`` atomically as ``celeritas-placement/1``."""
    return write_json_atomic(path, placement.to_json(), indent=1)
