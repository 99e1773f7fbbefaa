"""``place``, ``simulate`` and ``compare`` with ``--micro-batches``: the pipelined step beside the
single-batch one, the file's ``pipeline`` object replayed the same, one-line errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from celeritas_cli.main import main
from celeritas_core.generators.synthetic import small_training_graph
from celeritas_core.readwrite.formats import save_graph
from celeritas_core.simulation.memory import one_device_peak_bytes


@pytest.fixture(scope="module")
def step(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A small training step and a device memory of 45 % of its one-device peak (bytes)."""
    g = small_training_graph(0, liveness=True)
    path = tmp_path_factory.mktemp("pipe") / "step.json"
    save_graph(g, path)
    return path, f"{int(0.45 * one_device_peak_bytes(g))}B"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_place_pipelined_then_simulate_replays_the_same(step: tuple[Path, str], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    graph, memory = step
    out = tmp_path / "p.json"
    code, text, err = _run(["place", str(graph), "--devices", "4", "--device-memory", memory,
                            "--micro-batches", "4", "--schedule", "1f1b", "--out", str(out)], capsys)
    assert code == 0, err
    assert "pipelined step" in text and "4 micro-batches of 8, 1f1b" in text
    assert "OOM (pipelined): none" in text
    doc = json.loads(out.read_text())
    plan = doc["pipeline"]
    assert plan["micro_batches"] == 4 and plan["schedule"] == "1f1b" and plan["batch_size"] == 32
    assert plan["predicted_step_time_us"] < plan["single_batch_step_time_us"]
    code, replayed, err = _run(["simulate", str(graph), str(out)], capsys)
    assert code == 0, err
    line = next(x for x in text.splitlines() if x.startswith("pipelined step"))
    assert line in replayed.splitlines()  # the same step, M, schedule and ratio


def test_micro_batches_that_cannot_win_are_ruled_out_and_said(step: tuple[Path, str], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """On one device that holds the step, with a per-op floor above every op's time (no op gets
    faster on a smaller batch), each ``M`` has ``M`` times the work of the single-batch step: no
    ``M`` is replayed, and the output says so. An ``M`` asked for is replayed all the same."""
    graph, _ = step
    out = tmp_path / "p.json"
    code, text, err = _run(["place", str(graph), "--devices", "1", "--device-memory", "64GiB",
                            "--micro-batches", "auto", "--op-floor-us", "5000", "--out", str(out)], capsys)
    assert code == 0, err
    search = json.loads(out.read_text())["extra"]["pipeline_search"]
    assert search["micro_batches_tried"] == [] and search["micro_batches_ruled_out"] == [2, 4]
    assert ("pipelined   micro-batches ruled out [2, 4] (their work alone takes longer): one batch per step "
            "was fastest") in text
    code, text, err = _run(["place", str(graph), "--devices", "1", "--device-memory", "64GiB",
                            "--micro-batches", "4", "--op-floor-us", "5000", "--out", str(out)], capsys)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["pipeline"]["micro_batches"] == 4
    assert doc["extra"]["pipeline_search"]["micro_batches_tried"] == [4]
    assert doc["pipeline"]["predicted_step_time_us"] > doc["pipeline"]["single_batch_step_time_us"]


def test_compare_ranks_the_pipelined_steps(step: tuple[Path, str], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    graph, memory = step
    out_dir = tmp_path / "cmp"
    code, text, err = _run(["compare", str(graph), "--devices", "4", "--device-memory", memory,
                            "--placers", "celeritas,gpipe-even,alpa-stages,pipedream",
                            "--micro-batches", "auto",
                            "--out-dir", str(out_dir), "--no-figures", "--quiet"], capsys)
    assert code == 0, err
    rows = list(csv.DictReader((out_dir / "compare.csv").open()))
    steps = {r["placer"]: float(r["pipelined_step_time_us"] or r["step_time_us"]) for r in rows
             if r["pipelined_oom"] != "True"}
    assert min(steps, key=steps.__getitem__) == next(r["placer"] for r in rows if r["best"] == "True")
    assert steps["celeritas"] <= 1.01 * min(steps.values())
    assert "pipelined" in text and "best: " in text


def test_the_pipelined_gantt_chart_is_drawn(step: tuple[Path, str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    graph, memory = step
    out_dir = tmp_path / "fig"
    code, _, err = _run(["compare", str(graph), "--devices", "4", "--device-memory", memory,
                         "--placers", "celeritas", "--micro-batches", "2", "--schedule", "gpipe",
                         "--out-dir", str(out_dir), "--quiet"], capsys)
    assert code == 0, err
    assert (out_dir / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("extra", "message"), [
    (["--micro-batches", "two"], "micro-batches must be a whole number or auto, got 'two'"),
    (["--micro-batches", "5"], "micro-batches 5 does not divide the batch of 32"),
    (["--batch-size", "16"], "--batch-size needs --micro-batches"),
    (["--micro-batches", "2", "--op-floor-us", "-1"], "op floor must be a time in µs >= 0"),
])
def test_bad_pipeline_flags_are_one_line(step: tuple[Path, str], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str], extra: list[str],
                                         message: str) -> None:
    graph, memory = step
    out = tmp_path / "never.json"
    code, _, err = _run(["place", str(graph), "--devices", "4", "--device-memory", memory, "--out", str(out),
                         *extra], capsys)
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_a_graph_without_batch_inputs_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "layered.json"
    assert _run(["generate", "layered", "--tasks", "50", "--out", str(path)], capsys)[0] == 0
    code, _, err = _run(["place", str(path), "--devices", "2", "--device-memory", "1GB",
                         "--micro-batches", "2", "--out", str(tmp_path / "p.json")], capsys)
    assert code == 2 and "has no batch input" in err and "Traceback" not in err
