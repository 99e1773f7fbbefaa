"""Graph files in both formats on the command line: every command that reads a graph accepts the
columnar .npz as it accepts JSON (same results), ``celeritas generate`` writes it, and
``celeritas convert`` converts both ways, refuses to replace its input and writes nothing on bad
input (exit 2, one line)."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from celeritas_cli.main import main
from celeritas_core.readwrite.columnar import graph_arrays
from celeritas_core.readwrite.formats import graph_from_json, load_graph, save_graph
from tests.core.test_columnar import archive, assert_identical
from tests.documents import graph_doc_with_liveness

CLUSTER = ["--devices", "2", "--device-memory", "1KiB"]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not p.is_symlink()}


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the same graph (liveness, aliases, co-location, two outputs) as g.json and g.npz."""
    graph = graph_from_json(graph_doc_with_liveness())
    save_graph(graph, tmp_path / "g.json")
    save_graph(graph, tmp_path / "g.npz")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _without_timing(text: str) -> str:
    """``text`` without wall-clock figures (the summary's "placed in N s", the table's "N.NNNs")."""
    return re.sub(r"\b[0-9]+\.[0-9]+ ?s\b", "- s", text)


def test_place_simulate_info_compare_read_npz_as_json(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results: dict[str, list[Any]] = {}
    for graph in ("g.json", "g.npz"):
        stem = graph.replace(".", "_")
        runs = [["place", graph, *CLUSTER, "--placer", "order-place", "--out", f"{stem}.p.json"],
                ["simulate", graph, f"{stem}.p.json"],
                ["info", graph, *CLUSTER],
                ["compare", graph, *CLUSTER, "--placers", "single,m-topo,order-place", "--no-figures",
                 "--quiet", "--out-dir", f"{stem}.cmp"]]
        outputs = []
        for argv in runs:
            code, out, err = _run(argv, capsys)
            assert code == 0, (argv, err)
            outputs.append(_without_timing(out.replace(stem, "STEM")))
        placement = json.loads((work / f"{stem}.p.json").read_text())
        compared = json.loads((work / f"{stem}.cmp" / "compare.json").read_text())
        for row in compared["placers"]:
            row.pop("placement_seconds")
        results[graph] = [outputs, placement["assignment"], placement["predicted_step_time_us"], compared]
    assert results["g.json"] == results["g.npz"]


def test_generate_writes_the_columnar_format(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for out in ("t.npz", "t.json"):
        code, text, err = _run(["generate", "layered", "--tasks", "50", "--seed", "3", "--out", out], capsys)
        assert code == 0, err
        assert text.startswith(f"wrote {out}: ")
    assert (work / "t.npz").read_bytes()[:4] == b"PK\x03\x04"
    assert_identical(load_graph(work / "t.npz"), load_graph(work / "t.json"))


@pytest.mark.parametrize(("source", "out", "extra", "kind"),
                         [("g.json", "c.npz", [], "npz"), ("g.npz", "c.json", [], "json"),
                          ("g.json", "c.bin", ["--format", "npz"], "npz"),
                          ("g.npz", "c.npz", ["--format", "json"], "json"),
                          ("g.npz", "sub/dir/c.npz", [], "npz")])
def test_convert(work: Path, capsys: pytest.CaptureFixture[str], source: str, out: str, extra: list[str],
                 kind: str) -> None:
    code, text, err = _run(["convert", source, out, *extra], capsys)
    assert code == 0 and err == "", err
    assert re.fullmatch(rf"wrote {re.escape(out)}: g4, 4 ops, 5 edges, {kind} [0-9.]+ (B|KiB) "
                        r"\(from [0-9.]+ (B|KiB)\) in [0-9.]+ s\n", text), text
    assert (work / out).read_bytes()[:1] == (b"P" if kind == "npz" else b"{")
    assert_identical(load_graph(work / out), load_graph(work / "g.json"))


def test_convert_never_replaces_its_input(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.link(work / "g.npz", work / "hard.npz")
    (work / "link.json").symlink_to("g.json")
    before = _files(work)
    for argv in (["convert", "g.json", "g.json"], ["convert", "g.npz", "g.npz"],
                 ["convert", "g.npz", "hard.npz"],
                 ["convert", "g.json", "link.json"], ["convert", "link.json", "g.json", "--format", "npz"],
                 ["convert", "g.npz", "./g.npz", "--format", "json"]):
        code, out, err = _run(argv, capsys)
        assert code == 2 and out == "", argv
        assert err.count("\n") == 1 and err.startswith("celeritas: error: ") and "Traceback" not in err, err
    assert _files(work) == before


def _corrupt_npz(work: Path) -> dict[str, bytes]:
    """Malicious or broken archives: a pickled object column, wrong dtypes, lengths and offsets, a
    cycle, NaN, a truncated file, random bytes behind the zip magic."""
    arrays = dict(graph_arrays(load_graph(work / "g.npz")))

    def changed(**members: Any) -> bytes:
        return archive({**arrays, **members}, pickle=True)

    data = (work / "g.npz").read_bytes()
    return {
        "pickle.npz": changed(time_us=np.array([1.0, 2.0, 3.0, object()], dtype=object)),
        "dtype.npz": changed(edge_src=arrays["edge_src"].astype(np.int32)),
        "length.npz": changed(memory_bytes=arrays["memory_bytes"][:2]),
        "offsets.npz": changed(node_name_offsets=np.array([0, 3, 2, 3, 4])),
        "cycle.npz": changed(edge_src=np.array([0, 1, 2, 3, 1])),
        "nan.npz": changed(edge_bytes=np.array([np.nan, 1, 1, 1, 1])),
        "truncated.npz": data[: len(data) // 3],
        "random.npz": b"PK\x03\x04" + os.urandom(200),
    }


def test_bad_npz_inputs_exit_2_with_one_line(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _corrupt_npz(work)
    for name, content in files.items():
        (work / name).write_bytes(content)
    (work / "p.json").write_text(json.dumps({"format": "celeritas-placement/1", "devices": ["gpu:0"],
                                             "assignment": {n: 0 for n in "abcd"}}))
    before = _files(work)
    for name in files:
        for argv in (["place", name, *CLUSTER, "--out", "out.json"], ["simulate", name, "p.json"],
                     ["info", name], ["compare", name, *CLUSTER, "--quiet", "--out-dir", "cmp"],
                     ["convert", name, "out.json"], ["convert", name, "out.npz"]):
            code, out, err = _run(argv, capsys)
            assert code == 2, (argv, err)
            assert err.count("\n") == 1 and err.startswith(f"celeritas: error: {name}: "), (argv, err)
            assert "Traceback" not in err + out
    assert _files(work) == before and not (work / "cmp").exists()


def test_the_pipeline_reads_graph_artifacts_in_either_format(work: Path) -> None:
    from tasks.common import load_graph_uri

    assert_identical(load_graph_uri(str(work / "g.npz")), load_graph_uri(str(work / "g.json")))
    bad = work / "bad.npz"
    bad.write_bytes(io.BytesIO(b"PK\x03\x04junk").getvalue())
    with pytest.raises(ValueError, match=f"^{re.escape(str(bad))}: not a valid .npz"):
        load_graph_uri(str(bad))
