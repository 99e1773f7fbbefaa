"""Every reader, fed arbitrary JSON documents and mutations of valid ones, either returns a result
within the limits (docs/formats.md, "Limits") or raises a one-line CeleritasInputError; nothing
else (no OverflowError, TypeError, KeyError, numpy errors, ...). Derandomized: a fixed seed."""

from __future__ import annotations

import copy
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.limits import MAX_BYTES, MAX_DEVICES, MAX_SPEED, MAX_TIME_US, MIN_SPEED
from celeritas_core.readwrite import formats
from celeritas_core.readwrite.columnar import graph_arrays, npz_bytes
from celeritas_core.readwrite.formats import (
    check_fits_document,
    check_profile_document,
    cluster_from_json,
    fits_from_json,
    fits_to_json,
    graph_from_json,
    json_bytes,
    load_graph,
    parse_json,
    placement_from_json,
)
from celeritas_core.readwrite.graph_columns import json_columns
from tests.documents import cluster_doc, graph_doc, graph_doc_with_liveness, placement_doc

FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ---------------------------------------------------------------------------- valid documents
GRAPH = graph_doc_with_liveness()
CLUSTER = cluster_doc()
PLACEMENT = placement_doc()
PROFILE = {
    "format": "celeritas-profile/1", "model": "m", "model_config": {},
    "profiles": [
        {"batch_size": 2, "time_us": {"a": 1.0, "b": 2.0}, "memory_bytes": {"a": 10, "b": 20},
         "scratch_bytes": {"b": 4}, "peak_bytes": {"CPU:0": 40}, "output_aliases": {"b": [None, ["a", 0]]},
         "step_seconds": [0.1]},
        {"batch_size": 4, "time_us": {"a": 2.0, "b": 4.0}, "memory_bytes": {"a": 20, "b": 40},
         "output_aliases": {"b": [None, "external"]}, "step_seconds": [0.2]},
    ],
}
FITS = {
    "format": "celeritas-fits/1", "batch_sizes": [2, 4],
    "ops": {"a": {"time_us": [0.5, 0.0], "memory_bytes": [5.0, 0.0], "time_r2": 1.0, "memory_r2": None},
            "b": {"time_us": [1.0, 0.0], "memory_bytes": [10.0, 0.0], "time_r2": None, "memory_r2": 0.5}},
    "output_aliases": {"b": [None, ["a", 0]]},
}

# ---------------------------------------------------------------------------- strategies
EXTREME_NUMBERS = [0, -0.0, 1, -1, 0.5, 1e-300, 5e-324, 1e15, 1e18, 1.0000001e18, 2**31 - 1, 2**31, 2**53,
                   2**63 - 1, 2**63, 2**64, 10**30, 10**400, -(10**400), 1e308, -1e308, math.inf, -math.inf,
                   math.nan]
scalars = st.one_of(
    st.none(), st.booleans(), st.sampled_from(EXTREME_NUMBERS),
    st.integers(), st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.sampled_from(["a", "b", "gpu:0", "celeritas-graph/1", "2", "1e30", "NaN", ""]),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.sampled_from(["a", "b", "name", "format", "nodes", "edges",
                                                                "devices", "bytes", "ops", "profiles", "x"])
                                               | st.text(max_size=5), children, max_size=4)),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys / indices) into ``doc``, the root included."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """``base`` with one to three edits: a value replaced, a key or item deleted, an item duplicated."""
    doc: Any = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "duplicate"]))
        if not path:
            if action == "replace":
                doc = draw(json_values)
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        if action == "replace":
            parent[key] = draw(json_values)
        elif action == "delete":
            del parent[key]
        elif isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        else:
            parent[key] = copy.deepcopy(parent[key])
    return doc


def documents(base: dict[str, Any]) -> st.SearchStrategy[Any]:
    return st.one_of(json_values, mutated(base), mutated(base), mutated(base))


def _only_input_errors(fn: Callable[[], Any]) -> Any:
    """Run ``fn``; a CeleritasInputError must be one non-empty line; returns the result or None."""
    try:
        return fn()
    except CeleritasInputError as exc:
        text = str(exc)
        assert text.strip() and "\n" not in text and "\r" not in text, repr(text)
        return None


def _assert_graph_within_limits(graph: Graph) -> None:
    for values, limit in ((graph.time_us, MAX_TIME_US), (graph.memory_bytes, MAX_BYTES),
                          (graph.edge_bytes, MAX_BYTES)):
        assert np.isfinite(values).all() and (values >= 0).all() and (values <= limit).all()
        assert float(values.sum()) <= limit
    assert (graph.edge_src_output >= 0).all() and (graph.edge_src_output < 2**31).all()


def _assert_cluster_within_limits(cluster: Cluster) -> None:
    assert 1 <= cluster.num_devices <= MAX_DEVICES
    assert (cluster.memory_bytes > 0).all() and (cluster.memory_bytes <= MAX_BYTES).all()
    assert ((cluster.speed >= MIN_SPEED) & (cluster.speed <= MAX_SPEED)).all()
    assert 0 <= cluster.slope_us_per_byte <= 1 and 0 <= cluster.intercept_us <= MAX_TIME_US


# ---------------------------------------------------------------------------- the readers
def test_the_valid_documents_read() -> None:
    graph = graph_from_json(copy.deepcopy(GRAPH))
    cluster = cluster_from_json(copy.deepcopy(CLUSTER))
    placement_from_json(copy.deepcopy(PLACEMENT), graph, cluster)
    fits_from_json(copy.deepcopy(FITS))
    check_profile_document(copy.deepcopy(PROFILE))
    from celeritas_tf.evaluation import fits_from_profile

    assert fits_from_profile(copy.deepcopy(PROFILE)).names == ("a", "b")


@FUZZ
@given(documents(GRAPH))
def test_graph_reader(doc: Any) -> None:
    graph = _only_input_errors(lambda: graph_from_json(doc))
    if graph is not None:
        _assert_graph_within_limits(graph)


@FUZZ
@given(documents(CLUSTER))
def test_cluster_reader(doc: Any) -> None:
    cluster = _only_input_errors(lambda: cluster_from_json(doc))
    if cluster is not None:
        _assert_cluster_within_limits(cluster)


@FUZZ
@given(documents(PLACEMENT), st.booleans())
def test_placement_reader(doc: Any, with_cluster: bool) -> None:
    graph = graph_from_json(copy.deepcopy(GRAPH))
    cluster = cluster_from_json(copy.deepcopy(CLUSTER)) if with_cluster else None
    placement = _only_input_errors(lambda: placement_from_json(doc, graph, cluster))
    if placement is not None:
        assert ((placement.assignment >= 0) & (placement.assignment < len(placement.devices))).all()


@FUZZ
@given(documents(FITS), st.integers(1, 10**6))
def test_fits_reader(doc: Any, batch: int) -> None:
    fits = _only_input_errors(lambda: fits_from_json(doc, source="fits.json"))
    if fits is not None:
        t, m = fits.predict(batch)
        assert np.isfinite(t).all() and np.isfinite(m).all()


@FUZZ
@given(documents(PROFILE))
def test_profile_reader_as_the_cli_calls_it(doc: Any) -> None:
    """``celeritas fit`` checks the document (check_profile_document) and then fits it with
    celeritas_tf.evaluation.fits_from_profile (profile_rows, fit_costs, profile_aliases)."""
    from celeritas_tf.evaluation import fits_from_profile

    def read() -> Any:
        check_profile_document(doc, "profile.json")
        return fits_from_profile(doc, "profile.json")

    fits = _only_input_errors(read)
    if fits is not None:
        assert all(isinstance(b, int) and 1 <= b <= 10**6 for b in fits.batch_sizes)
        for column in (fits.time_slope, fits.time_intercept, fits.memory_slope, fits.memory_intercept):
            assert np.isfinite(column).all()
        _only_input_errors(lambda: check_fits_document(fits_to_json(fits)))  # what `fit` writes reads back


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=64), mutated(GRAPH).map(lambda d: json.dumps(d).encode()),
                 st.sampled_from([b"", b"\xff\xfe{", b"[" * 5000, b'{"format": ' + b"9" * 5000 + b"}",
                                  b"NaN", b'"\\ud800"', json.dumps(GRAPH).encode()[:-3]])))
def test_graph_files_of_arbitrary_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("bytes") / "g.json"
    Path(path).write_bytes(data)
    graph = _only_input_errors(lambda: load_graph(path))
    if graph is not None:
        _assert_graph_within_limits(graph)


def test_profile_values_the_issue_listed_are_refused() -> None:
    """Batch sizes 0, -2, "2", 2.5, true, 1e30 and NaN / string costs (the issue's list)."""
    for field, value in (("batch_size", 0), ("batch_size", -2), ("batch_size", "2"), ("batch_size", 2.5),
                         ("batch_size", True), ("batch_size", 1e30), ("batch_size", math.nan),
                         ("time_us", {"a": math.nan}), ("time_us", {"a": "1"}), ("memory_bytes", {"a": True}),
                         ("memory_bytes", {"a": 1e19}), ("time_us", {"a": 2e15})):
        doc = copy.deepcopy(PROFILE)
        doc["profiles"][1][field] = value
        with pytest.raises(CeleritasInputError, match=f"profiles\\[1\\].*'{field}'"):
            check_profile_document(doc, "profile.json")


# ---------------------------------------------------------------------------- the fast paths
def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down (an int is not a float; NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@FUZZ
@given(json_values, st.sampled_from([b"", b"\xef\xbb\xbf"]))
def test_parse_json_reads_what_the_json_module_reads(value: Any, bom: bool) -> None:
    """orjson where it can, the json module otherwise: the same values and types either way
    (NaN and Infinity literals, integers beyond 64 bits, lone surrogates, a BOM)."""
    text = json.dumps(value)
    assert _same(parse_json(bom + text.encode("utf-8")), json.loads(text)), text


@FUZZ
@given(json_values, st.sampled_from([None, 0, 1, 2, 4]))
def test_json_bytes_writes_what_the_json_module_writes(value: Any, indent: int | None) -> None:
    """The same document, refused exactly when ``json.dumps(allow_nan=False)`` refuses it; text
    identical to the json module's for documents without floats (indentation included)."""
    try:
        expected = json.dumps(value, indent=indent, allow_nan=False, ensure_ascii=False)
    except ValueError:
        with pytest.raises(ValueError, match="JSON"):
            json_bytes(value, indent=indent)
        return
    written = json_bytes(value, indent=indent).decode("utf-8")
    assert _same(json.loads(written), json.loads(expected))
    if indent is not None and "." not in expected and "e" not in expected.lower():  # the json module's
        # text; documents orjson leaves to the json module come out ASCII-escaped, as they always were
        assert written in (expected, json.dumps(value, indent=indent, allow_nan=False))


@FUZZ
@given(mutated(GRAPH))
def test_the_vectorised_graph_reader_agrees_with_the_loop(doc: Any) -> None:
    """json_columns accepts a document's nodes and edges only when the node-by-node loop does, and
    then gathers the same columns (else the loop runs and names the problem)."""
    if not (isinstance(doc, dict) and isinstance(doc.get("nodes"), list)
            and isinstance(doc.get("edges"), list)):
        return
    fast = json_columns(doc["nodes"], doc["edges"])
    slow = _only_input_errors(lambda: formats._read_columns(doc["nodes"], doc["edges"]))
    if fast is None:
        return
    assert slow is not None, "the fast path accepted what the loop refuses"
    assert (fast.names, fast.ops, fast.groups, fast.alias_rows) == (slow.names, slow.ops, slow.groups,
                                                                    slow.alias_rows)
    for attr in ("time_us", "memory_bytes", "edge_src", "edge_dst", "edge_bytes", "edge_src_output"):
        np.testing.assert_array_equal(getattr(fast, attr), getattr(slow, attr), err_msg=attr)
    assert fast.live_total == slow.live_total


def test_valid_documents_take_the_vectorised_path() -> None:
    for doc in (GRAPH, graph_doc(), {**graph_doc(), "edges": []}):
        assert json_columns(doc["nodes"], doc["edges"]) is not None


_NPZ = npz_bytes(graph_from_json(copy.deepcopy(GRAPH)))
_ARRAYS = graph_arrays(graph_from_json(copy.deepcopy(GRAPH)))
_DTYPES = ["<f8", "<i8", "|u1", "|b1", "<f4", "<i4", ">f8", "<U2", "|S3", "<c16"]


@st.composite
def corrupt_archives(draw: st.DrawFn) -> bytes:
    """A valid archive with bytes flipped, cut or inserted, or a member replaced by another array."""
    kind = draw(st.sampled_from(["flip", "cut", "insert", "member"]))
    data = bytearray(_NPZ)
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        return bytes(data)
    if kind == "cut":
        return bytes(data[:draw(st.integers(0, len(data) - 1))])
    if kind == "insert":
        at = draw(st.integers(0, len(data)))
        return bytes(data[:at]) + draw(st.binary(min_size=1, max_size=16)) + bytes(data[at:])
    members: dict[str, np.ndarray] = dict(_ARRAYS)
    key = draw(st.sampled_from(sorted(members)))
    dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
    length = draw(st.integers(0, 8))
    values = draw(st.lists(st.sampled_from([*EXTREME_NUMBERS[:19], -1, 2, 3, 4, 7]), min_size=length,
                           max_size=length))
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            members[key] = np.array(values, dtype=np.float64).astype(dtype)
    except (OverflowError, ValueError, TypeError):
        members[key] = np.zeros(length, dtype=dtype)
    buffer = io.BytesIO()
    np.savez(buffer, **members)
    return buffer.getvalue()


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(corrupt_archives())
def test_corrupt_columnar_files(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    """Every corruption of an archive is a one-line input error or a graph within the limits."""
    path = tmp_path_factory.mktemp("npz") / "g.npz"
    Path(path).write_bytes(data)
    graph = _only_input_errors(lambda: load_graph(path))
    if graph is not None:
        _assert_graph_within_limits(graph)
