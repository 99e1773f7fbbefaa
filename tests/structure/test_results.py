"""The results that the README and docs/results.md show are generated, never typed by hand.

``bench/report.py`` keeps what the page shows in ``docs/results/results.json`` (taken from the
benchmarks' JSON by ``make bench``) and renders the page, the chart and the README's table from
it. These tests render the committed snapshot again and compare, so a hand edit of a figure, or a
table left behind after the snapshot changed, fails.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "docs" / "results" / "results.json"


def _report() -> ModuleType:
    """bench/report.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_report", module)
    spec.loader.exec_module(module)
    return module


report = _report()


def _committed() -> dict:
    return json.loads(SNAPSHOT.read_text())


def test_readme_table_is_the_snapshot_rendered() -> None:
    readme = (ROOT / "README.md").read_text()
    assert report.readme_with_table(readme, _committed()) == readme, (
        "README.md's results table differs from docs/results/results.json rendered: run "
        "`.venv/bin/python bench/report.py --from-snapshot` (or `make bench`), never edit it by hand")


def test_results_page_is_the_snapshot_rendered() -> None:
    page = (ROOT / "docs" / "results.md").read_text()
    assert report.page(_committed()) == page


def test_snapshot_states_when_and_where_it_was_measured() -> None:
    snap = _committed()
    assert snap["format"] == report.SNAPSHOT_FORMAT
    for part in ("paper", "real"):
        measured = snap[part]["measured_on"]
        assert measured and measured["date"] and measured["machine"], part
        assert measured["date"] in report.table(snap)
    chart = ROOT / "docs" / "results" / "step_times.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_hand_edited_figure_is_caught() -> None:
    readme = (ROOT / "README.md").read_text()
    snap = _committed()
    cel = snap["paper"]["rows"][0]["placers"]["celeritas"]
    edited = readme.replace(f"{cel['step_us'] / 1e3:,.1f}", f"{cel['step_us'] / 2e3:,.1f}", 1)
    assert edited != readme
    assert report.readme_with_table(edited, snap) != edited


def _bench_docs() -> tuple[dict, dict]:
    """Two tiny benchmark documents in the shapes bench_placers.py and bench_real.py write."""
    when = {"date": "2026-01-02", "machine": "test machine", "cores": 2, "memory_gib": 1.0,
            "load_average": 0.5}

    def fig(step: float, fits: bool) -> dict:
        return {"step_time_us": step, "oom": not fits, "fits": fits, "placement_seconds": 0.25}

    placers_doc = {"measured_on": when, "devices": 4, "device_share": 0.3, "rows": [
        {"model": "g", "nodes": 10, "placers": {"metis": {**fig(3000.0, True), "oom_devices": []},
                                                  "m-topo": fig(1000.0, False),
                                                  "celeritas": fig(2000.0, True)}}]}
    instance = {"model": "m", "ops": 20, "devices": 4, "fraction": 0.45, "celeritas_fits": True,
                "others_fitting": ["metis"], "ratio_vs_best_other": 0.5,
                "placers": {"metis": fig(4000.0, True), "celeritas": fig(2000.0, True)}}
    other = {**instance, "devices": 2, "ratio_vs_best_other": 2.0}
    real_doc = {"measured_on": when, "batch": 32, "costs": "analytical:v100", "instances": [instance, other]}
    return placers_doc, real_doc


def test_table_from_benchmark_documents() -> None:
    snap = report.snapshot(*_bench_docs())
    text = report.table(snap)
    row = next(line for line in text.splitlines() if line.startswith("| g |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    header = next(line for line in text.splitlines() if line.startswith("| graph |"))
    names = [c.strip() for c in header.strip("|").split("|")]
    by_name = dict(zip(names, cells, strict=True))
    assert by_name["Metis"] == "3.0"
    assert by_name["m-TOPO"] == "OOM"  # faster, but it overflows a device
    assert by_name["**Celeritas**"] == "**2.0**"  # the fastest that fits
    assert by_name["Celeritas placement s"] == "0.25"
    assert "| m | 20 |" in text  # only the 4-device 45 % instance of the real models is a row
    assert "geometric mean 1.000, worst 2.000" in text  # sqrt(0.5 * 2.0) over both instances
    assert "2026-01-02, test machine, load average 0.5" in text


def test_report_writes_everything_and_refuses_a_missing_input(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    placers_doc, real_doc = _bench_docs()
    (tmp_path / "placers.json").write_text(json.dumps(placers_doc))
    (tmp_path / "real.json").write_text(json.dumps(real_doc))
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{report.README_BEGIN}\nold\n{report.README_END}\nafter\n")
    args = ["--placers-json", str(tmp_path / "placers.json"), "--real-json", str(tmp_path / "real.json"),
            "--docs", str(tmp_path / "docs"), "--readme", str(readme)]
    assert report.main(args) == 0
    text = readme.read_text()
    assert text.startswith("before\n") and text.endswith(f"{report.README_END}\nafter\n")
    assert "\nold\n" not in text and "| g | 10 |" in text
    assert (tmp_path / "docs" / "results" / "step_times.png").stat().st_size > 0
    assert "| g | 10 |" in (tmp_path / "docs" / "results.md").read_text()
    with pytest.raises(SystemExit) as exit_info:
        report.main([*args[:2], "--real-json", str(tmp_path / "missing.json"), *args[4:]])
    assert exit_info.value.code == 2
    assert "missing.json" in capsys.readouterr().err
