"""The comparison: every placer on one graph, the best pick, its files, and bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.placers import PLACERS
from celeritas_core.placers.compare import DEFAULT_PLACERS, compare_placers, parse_placer_list
from celeritas_core.readwrite.formats import save_graph
from tests.conftest import make_graph


def _two_chains():
    """Two heavy independent chains: splitting them over two devices halves the step."""
    edges = [(f"a{i}", f"a{i + 1}", 10.0) for i in range(5)]
    edges += [(f"b{i}", f"b{i + 1}", 10.0) for i in range(5)]
    return make_graph(edges, default_time=100.0, default_memory=10.0)


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    path = tmp_path / "chains.json"
    save_graph(_two_chains(), path)
    return path


def test_default_placers_are_all_registered():
    assert set(DEFAULT_PLACERS) <= set(PLACERS)


def test_every_placer_is_evaluated_and_the_best_fits_in_memory():
    g = _two_chains()
    cluster = Cluster.homogeneous(2, 100.0, slope_us_per_byte=0.0, intercept_us=1.0)
    comparison = compare_placers(g, cluster, DEFAULT_PLACERS)
    assert [p.placer for p in comparison.placements] == list(DEFAULT_PLACERS)
    single = comparison.by_placer("single")
    assert single.oom and single.oom_devices == ("gpu:0",)  # 120 bytes on a 100-byte device
    best = comparison.best
    assert not best.oom
    fitting = [p.predicted_step_time_us for p in comparison.placements if not p.oom]
    assert best.predicted_step_time_us == min(fitting)
    rows = comparison.rows()
    assert sum(r["best"] for r in rows) == 1
    assert rows[comparison.best_index]["placer"] == best.placer
    for row, p in zip(rows, comparison.placements, strict=True):
        assert row["step_time_us"] == p.predicted_step_time_us >= comparison.lower_bound_us
        single = comparison.single_device_time_us
        assert row["speedup_vs_single"] == pytest.approx(single / row["step_time_us"])
        assert row["peak_memory_bytes"] == int(p.device_memory_bytes.max())


def test_best_is_fastest_overall_when_every_placement_is_oom():
    g = _two_chains()
    cluster = Cluster.homogeneous(2, 20.0, slope_us_per_byte=0.0, intercept_us=1.0)  # 120 B on 40 B
    comparison = compare_placers(g, cluster, ["single", "celeritas"], {"R": 1})
    assert all(p.oom for p in comparison.placements)
    times = [p.predicted_step_time_us for p in comparison.placements]
    assert comparison.best.predicted_step_time_us == min(times)


def test_shared_params_go_only_to_placers_that_accept_them():
    g = _two_chains()
    cluster = Cluster.homogeneous(2, 1000.0)
    comparison = compare_placers(g, cluster, ["single", "celeritas", "m-sct"], {"R": 3, "threshold": 0.3})
    assert comparison.by_placer("single").params == {}
    assert comparison.by_placer("celeritas").params["R"] == 3
    assert comparison.by_placer("m-sct").params["threshold"] == pytest.approx(0.3)


def test_bad_params_fail_before_any_placer_runs():
    g = _two_chains()
    cluster = Cluster.homogeneous(2, 1000.0)
    calls = []
    with pytest.raises(CeleritasInputError, match=r"'R'.*>= 1"):
        compare_placers(g, cluster, ["single", "celeritas"], {"R": 0},
                        progress=lambda *a: calls.append(a))
    assert calls == []
    with pytest.raises(CeleritasInputError, match="'colour' is not accepted"):
        compare_placers(g, cluster, ["single", "celeritas"], {"colour": 1})


def test_parse_placer_list():
    assert parse_placer_list("celeritas, m-topo") == ["celeritas", "m-topo"]
    for text, message in (("celeritas,nope", "unknown placer 'nope'"), ("celeritas,,m-topo", "comma"),
                          ("celeritas,celeritas", "listed twice"), (" ", "comma")):
        with pytest.raises(CeleritasInputError, match=message):
            parse_placer_list(text)


def test_progress_is_reported_per_placer_and_at_the_end():
    calls = []
    compare_placers(_two_chains(), Cluster.homogeneous(2, 1000.0), ["single", "m-topo"],
                    progress=lambda *a: calls.append(a))
    assert calls == [(0, 2, "single"), (1, 2, "m-topo"), (2, 2, "")]


def test_cli_compare_prints_table_and_writes_json_csv_and_figures(graph_file, tmp_path, capsys):
    out_dir = tmp_path / "out"
    code = main(["compare", str(graph_file), "--devices", "2", "--device-memory", "100B",
                 "--comm-slope", "0", "--comm-intercept", "1", "--out-dir", str(out_dir), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err == ""  # --quiet: no progress line
    for name in DEFAULT_PLACERS:
        assert name in out
    doc = json.loads((out_dir / "compare.json").read_text())
    assert doc["format"] == "celeritas-compare/1"
    assert [p["placer"] for p in doc["placers"]] == list(DEFAULT_PLACERS)
    assert f"best: {doc['best']}," in out
    assert doc["placers"][0]["oom"] is True and doc["placers"][0]["oom_devices"] == ["gpu:0"]
    with (out_dir / "compare.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["placer"] for r in rows] == list(DEFAULT_PLACERS)
    assert [r["best"] for r in rows].count("True") == 1
    json_times = [p["step_time_us"] for p in doc["placers"]]
    assert np.allclose([float(r["step_time_us"]) for r in rows], json_times)
    for figure in ("gantt.png", "memory.png"):
        data = (out_dir / figure).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_cli_compare_progress_goes_to_stderr(graph_file, tmp_path, capsys):
    code = main(["compare", str(graph_file), "--devices", "2", "--device-memory", "1KB",
                 "--placers", "single,celeritas", "--no-figures", "--out-dir", str(tmp_path / "o")])
    _, err = capsys.readouterr()
    assert code == 0
    assert "running single" in err and "2/2 done" in err
    assert not (tmp_path / "o" / "gantt.png").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--devices", "2", "--device-memory", "1KB", "--placers", "celeritas,bogus"],
         "unknown placer 'bogus'"),
        (["--devices", "0", "--device-memory", "1KB"], "--devices: need at least one device"),
        (["--devices", "2", "--device-memory", "1KB", "--R", "0"], "'R': must be >= 1"),
        (["--devices", "2", "--device-memory", "1KB", "--param", "threshold"], "expected NAME=VALUE"),
        (["--devices", "2", "--device-memory", "1KB", "--param", "threshold=2"], "'threshold': must be <= 1"),
        (["--devices", "2"], "--devices and --device-memory must be given together"),
    ],
)
def test_cli_compare_bad_input_is_one_line_and_writes_nothing(graph_file, tmp_path, capsys, argv, message):
    out_dir = tmp_path / "out"
    code = main(["compare", str(graph_file), *argv, "--out-dir", str(out_dir), "--quiet"])
    _, err = capsys.readouterr()
    assert code == 2
    assert message in err and err.count("\n") == 1 and err.startswith("celeritas: error:")
    assert not out_dir.exists()


def test_cli_compare_bad_graph_names_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "celeritas-graph/1", "name": "x", "nodes": [], "edges": []}')
    code = main(["compare", str(bad), "--devices", "2", "--device-memory", "1KB", "--out-dir",
                 str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 2 and str(bad) in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- other dispatch orders
def _training_step():
    """A 407-op training step: on 3 devices the dispatch orders' steps differ."""
    from celeritas_core.generators.synthetic import small_training_graph

    return small_training_graph(3)


def test_every_placement_is_replayed_under_the_other_orders():
    from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH, simulate

    g = _training_step()
    cluster = Cluster.homogeneous(3, 2**40)
    comparison = compare_placers(g, cluster, ["heft", "m-topo"])
    assert comparison.other_order_names == ALTERNATIVE_DISPATCH
    assert len(comparison.other_orders) == len(comparison.placements)
    for row, p, spread in zip(comparison.rows(), comparison.placements, comparison.other_orders, strict=True):
        steps = [simulate(g, cluster, p.assignment, dispatch=name).step_time_us
                 for name in ALTERNATIVE_DISPATCH]
        assert spread.steps_us == tuple(zip(ALTERNATIVE_DISPATCH, steps, strict=True))
        assert spread.documented_us == p.predicted_step_time_us
        assert row["other_orders_median_us"] == float(np.median(steps))
        assert (row["other_orders_min_us"], row["other_orders_max_us"]) == (min(steps), max(steps))
        assert row["other_orders_ratio"] == row["other_orders_median_us"] / row["step_time_us"]
    assert any(row["other_orders_ratio"] != 1.0 for row in comparison.rows())


def test_comparison_refuses_spreads_that_do_not_match_the_placements():
    comparison = compare_placers(_two_chains(), Cluster.homogeneous(2, 1000.0), ["single", "m-topo"])
    with pytest.raises(ValueError, match="1 dispatch spreads for 2 placements"):
        type(comparison)(comparison.graph, comparison.cluster, comparison.placements,
                         comparison.other_orders[:1])


def _compare_cli(tmp_path: Path, capsys, devices: str, placers: str) -> tuple[str, dict, list[dict]]:
    graph = tmp_path / "step.json"
    save_graph(_training_step(), graph)
    out_dir = tmp_path / "out"
    code = main(["compare", str(graph), "--devices", devices, "--device-memory", "1TiB", "--placers", placers,
                 "--out-dir", str(out_dir), "--quiet", "--no-figures"])
    out, err = capsys.readouterr()
    assert code == 0, err
    with (out_dir / "compare.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    return out, json.loads((out_dir / "compare.json").read_text()), rows


@pytest.mark.parametrize(("ratio", "text"), [
    (1.021, "+2.1%"), (0.979, "-2.1%"), (1.0, "+0.0%"), (0.9999999999999998, "+0.0%"), (0.9996, "+0.0%"),
    (0.9994, "-0.1%"), (2.0, "+100.0%"), (float("inf"), "-"), (float("nan"), "-"),
])
def test_the_other_orders_cell_is_a_signed_change_without_negative_zero(ratio, text):
    from celeritas_core.readwrite.units import format_change

    assert format_change(ratio) == text


def _other_orders_cell(line: str) -> str:
    """The table's ``other orders`` cell of one row: its first percentage (``vs bound`` comes after)."""
    return next(token for token in line.split() if token.endswith("%"))


def test_cli_compare_reports_the_other_orders_in_table_json_and_csv(tmp_path, capsys):
    from celeritas_core.readwrite.units import format_change
    from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH

    out, doc, rows = _compare_cli(tmp_path, capsys, "3", "single,heft,m-topo")
    assert doc["dispatch"] == "rank" and doc["other_orders"] == list(ALTERNATIVE_DISPATCH)
    assert "other orders" in out.splitlines()[2]  # the table's header
    for entry, row in zip(doc["placers"], rows, strict=True):
        steps = entry["other_orders_step_us"]
        assert list(steps) == list(ALTERNATIVE_DISPATCH)
        assert entry["other_orders_median_us"] == float(np.median(list(steps.values())))
        assert entry["other_orders_min_us"] == min(steps.values())
        assert entry["other_orders_max_us"] == max(steps.values())
        assert entry["other_orders_ratio"] == entry["other_orders_median_us"] / entry["step_time_us"]
        for column in ("other_orders_median_us", "other_orders_min_us", "other_orders_max_us",
                       "other_orders_ratio"):
            assert float(row[column]) == entry[column]
        line = next(x for x in out.splitlines() if x.startswith(entry["placer"] + " "))
        assert _other_orders_cell(line) == format_change(entry["other_orders_ratio"])
    assert len({format_change(e["other_orders_ratio"]) for e in doc["placers"]}) > 1


def test_cli_compare_on_one_device_shows_no_change_under_other_orders(tmp_path, capsys):
    out, doc, _ = _compare_cli(tmp_path, capsys, "1", "single,heft")
    for entry in doc["placers"]:
        for step in entry["other_orders_step_us"].values():
            assert step == pytest.approx(entry["step_time_us"], rel=1e-12)
        line = next(x for x in out.splitlines() if x.startswith(entry["placer"] + " "))
        assert _other_orders_cell(line) == "+0.0%"


def test_docs_name_every_compare_field_and_column():
    from celeritas_core.placers.compare import CSV_COLUMNS

    text = (Path(__file__).resolve().parents[2] / "docs" / "formats.md").read_text(encoding="utf-8")
    section = text[text.index("## `celeritas-compare/1`"):text.index("## TensorFlow adapter formats")]
    doc = compare_placers(_two_chains(), Cluster.homogeneous(2, 1000.0), ["single"]).to_json()
    keys = set(doc) | set(doc["placers"][0])
    missing = sorted(k for k in keys if f"`{k}`" not in section)
    assert not missing, f"docs/formats.md's celeritas-compare/1 does not describe {missing}"
    header = ",".join(CSV_COLUMNS)
    assert header == "".join(section.split("the header `")[1].split("`")[0].split()), "CSV header in the docs"
