"""The columnar graph format celeritas-graph-columns/1 (.npz): exact round trips with JSON, the
choice of format by content and by extension, and strict validation of corrupt or malicious
archives (one-line errors naming the file and the member, node or edge; nothing is unpickled)."""

from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.generators import families
from celeritas_core.generators.synthetic import paper_shaped_graph
from celeritas_core.graphs.graph import Graph, Liveness
from celeritas_core.readwrite import columnar, formats
from celeritas_core.readwrite.columnar import graph_arrays, npz_bytes
from celeritas_core.readwrite.format_tags import GRAPH_COLUMNS_FORMAT
from celeritas_core.readwrite.formats import graph_from_json, graph_to_json, load_graph, save_graph
from tests.documents import graph_doc, graph_doc_with_liveness

Arrays = dict[str, Any]


# ---------------------------------------------------------------------------- helpers
def assert_identical(a: Graph, b: Graph) -> None:
    """Every field of two graphs equal, dtypes and the liveness arrays included."""
    assert (a.name, a.node_names, a.ops, a.colocation, dict(a.meta)) == (
        b.name, b.node_names, b.ops, b.colocation, dict(b.meta))
    for attr in ("time_us", "memory_bytes", "edge_src", "edge_dst", "edge_bytes", "edge_src_output"):
        x, y = getattr(a, attr), getattr(b, attr)
        assert x.dtype == y.dtype, attr
        np.testing.assert_array_equal(x, y, err_msg=attr)
    assert (a.liveness is None) == (b.liveness is None)
    if a.liveness is not None and b.liveness is not None:
        for attr in ("modelled", "persistent_bytes", "scratch_bytes", "output_ptr", "output_bytes",
                     "alias_node", "alias_output"):
            x, y = getattr(a.liveness, attr), getattr(b.liveness, attr)
            assert (x is None) == (y is None), attr
            if x is not None:
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=attr)


def with_random_liveness(graph: Graph, seed: int = 0) -> Graph:
    """``graph`` with liveness fields on about half its ops (integral and fractional bytes, zero
    scratch, outputs beyond the edges) and output aliases of real input tensors."""
    rng = np.random.default_rng(seed)
    n = graph.num_nodes
    persistent: list[float | None] = [None] * n
    scratch: list[float | None] = [None] * n
    outputs: list[list[float] | None] = [None] * n
    aliases: list[list[tuple[int, int] | None] | None] = [None] * n
    inputs: dict[int, list[tuple[int, int]]] = {}
    for s, d, o in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_src_output.tolist(),
                       strict=True):
        inputs.setdefault(d, []).append((s, o))
    for i in range(n):
        if rng.random() < 0.5:
            continue
        persistent[i] = float(rng.integers(0, 10**6)) if rng.random() < 0.8 else None
        scratch[i] = float(rng.random() * 1e4) if rng.random() < 0.5 else 0.0
        outputs[i] = [float(rng.integers(0, 10**7)) for _ in range(int(rng.integers(0, 4)))]
        if outputs[i] and i in inputs and rng.random() < 0.4:
            aliases[i] = [inputs[i][0]] + [None] * (len(outputs[i]) - 1)
    live = Liveness.from_lists(persistent, scratch, outputs, aliases)
    return Graph.from_arrays(name=graph.name, node_names=graph.node_names, ops=graph.ops,
                             time_us=graph.time_us, memory_bytes=graph.memory_bytes,
                             colocation=graph.colocation,
                             edge_src=graph.edge_src, edge_dst=graph.edge_dst, edge_bytes=graph.edge_bytes,
                             edge_src_output=graph.edge_src_output, meta=graph.meta, liveness=live)


def unicode_graph() -> Graph:
    """Names beyond ASCII (and with a NUL and a line break), empty op types, nested meta."""
    doc = graph_doc_with_liveness()
    for node, name in zip(doc["nodes"], ["ä/ß", "名前\n2", "x\x00y", "🙂"], strict=True):
        node["name"] = name
    doc["nodes"][0]["op"] = ""
    doc["nodes"][2]["colocation"] = doc["nodes"][3]["colocation"] = "grüppe"
    doc["nodes"][2]["output_aliases"] = [{"node": "名前\n2", "output": 0}]
    renamed = dict(zip("abcd", ["ä/ß", "名前\n2", "x\x00y", "🙂"], strict=True))
    for edge in doc["edges"]:
        edge["src"], edge["dst"] = renamed[edge["src"]], renamed[edge["dst"]]
    doc["meta"] = {"batch_size": 8, "nested": {"x": [1, 2.5, None, "é"]}, "big": 10**30, "t": True}
    return graph_from_json(doc)


def null_aliases_graph() -> Graph:
    """Output aliases given but all null: the reader keeps alias arrays of -1."""
    doc = graph_doc_with_liveness()
    doc["nodes"][2]["output_aliases"] = [None]
    return graph_from_json(doc)


GRAPHS = {
    "doc": lambda: graph_from_json(graph_doc()),
    "doc-liveness": lambda: graph_from_json(graph_doc_with_liveness()),
    "unicode": unicode_graph,
    "null-aliases": null_aliases_graph,
    "layered": lambda: families.layered_dag(seed=3, tasks=300, ccr=1.0),
    "inception-liveness": lambda: with_random_liveness(families.inception_graph(seed=1, modules=3)),
    "towers-liveness": lambda: with_random_liveness(families.towers_graph(seed=2, towers=5), seed=4),
    "paper-shaped": lambda: paper_shaped_graph("tensor_holography", seed=0),
}


def archive(members: dict[str, Any], *, pickle: bool = False) -> bytes:
    """A zip of ``.npy`` members: arrays (written by numpy, objects pickled when ``pickle``) or raw bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, value in members.items():
            if isinstance(value, bytes):
                zf.writestr(f"{key}.npy", value)
                continue
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(value), allow_pickle=pickle)
            zf.writestr(f"{key}.npy", member.getvalue())
    return buffer.getvalue()


def expect_error(path: Path, *needles: str) -> str:
    """Loading ``path`` raises a one-line CeleritasInputError naming the file first and each needle."""
    with pytest.raises(CeleritasInputError) as info:
        load_graph(path)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{path}: "), text
    for needle in needles:
        assert needle in text, f"{needle!r} missing from {text!r}"
    return text


@pytest.fixture
def base() -> Graph:
    return graph_from_json(graph_doc_with_liveness())


# ---------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("make", list(GRAPHS.values()), ids=list(GRAPHS))
def test_round_trip_json_npz_json(tmp_path: Path, make: Any) -> None:
    graph = make()
    direct = save_graph(graph, tmp_path / "direct.npz")
    assert direct.read_bytes()[:4] == b"PK\x03\x04"
    assert_identical(graph, load_graph(direct))  # the graph itself, exactly
    first = save_graph(graph, tmp_path / "g.json")
    from_json = load_graph(first)
    columns = save_graph(from_json, tmp_path / "g.npz")
    again = load_graph(columns)
    assert_identical(from_json, again)
    second = save_graph(again, tmp_path / "again.json")
    assert json.loads(first.read_text()) == json.loads(second.read_text())
    assert graph_to_json(again) == graph_to_json(graph)
    assert npz_bytes(again) == columns.read_bytes()  # deterministic: the same graph, the same bytes


def test_json_and_npz_are_told_apart_by_content(tmp_path: Path, base: Graph) -> None:
    npz_named_json = save_graph(base, tmp_path / "columns.json", file_format="npz")
    json_named_npz = save_graph(base, tmp_path / "text.npz", file_format="json")
    assert npz_named_json.read_bytes()[:2] == b"PK" and json_named_npz.read_bytes()[:1] == b"{"
    assert_identical(load_graph(npz_named_json), base)
    assert_identical(load_graph(json_named_npz), base)
    assert save_graph(base, tmp_path / "UPPER.NPZ").read_bytes()[:2] == b"PK"
    with pytest.raises(CeleritasInputError, match="unknown graph file format 'csv'"):
        save_graph(base, tmp_path / "x.csv", file_format="csv")


def test_the_archive_holds_the_documented_members(base: Graph) -> None:
    with np.load(io.BytesIO(npz_bytes(base)), allow_pickle=False) as npz:
        assert set(npz.files) == set(columnar.REQUIRED) | set(columnar.LIVENESS) | set(columnar.ALIASES)
        assert npz["format"].tobytes().decode() == GRAPH_COLUMNS_FORMAT
        assert json.loads(npz["meta"].tobytes()) == {"batch_size": 8, "source": "test"}
        for key, dtype in (columnar.REQUIRED | columnar.LIVENESS | columnar.ALIASES).items():
            assert npz[key].dtype.str == dtype and npz[key].ndim == 1, key
        assert npz["node_names"].tobytes() == b"abcd"
        assert npz["node_name_offsets"].tolist() == [0, 1, 2, 3, 4]
        assert npz["node_colocation"].tolist() == [-1, -1, 0, 0]
        assert npz["edge_src_output"].tolist() == [0, 0, 0, 0, 1]
        assert npz["live_output_offsets"].tolist() == [0, 0, 2, 3, 3]
        assert npz["live_alias_node"].tolist() == [-1, -1, 1]
    plain = graph_from_json(graph_doc())
    with np.load(io.BytesIO(npz_bytes(plain)), allow_pickle=False) as npz:
        assert set(npz.files) == set(columnar.REQUIRED)


def test_unmodelled_ops_keep_no_liveness_bytes(base: Graph) -> None:
    """What JSON cannot express (bytes on an op that is not modelled) is not written either."""
    live = base.liveness
    assert live is not None
    messy = Liveness(live.modelled, live.persistent_bytes + 5, live.scratch_bytes, live.output_ptr,
                     live.output_bytes, live.alias_node, live.alias_output)
    graph = Graph.from_arrays(name="m", node_names=base.node_names, time_us=base.time_us,
                              memory_bytes=base.memory_bytes, edge_src=base.edge_src, edge_dst=base.edge_dst,
                              edge_bytes=base.edge_bytes, edge_src_output=base.edge_src_output,
                              liveness=messy)
    arrays = graph_arrays(graph)
    assert arrays["live_persistent_bytes"].tolist() == [0, 9, 5, 0]
    assert_identical(columnar.graph_from_npz(npz_bytes(graph)),
                     graph_from_json(graph_to_json(graph)))


def test_writer_refuses_what_cannot_be_read_back(tmp_path: Path, base: Graph) -> None:
    bad_name = Graph.from_arrays(name="s", node_names=["ok", "bad\ud800"], time_us=[1, 1],
                                 memory_bytes=[1, 1], edge_src=[0], edge_dst=[1], edge_bytes=[1])
    with pytest.raises(CeleritasInputError, match="lone surrogate"):
        save_graph(bad_name, tmp_path / "s.npz")
    nan_meta = Graph.from_arrays(name="n", node_names=["a"], time_us=[1], memory_bytes=[1], edge_src=[],
                                 edge_dst=[], edge_bytes=[], meta={"x": math.nan})
    with pytest.raises(ValueError, match="JSON"):
        save_graph(nan_meta, tmp_path / "n.npz")
    huge = base.with_memory(np.array([1e19, 1, 1, 1]))
    with pytest.raises(CeleritasInputError, match="at most 1e"):
        save_graph(huge, tmp_path / "h.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- corrupt archives
def _mutate(arrays: Arrays, key: str, value: Any) -> Arrays:
    changed = dict(arrays)
    if value is None:
        del changed[key]
    else:
        changed[key] = value
    return changed


def _float32(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float32)


# (name, member, new value or a function of the old one, needles); None deletes the member
BAD_MEMBERS: list[tuple[str, str, Any, tuple[str, ...]]] = [
    ("object-array", "time_us", lambda v: np.array(list(v), dtype=object), ("time_us.npy", "dtype", "|O")),
    ("float32-time", "time_us", _float32, ("time_us.npy", "float64", "<f4")),
    ("big-endian-bytes", "edge_bytes", lambda v: v.astype(">f8"), ("edge_bytes.npy", ">f8")),
    ("int32-src", "edge_src", lambda v: v.astype(np.int32), ("edge_src.npy", "int64")),
    ("two-dimensional", "memory_bytes", lambda v: v.reshape(2, 2), ("memory_bytes.npy", "one-dimensional")),
    ("string-array", "node_names", lambda v: np.array(["a", "b", "c", "d"]), ("node_names.npy", "uint8")),
    ("missing-member", "edge_dst", None, ("missing member 'edge_dst.npy'",)),
    ("missing-format", "format", None, ("missing member 'format.npy'", GRAPH_COLUMNS_FORMAT)),
    ("wrong-tag", "format", lambda v: np.frombuffer(b"celeritas-graph/1", np.uint8), ("unknown format tag",)),
    ("empty-name", "name", lambda v: np.zeros(0, np.uint8), ("'name'", "non-empty")),
    ("meta-not-json", "meta", lambda v: np.frombuffer(b"{oops", np.uint8),
     ("member 'meta'", "not valid JSON")),
    ("meta-not-object", "meta", lambda v: np.frombuffer(b"[1]", np.uint8), ("member 'meta'", "JSON object")),
    ("no-nodes", "time_us", lambda v: v[:0], ("graph is empty",)),
    ("short-memory", "memory_bytes", lambda v: v[:3], ("'memory_bytes'", "one per node")),
    ("offsets-decrease", "node_name_offsets", lambda v: np.array([0, 2, 1, 3, 4]), ("node_name_offsets",)),
    ("offsets-not-at-0", "node_name_offsets", lambda v: v + 1, ("node_name_offsets", "start at 0")),
    ("offsets-short", "node_name_offsets", lambda v: v[:-1], ("node_name_offsets",)),
    ("offsets-past-end", "node_name_offsets", lambda v: np.array([0, 1, 2, 3, 9]), ("node_name_offsets",)),
    ("empty-node-name", "node_name_offsets", lambda v: np.array([0, 1, 1, 3, 4]),
     ("node_names[1]", "non-empty")),
    ("duplicate-name", "node_names", lambda v: np.frombuffer(b"abca", np.uint8),
     ("node 'a'", "duplicate node name", "nodes[0]", "nodes[3]")),
    ("bad-utf8-name", "node_names", lambda v: np.frombuffer(b"ab\xffd", np.uint8),
     ("node_names[2]", "UTF-8")),
    ("op-code-out-of-range", "node_op", lambda v: np.array([0, 1, 9, 3]), ("node 'c'", "'op'", "op_names")),
    ("op-code-negative", "node_op", lambda v: np.array([0, -1, 2, 3]), ("node 'b'", "'op'")),
    ("group-code-out-of-range", "node_colocation", lambda v: np.array([-1, -2, 0, 0]),
     ("node 'b'", "'colocation'")),
    ("nan-time", "time_us", lambda v: np.array([1.0, math.nan, 3.0, 0.0]),
     ("node 'b'", "'time_us'", "finite and >= 0", "nan")),
    ("negative-memory", "memory_bytes", lambda v: np.array([10.0, 20.0, -1.0, 0.0]),
     ("node 'c'", "'memory_bytes'", "-1.0")),
    ("time-above-limit", "time_us", lambda v: np.array([1.0, 2e15, 3.0, 0.0]), ("node 'b'", "at most 1e+15")),
    ("total-memory", "memory_bytes", lambda v: np.full(4, 0.4e18), ("total memory_bytes",)),
    ("edge-src-out-of-range", "edge_src", lambda v: np.array([0, 1, 2, 4, 1]), ("edges[3]", "src 4", "0..3")),
    ("edge-dst-negative", "edge_dst", lambda v: np.array([1, 2, 3, -1, 3]), ("edges[3]", "dst -1")),
    ("edge-count-mismatch", "edge_bytes", lambda v: v[:2], ("'edge_bytes'", "one per edge")),
    ("self-loop", "edge_dst", lambda v: np.array([1, 1, 3, 2, 3]), ("edges[1]", "self-loop", "'b'")),
    ("cycle", "edge_src", lambda v: np.array([0, 1, 2, 3, 1]), ("cycle", "'c'", "'d'")),  # edges[3]: d -> c
    ("infinite-bytes", "edge_bytes", lambda v: np.array([100, math.inf, 0, 100, 7.0]),
     ("edges[1] ('b' -> 'c')", "'bytes'", "inf")),
    ("src-output-2**31", "edge_src_output", lambda v: np.array([0, 0, 0, 0, 2**31]),
     ("edges[4] ('b' -> 'd')", "'src_output'", "2**31")),
    ("liveness-partial", "live_scratch_bytes", None, ("missing member 'live_scratch_bytes.npy'", "together")),
    ("bool-not-0-or-1", "live_modelled", lambda v: np.array([0, 2, 1, 0], np.uint8).view(bool),
     ("live_modelled", "0 and 1")),
    ("unmodelled-with-bytes", "live_persistent_bytes", lambda v: np.array([3.0, 4.0, 0.0, 0.0]),
     ("node 'a'", "not modelled")),
    ("nan-output-bytes", "live_output_bytes", lambda v: np.array([50.5, math.nan, 6.0]),
     ("node 'b'", "output_bytes[1]", "nan")),
    ("output-offsets-bad", "live_output_offsets", lambda v: np.array([0, 0, 2, 1, 3]),
     ("live_output_offsets",)),
    ("alias-out-of-range", "live_alias_node", lambda v: np.array([-1, -1, 7]),
     ("node 'c'", "output_aliases[0]")),
    ("alias-not-an-input", "live_alias_node", lambda v: np.array([-1, -1, 3]),
     ("node 'c'", "output_aliases[0]", "not an input")),
    ("alias-half-missing", "live_alias_output", None, ("live_alias_output.npy",)),
]


@pytest.mark.parametrize(("key", "change", "needles"), [c[1:] for c in BAD_MEMBERS],
                         ids=[c[0] for c in BAD_MEMBERS])
def test_bad_members_are_one_line_errors(tmp_path: Path, base: Graph, key: str, change: Any,
                                          needles: tuple[str, ...]) -> None:
    arrays = graph_arrays(base)
    value = change(arrays[key]) if callable(change) else change
    path = tmp_path / "bad.npz"
    path.write_bytes(archive(_mutate(arrays, key, value), pickle=True))
    expect_error(path, *needles)


class _Evil:
    """Unpickling this would create a file: reading must never unpickle."""

    marker: Path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def test_a_pickle_is_never_loaded(tmp_path: Path, base: Graph) -> None:
    evil = _Evil()
    evil.marker = tmp_path / "pwned"
    arrays = graph_arrays(base)
    for key in ("time_us", "node_names", "meta", "format"):
        path = tmp_path / f"{key}.npz"
        path.write_bytes(archive(_mutate(arrays, key, np.array([evil, 1], dtype=object)), pickle=True))
        expect_error(path, f"{key}.npy", "dtype")
    assert not evil.marker.exists()


def _valid_npz(base: Graph) -> bytes:
    return npz_bytes(base)


def test_not_a_zip_truncated_and_corrupted(tmp_path: Path, base: Graph) -> None:
    data = _valid_npz(base)
    cases = {
        "garbage.npz": b"PK\x03\x04" + bytes(range(256)) * 4,
        "truncated.npz": data[: len(data) // 2],
        "only-magic.npz": b"PK\x03\x04",
        "empty-archive.npz": archive({}),
    }
    flipped = bytearray(data)
    member = zipfile.ZipFile(io.BytesIO(data)).getinfo("time_us.npy")
    flipped[member.header_offset + 30 + len("time_us.npy") + 5] ^= 0xFF  # inside the compressed data
    cases["crc.npz"] = bytes(flipped)
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        expect_error(path)


def test_npy_headers_are_checked_before_any_data(tmp_path: Path, base: Graph) -> None:
    arrays = graph_arrays(base)
    good = io.BytesIO()
    np.lib.format.write_array(good, arrays["time_us"])
    header_v3 = b"\x93NUMPY\x03\x00" + good.getvalue()[8:]
    huge = io.BytesIO()
    np.lib.format.write_array_header_1_0(huge, {"descr": "<f8", "fortran_order": False, "shape": (10**13,)})
    huge_shape = huge.getvalue() + b"\0" * 32
    cases = {
        "short-data": ("time_us", good.getvalue()[:-8], ("holds 24 bytes", "4 values")),
        "long-data": ("time_us", good.getvalue() + b"\0" * 8, ("holds 40 bytes",)),
        "not-npy": ("time_us", b"hello world", ("not a .npy array",)),
        "version-3": ("time_us", header_v3, ("unsupported .npy version 3.0",)),
        "huge-shape": ("time_us", huge_shape, ("holds 32 bytes", "10,000,000,000,000 values")),
    }
    for name, (key, raw, needles) in cases.items():
        members: dict[str, Any] = dict(arrays)
        members[key] = raw
        path = tmp_path / f"{name}.npz"
        path.write_bytes(archive(members))
        expect_error(path, *needles)


def test_uncompressed_size_is_bounded_before_decompressing(tmp_path: Path, base: Graph,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb.npz"
    path.write_bytes(_valid_npz(base))
    monkeypatch.setattr(columnar, "MAX_INPUT_FILE_BYTES", 1000)
    expect_error(path, "uncompressed", "above the limit of 1,000 bytes")


def test_op_and_group_tables_hold_distinct_strings(tmp_path: Path, base: Graph) -> None:
    arrays = dict(graph_arrays(base))
    arrays["op_names"] = np.frombuffer(b"MatMulMatMulReluSum", np.uint8)
    arrays["op_name_offsets"] = np.array([0, 6, 12, 16, 19])
    path = tmp_path / "ops.npz"
    path.write_bytes(archive(arrays))
    expect_error(path, "'op_names'", "'MatMul' appears twice")
    arrays = dict(graph_arrays(base))
    arrays["colocation_name_offsets"] = np.array([0, 0, 3])
    arrays["colocation_names"] = np.frombuffer(b"grp", np.uint8)
    path.write_bytes(archive(arrays))
    expect_error(path, "colocation_names[0]", "non-empty")


def test_a_member_given_twice_is_refused(tmp_path: Path, base: Graph) -> None:
    buffer = io.BytesIO(_valid_npz(base))
    with pytest.warns(UserWarning), zipfile.ZipFile(buffer, "a") as zf:
        zf.writestr("time_us.npy", b"x")
    path = tmp_path / "twice.npz"
    path.write_bytes(buffer.getvalue())
    expect_error(path, "'time_us.npy' appears twice")


def test_unknown_members_are_ignored(tmp_path: Path, base: Graph) -> None:
    arrays: dict[str, Any] = dict(graph_arrays(base))
    arrays["future_column"] = np.arange(3)
    path = tmp_path / "extra.npz"
    path.write_bytes(archive(arrays))
    assert_identical(load_graph(path), base)


def test_inputs_go_through_safe_io(tmp_path: Path, base: Graph, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_graph(base, tmp_path / "g.npz")
    monkeypatch.setattr(formats, "read_input_bytes",
                        lambda p: (_ for _ in ()).throw(CeleritasInputError("refused", source=str(p))))
    with pytest.raises(CeleritasInputError, match="refused"):
        load_graph(path)


def test_failed_write_keeps_the_previous_file(tmp_path: Path, base: Graph) -> None:
    dest = tmp_path / "g.npz"
    dest.write_bytes(b"previous")
    nan_meta = Graph.from_arrays(name="n", node_names=["a"], time_us=[1], memory_bytes=[1], edge_src=[],
                                 edge_dst=[], edge_bytes=[], meta={"x": math.inf})
    with pytest.raises(ValueError):
        save_graph(nan_meta, dest)
    assert dest.read_bytes() == b"previous" and sorted(p.name for p in tmp_path.iterdir()) == ["g.npz"]


def test_docs_describe_every_member_with_its_dtype() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "formats.md").read_text(encoding="utf-8")
    section = text[text.index("## `celeritas-graph-columns/1`"):text.index("## `celeritas-cluster/1`")]
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in section.splitlines()
            if line.startswith("| `")}
    names = {"uint8": "|u1", "int64": "<i8", "float64": "<f8", "bool": "|b1"}
    documented = {}
    for cell, dtype in rows.items():
        for member in cell.replace("`", "").split(", "):
            documented[member] = names.get(dtype.strip("`"))
    members = columnar.REQUIRED | columnar.LIVENESS | columnar.ALIASES
    assert {k: documented.get(k) for k in members} == members


def test_a_graph_json_too_large_to_read_back_is_refused_and_nothing_written(tmp_path, monkeypatch):
    import celeritas_core.readwrite.formats as formats
    from celeritas_core.generators.families import layered_dag

    graph = layered_dag(seed=1, tasks=200, ccr=1.0)
    monkeypatch.setattr(formats, "MAX_INPUT_FILE_BYTES", 4096)
    out = tmp_path / "big.json"
    with pytest.raises(CeleritasInputError, match=r"big\.json: the graph's JSON would be .* bytes, above the "
                                                 r"4,096 bytes a reader accepts; write the columnar format"):
        formats.save_graph(graph, out)
    assert not out.exists()
    formats.save_graph(graph, tmp_path / "big.npz")  # the columnar file is far smaller
    assert (tmp_path / "big.npz").stat().st_size < 4096 * 4
