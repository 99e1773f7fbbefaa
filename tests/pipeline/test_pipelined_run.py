"""The pipeline with ``micro_batches``: every placer placed as a pipelined step, validated as its
micro-batch step against the pipelined replay, promoted and published with its ``pipeline``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("mlflow")

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from tasks.params import resolve_params


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    return tmp_path


def test_a_pipelined_run_validates_and_publishes_the_pipelined_step(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    knobs = json.dumps({"features": 16, "hidden": 32, "layers": 2})
    code = main(["run", "--model", "mlp", "--model-knobs", knobs, "--batch-size", "16",
                 "--profile-batch-sizes", "2,4", "--num-devices", "2", "--device-memory", "60KB",
                 "--calibrate-comm", "false", "--placers", "celeritas,alpa-stages", "--micro-batches", "2",
                 "--schedule", "1f1b", "--validation-steps", "3", "--warmup-steps", "1",
                 "--job-id", "pipelined"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "champion: version 1 of celeritas-mlp-b16-" in out
    run_dir = next((store / "build" / "runs" / "mlp").iterdir())
    compare = json.loads((run_dir / "compare.json").read_text())
    assert {row["placer"]: row["micro_batches"] for row in compare["placers"]} == {"celeritas": 2,
                                                                                   "alpa-stages": 2}
    for placer in ("celeritas", "alpa-stages"):
        placement = json.loads((run_dir / "placements" / f"{placer}.json").read_text())
        validation = json.loads((run_dir / "validation" / f"{placer}.json").read_text())
        assert placement["pipeline"]["schedule"] == "1f1b" and validation["micro_batches"] == 2
        predicted = placement["pipeline"]["predicted_step_time_us"]
        assert validation["predicted_step_time_us"] == pytest.approx(predicted)
        assert validation["modes"]["enforced"]["order_agreement"] == 1.0


def test_bad_micro_batches_are_one_line() -> None:
    for bad in ("0", "two", "-2"):
        with pytest.raises(CeleritasInputError, match="parameter 'micro_batches'") as info:
            resolve_params({"micro_batches": bad})
        assert "\n" not in str(info.value)
    with pytest.raises(CeleritasInputError, match="parameter 'schedule'"):
        resolve_params({"schedule": "zigzag"})
    assert resolve_params({"micro_batches": " auto "}).micro_batches == " auto "
