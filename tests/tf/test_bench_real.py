"""bench/bench_real.py on one small real model: the CLI extraction, the cache key, and figures that
agree with each other, with the table and with a fresh replay."""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorflow")

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.readwrite.formats import load_graph
from celeritas_core.simulation.memory import one_device_peak_bytes
from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH, simulate

BENCH = Path(__file__).resolve().parents[2] / "bench"
# bench/ is a folder of scripts, not a package: bench_real imports its neighbours by module name
sys.path.insert(0, str(BENCH))
import bench_real  # noqa: E402

MODEL = "transformer_encoder_tiny"
BATCH = 16
DEVICES = 4
FRACTION = 0.8


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of the benchmark's main on the tiny encoder, 4 devices × 80 %: its JSON and stdout."""
    tmp = tmp_path_factory.mktemp("real")
    out = tmp / "real.json"
    argv = ["--models", MODEL, "--batch", str(BATCH), "--devices", str(DEVICES), "--fractions",
            str(FRACTION), "--cache-dir", str(tmp / "cache"), "--out", str(out)]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert bench_real.main(argv) == 0
    return {"doc": json.loads(out.read_text()), "stdout": stdout.getvalue(), "cache": tmp / "cache"}


def test_figures_agree_with_each_other_and_the_table(bench_run: dict[str, Any]) -> None:
    doc, stdout = bench_run["doc"], bench_run["stdout"]
    assert doc["graphs"][0]["extracted_now"] and doc["graphs"][0]["extract_seconds"] > 0
    [row] = doc["instances"]
    placers = row["placers"]
    assert set(placers) == set(doc["placers"]) and "celeritas" in placers and "metis" in placers
    assert not any("error" in fig for fig in placers.values()), placers
    for fig in placers.values():
        assert fig["fits"] == (not fig["oom"]) and fig["step_time_us"] > 0
    fitting = {n: f["step_time_us"] for n, f in placers.items() if n != "celeritas" and f["fits"]}
    assert row["others_fitting"] == sorted(fitting)
    assert row["celeritas_fits"] == placers["celeritas"]["fits"]
    cel_step = placers["celeritas"]["step_time_us"]
    assert row["celeritas_step_us"] == cel_step
    if fitting:
        best = min(fitting, key=fitting.__getitem__)
        assert (row["best_other"], row["best_other_step_us"]) == (best, fitting[best])
        if row["celeritas_fits"]:
            assert row["ratio_vs_best_other"] == pytest.approx(cel_step / fitting[best])
    steps = row["dispatch_steps_us"]
    assert sorted(steps) == sorted(ALTERNATIVE_DISPATCH)
    assert row["dispatch_median_ratio"] == pytest.approx(statistics.median(steps.values()) / cel_step)
    assert row["device_memory_bytes"] == pytest.approx(FRACTION * row["one_device_peak_bytes"])
    assert bench_real.format_row(row) in stdout.splitlines()
    assert [line.split()[0] for line in doc["checks"][:3]] == [
        "PASS" if ok else "MISS" for ok in _expected_verdicts(row)]
    assert doc["checks"][3].startswith("no placer fits 0 instances" if fitting or row["celeritas_fits"] else
                                       "no placer fits 1 instances")
    assert row["memory_lower_bound_bytes"] > 0 and row["cannot_fit"] is False  # 4 × 80 % of the peak
    assert doc["checks"][4].startswith("max Celeritas placement seconds")
    assert all(line in stdout for line in doc["checks"])


def _expected_verdicts(row: dict[str, Any]) -> list[bool]:
    """Targets (a)–(c) on a one-instance run, recomputed from the row's figures."""
    fits_a = row["celeritas_fits"] or row["best_other"] is None
    ratio = row["ratio_vs_best_other"]
    fits_b = ratio is None or ratio <= bench_real.WORST_TARGET
    return [fits_a, fits_b, abs(row["dispatch_median_ratio"] - 1) <= bench_real.DISPATCH_TARGET]


def test_graph_in_the_cache_is_the_instance_placed(bench_run: dict[str, Any]) -> None:
    [row] = bench_run["doc"]["instances"]
    graph = load_graph(bench_run["doc"]["graphs"][0]["path"])
    assert graph.num_nodes == row["ops"] and graph.num_edges == row["edges"]
    assert one_device_peak_bytes(graph) == pytest.approx(row["one_device_peak_bytes"])
    cluster = Cluster.homogeneous(DEVICES, FRACTION * one_device_peak_bytes(graph))
    fig, placement = bench_real.run_placer(graph, cluster, "metis")
    assert placement is not None
    same = ("step_time_us", "oom", "fits", "max_device_peak_bytes")
    assert {k: fig[k] for k in same} == {k: row["placers"]["metis"][k] for k in same}
    assert fig["fits"] == (not placement.evaluated.oom_devices)
    replayed = {d: simulate(graph, cluster, placement.assignment, dispatch=d).step_time_us
                for d in ALTERNATIVE_DISPATCH}
    assert bench_real.dispatch_figures(graph, cluster, placement)["dispatch_steps_us"] == replayed


def test_cache_is_reused_and_keyed_on_what_the_graph_depends_on(
        bench_run: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = bench_run["cache"]
    first = Path(bench_run["doc"]["graphs"][0]["path"])
    again = bench_real.extract(MODEL, BATCH, cache)
    assert (again.path, again.built) == (first, False)
    key = bench_real.cache_key(MODEL, BATCH)
    assert first.name == f"{MODEL}-b{BATCH}-{key[:16]}.npz"
    assert bench_real.cache_key(MODEL, BATCH + 1) != key
    edited = tmp_path / "real_models.py"
    edited.write_text(bench_real.MODEL_FILE.read_text() + "\n# edited\n")
    monkeypatch.setattr(bench_real, "MODEL_FILE", edited)
    assert bench_real.cache_key(MODEL, BATCH) != key
    monkeypatch.undo()
    monkeypatch.setattr(bench_real, "package_versions", lambda: {"keras": "0.0"})
    assert bench_real.cache_key(MODEL, BATCH) != key


def test_bad_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--models", "alexnet"], ["--fractions", "1.5"], ["--devices", "x"]):
        with pytest.raises(SystemExit) as exc:
            bench_real.parse_args(argv)
        assert exc.value.code == 2
    assert "unknown 'alexnet'" in capsys.readouterr().err
