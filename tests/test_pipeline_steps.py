"""Pipeline steps without Airflow: retries leave no corrupt or duplicate artifacts or MLflow runs,
parameters are validated with one-line errors, publishing never replaces a faster placement,
and ``celeritas run`` / ``celeritas runs compare`` work end to end."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("mlflow")

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from tasks import storage, tracking
from tasks.calibrate_comm import calibrate_comm
from tasks.fit_regression import fit_regression
from tasks.fuse import fuse
from tasks.params import resolve_params
from tasks.place import place
from tasks.prepare import prepare
from tasks.profile_small_batches import profile_small_batches
from tasks.publish import publish
from tasks.remeasure_large_batch import remeasure_large_batch

TINY = {
    "model": "mlp", "model_knobs": {"features": 16, "hidden": 32, "layers": 2, "classes": 10},
    "batch_size": 16, "profile_batch_sizes": [2, 4], "num_devices": 2, "device_memory": "60KB",
    "calibrate_comm": False, "placers": ["celeritas", "m-topo"], "validation_steps": 5, "warmup_steps": 1,
}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    return tmp_path


def _children(parent: str) -> list[str]:
    import mlflow

    client = mlflow.MlflowClient(tracking.tracking_uri())
    exp = client.get_experiment_by_name("celeritas-placement")
    runs = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
    return sorted(r.data.tags["celeritas.placer"] for r in runs)


def test_params_are_validated_with_one_line_errors():
    assert resolve_params({})["validation_steps"] == 50
    for bad, field in (({"batch_size": 0}, "batch_size"), ({"placers": ["nope"]}, "placers.0"),
                       ({"device_memory": "12 parsecs"}, "device_memory"), ({"colour": 1}, "params"),
                       ({"profile_batch_sizes": [4, 4]}, "profile_batch_sizes")):
        with pytest.raises(CeleritasInputError, match=f"parameter '{field}'") as err:
            resolve_params(bad)
        assert "\n" not in str(err.value)


def test_a_retried_step_overwrites_its_outputs_and_reuses_its_runs(store, monkeypatch):
    job = prepare(TINY, job_id="job-1")
    again = prepare(TINY, job_id="job-1")  # a retried prepare: same run directory and parent run
    assert again["parent_run_id"] == job["parent_run_id"] and again["run_dir"] == job["run_dir"]
    p, run_dir, parent = job["params"], job["run_dir"], job["parent_run_id"]
    cluster = calibrate_comm(p, run_dir, parent)
    profile = profile_small_batches(p, run_dir)
    fits = fit_regression(p, run_dir, profile["profile_uri"], parent)
    measured = remeasure_large_batch(p, run_dir, fits["fits_uri"], cluster["cluster_uri"], parent)
    fuse(p, run_dir, measured["measured_graph_uri"], cluster["cluster_uri"], parent)

    # the place step fails half-way (the tracking server drops out after the first child run)
    real_child_run = tracking.child_run
    calls = []

    def flaky(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise tracking.TransientTrackingError("http://127.0.0.1:1", "connection refused")
        return real_child_run(*args, **kwargs)

    monkeypatch.setattr(tracking, "child_run", flaky)
    with pytest.raises(tracking.TransientTrackingError):
        place(p, run_dir, measured["measured_graph_uri"], cluster["cluster_uri"], parent)
    monkeypatch.setattr(tracking, "child_run", real_child_run)
    before = storage.list_uris(run_dir)
    assert not any(u.endswith(".tmp") or "celeritas-tmp" in u for u in before)

    # the retry completes; running it once more changes nothing
    first = place(p, run_dir, measured["measured_graph_uri"], cluster["cluster_uri"], parent)
    after_first = storage.list_uris(run_dir)
    second = place(p, run_dir, measured["measured_graph_uri"], cluster["cluster_uri"], parent)
    assert storage.list_uris(run_dir) == after_first
    assert first["placements"] == second["placements"]
    assert _children(parent) == ["celeritas", "m-topo"]  # one child run per placer, not per attempt
    for uri in first["placements"].values():
        assert storage.read_json(uri)["format"] == "celeritas-placement/1"  # complete, parseable JSON


def test_publish_keeps_a_faster_production_placement(store):
    job = prepare(TINY, job_id="champion")
    tracking.log_metrics(job["parent_run_id"], {"best_measured_step_time_s": 0.010})
    first = publish(job["params"], job["run_dir"], {"best_measured_step_time_s": 0.010,
                                                    "best_placement_uri": "file:///a.json",
                                                    "best_measured": "celeritas"}, job["parent_run_id"])
    assert first["decision"] == "promoted"
    challenger = prepare(TINY, job_id="challenger")
    slower = publish(challenger["params"], challenger["run_dir"],
                     {"best_measured_step_time_s": 0.0101, "best_placement_uri": "file:///b.json",
                      "best_measured": "m-topo"}, challenger["parent_run_id"])
    assert slower["decision"] == "kept" and "below" in slower["reason"]
    assert tracking.production_run("mlp")["run_id"] == job["parent_run_id"]
    assert json.loads((store / "build").exists() and storage.read_text(
        storage.join(challenger["run_dir"], "publish.json")))["placement_uri"] == "file:///a.json"
    faster = prepare(TINY, job_id="faster")
    better = publish(faster["params"], faster["run_dir"],
                     {"best_measured_step_time_s": 0.008, "best_placement_uri": "file:///c.json",
                      "best_measured": "celeritas"}, faster["parent_run_id"])
    assert better["decision"] == "promoted" and "25.0 %" in better["reason"]
    assert tracking.production_run("mlp")["run_id"] == faster["parent_run_id"]


def test_celeritas_run_and_runs_compare(store, capsys):
    code = main(["run", "--model", "mlp", "--model-knobs", json.dumps(TINY["model_knobs"]),
                 "--batch-size", "16",
                 "--profile-batch-sizes", "2,4", "--num-devices", "2", "--device-memory", "60KB",
                 "--calibrate-comm", "false", "--placers", "celeritas,m-topo", "--validation-steps", "3",
                 "--warmup-steps", "1", "--job-id", "cli-job"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "publish: promoted" in out and "artifacts:" in out
    code = main(["runs", "compare", "--model", "mlp", "--last", "5"])
    out, _ = capsys.readouterr()
    assert code == 0 and "FINISHED" in out and "promoted" in out


def test_celeritas_run_bad_flags_are_one_line(store, capsys):
    for argv, message in ((["--batch-size", "x"], "--batch-size: expected integer"),
                          (["--placers", "celeritas,bogus"], "parameter 'placers.1'"),
                          (["--calibrate-comm", "maybe"], "--calibrate-comm: expected boolean")):
        code = main(["run", *argv])
        _, err = capsys.readouterr()
        assert code == 2 and message in err and err.count("\n") == 1, err
