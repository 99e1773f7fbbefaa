"""``celeritas validate`` runs a pipelined placement as its micro-batch step: the replicas where the
placement puts their ops, each device in the plan's order, timed against the pipelined replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.formats import load_graph
from celeritas_core.simulation.memory import one_device_peak_bytes
from celeritas_tf.microbatch import placement_pipeline_run

KNOBS = ["--model", "mlp", "--set", "hidden=64", "--set", "layers=3"]


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def pipelined(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-device 1F1B placement of the mlp's step at batch 16 in 4 micro-batches."""
    folder = tmp_path_factory.mktemp("pipelined")
    graph = folder / "g.json"
    assert main(["graph", *KNOBS, "--batch", "16", "--out", str(graph)]) == 0
    memory = f"{int(0.6 * one_device_peak_bytes(load_graph(graph)))}B"
    placement = folder / "p.json"
    assert main(["place", str(graph), "--devices", "2", "--device-memory", memory, "--micro-batches", "4",
                 "--schedule", "1f1b", "--out", str(placement)]) == 0
    return placement


def test_validate_runs_the_pipelined_step_in_the_plans_order(pipelined: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "v.json"
    code, text, err = _cli(["validate", *KNOBS, str(pipelined), "--batch", "16", "--devices", "2",
                            "--steps", "4", "--warmup", "1", "--blocks", "2", "--out", str(out)], capsys)
    assert code == 0, err
    assert "pipelined step of 4 micro-batches, 1f1b, replayed" in text
    assert "enforced order (the placement's mode)" in text
    assert "100.0 % of ops ran in the recorded order" in text
    doc = json.loads(out.read_text())
    plan = json.loads(pipelined.read_text())["pipeline"]
    assert doc["micro_batches"] == 4 and doc["schedule"] == "1f1b"
    assert doc["predicted_step_time_us"] == pytest.approx(plan["predicted_step_time_us"])
    assert doc["modes"]["enforced"]["measured_over_predicted"] > 0
    assert doc["predicted_peak_bytes"] == [float(x) for x in plan["device_peak_memory_bytes"]]
    assert len(doc["measured_peak_bytes"]) == 2  # both devices ran ops


def test_the_pipeline_run_is_read_from_the_document(pipelined: Path) -> None:
    doc = json.loads(pipelined.read_text())
    run = placement_pipeline_run(doc)
    assert run is not None and run.micro_batches == 4 and len(run.device_order) == 2
    assert {k for device in run.device_order for _, k in device} == {-1, 0, 1, 2, 3}
    assert placement_pipeline_run({k: v for k, v in doc.items() if k != "pipeline"}) is None
    doc["pipeline"]["device_order"][0][0][0] = "ghost"
    with pytest.raises(CeleritasInputError, match="op 'ghost' is not an op of the placement"):
        placement_pipeline_run(doc, "p.json")
