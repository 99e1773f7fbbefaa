"""The JSON formats: every validation rule, round trips, atomic writes, sizes, and docs/formats.md."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE, Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.placement import Placement, PlacementEvaluation
from celeritas_core.readwrite import formats
from celeritas_core.readwrite.format_tags import (
    CLUSTER_FORMAT,
    CLUSTER_FORMAT_V2,
    GRAPH_FORMAT,
    PLACEMENT_FORMAT,
)
from celeritas_core.readwrite.formats import (
    cluster_from_json,
    cluster_to_json,
    graph_from_json,
    graph_to_json,
    load_cluster,
    load_graph,
    load_placement,
    placement_from_json,
    placement_to_json,
    read_json,
    save_cluster,
    save_graph,
    save_placement,
    write_json_atomic,
)
from celeritas_core.readwrite.units import MIN_BARE_DEVICE_MEMORY, parse_device_memory, parse_size
from celeritas_core.simulation.bounds import lower_bound_us, single_device_time_us
from tests.documents import cluster_doc, graph_doc, placement_doc

DOCS = Path(__file__).resolve().parents[2] / "docs" / "formats.md"

Doc = dict[str, Any]
Mutation = Callable[[Doc], Any]


# ---------------------------------------------------------------------------- helpers
def _write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _write_doc(path: Path, doc: Any) -> Path:
    # json.dumps writes NaN / Infinity literals for non-finite floats, which json.load accepts.
    return _write_text(path, json.dumps(doc))


def _expect_input_error(fn: Callable[[], Any], source: Path | str | None, *needles: str) -> str:
    """Run ``fn``; it must raise a one-line CeleritasInputError naming ``source`` and every needle."""
    with pytest.raises(CeleritasInputError) as info:
        fn()
    text = str(info.value)
    assert "\n" not in text and "\r" not in text, f"multi-line error: {text!r}"
    assert text.strip(), "empty error message"
    if source is not None:
        assert text.startswith(f"{source}: "), f"error does not name the file first: {text!r}"
        assert info.value.source == str(source)
    for needle in needles:
        assert needle in text, f"{needle!r} missing from error {text!r}"
    return text


def _set(path: str, value: Any) -> Mutation:
    """A mutation setting ``doc[k1][k2]... = value`` (path like ``nodes.1.op``)."""
    keys: list[str | int] = [int(k) if k.isdigit() else k for k in path.split(".")]

    def mutate(doc: Doc) -> None:
        target: Any = doc
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value

    return mutate


def _delete(path: str) -> Mutation:
    keys: list[str | int] = [int(k) if k.isdigit() else k for k in path.split(".")]

    def mutate(doc: Doc) -> None:
        target: Any = doc
        for k in keys[:-1]:
            target = target[k]
        del target[keys[-1]]

    return mutate


def _append_edge(edge: dict[str, Any]) -> Mutation:
    return lambda doc: doc["edges"].append(edge)


def _replace_doc(new: Any) -> Mutation:
    def mutate(doc: Doc) -> Any:
        return new

    return mutate


def _set_all(key: str, **fields: Any) -> Mutation:
    """A mutation updating every entry of ``doc[key]`` with ``fields``."""
    def mutate(doc: Doc) -> None:
        for entry in doc[key]:
            entry.update(fields)

    return mutate


def _mutated(base: Doc, mutation: Mutation) -> Any:
    doc = copy.deepcopy(base)
    replaced = mutation(doc)
    return doc if replaced is None else replaced


@pytest.fixture
def graph() -> Graph:
    return graph_from_json(graph_doc())


@pytest.fixture
def cluster() -> Cluster:
    return cluster_from_json(cluster_doc())


# ---------------------------------------------------------------------------- the valid documents
def test_valid_graph_doc_loads_with_expected_content(tmp_path: Path) -> None:
    g = load_graph(_write_doc(tmp_path / "g.json", graph_doc()))
    assert g.name == "g4"
    assert g.node_names == ("a", "b", "c", "d")
    assert g.ops == ("Placeholder", "MatMul", "Relu", "Sum")
    assert g.time_us.tolist() == [1.0, 2.5, 3.0, 0.0]
    assert g.memory_bytes.tolist() == [10.0, 20.0, 30.5, 0.0]
    assert g.colocation == (None, None, "grp", "grp")
    assert g.edge_src.tolist() == [0, 1, 2, 0, 1]
    assert g.edge_dst.tolist() == [1, 2, 3, 2, 3]
    assert g.edge_bytes.tolist() == [100.0, 50.5, 0.0, 100.0, 7.0]
    assert g.edge_src_output.tolist() == [0, 0, 0, 0, 1]
    assert dict(g.meta) == {"batch_size": 8, "source": "test"}


def test_optional_graph_fields_default(tmp_path: Path) -> None:
    doc = graph_doc()
    del doc["meta"]
    for node in doc["nodes"]:
        node.pop("colocation", None)
    for edge in doc["edges"]:
        edge.pop("src_output", None)
    doc["nodes"][0]["colocation"] = None  # explicit null means "no group"
    g = load_graph(_write_doc(tmp_path / "g.json", doc))
    assert dict(g.meta) == {}
    assert g.colocation == (None, None, None, None)
    assert g.edge_src_output.tolist() == [0] * 5


def test_graph_without_edges_loads(tmp_path: Path) -> None:
    doc = graph_doc()
    doc["edges"] = []
    g = load_graph(_write_doc(tmp_path / "g.json", doc))
    assert g.num_edges == 0
    assert g.topological_order.tolist() == [0, 1, 2, 3]


def test_cluster_defaults(tmp_path: Path) -> None:
    doc = cluster_doc()
    del doc["comm"]
    c = load_cluster(_write_doc(tmp_path / "c.json", doc))
    assert c.device_names == ("gpu:0", "gpu:1")
    assert c.memory_bytes.tolist() == [1000.0, 2000.0]
    assert c.speed.tolist() == [1.0, 1.0]  # gpu:1 gives no speed
    assert c.slope_us_per_byte == DEFAULT_SLOPE_US_PER_BYTE == 1e-4
    assert c.intercept_us == DEFAULT_INTERCEPT_US == 25.0


def test_valid_placement_loads(tmp_path: Path, graph: Graph, cluster: Cluster) -> None:
    p = load_placement(_write_doc(tmp_path / "p.json", placement_doc()), graph, cluster)
    assert p.assignment.tolist() == [0, 0, 1, 1]
    assert p.devices == ("gpu:0", "gpu:1")
    assert p.placer == "manual"
    assert p.params == {"R": 3}
    assert p.placement_seconds == 0.25
    assert p.coarse_nodes == 2
    assert p.graph_name == "g4"
    assert p.device_of("c") == 1


# ---------------------------------------------------------------------------- graph validation
GRAPH_CASES: list[tuple[str, Mutation, tuple[str, ...]]] = [
    ("unknown-format-tag", _set("format", "celeritas-graph/2"),
     ("unknown format tag", "'celeritas-graph/2'", "'celeritas-graph/1'")),
    ("cluster-tag-in-graph-file", _set("format", CLUSTER_FORMAT),
     ("unknown format tag", "celeritas-cluster/1")),
    ("missing-format", _delete("format"), ("missing field 'format'",)),
    ("top-level-array", _replace_doc([1, 2]), ("format",)),
    ("missing-name", _delete("name"), ("'name'",)),
    ("name-not-string", _set("name", 7), ("'name'",)),
    ("name-empty", _set("name", ""), ("'name'",)),
    ("meta-not-object", _set("meta", [1]), ("'meta'",)),
    ("missing-nodes", _delete("nodes"), ("'nodes'",)),
    ("nodes-not-list", _set("nodes", {"a": {}}), ("'nodes'",)),
    ("missing-edges", _delete("edges"), ("'edges'",)),
    ("edges-not-list", _set("edges", {"src": "a"}), ("'edges'",)),
    ("node-not-object", _set("nodes.1", "b"), ("nodes[1]", "object")),
    ("missing-node-name", _delete("nodes.1.name"), ("nodes[1]", "'name'")),
    ("node-name-not-string", _set("nodes.1.name", 5), ("nodes[1]", "'name'")),
    ("node-name-empty", _set("nodes.1.name", ""), ("nodes[1]", "'name'")),
    ("missing-op", _delete("nodes.1.op"), ("node 'b'", "'op'")),
    ("op-not-string", _set("nodes.1.op", 3), ("node 'b'", "'op'")),
    ("missing-time", _delete("nodes.1.time_us"), ("node 'b'", "missing field 'time_us'")),
    ("time-string", _set("nodes.1.time_us", "fast"), ("node 'b'", "'time_us'", "number", "'fast'")),
    ("time-bool", _set("nodes.1.time_us", True), ("node 'b'", "'time_us'", "number")),
    ("time-null", _set("nodes.1.time_us", None), ("node 'b'", "'time_us'")),
    ("missing-memory", _delete("nodes.2.memory_bytes"), ("node 'c'", "missing field 'memory_bytes'")),
    ("memory-string", _set("nodes.2.memory_bytes", "1GB"), ("node 'c'", "'memory_bytes'", "'1GB'")),
    ("colocation-not-string", _set("nodes.2.colocation", 5), ("node 'c'", "'colocation'")),
    ("colocation-empty", _set("nodes.2.colocation", ""), ("node 'c'", "'colocation'")),
    ("duplicate-node", _set("nodes.2.name", "b"), ("node 'b'", "duplicate", "nodes[1]", "nodes[2]")),
    ("edge-not-object", _set("edges.1", ["b", "c"]), ("edges[1]", "object")),
    ("edge-missing-src", _delete("edges.1.src"), ("edges[1]", "'src'")),
    ("edge-src-not-string", _set("edges.1.src", 1), ("edges[1]", "'src'")),
    ("edge-missing-dst", _delete("edges.1.dst"), ("edges[1]", "'dst'")),
    ("edge-unknown-src", _set("edges.1.src", "ghost"), ("edges[1]", "src", "'ghost'", "not a node")),
    ("edge-unknown-dst", _set("edges.1.dst", "ghost"), ("edges[1]", "dst", "'ghost'", "not a node")),
    ("self-loop", _append_edge({"src": "c", "dst": "c", "bytes": 1}), ("edges[5]", "self-loop", "'c'")),
    ("missing-bytes", _delete("edges.1.bytes"), ("edges[1]", "'b' -> 'c'", "missing field 'bytes'")),
    ("bytes-string", _set("edges.1.bytes", "1KB"), ("edges[1]", "'b' -> 'c'", "'bytes'", "'1KB'")),
    ("bytes-bool", _set("edges.1.bytes", False), ("edges[1]", "'bytes'")),
    ("src-output-negative", _set("edges.4.src_output", -1), ("edges[4]", "'b' -> 'd'", "'src_output'")),
    ("src-output-float", _set("edges.4.src_output", 1.5), ("edges[4]", "'src_output'")),
    ("src-output-bool", _set("edges.4.src_output", True), ("edges[4]", "'src_output'")),
    ("src-output-string", _set("edges.4.src_output", "0"), ("edges[4]", "'src_output'")),
    ("src-output-huge", _set("edges.4.src_output", 10**30), ("edges[4]", "'src_output'")),
    ("empty-graph", _set("nodes", []), ("empty",)),
    ("empty-graph-no-edges", lambda doc: doc.update(nodes=[], edges=[]), ("empty",)),
]


# Values beyond the limits (docs/formats.md, "Limits"), one by one and in total.
LIMIT_CASES: list[tuple[str, Mutation, tuple[str, ...]]] = [
    ("time-above-limit", _set("nodes.1.time_us", 1.5e15), ("node 'b'", "'time_us'", "at most 1e+15 µs")),
    ("memory-above-limit", _set("nodes.1.memory_bytes", 2e18),
     ("node 'b'", "'memory_bytes'", "at most 1e+18")),
    ("bytes-1e308", _set("edges.0.bytes", 1e308), ("edges[0]", "'bytes'", "at most 1e+18")),
    ("src-output-2**63-1", _set("edges.4.src_output", 2**63 - 1), ("edges[4]", "'src_output'", "2**31")),
    ("src-output-2**31", _set("edges.4.src_output", 2**31), ("edges[4]", "'src_output'")),
    ("total-time", _set_all("nodes", time_us=0.4e15), ("total time_us", "1e+15")),
    ("total-memory", _set_all("nodes", memory_bytes=0.4e18), ("total memory_bytes",)),
    ("total-edge-bytes", _set_all("edges", bytes=0.4e18), ("total edge bytes",)),
    ("liveness-above-limit", _set("nodes.1.output_bytes", [2e18]), ("node 'b'", "output_bytes[0]")),
    ("liveness-total", _set_all("nodes", persistent_bytes=0.4e18, memory_bytes=1),
     ("total persistent_bytes",)),
]


@pytest.mark.parametrize(("mutation", "needles"), [c[1:] for c in GRAPH_CASES + LIMIT_CASES],
                         ids=[c[0] for c in GRAPH_CASES + LIMIT_CASES])
def test_graph_validation(tmp_path: Path, mutation: Mutation, needles: tuple[str, ...]) -> None:
    path = _write_doc(tmp_path / "bad.json", _mutated(graph_doc(), mutation))
    _expect_input_error(lambda: load_graph(path), path, *needles)


@pytest.mark.parametrize(
    ("field", "where"),
    [("time_us", "node 'b'"), ("memory_bytes", "node 'b'"), ("bytes", "'a' -> 'b'")],
)
@pytest.mark.parametrize(
    ("value", "shown"),
    [(-1, "-1"), (-0.5, "-0.5"), (math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"),
     (10**400, "finite")],
    ids=["negative-int", "negative-float", "NaN", "Infinity", "-Infinity", "int-beyond-float"],
)
def test_bad_costs(tmp_path: Path, field: str, where: str, value: float, shown: str) -> None:
    doc = graph_doc()
    if field == "bytes":
        doc["edges"][0]["bytes"] = value
    else:
        doc["nodes"][1][field] = value
    path = _write_doc(tmp_path / "bad.json", doc)
    if isinstance(value, float) and not math.isfinite(value):
        assert re.search(r"\b-?(NaN|Infinity)\b", path.read_text())  # the literal is really there
    _expect_input_error(lambda: load_graph(path), path, where, f"'{field}'", "finite", shown)


def test_cycle_names_the_nodes_on_it(tmp_path: Path) -> None:
    doc = graph_doc()
    doc["nodes"].append({"name": "tail", "op": "X", "time_us": 1, "memory_bytes": 1})
    doc["edges"].append({"src": "d", "dst": "b", "bytes": 1})  # b -> c -> d -> b
    doc["edges"].append({"src": "d", "dst": "tail", "bytes": 1})  # downstream of the cycle, not on it
    path = _write_doc(tmp_path / "cyclic.json", doc)
    text = _expect_input_error(lambda: load_graph(path), path, "cycle", "'b'", "'c'", "'d'")
    assert "'a'" not in text and "'tail'" not in text, text


def test_two_node_cycle(tmp_path: Path) -> None:
    doc = graph_doc()
    doc["edges"] = [{"src": "a", "dst": "b", "bytes": 1}, {"src": "b", "dst": "a", "bytes": 1}]
    path = _write_doc(tmp_path / "cyclic.json", doc)
    text = _expect_input_error(lambda: load_graph(path), path, "cycle", "'a'", "'b'")
    assert "'c'" not in text and "'d'" not in text


def test_error_naming_a_node_with_a_newline_stays_one_line(tmp_path: Path) -> None:
    doc = graph_doc()
    doc["nodes"][1]["name"] = "b\nsecond line"
    doc["nodes"][1]["time_us"] = -1
    path = _write_doc(tmp_path / "bad.json", doc)
    _expect_input_error(lambda: load_graph(path), path, "'b\\nsecond line'")


def test_invalid_json(tmp_path: Path) -> None:
    path = _write_text(tmp_path / "broken.json", '{"format": "celeritas-graph/1",\n "name": }')
    _expect_input_error(lambda: load_graph(path), path, "not valid JSON", "line 2")


def test_truncated_json(tmp_path: Path) -> None:
    text = json.dumps(graph_doc())
    path = _write_text(tmp_path / "cut.json", text[: len(text) // 2])
    _expect_input_error(lambda: load_graph(path), path, "not valid JSON")


def test_empty_file(tmp_path: Path) -> None:
    path = _write_text(tmp_path / "empty.json", "")
    _expect_input_error(lambda: load_graph(path), path, "not valid JSON")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    _expect_input_error(lambda: load_graph(path), path, "not valid JSON", "UTF-8")


def test_integer_literal_beyond_python_digit_limit(tmp_path: Path) -> None:
    path = _write_text(tmp_path / "huge.json", '{"format": ' + "9" * 5000 + "}")
    _expect_input_error(lambda: load_graph(path), path, "not valid JSON")


def test_deeply_nested_json(tmp_path: Path) -> None:
    path = _write_text(tmp_path / "deep.json", "[" * 200_000 + "]" * 200_000)
    _expect_input_error(lambda: load_graph(path), path, "not valid JSON")


def test_file_not_found(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "graph.json"
    _expect_input_error(lambda: load_graph(path), path, "file not found")
    _expect_input_error(lambda: load_cluster(path), path, "file not found")


def test_directory_instead_of_file(tmp_path: Path, graph: Graph) -> None:
    _expect_input_error(lambda: load_graph(tmp_path), tmp_path, "directory")
    _expect_input_error(lambda: load_placement(tmp_path, graph), tmp_path, "directory")


def test_from_json_errors_have_no_source_until_loaded() -> None:
    doc = graph_doc()
    doc["nodes"][0]["time_us"] = -3
    text = _expect_input_error(lambda: graph_from_json(doc), None, "node 'a'", "'time_us'")
    assert text.startswith("node 'a'")


# ---------------------------------------------------------------------------- cluster validation
CLUSTER_CASES: list[tuple[str, Mutation, tuple[str, ...]]] = [
    ("unknown-tag", _set("format", "celeritas-cluster/9"), ("unknown format tag", "'celeritas-cluster/9'")),
    ("graph-tag", _set("format", GRAPH_FORMAT), ("unknown format tag", "'celeritas-graph/1'")),
    ("missing-format", _delete("format"), ("missing field 'format'",)),
    ("top-level-string", _replace_doc("gpu"), ("format",)),
    ("zero-devices", _set("devices", []), ("devices", "zero devices")),
    ("missing-devices", _delete("devices"), ("'devices'",)),
    ("devices-not-list", _set("devices", {"gpu:0": 1}), ("'devices'",)),
    ("device-not-object", _set("devices.1", "gpu:1"), ("devices[1]", "object")),
    ("device-missing-name", _delete("devices.1.name"), ("devices[1]", "'name'")),
    ("device-name-not-string", _set("devices.1.name", 1), ("devices[1]", "'name'")),
    ("duplicate-device", _set("devices.1.name", "gpu:0"),
     ("devices[1]", "duplicate", "'gpu:0'", "devices[0]")),
    ("missing-memory", _delete("devices.1.memory_bytes"),
     ("devices[1]", "'gpu:1'", "'memory_bytes'", "None")),
    ("zero-memory", _set("devices.1.memory_bytes", 0),
     ("devices[1]", "'gpu:1'", "'memory_bytes'", "positive")),
    ("negative-memory", _set("devices.1.memory_bytes", -5), ("'gpu:1'", "'memory_bytes'", "-5")),
    ("memory-size-string", _set("devices.1.memory_bytes", "32GiB"), ("'gpu:1'", "'memory_bytes'", "'32GiB'")),
    ("memory-nan", _set("devices.1.memory_bytes", math.nan), ("'gpu:1'", "'memory_bytes'", "nan")),
    ("memory-inf", _set("devices.1.memory_bytes", math.inf), ("'gpu:1'", "'memory_bytes'", "inf")),
    ("memory-int-beyond-float", _set("devices.1.memory_bytes", 10**400), ("'gpu:1'", "'memory_bytes'")),
    ("memory-bool", _set("devices.1.memory_bytes", True), ("'gpu:1'", "'memory_bytes'")),
    ("zero-speed", _set("devices.0.speed", 0), ("devices[0]", "'gpu:0'", "'speed'", "positive")),
    ("negative-speed", _set("devices.0.speed", -1.5), ("'gpu:0'", "'speed'", "-1.5")),
    ("speed-string", _set("devices.0.speed", "fast"), ("'gpu:0'", "'speed'", "'fast'")),
    ("speed-nan", _set("devices.0.speed", math.nan), ("'gpu:0'", "'speed'")),
    ("speed-inf", _set("devices.0.speed", math.inf), ("'gpu:0'", "'speed'")),
    ("speed-null", _set("devices.0.speed", None), ("'gpu:0'", "'speed'")),
    ("comm-not-object", _set("comm", [1, 2]), ("'comm'",)),
    ("negative-slope", _set("comm.slope_us_per_byte", -1e-4), ("comm", "'slope_us_per_byte'", ">= 0")),
    ("negative-intercept", _set("comm.intercept_us", -25), ("comm", "'intercept_us'", "-25")),
    ("slope-string", _set("comm.slope_us_per_byte", "fast"), ("comm", "'slope_us_per_byte'")),
    ("intercept-nan", _set("comm.intercept_us", math.nan), ("comm", "'intercept_us'")),
    ("intercept-inf", _set("comm.intercept_us", math.inf), ("comm", "'intercept_us'")),
    ("intercept-int-beyond-float", _set("comm.intercept_us", 10**400), ("comm", "'intercept_us'")),
    ("slope-bool", _set("comm.slope_us_per_byte", True), ("comm", "'slope_us_per_byte'")),
]


# Values beyond the limits.
CLUSTER_LIMIT_CASES: list[tuple[str, Mutation, tuple[str, ...]]] = [
    ("memory-above-limit", _set("devices.1.memory_bytes", 1.1e18), ("'gpu:1'", "'memory_bytes'", "at most")),
    ("speed-too-small", _set("devices.0.speed", 1e-7), ("'gpu:0'", "'speed'", "1e-06")),
    ("speed-too-large", _set("devices.0.speed", 1e7), ("'gpu:0'", "'speed'", "1e+06")),
    ("slope-1e308", _set("comm.slope_us_per_byte", 1e308), ("comm", "'slope_us_per_byte'", "at most 1")),
    ("intercept-above-limit", _set("comm.intercept_us", 2e15), ("comm", "'intercept_us'", "at most 1e+15")),
    ("too-many-devices", _set("devices", [{"name": f"d{i}", "memory_bytes": 1} for i in range(1025)]),
     ("1,025 devices", "limit of 1,024")),
]


@pytest.mark.parametrize(("mutation", "needles"), [c[1:] for c in CLUSTER_CASES + CLUSTER_LIMIT_CASES],
                         ids=[c[0] for c in CLUSTER_CASES + CLUSTER_LIMIT_CASES])
def test_cluster_validation(tmp_path: Path, mutation: Mutation, needles: tuple[str, ...]) -> None:
    path = _write_doc(tmp_path / "cluster.json", _mutated(cluster_doc(), mutation))
    _expect_input_error(lambda: load_cluster(path), path, *needles)


def test_zero_comm_constants_are_allowed(tmp_path: Path) -> None:
    doc = cluster_doc()
    doc["comm"] = {"slope_us_per_byte": 0, "intercept_us": 0}
    c = load_cluster(_write_doc(tmp_path / "c.json", doc))
    assert c.slope_us_per_byte == 0.0 and c.intercept_us == 0.0
    assert c.comm_time_us(1e6) == 0.0


# ---------------------------------------------------------------------------- placement validation
PLACEMENT_CASES: list[tuple[str, Mutation, tuple[str, ...]]] = [
    ("unknown-tag", _set("format", "celeritas-placement/0"),
     ("unknown format tag", "'celeritas-placement/0'")),
    ("missing-format", _delete("format"), ("missing field 'format'",)),
    ("node-missing", _delete("assignment.d"), ("assignment", "'d'", "not placed", "1 nodes missing")),
    ("two-nodes-missing", lambda doc: doc.update(assignment={"a": 0, "b": 0}), ("'c'", "2 nodes missing")),
    ("unknown-node", _set("assignment.ghost", 0), ("assignment", "'ghost'", "not in graph 'g4'")),
    ("device-out-of-range", _set("assignment.c", 2), ("assignment", "'c'", "device 2", "0..1")),
    ("device-negative", _set("assignment.c", -1), ("'c'", "device -1")),
    ("device-name-not-index", _set("assignment.c", "gpu:1"), ("'c'", "'gpu:1'")),
    ("device-float", _set("assignment.c", 1.0), ("'c'", "1.0")),
    ("device-bool", _set("assignment.c", True), ("'c'", "True")),
    ("assignment-not-object", _set("assignment", [0, 0, 1, 1]), ("'assignment'",)),
    ("missing-assignment", _delete("assignment"), ("'assignment'",)),
    ("device-count-mismatch", _set("devices", ["gpu:0", "gpu:1", "gpu:2"]),
     ("devices", "3 devices", "cluster has 2")),
    ("devices-empty", _set("devices", []), ("'devices'",)),
    ("devices-not-strings", _set("devices", [0, 1]), ("'devices'",)),
    ("missing-devices", _delete("devices"), ("'devices'",)),
    ("placer-not-string", _set("placer", 3), ("'placer'",)),
    ("params-not-object", _set("params", [1]), ("'params'",)),
    ("seconds-string", _set("placement_seconds", "fast"), ("'placement_seconds'", "'fast'")),
    ("seconds-negative", _set("placement_seconds", -1), ("'placement_seconds'",)),
    ("seconds-nan", _set("placement_seconds", math.nan), ("'placement_seconds'",)),
    ("coarse-nodes-string", _set("coarse_nodes", "x"), ("'coarse_nodes'", "'x'")),
    ("coarse-nodes-zero", _set("coarse_nodes", 0), ("'coarse_nodes'",)),
]


@pytest.mark.parametrize(("mutation", "needles"), [c[1:] for c in PLACEMENT_CASES],
                         ids=[c[0] for c in PLACEMENT_CASES])
def test_placement_validation(tmp_path: Path, graph: Graph, cluster: Cluster, mutation: Mutation,
                              needles: tuple[str, ...]) -> None:
    path = _write_doc(tmp_path / "p.json", _mutated(placement_doc(), mutation))
    _expect_input_error(lambda: load_placement(path, graph, cluster), path, *needles)


def test_placement_without_cluster_checks_indices_against_its_own_devices(
    tmp_path: Path, graph: Graph
) -> None:
    doc = placement_doc()
    doc["devices"] = ["gpu:0", "gpu:1", "gpu:2"]
    doc["assignment"]["d"] = 2
    p = load_placement(_write_doc(tmp_path / "p.json", doc), graph)  # no cluster: 3 devices is fine
    assert p.assignment.tolist() == [0, 0, 1, 2]
    doc["assignment"]["d"] = 3
    path = _write_doc(tmp_path / "p3.json", doc)
    _expect_input_error(lambda: load_placement(path, graph), path, "'d'", "device 3", "0..2")


def test_placement_optional_fields_default(tmp_path: Path, graph: Graph) -> None:
    doc = {"format": PLACEMENT_FORMAT, "devices": ["x"], "assignment": dict.fromkeys("abcd", 0),
           "placement_seconds": None, "coarse_nodes": None}
    p = load_placement(_write_doc(tmp_path / "p.json", doc), graph)
    assert (p.placer, p.params, p.placement_seconds, p.coarse_nodes) == ("unknown", {}, 0.0, None)


# ---------------------------------------------------------------------------- round trips
def _assert_same_graph(a: Graph, b: Graph) -> None:
    assert a.name == b.name
    assert a.node_names == b.node_names
    assert a.ops == b.ops
    assert a.colocation == b.colocation
    assert dict(a.meta) == dict(b.meta)
    for attr in ("time_us", "memory_bytes", "edge_src", "edge_dst", "edge_bytes", "edge_src_output"):
        x, y = getattr(a, attr), getattr(b, attr)
        assert x.dtype == y.dtype, attr
        np.testing.assert_array_equal(x, y, err_msg=attr)


def test_graph_round_trip(tmp_path: Path, graph: Graph) -> None:
    path = save_graph(graph, tmp_path / "out" / "g.json")  # creates the missing folder
    assert path == tmp_path / "out" / "g.json"
    again = load_graph(path)
    _assert_same_graph(graph, again)
    assert graph_to_json(again) == graph_to_json(graph)


def test_graph_round_trip_random_floats(tmp_path: Path, rng: np.random.Generator) -> None:
    n = 300
    src = rng.integers(0, n - 1, size=900)
    dst = np.minimum(src + 1 + rng.integers(0, 20, size=900), n - 1)
    g = Graph.from_arrays(
        name="random",
        node_names=[f"op/{i}" for i in range(n)],
        ops=[["MatMul", "Add", "", "Conv2D"][i % 4] for i in range(n)],
        time_us=rng.random(n) * 1e3,
        memory_bytes=np.floor(rng.random(n) * 1e9),
        colocation=[f"grp{i % 7}" if i % 3 == 0 else None for i in range(n)],
        edge_src=src,
        edge_dst=dst,
        edge_bytes=rng.random(900) * 1e6,
        edge_src_output=rng.integers(0, 3, size=900),
        meta={"batch_size": 64, "source": "rng", "nested": {"x": [1, 2.5, None]}},
    )
    again = load_graph(save_graph(g, tmp_path / "r.json"))
    _assert_same_graph(g, again)


def test_cluster_round_trip(tmp_path: Path) -> None:
    c = Cluster.build(["a", "b", "c"], [2**34, 1.5e9, 1000.5], [1.0, 2.5, 0.75],
                      slope_us_per_byte=3.3e-5, intercept_us=12.5)
    again = load_cluster(save_cluster(c, tmp_path / "c.json"))
    assert again.device_names == c.device_names
    np.testing.assert_array_equal(again.memory_bytes, c.memory_bytes)
    np.testing.assert_array_equal(again.speed, c.speed)
    assert (again.slope_us_per_byte, again.intercept_us) == (c.slope_us_per_byte, c.intercept_us)


def test_cluster_files_record_where_their_transfer_model_comes_from(tmp_path: Path) -> None:
    c = Cluster.homogeneous(2, 1e9)
    fit = {"slope_us_per_byte": 0.0, "intercept_us": 101.4, "r2": 0.0, "rejected": "slope 0"}
    path = save_cluster(c, tmp_path / "c.json", source="default", calibration=fit)
    doc = json.loads(path.read_text())
    assert doc["comm"] == {"slope_us_per_byte": 1e-4, "intercept_us": 25.0, "source": "default",
                           "calibration": fit}
    assert load_cluster(path).intercept_us == 25.0  # readers use the model in force, not the rejected fit
    assert "source" not in cluster_to_json(c)["comm"]  # written only when known: older files stay valid
    base = {"format": CLUSTER_FORMAT, "devices": [{"name": "gpu:0", "memory_bytes": 1e9}]}
    assert cluster_from_json({**base, "comm": {"source": "calibrated", "calibration": {}}}).num_devices == 1
    with pytest.raises(CeleritasInputError, match=r"^comm: field 'source' must be one of 'calibrated', "
                                                  r"'default', got 'measured'$"):
        cluster_from_json({**base, "comm": {"source": "measured"}})
    with pytest.raises(CeleritasInputError, match=r"^comm: field 'calibration' must be an object, got 3$"):
        cluster_from_json({**base, "comm": {"calibration": 3}})
    with pytest.raises(CeleritasInputError, match=r"field 'source' must be one of"):
        cluster_to_json(c, source="guessed")


def test_homogeneous_cluster_names(tmp_path: Path) -> None:
    c = Cluster.homogeneous(4, parse_size("32GiB"))
    assert c.device_names == ("gpu:0", "gpu:1", "gpu:2", "gpu:3")
    again = load_cluster(save_cluster(c, tmp_path / "c.json"))
    assert again.memory_bytes.tolist() == [32 * 2**30] * 4
    assert again.speed.tolist() == [1.0] * 4


def _evaluated_placement(graph: Graph, cluster: Cluster) -> Placement:
    evaluation = PlacementEvaluation(
        predicted_step_time_us=12.5,
        single_device_time_us=6.5,
        lower_bound_us=6.5,
        device_memory_bytes=np.array([10.0, 50.5]),
        device_peak_memory_bytes=np.array([10.0, 40.0]),
        single_device_peak_memory_bytes=50.0,
        device_capacity_bytes=cluster.memory_bytes.copy(),
        device_busy_us=np.array([1.0, 5.5]),
    )
    return Placement(
        placer="manual",
        params={"R": 3, "memory_fraction": 0.5},
        devices=cluster.device_names,
        node_names=graph.node_names,
        assignment=np.array([0, 1, 1, 1]),
        graph_name=graph.name,
        placement_seconds=0.125,
        coarse_nodes=3,
        evaluation=evaluation,
        device_order=(np.array([0]), np.array([1, 2, 3])),
    )


def test_placement_round_trip(tmp_path: Path, graph: Graph, cluster: Cluster) -> None:
    p = _evaluated_placement(graph, cluster)
    path = save_placement(p, tmp_path / "p.json")
    again = load_placement(path, graph, cluster)
    assert again.assignment.tolist() == p.assignment.tolist()
    assert again.devices == p.devices
    assert again.node_names == p.node_names
    assert (again.placer, again.params, again.placement_seconds, again.coarse_nodes) == (
        p.placer, p.params, p.placement_seconds, p.coarse_nodes)
    written = read_json(path)
    assert written == json.loads(json.dumps(placement_to_json(p)))
    assert written["gap_to_lower_bound"] == pytest.approx(12.5 / 6.5 - 1)
    assert written["device_memory_bytes"] == [10, 50]
    assert written["oom"] is False and written["oom_devices"] == []
    assert written["extra"] == {"device_busy_us": [1.0, 5.5]}


def test_unevaluated_placement_writes_null_figures(tmp_path: Path, graph: Graph) -> None:
    p = Placement(placer="x", params={}, devices=("d0",), node_names=graph.node_names,
                  assignment=np.zeros(4, dtype=np.int64), graph_name=graph.name)
    written = read_json(save_placement(p, tmp_path / "p.json"))
    for key in ("predicted_step_time_us", "single_device_time_us", "lower_bound_us", "gap_to_lower_bound"):
        assert written[key] is None, key
    assert "coarse_nodes" not in written and "extra" not in written
    assert load_placement(tmp_path / "p.json", graph).assignment.tolist() == [0, 0, 0, 0]


# ---------------------------------------------------------------------------- atomic writes
def _files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_failed_write_leaves_no_file(tmp_path: Path, graph: Graph, cluster: Cluster) -> None:
    p = dataclasses.replace(_evaluated_placement(graph, cluster),
                            params={"R": math.nan})  # json.dump(allow_nan=False) fails on it
    with pytest.raises(ValueError, match="JSON"):
        save_placement(p, tmp_path / "p.json")
    assert _files_in(tmp_path) == []


def test_failed_write_keeps_existing_file(tmp_path: Path, graph: Graph, cluster: Cluster) -> None:
    dest = _write_text(tmp_path / "p.json", "previous content\n")
    p = dataclasses.replace(_evaluated_placement(graph, cluster), extra={"bad": float("inf")})
    with pytest.raises(ValueError):
        save_placement(p, dest)
    assert dest.read_text() == "previous content\n"
    assert _files_in(tmp_path) == ["p.json"]


def test_failed_write_in_the_middle_of_dumping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               graph: Graph) -> None:
    dest = _write_text(tmp_path / "g.json", "old graph\n")

    def half_write(fh: Any, data: bytes) -> None:
        fh.write(data[: len(data) // 2])
        fh.flush()
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(formats, "write_json_bytes", half_write)
    with pytest.raises(RuntimeError, match="disk on fire"):
        save_graph(graph, dest)
    with pytest.raises(RuntimeError):
        save_graph(graph, tmp_path / "new.json")
    assert dest.read_text() == "old graph\n"
    assert _files_in(tmp_path) == ["g.json"]


def test_unserializable_value_leaves_no_temp_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "x.json", {"a": object()})
    assert _files_in(tmp_path) == []


def test_successful_write_replaces_and_cleans_up(tmp_path: Path, graph: Graph) -> None:
    dest = _write_text(tmp_path / "g.json", "old graph\n")
    save_graph(graph, dest)
    assert _files_in(tmp_path) == ["g.json"]
    _assert_same_graph(load_graph(dest), graph)


def test_written_file_respects_umask(tmp_path: Path, graph: Graph) -> None:
    old = os.umask(0o027)
    try:
        path = save_graph(graph, tmp_path / "g.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # not mkstemp's 0600


# ---------------------------------------------------------------------------- units.parse_size
@pytest.mark.parametrize(
    ("text", "expected"),
    [("32GiB", 32 * 2**30), ("500MB", 500 * 10**6), ("1e9", 10**9), (1024, 1024), ("1024", 1024),
     ("1.5GiB", 3 * 2**29), ("4 kib", 4096), (" 2TB ", 2 * 10**12), ("512b", 512), (2.5e9, 2_500_000_000),
     ("1E3K", 10**6)],
)
def test_parse_size_accepts(text: str | int | float, expected: int) -> None:
    value = parse_size(text)
    assert value == expected
    assert isinstance(value, int)


@pytest.mark.parametrize(
    "text",
    ["abc", "-1GiB", "0", "inf", "", "   ", "12XB", "1.5.2GB", "GiB", "nan", "1e999", "32 GiB extra",
     "0.5", "0.9B",
     0, -5, math.inf, math.nan, True],
)
def test_parse_size_rejects(text: str | int | float) -> None:
    _expect_input_error(lambda: parse_size(text, field="--device-memory"), None, "--device-memory")


@pytest.mark.parametrize(("text", "expected"), [
    ("600MiB", 600 * 2**20), ("600B", 600), ("60KB", 60_000), ("17179869184", 16 * 2**30),
    (17179869184, 16 * 2**30), ("1e9", 10**9), (str(MIN_BARE_DEVICE_MEMORY), MIN_BARE_DEVICE_MEMORY),
    ("1 MiB", 2**20)])
def test_a_device_memory_with_its_unit_or_a_large_bare_count_of_bytes_is_read(text: str | int,
                                                                             expected: int) -> None:
    assert parse_device_memory(text, field="--device-memory") == expected


@pytest.mark.parametrize(("text", "number"), [
    ("600", "600"), (" 64 ", "64"), ("1e5", "1e5"), (str(MIN_BARE_DEVICE_MEMORY - 1), "1048575"),
    (600, "600"), (600.0, "600")])
def test_a_bare_number_too_small_for_a_device_is_a_forgotten_unit(text: str | int | float,
                                                                   number: str) -> None:
    with pytest.raises(CeleritasInputError) as err:
        parse_device_memory(text, field="--device-memory")
    assert str(err.value) == (f"--device-memory: {int(float(number))} bytes is too small for a device; "
                              f"did you mean {number}MiB? (write the unit: {number}MiB, 16GiB; a bare "
                              "number is bytes)")
    assert parse_size(text) == int(float(number))  # other sizes (tensor sizes, say) may be that small


# ---------------------------------------------------------------------------- size of real graphs
def test_loads_a_36k_node_graph(tmp_path: Path) -> None:
    """Not a timing assertion: the paper's largest graph size must load through the validating reader."""
    n = 36_352
    idx = np.arange(1, n)
    parents = np.concatenate([idx - 1, np.maximum(idx - 1 - (idx * 7919) % 97, 0)])
    children = np.concatenate([idx, idx])
    nodes = [{"name": f"layer{i // 100}/op{i}", "op": "MatMul", "time_us": float(i % 50) + 0.5,
              "memory_bytes": 4096 * (i % 13),
              **({"colocation": f"v{(i // 10) % 500}"} if i % 10 == 0 else {})}
             for i in range(n)]
    edges = [{"src": nodes[s]["name"], "dst": nodes[d]["name"], "bytes": 1024 * (k % 17),
              **({"src_output": 1} if k % 5 == 0 else {})}
             for k, (s, d) in enumerate(zip(parents.tolist(), children.tolist(), strict=True))]
    path = _write_doc(tmp_path / "big.json", {"format": GRAPH_FORMAT, "name": "big", "nodes": nodes,
                                              "edges": edges})
    g = load_graph(path)
    assert g.num_nodes == n
    assert g.num_edges == len(edges)
    rank = g.topological_rank
    assert np.all(rank[g.edge_src] < rank[g.edge_dst])
    assert len(g.colocation_names) == 500


# ---------------------------------------------------------------------------- Graph CSR / order
def test_csr_degrees_and_topological_order_by_hand() -> None:
    # nodes a b c d e ; edges (in id order): a->c, b->c, a->d, c->e, d->e, a->e
    g = Graph.from_arrays(
        name="hand",
        node_names=["a", "b", "c", "d", "e"],
        time_us=[1, 1, 1, 1, 1],
        memory_bytes=[1, 1, 1, 1, 1],
        edge_src=[0, 1, 0, 2, 3, 0],
        edge_dst=[2, 2, 3, 4, 4, 4],
        edge_bytes=[10, 20, 30, 40, 50, 60],
    )
    assert g.succ_ptr.tolist() == [0, 3, 4, 5, 6, 6]
    assert g.succ_idx.tolist() == [2, 3, 4, 2, 4, 4]
    assert g.succ_edge.tolist() == [0, 2, 5, 1, 3, 4]
    assert g.pred_ptr.tolist() == [0, 0, 0, 2, 3, 6]
    assert g.pred_idx.tolist() == [0, 1, 0, 2, 3, 0]
    assert g.pred_edge.tolist() == [0, 1, 2, 3, 4, 5]
    assert g.in_degree.tolist() == [0, 0, 2, 1, 3]
    assert g.out_degree.tolist() == [3, 1, 1, 1, 0]
    # Kahn with a LIFO stack: a first (smallest source), then its newly ready child d, then b, c, e.
    assert g.topological_order.tolist() == [0, 3, 1, 2, 4]
    assert g.topological_rank.tolist() == [0, 2, 3, 1, 4]
    # CSR slots agree with the edge list
    for u in range(g.num_nodes):
        for k in range(g.succ_ptr[u], g.succ_ptr[u + 1]):
            e = g.succ_edge[k]
            assert g.edge_src[e] == u and g.edge_dst[e] == g.succ_idx[k]
        for k in range(g.pred_ptr[u], g.pred_ptr[u + 1]):
            e = g.pred_edge[k]
            assert g.edge_dst[e] == u and g.edge_src[e] == g.pred_idx[k]


def test_csr_with_parallel_edges_and_isolated_nodes() -> None:
    g = Graph.from_arrays(name="p", node_names=["x", "lonely", "y"], time_us=[1, 1, 1],
                          memory_bytes=[0, 0, 0], edge_src=[0, 0], edge_dst=[2, 2], edge_bytes=[1, 2],
                          edge_src_output=[0, 1])
    assert g.succ_ptr.tolist() == [0, 2, 2, 2]
    assert g.pred_ptr.tolist() == [0, 0, 0, 2]
    assert g.in_degree.tolist() == [0, 0, 2]
    assert g.out_degree.tolist() == [2, 0, 0]
    assert g.topological_order.tolist() == [0, 2, 1]


def test_single_node_graph_without_edges() -> None:
    g = Graph.from_arrays(name="one", node_names=["only"], time_us=[0], memory_bytes=[0],
                          edge_src=[], edge_dst=[], edge_bytes=[])
    assert g.succ_ptr.tolist() == [0, 0]
    assert g.pred_ptr.tolist() == [0, 0]
    assert g.in_degree.tolist() == [0]
    assert g.topological_order.tolist() == [0]


# ---------------------------------------------------------------------------- docs/formats.md
def _doc_json_blocks() -> list[Any]:
    text = DOCS.read_text(encoding="utf-8")
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, flags=re.DOTALL)]


def _doc_examples() -> dict[str, Any]:
    by_format: dict[str, list[Any]] = {}
    for doc in _doc_json_blocks():
        by_format.setdefault(doc["format"], []).append(doc)
    assert sorted(by_format) == sorted([GRAPH_FORMAT, CLUSTER_FORMAT, CLUSTER_FORMAT_V2, PLACEMENT_FORMAT])
    assert all(len(docs) == 1 for docs in by_format.values()), "one example per format"
    return {tag: docs[0] for tag, docs in by_format.items()}


def test_docs_examples_load_with_the_readers(tmp_path: Path) -> None:
    ex = _doc_examples()
    g = graph_from_json(ex[GRAPH_FORMAT])
    c = cluster_from_json(ex[CLUSTER_FORMAT])
    p = placement_from_json(ex[PLACEMENT_FORMAT], g, c)
    # the example promises: 4 nodes, a co-location group, a non-zero src_output, a 2-device cluster
    assert g.num_nodes == 4
    assert len(g.colocation_names) == 1 and sum(x is not None for x in g.colocation) == 2
    assert g.edge_src_output.max() > 0
    assert {"batch_size", "source"} <= set(g.meta)
    assert c.num_devices == 2
    assert "speed" not in ex[CLUSTER_FORMAT]["devices"][1]  # shows the default
    assert p.devices == c.device_names
    # and through the file-reading functions too
    for tag, name in ((GRAPH_FORMAT, "g.json"), (CLUSTER_FORMAT, "c.json"), (PLACEMENT_FORMAT, "p.json")):
        _write_doc(tmp_path / name, ex[tag])
    assert load_graph(tmp_path / "g.json").node_names == g.node_names
    assert load_cluster(tmp_path / "c.json").device_names == c.device_names
    assert load_placement(tmp_path / "p.json", g, c).assignment.tolist() == p.assignment.tolist()


def test_docs_topology_example_is_what_the_preset_writes() -> None:
    from celeritas_core.graphs.topology import parse_preset

    shown = _doc_examples()[CLUSTER_FORMAT_V2]
    devices = Cluster.homogeneous(4, 80 * 2**30)
    topology = parse_preset("2x2:nvlink,ib").topology(devices.device_names)
    written = cluster_to_json(devices.with_topology(topology))
    assert json.loads(json.dumps(written)) == shown
    assert cluster_from_json(shown).topology.describe().startswith("2 nodes x 2 devices")


def test_docs_placement_example_figures_are_consistent() -> None:
    ex = _doc_examples()
    g = graph_from_json(ex[GRAPH_FORMAT])
    c = cluster_from_json(ex[CLUSTER_FORMAT])
    doc = ex[PLACEMENT_FORMAT]
    p = placement_from_json(doc, g, c)
    assert doc["graph"] == g.name
    assert doc["lower_bound_us"] == pytest.approx(lower_bound_us(g, c))
    assert doc["single_device_time_us"] == pytest.approx(single_device_time_us(g, c))
    gap = doc["predicted_step_time_us"] / doc["lower_bound_us"] - 1
    assert doc["gap_to_lower_bound"] == pytest.approx(gap)
    used = np.bincount(p.assignment, weights=g.memory_bytes, minlength=c.num_devices)
    assert doc["device_memory_bytes"] == used.astype(int).tolist()
    assert doc["device_capacity_bytes"] == c.memory_bytes.astype(int).tolist()
    assert doc["oom"] is bool(doc["oom_devices"])
    # everything on one device: no transfer, so the step is the serial work
    assert len(set(p.assignment.tolist())) == 1
    assert doc["predicted_step_time_us"] == pytest.approx(g.total_time_us)


def test_docs_placement_example_is_what_the_celeritas_placer_writes() -> None:
    from celeritas_core.placers import place

    ex = _doc_examples()
    g = graph_from_json(ex[GRAPH_FORMAT])
    c = cluster_from_json(ex[CLUSTER_FORMAT])
    written = json.loads(json.dumps(placement_to_json(place(g, c, "celeritas"))))
    shown = dict(ex[PLACEMENT_FORMAT])
    assert written.pop("placement_seconds") >= 0
    shown.pop("placement_seconds")
    assert written == shown


def test_docs_list_every_placement_field(graph: Graph, cluster: Cluster) -> None:
    text = DOCS.read_text(encoding="utf-8")
    keys = set(placement_to_json(_evaluated_placement(graph, cluster)))
    assert {"coarse_nodes", "extra"} <= keys
    missing = sorted(k for k in keys if f"`{k}`" not in text)
    assert not missing, f"docs/formats.md does not describe {missing}"
    example_keys = set(_doc_examples()[PLACEMENT_FORMAT])
    assert example_keys == keys, "the placement example should show every field"


def test_docs_mention_every_graph_and_cluster_field() -> None:
    text = DOCS.read_text(encoding="utf-8")
    fields = ["format", "name", "meta", "batch_size", "source", "nodes", "edges", "op", "time_us",
              "memory_bytes", "colocation", "src", "dst", "bytes", "src_output", "devices", "speed",
              "comm", "slope_us_per_byte", "intercept_us", "calibration", "rejected", "min_r2"]
    missing = [f for f in fields if f"`{f}`" not in text]
    assert not missing, missing


# ---------------------------------------------------------------------------- the CLI's error line
def test_cli_prints_one_line_error_exit_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from celeritas_cli.main import main

    doc = graph_doc()
    doc["nodes"][2]["time_us"] = -1
    bad = _write_doc(tmp_path / "model.json", doc)
    out = tmp_path / "p.json"
    status = main(["place", str(bad), "--devices", "2", "--device-memory", "1GiB", "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"celeritas: error: {bad}: node 'c': field 'time_us'"), err
    assert not out.exists()
    assert _files_in(tmp_path) == ["model.json"]


# ---------------------------------------------------------------------------- the hardened I/O layer
def test_inputs_must_be_regular_files(tmp_path: Path, graph: Graph) -> None:
    from celeritas_core.readwrite.safe_io import read_input_bytes

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # reading it would block forever: it must be refused before it is opened
    for path, needle in ((fifo, "FIFO"), (Path("/dev/zero"), "character device"), (tmp_path, "directory")):
        _expect_input_error(lambda p=path: load_graph(p), path, needle)
        _expect_input_error(lambda p=path: read_input_bytes(p), path, needle)
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    _expect_input_error(lambda: load_graph(loop), loop, "cannot read")
    save_graph(graph, tmp_path / "g.json")
    (tmp_path / "link.json").symlink_to("g.json")  # an input may be a symbolic link to a regular file
    _assert_same_graph(load_graph(tmp_path / "link.json"), graph)


def test_input_size_limit(tmp_path: Path) -> None:
    from celeritas_core.limits import MAX_INPUT_FILE_BYTES
    from celeritas_core.readwrite.safe_io import read_input_bytes

    assert MAX_INPUT_FILE_BYTES == 2 * 2**30
    path = _write_text(tmp_path / "g.json", json.dumps(graph_doc()))
    assert read_input_bytes(path) == path.read_bytes()
    _expect_input_error(lambda: read_input_bytes(path, limit=100), path, "above the input limit of 100 bytes")
    with path.open("r+b") as fh:  # a sparse file just above the limit: refused by its size, not read
        fh.truncate(MAX_INPUT_FILE_BYTES + 1)
    _expect_input_error(lambda: load_graph(path), path, "above the input limit of 2,147,483,648 bytes")


def test_utf16_input_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_bytes(json.dumps(graph_doc()).encode("utf-16"))
    _expect_input_error(lambda: load_graph(path), path, "not UTF-8")
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(graph_doc()).encode())  # a UTF-8 BOM is fine
    assert load_graph(path).name == "g4"


def test_outputs_only_replace_regular_files(tmp_path: Path, graph: Graph) -> None:
    from celeritas_core.readwrite.safe_io import check_output_path

    source = save_graph(graph, tmp_path / "in.json")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    (tmp_path / "link.json").symlink_to("in.json")
    (tmp_path / "dangling.json").symlink_to("nowhere.json")
    os.link(source, tmp_path / "hard.json")
    cases = [(fifo, "FIFO"), (tmp_path / "dir", "directory"), (tmp_path / "link.json", "symbolic link"),
             (tmp_path / "dangling.json", "symbolic link"), (source, "same file as the input"),
             (tmp_path / "hard.json", "same file as the input"), (source / "x.json", "Not a directory"),
             (tmp_path / "sub" / ".." / "in.json", "same file as the input")]
    before = {p.name: p.lstat() for p in tmp_path.iterdir()}
    for path, needle in cases:
        _expect_input_error(lambda p=path: save_graph(graph, p, inputs=[source]), path, needle)
        _expect_input_error(lambda p=path: check_output_path(p, inputs=[source]), path, needle)
    after = {p.name: p.lstat() for p in tmp_path.iterdir()}
    assert sorted(before) == sorted(after)
    for name, st in before.items():
        assert (st.st_mode, st.st_ino, st.st_mtime_ns, st.st_size) == \
            (after[name].st_mode, after[name].st_ino, after[name].st_mtime_ns, after[name].st_size), name
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and (tmp_path / "link.json").is_symlink()
    # The case: as root, `--out /dev/null` replaced the device node. Only the side-effect-free
    # check is called here; a real device is never passed to a writer in the tests.
    _expect_input_error(lambda: check_output_path("/dev/null"), "/dev/null", "character device")


def test_output_set_writes_all_or_nothing(tmp_path: Path) -> None:
    from celeritas_core.readwrite.safe_io import OutputSet, staged_outputs

    old = _write_text(tmp_path / "a.json", "old a\n")
    with pytest.raises(RuntimeError, match="plot failed"), staged_outputs():
        write_json_atomic(old, {"new": 1})
        write_json_atomic(tmp_path / "new" / "deeper" / "b.json", {"new": 2})

        def fail(fh: Any) -> None:
            fh.write(b"partial")
            raise RuntimeError("plot failed")

        formats.write_atomic(tmp_path / "c.png", fail, binary=True)
    assert old.read_text() == "old a\n"
    assert _files_in(tmp_path) == ["a.json"]  # no temporary file, no folder created for b.json
    with staged_outputs() as outputs:
        write_json_atomic(old, {"new": 1})
        write_json_atomic(tmp_path / "new" / "b.json", {"new": 2})
        assert old.read_text() == "old a\n" and not (tmp_path / "new" / "b.json").exists()  # staged only
    assert outputs.paths == [old, tmp_path / "new" / "b.json"]
    assert read_json(old) == {"new": 1} and read_json(tmp_path / "new" / "b.json") == {"new": 2}
    assert _files_in(tmp_path) == ["a.json", "new"] and _files_in(tmp_path / "new") == ["b.json"]
    same = OutputSet()
    same.add(tmp_path / "x.json", lambda fh: fh.write("1"))
    _expect_input_error(lambda: same.add(tmp_path / "x.json", lambda fh: fh.write("2")), tmp_path / "x.json",
                        "given twice")
    same.discard()
    assert not (tmp_path / "x.json").exists()


def test_output_set_restores_previous_files_when_a_rename_fails(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from celeritas_core.readwrite import safe_io

    first = _write_text(tmp_path / "first.json", "old first\n")
    outputs = safe_io.OutputSet()
    outputs.add(first, lambda fh: fh.write("new first\n"))
    outputs.add(tmp_path / "second.json", lambda fh: fh.write("new second\n"))
    real_replace = os.replace
    calls = []

    def flaky_replace(src: Any, dst: Any) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(safe_io.os, "replace", flaky_replace)
    with pytest.raises(OSError, match="No space"):
        outputs.commit()
    monkeypatch.setattr(safe_io.os, "replace", real_replace)
    assert first.read_text() == "old first\n"
    assert _files_in(tmp_path) == ["first.json"]


def test_cli_compare_writes_all_outputs_or_none(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch, graph: Graph) -> None:
    """The issue's case: the last figure fails after the JSON, the CSV and the Gantt chart were made."""
    from celeritas_cli.main import main
    from celeritas_core import plots

    graph_file = save_graph(graph, tmp_path / "g.json")
    out_dir = tmp_path / "out"

    def broken_chart(*args: Any, **kwargs: Any) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plots, "memory_chart", broken_chart)
    argv = ["compare", str(graph_file), "--devices", "2", "--device-memory", "1MiB", "--placers",
            "single,m-topo", "--out-dir", str(out_dir), "--quiet"]
    assert main(argv) == 1
    assert "No space left" in capsys.readouterr().err
    assert not out_dir.exists()  # nothing left behind, not even the folder
    out_dir.mkdir()
    old = _write_text(out_dir / "compare.json", "previous comparison\n")
    assert main(argv) == 1
    assert old.read_text() == "previous comparison\n" and _files_in(out_dir) == ["compare.json"]


def test_cli_refuses_outputs_before_computing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              graph: Graph) -> None:
    from celeritas_cli.main import main

    graph_file = save_graph(graph, tmp_path / "g.json")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cluster = ["--devices", "2", "--device-memory", "1MiB"]
    for argv, needle in (
            (["place", str(graph_file), *cluster, "--out", str(graph_file)], "same file as the input"),
            (["place", str(graph_file), *cluster, "--out", str(fifo)], "FIFO"),
            (["compare", str(graph_file), *cluster, "--out-dir", str(fifo)], "Not a directory"),
            (["generate", "layered", "--out", str(tmp_path)], "directory")):
        before = sorted(p.name for p in tmp_path.iterdir())
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
        assert sorted(p.name for p in tmp_path.iterdir()) == before


# ---------------------------------------------------------------------------- limits
# (the documents beyond them: LIMIT_CASES and CLUSTER_LIMIT_CASES, in the validation tests above)


def test_values_at_the_limits_load(tmp_path: Path) -> None:
    from celeritas_core.limits import MAX_BYTES, MAX_DEVICES, MAX_TIME_US

    doc = graph_doc()
    doc["nodes"] = [dict(n, time_us=0, memory_bytes=0) for n in doc["nodes"]]
    doc["nodes"][0].update(time_us=MAX_TIME_US, memory_bytes=MAX_BYTES)
    for e in doc["edges"]:
        e["bytes"] = 0
    doc["edges"][0]["bytes"] = MAX_BYTES
    doc["edges"][4]["src_output"] = 2**31 - 1
    g = load_graph(_write_doc(tmp_path / "g.json", doc))
    assert g.total_time_us == MAX_TIME_US and g.total_memory_bytes == MAX_BYTES
    cdoc = {"format": CLUSTER_FORMAT, "comm": {"slope_us_per_byte": 1.0, "intercept_us": MAX_TIME_US},
            "devices": [{"name": f"d{i}", "memory_bytes": MAX_BYTES, "speed": 1e-6 if i % 2 else 1e6}
                        for i in range(MAX_DEVICES)]}
    assert load_cluster(_write_doc(tmp_path / "c.json", cdoc)).num_devices == MAX_DEVICES


def test_cluster_build_checks_limits_and_types() -> None:
    for kwargs, needle in (({"memory_bytes": ["x", 1]}, "one number per device"),
                           ({"memory_bytes": [True, 1]}, "one number per device"),
                           ({"memory_bytes": [2e18, 1]}, "at most"),
                           ({"memory_bytes": [1, 1], "speed": [0, 1]}, "speed must be positive"),
                           ({"memory_bytes": [1, 1], "slope_us_per_byte": 2.0}, "at most 1"),
                           ({"memory_bytes": [1, 1], "intercept_us": math.inf}, "intercept_us")):
        with pytest.raises(CeleritasInputError, match=needle):
            Cluster.build(["a", "b"], **kwargs)
    with pytest.raises(CeleritasInputError, match="non-empty string"):
        Cluster.build([0, 1], [1, 1])
    with pytest.raises(CeleritasInputError, match="limit of 1,024"):
        Cluster.homogeneous(100_000, 1e9)


def test_docs_list_every_limit() -> None:
    from celeritas_core import limits

    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Limits"):]
    names = [n for n in dir(limits) if n.isupper()]
    assert {"MAX_BYTES", "MAX_TIME_US", "MAX_DEVICES", "MAX_INPUT_FILE_BYTES"} <= set(names)
    missing = [n for n in [*names, "MAX_FIT_COEFFICIENT", "MAX_CALIBRATION_BYTES"]
               if f"`{n}`" not in section]
    assert not missing, f"docs/formats.md, Limits, does not list {missing}"
