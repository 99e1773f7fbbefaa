"""tasks/tracking.py against a temporary SQLite store, a real ``mlflow server`` and a closed port."""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from mlflow import MlflowClient

from celeritas_core.errors import CeleritasInputError
from tasks import tracking
from tests.mlflow_server import free_port, mlflow_server

MODEL = "resnet50"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh SQLite tracking store under tmp_path (the project home too)."""
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    return uri


def _client() -> MlflowClient:
    return MlflowClient(tracking_uri=tracking.tracking_uri())


def _artifact_names(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    return {Path(f.path).name for f in client.list_artifacts(run_id, path)}


def _parent_children_series(tmp_path: Path, job_id: str) -> tuple[str, dict[str, str]]:
    """The pipeline's logging flow; checks it through a plain MlflowClient; returns the run ids."""
    (tmp_path / "files").mkdir(exist_ok=True)
    placement = tmp_path / "files" / "placement.json"
    placement.write_text('{"assignment": {}}')
    gantt = tmp_path / "files" / "gantt.png"
    gantt.write_bytes(b"\x89PNG fake")
    long_value = "x" * 7000
    parent = tracking.start_parent_run(
        model=MODEL, run_name=f"{MODEL} {job_id}", job_id=job_id,
        tags={"celeritas.batch_size": "64", "celeritas.devices": "4",
              "airflow.dag_id": "celeritas_placement"},
        params={"batch_size": 64, "placers": ["celeritas", "metis"], "notes": long_value, "seed": None})
    children = {}
    for i, placer in enumerate(("celeritas", "metis")):
        children[placer] = tracking.child_run(
            parent, placer, params={"placer": placer, "R": 3},
            metrics={"simulated_step_time_us": 1000.0 + i, "placement_seconds": 0.5 * (i + 1)},
            artifacts={"placement": str(placement)})
    tracking.log_metrics(parent, {"best_simulated_step_time_us": 1000.0, "single_device_time_us": 3000.0})
    tracking.log_series(children["celeritas"], "validation_step_time_s", [0.1 + 0.001 * i for i in range(50)])
    tracking.log_artifact(parent, str(gantt), "placement")
    tracking.set_tags(parent, {"celeritas.best_simulated_placer": "celeritas"})

    client = _client()
    p = client.get_run(parent)
    assert p.info.status == "RUNNING"
    assert p.info.run_name == f"{MODEL} {job_id}"
    assert p.data.tags["celeritas.role"] == "parent"
    assert p.data.tags["celeritas.model"] == MODEL
    assert p.data.tags["celeritas.job_id"] == job_id
    assert p.data.tags["airflow.dag_id"] == "celeritas_placement"
    assert p.data.params["batch_size"] == "64"
    assert p.data.params["placers"] == '["celeritas", "metis"]'
    assert p.data.params["seed"] == "None"
    assert len(p.data.params["notes"]) == tracking.MAX_PARAM_VALUE
    assert p.data.metrics["best_simulated_step_time_us"] == 1000.0
    assert _artifact_names(client, parent, "placement") == {"gantt.png"}
    for i, (placer, run_id) in enumerate(children.items()):
        c = client.get_run(run_id)
        assert c.info.run_name == placer
        assert c.info.status == "FINISHED"
        assert c.info.experiment_id == p.info.experiment_id
        assert c.data.tags["mlflow.parentRunId"] == parent
        assert c.data.tags["celeritas.placer"] == placer
        assert c.data.tags["celeritas.model"] == MODEL
        assert c.data.params == {"placer": placer, "R": "3"}
        assert c.data.metrics["simulated_step_time_us"] == 1000.0 + i
        assert _artifact_names(client, run_id, "placement") == {"placement.json"}
    history = client.get_metric_history(children["celeritas"], "validation_step_time_s")
    assert sorted(m.step for m in history) == list(range(50))
    assert {m.step: m.value for m in history}[49] == pytest.approx(0.149)
    tracking.end_run(parent, "FINISHED")
    assert client.get_run(parent).info.status == "FINISHED"
    return parent, children


def test_parent_and_child_runs_on_sqlite(store: str, tmp_path: Path) -> None:
    parent, children = _parent_children_series(tmp_path, "manual__2024-06-01T00:00:00+00:00")
    assert len({parent, *children.values()}) == 3
    # artifacts of experiments created on a SQLite store live next to the database, never in ./mlruns
    stored = {p.name for p in (tmp_path / "mlruns" / "artifacts").rglob("*") if p.is_file()}
    assert stored == {"placement.json", "gantt.png"}


def test_log_series_and_steps(store: str) -> None:
    run = tracking.start_parent_run(model=MODEL, run_name="series", job_id="series", tags={}, params={})
    values = [0.01 * (i % 7) + 0.2 for i in range(50)]
    tracking.log_series(run, "validation_step_time_s", values)
    tracking.log_metrics(run, {"loss": 1.5}, step=3)
    tracking.log_metrics(run, {"loss": 1.25, "nan_metric": float("nan")}, step=4)
    client = _client()
    history = client.get_metric_history(run, "validation_step_time_s")
    assert len(history) == 50
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(50))
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(values)
    assert [(m.step, m.value) for m in client.get_metric_history(run, "loss")] == [(3, 1.5), (4, 1.25)]
    assert "nan_metric" not in client.get_run(run).data.metrics


def test_retries_reuse_parent_and_child(store: str) -> None:
    kwargs = {"model": MODEL, "run_name": "job-1", "job_id": "job-1", "tags": {"celeritas.devices": "4"}}
    first = tracking.start_parent_run(**kwargs, params={"batch_size": 64, "R": 3})
    again = tracking.start_parent_run(**kwargs, params={"batch_size": 64, "R": 4, "extra": 1})
    assert again == first
    client = _client()
    exp = tracking.experiment_id()
    parents = client.search_runs([exp], "tags.`celeritas.role` = 'parent'")
    assert [r.info.run_id for r in parents] == [first]
    assert parents[0].data.params == {"batch_size": "64", "R": "3", "extra": "1"}  # params never overwritten
    assert tracking.start_parent_run(**{**kwargs, "job_id": "job-2"}) != first

    # the placer's child: place.py then validate.py (or a retry) log into one child run
    c1 = tracking.child_run(first, "celeritas", params={"placer": "celeritas"},
                            metrics={"simulated_step_time_us": 900.0})
    c2 = tracking.child_run(first, "celeritas", params={"placer": "celeritas"},
                            metrics={"measured_mean_step_time_s": 0.12})
    assert c1 == c2
    children = client.search_runs([exp], f"tags.`mlflow.parentRunId` = '{first}'")
    assert [r.info.run_id for r in children] == [c1]
    assert children[0].info.status == "FINISHED"
    assert children[0].data.metrics == {"simulated_step_time_us": 900.0, "measured_mean_step_time_s": 0.12}
    assert tracking.child_run(first, "metis", metrics={}) != c1

    # a finished job's id starts a new parent run (a re-triggered job), an unfinished one is reused
    tracking.end_run(first, "FAILED")
    assert client.get_run(first).info.status == "FAILED"
    assert tracking.start_parent_run(**kwargs) != first


def test_promote_production_and_decision(store: str) -> None:
    assert tracking.production_run(MODEL) is None
    old = tracking.start_parent_run(model=MODEL, run_name="a", job_id="a")
    tracking.log_metrics(old, {"best_measured_step_time_s": 0.2})
    tracking.set_tags(old, {"celeritas.best_measured_placer": "metis"})
    tracking.promote(old, MODEL, placement_uri="s3://bucket/a/placement.json", reason="first placement")
    tracking.record_decision(old, "promoted", "first placement")
    champion = tracking.production_run(MODEL)
    assert champion is not None
    assert champion["run_id"] == old
    assert champion["measured_step_time_s"] == 0.2
    assert champion["placement_uri"] == "s3://bucket/a/placement.json"
    assert champion["placer"] == "metis"
    assert champion["promote_reason"] == "first placement"

    time.sleep(0.01)
    new = tracking.start_parent_run(model=MODEL, run_name="b", job_id="b")
    tracking.log_metrics(new, {"best_measured_step_time_s": 0.15})
    tracking.promote(new, MODEL, placement_uri="s3://bucket/b/placement.json", reason="25 % faster")
    tracking.record_decision(new, "promoted", "25 % faster")
    champion = tracking.production_run(MODEL)
    assert champion is not None
    assert (champion["run_id"], champion["measured_step_time_s"]) == (new, 0.15)
    old_tags = _client().get_run(old).data.tags
    assert old_tags["celeritas.production"] == "false"
    assert old_tags["celeritas.superseded_by"] == new
    new_tags = _client().get_run(new).data.tags
    assert new_tags["celeritas.production"] == "true"
    assert new_tags["celeritas.publish_decision"] == "promoted"
    assert new_tags["celeritas.publish_reason"] == "25 % faster"

    tracking.promote(old, MODEL, placement_uri="s3://bucket/a/placement.json", reason="rollback")
    assert tracking.production_run(MODEL)["run_id"] == old
    assert _client().get_run(new).data.tags["celeritas.superseded_by"] == old
    tracking.promote(new, MODEL, placement_uri="s3://bucket/b/placement.json", reason="roll forward")

    slower = tracking.start_parent_run(model=MODEL, run_name="c", job_id="c")
    tracking.record_decision(slower, "kept", "3 % slower")
    assert tracking.production_run(MODEL)["run_id"] == new
    assert tracking.production_run("other-model") is None
    child = tracking.child_run(slower, "celeritas")
    with pytest.raises(CeleritasInputError, match="not a parent run"):
        tracking.promote(child, MODEL, placement_uri="x", reason="r")
    with pytest.raises(CeleritasInputError, match="not a parent run of model 'bert'"):
        tracking.promote(slower, "bert", placement_uri="x", reason="r")


def test_recent_runs_and_table(store: str) -> None:
    ids = []
    for i, batch in enumerate((32, 64, 128)):
        run = tracking.start_parent_run(model=MODEL, run_name=f"r{i}", job_id=f"r{i}",
                                        tags={"celeritas.batch_size": str(batch), "celeritas.devices": "4"})
        tracking.child_run(run, "celeritas", metrics={"placement_seconds": 1.5 + i, "speedup_vs_single": 2.0})
        tracking.log_metrics(run, {"best_measured_step_time_s": 0.1 + i / 100,
                                   "best_simulated_step_time_us": 1000.0 + i,
                                   "single_device_time_us": 3000.0})
        tracking.set_tags(run, {"celeritas.best_measured_placer": "celeritas"})
        ids.append(run)
        time.sleep(0.01)
    other = tracking.start_parent_run(model="bert", run_name="o", job_id="o")
    tracking.end_run(ids[2], "FINISHED")
    rows = tracking.recent_runs(MODEL, 2)
    assert [r["run_id"] for r in rows] == [ids[2], ids[1]]
    assert other not in [r["run_id"] for r in tracking.recent_runs(MODEL, 10)]
    top = rows[0]
    keys = ("status", "batch_size", "devices", "placer")
    assert [top[k] for k in keys] == ["FINISHED", "128", "4", "celeritas"]
    assert top["best_measured_step_time_s"] == pytest.approx(0.12)
    assert top["speedup_vs_single"] == pytest.approx(3000.0 / 1002.0)  # from the parent's metrics
    assert top["placement_seconds"] == 3.5  # from the winner's child run
    table = tracking.format_runs_table(rows).splitlines()
    assert len(table) == 3
    assert table[0].split()[:3] == ["started", "(UTC)", "run_id"]
    assert ids[2] in table[1] and ids[1] in table[2]
    assert table[1].split()[3:8] == ["FINISHED", "128", "4", "celeritas", "0.120000"]
    assert "1002.0" in table[1] and "2.99" in table[1] and "3.50" in table[1]
    assert tracking.recent_runs("unknown-model") == []
    assert tracking.format_runs_table([]) == "no runs"
    with pytest.raises(CeleritasInputError):
        tracking.recent_runs(MODEL, 0)


def test_bad_input_is_one_line_input_error(store: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    run = tracking.start_parent_run(model=MODEL, run_name="bad", job_id="bad")
    cases = [
        lambda: tracking.end_run(run, "DONE"),
        lambda: tracking.log_metrics(run, {"x": "fast"}),
        lambda: tracking.log_series(run, "x", [1.0, None]),
        lambda: tracking.log_artifact(run, str(tmp_path / "missing.json")),
        lambda: tracking.child_run(run, "metis", artifacts={"placement": str(tmp_path / "missing.json")}),
        lambda: tracking.set_tags("0" * 32, {"a": "b"}),
        lambda: tracking.child_run("0" * 32, "metis"),
        lambda: tracking.start_parent_run(model=MODEL, run_name="q", job_id="it's \"quoted\""),
        lambda: tracking.start_parent_run(model="", run_name="q", job_id="q"),
        lambda: tracking.start_parent_run(model=MODEL, run_name="q", job_id="q",
                                          tags={"celeritas.role": "child"}),
    ]
    for case in cases:
        with pytest.raises(CeleritasInputError) as info:
            case()
        assert "\n" not in str(info.value)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(tmp_path / "mlruns"))
    with pytest.raises(CeleritasInputError, match="file store"):
        tracking.tracking_uri()


def test_default_store_under_project_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    db = tmp_path.resolve() / "build" / "mlflow" / "mlflow.db"
    assert tracking.tracking_uri() == f"sqlite:///{db}"
    assert db.parent.is_dir()
    assert tracking.artifact_root(tracking.tracking_uri()) == (db.parent / "artifacts").as_uri()
    assert tracking.artifact_root("http://127.0.0.1:5000") is None


def test_importing_tracking_does_not_import_mlflow() -> None:
    code = "import sys, tasks.tracking; assert 'mlflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("fast", [True, False], ids=["no-retries", "module-defaults"])
def test_unreachable_server_is_transient(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    for name in tracking._HTTP_DEFAULTS:  # restored after the test, whatever the module sets
        monkeypatch.delenv(name, raising=False)
    if fast:
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    start = time.monotonic()
    with pytest.raises(tracking.TransientTrackingError) as info:
        tracking.start_parent_run(model=MODEL, run_name="x", job_id="x")
    assert time.monotonic() - start < (3 if fast else 15)
    message = str(info.value)
    assert url in message and "\n" not in message
    assert isinstance(info.value, RuntimeError) and not isinstance(info.value, CeleritasInputError)
    assert str(pickle.loads(pickle.dumps(info.value))) == message  # crosses process boundaries intact
    with pytest.raises(tracking.TransientTrackingError):
        tracking.production_run(MODEL)


@pytest.mark.slow
def test_real_mlflow_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same flow against ``mlflow server`` (REST API + proxied artifacts) started for this test."""
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    for name in tracking._HTTP_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    with mlflow_server(tmp_path / "server") as url:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        parent, children = _parent_children_series(tmp_path, "scheduled__2024-06-01")
        assert tracking.child_run(parent, "metis") == children["metis"]
        tracking.promote(parent, MODEL, placement_uri="s3://b/p.json", reason="first")
        assert tracking.production_run(MODEL)["run_id"] == parent
        assert [r["run_id"] for r in tracking.recent_runs(MODEL)] == [parent]
        stored = {p.name for p in (tmp_path / "server" / "artifacts").rglob("*") if p.is_file()}
        assert stored == {"placement.json", "gantt.png"}
    assert not (tmp_path / "build").exists()  # nothing fell back to a local store
