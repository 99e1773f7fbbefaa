"""``celeritas train``: a placement file, the champion of a configuration in a SQLite MLflow store
(published as the pipeline's ``publish`` does), ``models:/NAME@champion``, NumPy data, saved
weights; every refusal one line, exit 2, no traceback and no weights file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("mlflow")

from celeritas_cli.main import main

pytestmark = [pytest.mark.tf, pytest.mark.pipeline]
ROOT = Path(__file__).resolve().parents[2]
#: The configuration the test champion is published for (the pipeline's other fields: defaults).
PARAMS = {"model": "mlp", "batch_size": 16, "num_devices": 2, "device_memory": "40KB",
          "calibrate_comm": False}
FLAGS = ["--model", "mlp", "--batch-size", "16", "--num-devices", "2", "--device-memory", "40KB",
         "--calibrate-comm", "false"]


def publish_champion(folder: Path, params: dict[str, Any]) -> dict[str, Any]:
    """Place ``params``' model with ``celeritas graph`` and ``celeritas place`` and publish the
    placement as its configuration's champion in the tracking store the environment names, as
    ``tasks/publish.py`` does (``placement.json`` and ``configuration.json``); the configuration."""
    from tasks import tracking
    from tasks.prepare import configuration_for

    folder.mkdir(parents=True, exist_ok=True)
    graph, placement = folder / "graph.json", folder / "placement.json"
    assert main(["graph", "--model", params["model"], "--batch", str(params["batch_size"]), "--costs",
                 "analytical:v100", "--out", str(graph)]) == 0
    assert main(["place", str(graph), "--devices", str(params["num_devices"]), "--device-memory",
                 params["device_memory"], "--out", str(placement)]) == 0
    config = configuration_for(params)
    (folder / "configuration.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    run = tracking.start_parent_run(model=params["model"], run_name="test champion",
                                    job_id=f"job-{folder.name}")
    promotion = tracking.promote_if_current(
        registered_model=config["registered_model"], model=params["model"], config_key=config["key"],
        configuration=json.dumps(config, sort_keys=True), run_id=run, expected_version=None,
        published={"placement.json": str(placement),
                   "configuration.json": str(folder / "configuration.json")},
        tags={tracking.TAG_PLACER: "celeritas", "celeritas.step_time_s": "0.01"}, reason="test champion")
    assert promotion.promoted
    tracking.end_run(run, "FINISHED")
    return config


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A SQLite tracking store holding a champion for :data:`PARAMS` (its configuration)."""
    home = tmp_path_factory.mktemp("train-cli")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{home / 'mlflow' / 'mlflow.db'}")
        patch.setenv("CELERITAS_HOME", str(home))
        patch.delenv("CELERITAS_CLUSTER_NAME", raising=False)
        config = publish_champion(home / "published", PARAMS)
        yield {**config, "home": home, "placement": home / "published" / "placement.json"}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["train", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one-line error of a refused ``celeritas train`` (exit 2)."""
    code, out, err = _run(argv, capsys)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("celeritas: error: "), err
    return lines[0].removeprefix("celeritas: error: ")


def test_train_with_a_placement_file_saves_the_trained_weights(store, tmp_path, capsys) -> None:
    weights = tmp_path / "mlp.weights.h5"
    code, out, err = _run(["--model", "mlp", "--placement", str(store["placement"]), "--batch-size", "16",
                           "--steps", "30", "--learning-rate", "0.02", "--seed", "2", "--save-weights",
                           str(weights)], capsys)
    assert code == 0, err
    assert "mlp at batch 16 on 2 devices, placer celeritas, enforced order, " in err
    steps = [line for line in err.splitlines() if line.strip().startswith("step ")]
    expected = ["step 1/30", *[f"step {k}/30" for k in range(3, 31, 3)]]
    assert [s.split(":")[0].strip() for s in steps] == expected
    first, last = (float(s.rsplit(" ", 1)[1]) for s in (steps[0], steps[-1]))
    assert last < first / 2
    (summary,) = out.strip().splitlines()
    assert summary.startswith(f"trained mlp with {store['placement']} at batch 16 on 2 devices (enforced "
                              "order) on synthetic data: 30 steps in ")
    assert summary.endswith(f"loss {first:.4f} -> {last:.4f}; weights: {weights}")
    assert weights.stat().st_size > 0


def test_train_with_the_champion_of_the_configuration(store, capsys) -> None:
    code, out, err = _run([*FLAGS, "--champion", "--steps", "3", "--order", "free"], capsys)
    assert code == 0, err
    assert f"champion: version 1 of {store['registered_model']} (placer celeritas; mlp (classes=10, " in err
    assert out.startswith(f"trained mlp with models:/{store['registered_model']}@champion (version 1) at "
                          "batch 16 on 2 devices (free order) on synthetic data: 3 steps in ")


def test_a_models_uri_needs_no_model_and_data_may_come_from_an_npz(store, tmp_path, capsys) -> None:
    rng = np.random.default_rng(0)
    data = tmp_path / "data.npz"
    np.savez(data, features=rng.standard_normal((40, 16)).astype("float32"), labels=np.arange(40) % 10)
    uri = f"models:/{store['registered_model']}@champion"
    code, out, err = _run(["--placement", uri, "--data", str(data), "--steps", "4"], capsys)
    assert code == 0, err
    assert f"on {data}: 4 steps in " in out and "(enforced order)" in out
    xy = tmp_path / "xy.npz"
    np.savez(xy, x=rng.standard_normal((16, 16)), y=np.zeros(16, dtype=int))
    assert _run(["--placement", uri, "--data", str(xy), "--steps", "2"], capsys)[0] == 0


def test_every_refusal_is_one_line_exit_2_and_writes_no_weights(store, tmp_path, capsys) -> None:
    weights = tmp_path / "never.weights.h5"
    name, key = store["registered_model"], store["key"]
    uri = f"models:/{name}@champion"
    placement = str(store["placement"])
    missing = {"batch_size": 32, "num_devices": 2, "device_memory": "40KB", "calibrate_comm": False}
    from tasks.prepare import configuration_for

    absent = configuration_for({"model": "mlp", **missing})["registered_model"]
    store_uri = os.environ["MLFLOW_TRACKING_URI"]
    bad_npz = tmp_path / "bad.npz"
    bad_npz.write_text("not a zip")
    other_npz = tmp_path / "other.npz"
    np.savez(other_npz, a=np.zeros(3))
    neither = ("give the placement: --placement FILE (or models:/NAME@champion), or --champion (the "
               "champion of the configuration)")
    cases = [
        ([], neither),
        (["--placement", placement, "--champion"], neither),
        (["--placement", placement, "--registered-model", name],
         "--registered-model names a champion: use it with --champion"),
        (["--placement", placement, "--batch-size", "16"],
         "--model: required with a placement file, and with --champion unless --registered-model names the "
         "champion"),
        (["--model", "mlp", "--placement", placement],
         "--batch-size: required with a placement file (the batch it was made for)"),
        (["--model", "mlp", "--placement", placement, "--batch-size", "16", "--steps", "0"],
         "--steps: must be an integer from 1 to 100,000, got 0"),
        (["--model", "mlp", "--placement", placement, "--batch-size", "16", "--save-weights", "w.h5"],
         "w.h5: --save-weights: the file name must end in .weights.h5 (Keras's format)"),
        (["--placement", f"models:/{name}/1"],
         f"models:/{name}/1: only the champion of a registered model is published for training: "
         "models:/NAME@champion"),
        (["--model", "mlp", "--placement", placement, "--batch-size", "16", "--num-devices", "3"],
         f"{placement}: --num-devices 3: the placement has 2 devices"),
        (["--model", "mlp", "--placement", placement, "--batch-size", "16", "--data", str(bad_npz)],
         f"{bad_npz}: not a NumPy .npz archive"),
        (["--model", "mlp", "--placement", placement, "--batch-size", "16", "--data", str(other_npz)],
         f"{other_npz}: expected arrays 'x' and 'y', or ['features', 'labels']; it holds ['a']"),
        (["--model", "mlp", "--set", "features=12", "--placement", placement, "--batch-size", "16"],
         None),  # another structure of the model: checked below
        (["--model", "mlp", "--batch-size", "32", "--num-devices", "2", "--device-memory", "40KB",
          "--calibrate-comm", "false", "--champion"],
         f"no champion for registered model {absent!r} in {store_uri} (run the pipeline for its "
         "configuration first; celeritas production show lists the champions)"),
        (["--champion", "--registered-model", name, "--model", "mlp", "--set", "hidden=48"],
         f"the champion models:/{name}@champion (version 1) is a placement of mlp (classes=10, features=16, "
         "hidden=32, layers=2), not of mlp (classes=10, features=16, hidden=48, layers=2)"),
        (["--placement", uri, "--batch-size", "32"],
         f"--batch-size 32: the champion models:/{name}@champion (version 1) was placed for batch 16"),
        (["--placement", uri, "--num-devices", "4"],
         f"--num-devices 4: the champion models:/{name}@champion (version 1) places the model on 2 devices"),
    ]
    for argv, message in cases:
        full = argv if "--save-weights" in argv else [*argv, "--save-weights", str(weights)]
        got = _refused(full, capsys)
        if message is None:
            assert got.startswith(f"{placement}: the placement was made for another structure of 'mlp': ")
        else:
            assert got == message, argv
        assert not weights.exists()
    assert key in name


def test_no_champion_in_an_empty_store_and_an_unreachable_registry_say_so(store, tmp_path, capsys,
                                                                          monkeypatch) -> None:
    empty = f"sqlite:///{tmp_path / 'empty' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", empty)
    assert _refused([*FLAGS, "--champion"], capsys) == (
        f"no champion {store['registered_model']!r}: the tracking store {empty} holds no runs (run the "
        "pipeline first, e.g. make demo)")
    assert not (tmp_path / "empty").exists()  # a look-up creates no store
    # a tracking server that does not answer, in a fresh process: one line, exit 2, no traceback
    from tests.mlflow_server import free_port

    env = {**os.environ, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}",
           "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "celeritas_cli", "train", *FLAGS, "--champion"], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    server = env["MLFLOW_TRACKING_URI"]
    assert line.startswith(f"celeritas: error: MLflow tracking server {server} unreachable: ")
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_help_loads_no_numpy_tensorflow_or_mlflow() -> None:
    from tests.cli.test_startup import HEAVY, _modules_after

    loaded = _modules_after("train", "--help")
    assert "numpy" not in loaded and sorted(set(HEAVY) & set(loaded)) == []


def test_help_says_what_it_does(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["train", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("--placement FILE|URI", "models:/NAME@champion", "--champion", "--registered-model NAME",
                   "--steps STEPS", "--order {enforced,free}", "--data synthetic|NPZ", "--save-weights PATH",
                   "(default 4)", "(default 30MiB)", "exit 2"):
        assert phrase in text, phrase
