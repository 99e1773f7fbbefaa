"""bench/bench_gpu.py without TensorFlow: the report built from fabricated per-device figures
(Spearman per execution-order mode, the memory comparison, the printed table) and argument errors
(one line, exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from celeritas_core.readwrite.formats import write_json_atomic
from celeritas_core.readwrite.units import format_bytes, format_us

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
# bench/ is a folder of scripts, not a package
sys.path.insert(0, str(BENCH))
import bench_gpu  # noqa: E402
from bench_gpu import ModelResult, PlacerRun  # noqa: E402


def ranks(values: list[float]) -> np.ndarray:
    """Ranks 0..n-1 of distinct values (the test data has no ties)."""
    order = np.argsort(values)
    out = np.empty(len(values))
    out[order] = np.arange(len(values))
    return out


def rank_correlation(xs: list[float], ys: list[float]) -> float:
    """Spearman's rho of tie-free data: 1 − 6 Σd² / (n(n² − 1))."""
    d = ranks(xs) - ranks(ys)
    n = len(xs)
    return 1.0 - 6.0 * float(np.sum(d**2)) / (n * (n * n - 1))


def fabricated_runs(rng: np.random.Generator, devices: int = 3) -> list[PlacerRun]:
    """Four placers that ran in both orders (distinct times) and one that did not (out of memory)."""
    runs = []
    for i, name in enumerate(["single", "metis", "m-topo", "celeritas"]):
        predicted = tuple(float(x) for x in rng.uniform(1e6, 5e8, devices))
        measured = tuple(float(x) for x in rng.uniform(1e6, 5e8, devices))
        steps = tuple(float(x) for x in rng.uniform(0.01, 0.2, 7))
        enforced = tuple(float(x) for x in rng.uniform(0.01, 0.2, 7))
        runs.append(PlacerRun(name, float(rng.uniform(1e3, 1e6)) + i, predicted, bool(i % 2),
                              step_seconds=steps, enforced_step_seconds=enforced,
                              measured_peak_bytes=measured,
                              trace_peak_bytes=tuple(m * 0.9 for m in measured)))
    runs.append(PlacerRun("m-etf", 1234.0, (9e9,) * devices, True, measured_peak_bytes=(None,) * devices,
                          error="ResourceExhaustedError: OOM when allocating tensor"))
    return runs


def test_spearman_matches_the_rank_formula_and_refuses_what_has_no_ranking(rng: np.random.Generator) -> None:
    for n in (3, 5, 9):
        xs = [float(x) for x in rng.permutation(n) * 1.5 + 2]
        ys = [float(y) for y in rng.uniform(0, 10, n)]
        assert bench_gpu.spearman(xs, ys) == pytest.approx(rank_correlation(xs, ys))
        assert bench_gpu.spearman(xs, [float(np.exp(x)) for x in xs]) == pytest.approx(1.0)
        assert bench_gpu.spearman(xs, [-x for x in xs]) == pytest.approx(-1.0)
    assert bench_gpu.spearman([1.0, 2.0], [3.0, 4.0]) is None  # two points always rank ±1
    assert bench_gpu.spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None
    assert bench_gpu.spearman([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]) is None
    with pytest.raises(ValueError):
        bench_gpu.spearman([1.0, 2.0, 3.0], [1.0, 2.0])


def test_memory_table_compares_each_device(rng: np.random.Generator) -> None:
    predicted = [float(x) for x in rng.uniform(1, 1e9, 4)]
    measured = [float(rng.uniform(1, 1e9)), None, 0.0, float(rng.uniform(1, 1e9))]
    rows = bench_gpu.memory_table(predicted, measured)
    assert [r["device"] for r in rows] == [0, 1, 2, 3]
    for k in (0, 3):
        assert rows[k]["error"] == pytest.approx(predicted[k] / measured[k] - 1.0)
        assert (rows[k]["predicted_bytes"], rows[k]["measured_bytes"]) == (predicted[k], measured[k])
    assert rows[1]["error"] is None and rows[1]["measured_bytes"] is None  # not measured
    assert rows[2]["error"] is None  # nothing measured: no ratio
    shorter = bench_gpu.memory_table(predicted[:2], measured)
    assert len(shorter) == 4 and shorter[3]["predicted_bytes"] is None and shorter[3]["error"] is None


def test_placer_row_figures_come_from_the_run(rng: np.random.Generator) -> None:
    ran, failed = fabricated_runs(rng)[0], fabricated_runs(rng)[-1]
    row = bench_gpu.placer_row(ran)
    seconds = np.array(ran.step_seconds)
    assert row["ran"] and row["timed_steps"] == len(seconds) and row["error"] is None
    assert row["measured_mean_us"] == pytest.approx(seconds.mean() * 1e6)
    assert row["measured_median_us"] == pytest.approx(np.median(seconds) * 1e6)
    assert row["measured_over_simulated"] == pytest.approx(seconds.mean() * 1e6 / ran.simulated_us)
    fullest = max(ran.predicted_peak_bytes) / max(ran.measured_peak_bytes) - 1
    assert row["fullest_error"] == pytest.approx(fullest)
    assert [m["error"] for m in row["memory"]] == pytest.approx(
        [p / m - 1 for p, m in zip(ran.predicted_peak_bytes, ran.measured_peak_bytes, strict=True)])
    for mode, steps in (("free", ran.step_seconds), ("enforced", ran.enforced_step_seconds)):
        figures = row["modes"][mode]
        assert figures["timed_steps"] == len(steps)
        assert figures["measured_mean_us"] == pytest.approx(np.mean(steps) * 1e6)
        assert figures["measured_median_us"] == pytest.approx(np.median(steps) * 1e6)
        assert figures["measured_p90_us"] == pytest.approx(np.percentile(steps, 90) * 1e6)
        assert figures["measured_over_simulated"] == pytest.approx(np.mean(steps) * 1e6 / ran.simulated_us)
    assert row["modes"]["free"]["measured_mean_us"] == row["measured_mean_us"]  # the top level: free
    bad = bench_gpu.placer_row(failed)
    assert not bad["ran"] and bad["error"] == failed.error and bad["timed_steps"] == 0
    assert bad["measured_mean_us"] is None and bad["measured_over_simulated"] is None
    assert bad["fullest_error"] is None and all(m["error"] is None for m in bad["memory"])
    assert all(f["timed_steps"] == 0 and f["measured_over_simulated"] is None for f in bad["modes"].values())


def test_model_row_ranks_only_the_placers_that_ran(rng: np.random.Generator) -> None:
    runs = fabricated_runs(rng)
    result = ModelResult("mlp", 32, (2, 4, 8), 109, 0, 0.01, 0.5, tuple(runs), 12.5)
    row = bench_gpu.model_row(result)
    ran = [r for r in runs if r.step_seconds]
    simulated = [r.simulated_us for r in ran]
    expected = rank_correlation(simulated, [float(np.mean(r.step_seconds)) for r in ran])
    assert row["spearman"] == pytest.approx(expected) == row["spearman_by_mode"]["free"]
    enforced = rank_correlation(simulated, [float(np.mean(r.enforced_step_seconds)) for r in ran])
    assert row["spearman_by_mode"]["enforced"] == pytest.approx(enforced)
    assert row["placers_ran"] == len(ran) == len(runs) - 1
    worst = max(abs(max(r.predicted_peak_bytes) / max(r.measured_peak_bytes) - 1) for r in ran)
    assert row["worst_fullest_memory_error"] == pytest.approx(worst)
    assert [p["placer"] for p in row["placers"]] == [r.placer for r in runs]
    # measured in the opposite order of the simulation: a perfect inversion
    flipped = [replace(r, step_seconds=(1.0 / r.simulated_us,), enforced_step_seconds=(r.simulated_us,))
               for r in ran]
    row = bench_gpu.model_row(replace(result, runs=tuple(flipped)))
    assert row["spearman"] == pytest.approx(-1.0)
    assert row["spearman_by_mode"]["enforced"] == pytest.approx(1.0)
    # placers timed free only (no order) are left out of the enforced ranking
    free_only = [replace(r, enforced_step_seconds=()) if i < 2 else r for i, r in enumerate(ran)]
    row = bench_gpu.model_row(replace(result, runs=tuple(free_only)))
    assert row["spearman_by_mode"]["enforced"] is None and row["spearman"] == pytest.approx(expected)


def test_report_prints_every_figure_and_the_document_is_json(rng: np.random.Generator,
                                                             tmp_path: Path) -> None:
    runs = fabricated_runs(rng)
    result = ModelResult("nmt", 64, bench_gpu.profile_batches(64), 2646, 3, 0.02, 0.4, tuple(runs), 30.0)
    device = {"kind": "GPU", "description": "NVIDIA H100 80GB HBM3", "logical_devices": 3,
              "memory_limit_mib": 512}
    settings = {"device_memory_mib": 512, "warmup_steps": 5, "steps": 7}
    doc = bench_gpu.build_document(device, settings, {"describe": "t = 1 µs/B · bytes + 2 µs (calibrated)"},
                                   [result, {"model": "transformer", "error": "ValueError: broken"}], 99.0)
    out = tmp_path / "gpu.json"
    write_json_atomic(out, doc, indent=1)  # no NaN anywhere: unknowns are null
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc))
    text = "\n".join(bench_gpu.report_lines(doc))
    row = doc["models"][0]
    rhos = row["spearman_by_mode"]
    assert (f"Spearman free {rhos['free']:.3f}, enforced {rhos['enforced']:.3f} over {len(runs) - 1} "
            "placers") in text
    assert "3 off the GPU" in text and "transformer: failed: ValueError: broken" in text
    lines = text.splitlines()
    for run in runs:
        [line] = [s for s in lines if s.startswith(f"  {run.placer} ")]
        assert format_us(run.simulated_us) in line
        if run.step_seconds:
            free_us = float(np.mean(run.step_seconds)) * 1e6
            enforced_us = float(np.mean(run.enforced_step_seconds)) * 1e6
            assert line.index(format_us(free_us)) < line.index(format_us(enforced_us))  # free, then enforced
            assert f"{free_us / run.simulated_us:.2f}" in line
            assert f"{enforced_us / run.simulated_us:.2f}" in line
            for k, (p, m) in enumerate(zip(run.predicted_peak_bytes, run.measured_peak_bytes, strict=True)):
                assert f"GPU{k} {format_bytes(p)} / {format_bytes(m)} ({(p / m - 1) * 100:+.1f}%)" in line
        else:
            assert "did not run" in line
            assert run.error in text


def test_profile_batches_span_a_quarter_of_the_batch() -> None:
    for batch in range(bench_gpu.MIN_BATCH, 600):
        sizes = bench_gpu.profile_batches(batch)
        assert len(sizes) >= 2 and list(sizes) == sorted(set(sizes)) and max(sizes) < batch
        assert set(sizes) == {max(1, batch // d) for d in bench_gpu.PROFILE_DIVISORS}


def test_device_kind_reads_every_spelling() -> None:
    assert bench_gpu.device_kind("/job:localhost/replica:0/task:0/device:GPU:3") == "GPU"
    assert bench_gpu.device_kind("/job:localhost/replica:0/task:0/device:GPU:0/stream:all") == "GPU"
    assert bench_gpu.device_kind("/job:localhost/replica:0/task:0/device:CPU:0") == "CPU"


@pytest.mark.parametrize("args", [["--models", "nope"], ["--devices", "1"], ["--devices", "17"],
                                  ["--device-memory", "0"], ["--batch", "4"], ["--steps", "x"],
                                  ["--placers", "single,bogus"], ["--models", ","], ["--unknown"]])
def test_argument_errors_are_one_line_and_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench_gpu.main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("bench_gpu.py: error: ")
    assert args[0] in err or "unrecognized" in err


def test_an_output_that_cannot_be_written_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(SystemExit) as exit_info:
        bench_gpu.main(["--out", str(blocker / "gpu.json")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--out" in err and "not a directory" in err.lower()


def test_help_and_argument_errors_never_load_tensorflow() -> None:
    code = ("import sys; sys.path.insert(0, 'bench'); import bench_gpu\n"
            "for argv in (['--help'], ['--devices', '0']):\n"
            "    try:\n        bench_gpu.main(argv)\n    except SystemExit:\n        pass\n"
            "print('TF', 'tensorflow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "about 8 minutes on one H100" in " ".join(proc.stdout.split())
    assert proc.stdout.strip().endswith("TF False")
