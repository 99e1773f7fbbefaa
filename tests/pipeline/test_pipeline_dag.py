"""The Airflow DAG: parsing, structure, the trigger form's validation, and whole runs through
``dag.test()`` on a tiny model, logging to MLflow (a SQLite store, then a real ``mlflow server``)
and writing artifacts locally or to an S3 endpoint (moto's server) on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Airflow reads its configuration when first imported: point it at a private home first.
_HOME = Path(tempfile.mkdtemp(prefix="celeritas-airflow-"))
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(_HOME), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
    "CELERITAS_HOME": str(_HOME), "TF_CPP_MIN_LOG_LEVEL": "2",
}
os.environ.update(AIRFLOW_ENV)

pytest.importorskip("airflow")
pytest.importorskip("tensorflow")
TINY = {
    "model": "mlp", "model_knobs": {"features": 16, "hidden": 32, "layers": 2, "classes": 10},
    "batch_size": 16, "profile_batch_sizes": [2, 4], "num_devices": 2, "device_memory": "60KB",
    "calibrate_comm": False, "placers": ["celeritas", "m-topo", "single"],
    "validation_steps": 50, "warmup_steps": 5,
}
GPU_TASKS = {"calibrate_comm", "profile_small_batches", "remeasure_large_batch", "validate", "validate_all"}
STEP_TASKS = ("calibrate_comm", "profile_small_batches", "fit_regression", "remeasure_large_batch", "fuse",
              "place", "plan_validation", "validate", "publish")
# data flow: every step reads prepare's job; the cluster and the measured graph feed fuse and place;
# plan_validation's items feed the mapped validate, its plan (XCom key "plan") publish
EDGES = {
    *{("prepare", t) for t in STEP_TASKS},
    ("profile_small_batches", "fit_regression"), ("fit_regression", "remeasure_large_batch"),
    ("calibrate_comm", "remeasure_large_batch"), ("calibrate_comm", "fuse"), ("calibrate_comm", "place"),
    ("remeasure_large_batch", "fuse"), ("remeasure_large_batch", "place"), ("fuse", "place"),
    ("place", "plan_validation"), ("plan_validation", "validate"), ("plan_validation", "publish"),
    ("validate", "publish"), ("publish", "promoted"), ("publish", "announce"),
    ("promoted", "announce"), ("prepare", "close_run"), *{(t, "close_run") for t in STEP_TASKS},
}


@pytest.fixture(scope="module")
def airflow_home():
    """The private AIRFLOW_HOME with a migrated SQLite metadata database and the gpu pool."""
    env = {**os.environ, **AIRFLOW_ENV}
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True,
                   env=env)
    subprocess.run([sys.executable, "-m", "airflow", "pools", "set", "gpu", "1", "GPU workers"],
                   check=True, capture_output=True, env=env)
    return _HOME


@pytest.fixture(scope="module")
def dag(airflow_home):
    from airflow.dag_processing.dagbag import BundleDagBag

    bag = BundleDagBag(dag_folder=str(ROOT / "dags"), bundle_path=ROOT / "dags")
    assert bag.import_errors == {}
    return bag.get_dag("celeritas_placement")


@pytest.mark.parametrize("dag_file", ["celeritas_placement.py", "celeritas_fleet.py"])
def test_dag_files_import_no_heavy_module(dag_file):
    code = ("import sys, runpy; runpy.run_path(sys.argv[1]); "
            "print(sorted(m for m in ('tensorflow', 'mlflow', 'boto3', 'numpy', 'keras') "
            "if m in sys.modules))")
    # the DAG processor puts the DAGs folder (the bundle) on sys.path: celeritas_steps is found there
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "dags" / dag_file)],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'dags'}"})
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_dag_structure_queues_pools_schedule(dag):
    assert set(dag.task_ids) == {a for a, _ in EDGES} | {b for _, b in EDGES}
    edges = {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}
    assert edges == EDGES
    for t in dag.tasks:
        if t.task_id in GPU_TASKS:
            assert (t.queue, t.pool) == ("gpu", "gpu"), t.task_id
        else:
            assert t.queue != "gpu" and t.pool != "gpu", t.task_id
    assert dag.catchup is False
    assert dag.schedule is None  # ad hoc: unpausing it never starts an unrequested run
    assert dag.max_active_runs > 1  # runs of different models (or configurations) go side by side
    assert dag.get_task("prepare").retries == 0 and dag.get_task("validate").retries >= 1
    assert all(t.execution_timeout is not None for t in dag.tasks)
    assert dag.get_task("validate").execution_timeout > dag.get_task("publish").execution_timeout
    assert dag.get_task("validate").map_index_template == "{{ placer }}"
    # the MLflow parent run's lifecycle: prepare (setup) opens it, close_run (teardown) ends it
    setups = {t.task_id for t in dag.tasks if t.is_setup}
    teardowns = {t.task_id for t in dag.tasks if t.is_teardown}
    assert (setups, teardowns) == ({"prepare"}, {"close_run"})
    close = dag.get_task("close_run")
    assert close.trigger_rule == "all_done_setup_success" and close.on_failure_fail_dagrun
    announce = dag.get_task("announce")
    assert [o.name for o in announce.outlets] == ["celeritas_published_placement"]


def test_form_params_have_titles_sections_and_reject_bad_values(dag):
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    for name in dag.params:
        param = dag.params.get_param(name)
        assert param.schema.get("title") and param.schema.get("section") and param.description, name
    for bad, message in (({"batch_size": 0}, "minimum of 1"), ({"placers": ["nope"]}, "is not one of"),
                         ({"device_memory": "lots"}, "does not match"), ({"profile_batch_sizes": [2]},
                                                                          "is too short")):
        params = ParamsDict({name: dag.params.get_param(name) for name in dag.params})
        with pytest.raises(ParamValidationError, match=message):
            params.update(bad)
            params.validate()
    ok = ParamsDict({name: dag.params.get_param(name) for name in dag.params})
    ok.update(TINY)
    assert ok.validate()["batch_size"] == 16


def _mlflow_runs(tracking_uri: str):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("celeritas-placement")
    return client, client.search_runs([exp.experiment_id])


def _common_artifacts(client, run_ids):
    """What MLflow 3.17's compare view shows for ``run_ids`` (CompareRunArtifactView): the files
    (not folders) at the top of the first run's artifacts that every other run has too."""
    listings = [{(a.path, a.is_dir) for a in client.list_artifacts(run_id)} for run_id in run_ids]
    common = {path for path, is_dir in listings[0] if not is_dir}
    for listing in listings[1:]:
        common &= {path for path, _ in listing}
    return common


def _check_run(client, runs, expected_placers, run_id_prefix="manual"):
    parents = [r for r in runs if r.data.tags.get("celeritas.role") == "parent"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["airflow.dag_id"] == "celeritas_placement"
    assert parent.data.tags["airflow.run_id"].startswith(run_id_prefix)
    assert parent.data.params["batch_size"] == "16" and parent.data.params["model"] == "mlp"
    # runs are told apart in MLflow's list: model, batch, devices and the run id's first 6 hex digits
    assert parent.info.run_name == f"mlp b16 2dev {parent.info.run_id[:6]}"
    for metric in ("estimation_memory_deviation", "best_measured_step_time_ms", "coarse_nodes", "ccr_before"):
        assert metric in parent.data.metrics, metric
    assert not [m for m in parent.data.metrics if "step_time" in m and not m.endswith("_ms")]
    assert parent.data.tags["celeritas.transfer_model"] == "default"  # TINY: calibration off
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(c.data.tags["celeritas.placer"] for c in children) == sorted(expected_placers)
    validated = 0
    for child in children:
        assert child.info.run_name == f"{child.data.tags['celeritas.placer']} · {parent.info.run_name}"
        for metric in ("placement_time_s", "simulated_step_time_ms", "speedup_vs_single", "oom", "transfers",
                       "transfer_bytes"):
            assert metric in child.data.metrics, (child.info.run_name, metric)
        assert not [m for m in child.data.metrics if "step_time" in m and not m.endswith("_ms")]
        assert any(a.path.endswith(".json") for a in client.list_artifacts(child.info.run_id, "placement"))
        if child.data.metrics["oom"]:  # over-full placements are not run on the devices
            assert "measured_mean_step_time_ms" not in child.data.metrics
            continue
        validated += 1
        for metric in ("measured_mean_step_time_ms", "measured_median_step_time_ms",
                       "measured_p90_step_time_ms"):
            assert metric in child.data.metrics, (child.info.run_name, metric)
        history = client.get_metric_history(child.info.run_id, "validation_step_time_ms")
        assert sorted(m.step for m in history) == list(range(50))
        median_ms = child.data.metrics["measured_median_step_time_ms"]
        assert min(m.value for m in history) <= median_ms <= max(m.value for m in history)
        assert any(a.path.endswith(".validation.json")
                   for a in client.list_artifacts(child.info.run_id, "validation"))
    assert validated >= 2
    # each placer's own charts are where MLflow's compare view finds them: at the top of every child
    assert _common_artifacts(client, [c.info.run_id for c in children]) == {"gantt.png", "memory.png"}
    top = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"placement", "standard_evaluation", "gantt.png", "memory.png", "memory_all_placers.png",
            "estimation_cdf.png"} <= top
    placement = {a.path for a in client.list_artifacts(parent.info.run_id, "placement")}
    assert "placement/compare.json" in placement
    # the run's Gantt and memory charts are those of the placement publish chose, not the simulator's best
    assert parent.data.tags["celeritas.charts_placer"] == parent.data.tags["celeritas.best_measured_placer"]
    # the run's description states the decision in one line, with the figures
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith("Promoted to production as version ") and " ms per step" in note
    assert "\n" not in note
    experiment = client.get_experiment(parent.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # the training view
    return parent


def test_whole_dag_on_a_tiny_model_with_a_sqlite_store(dag, airflow_home, tmp_path, monkeypatch, caplog):
    from tasks import storage

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("CELERITAS_RUNS_ROOT", str(tmp_path))  # run directories must be under it
    run_dir = tmp_path / "run"
    caplog.set_level("INFO")
    dag_run = dag.test(run_conf={**TINY, "run_dir": str(run_dir)})
    assert str(dag_run.state).endswith("success")
    client, runs = _mlflow_runs(uri)
    parent = _check_run(client, runs, TINY["placers"])
    logged = caplog.text
    children = {r.data.tags["celeritas.placer"]: r for r in runs
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    for line in ("place: done in", "simulated step (ms)", "validate: done in", "champion median (ms)",
                 "publish: done in",
                 "PROMOTED: ", f"MLflow run: run {parent.info.run_id}",
                 "calibrate_comm: done in", "(the default model: calibration is off (calibrate_comm))"):
        assert line in logged, line  # each step's summary and the run's link are in the task logs
    # place links to every placer's child run, and each validate task to its own placer's
    for placer, child in children.items():
        link = f"MLflow run of placer {placer}: run {child.info.run_id}"
        assert logged.count(link) == (1 if child.data.metrics["oom"] else 2), link
    assert "Returned value was" not in logged  # not the whole XCom dict
    assert parent.data.tags["celeritas.publish_decision"] == "promoted"
    names = {Path(u).relative_to(run_dir).as_posix() for u in storage.list_uris(str(run_dir))}
    for expected in ("params.json", "cluster.json", "profile.json", "fits.json", "graph.measured.json",
                     "compare.json", "gantt.png", "memory.png", "validation.json", "publish.json",
                     "charts/celeritas/gantt.png", "charts/m-topo/memory.png",
                     "placements/celeritas.json", "validation/m-topo.json"):
        assert expected in names, expected
    publish = json.loads((run_dir / "publish.json").read_text())
    assert publish["decision"] == "promoted" and publish["challenger_placement_uri"].startswith(str(run_dir))
    # production points to the immutable copy in the MLflow run's artifacts, not to the run directory
    assert publish["placement_uri"].endswith("/published/placement.json")
    # a placement whose replayed peak exceeds a device is not validated; one that fits is
    compared = {row["placer"]: row for row in json.loads((run_dir / "compare.json").read_text())["placers"]}
    assert compared, "compare.json lists no placers"
    for placer, row in compared.items():
        assert (f"validation/{placer}.json" in names) == (not row["oom"]), placer
    # every step's XCom is its contract's JSON form
    from tasks import contracts

    xcoms = _xcoms(dag_run)
    for task_id, contract in (("prepare", contracts.Job), ("calibrate_comm", contracts.CalibrationResult),
                              ("profile_small_batches", contracts.ProfileResult),
                              ("fit_regression", contracts.FitResult),
                              ("remeasure_large_batch", contracts.RemeasureResult),
                              ("fuse", contracts.FuseResult), ("place", contracts.PlaceResult),
                              ("publish", contracts.PublishResult)):
        decoded = contract.from_xcom(xcoms[task_id])
        assert json.dumps(decoded.to_xcom(), sort_keys=True) == json.dumps(xcoms[task_id], sort_keys=True)
    # validate is mapped over plan_validation's items: one GPU task per placement that fits
    items = [contracts.ValidationItem.from_xcom(item) for item in xcoms["plan_validation"]]
    mapped = [contracts.PlacementValidation.from_xcom(xcoms["validate"][i]) for i in range(len(items))]
    assert [v.placer for v in mapped] == [item.placer for item in items]
    assert sorted(v.placer for v in mapped) == sorted(p for p, row in compared.items() if not row["oom"])
    assert all(v.champion_version is None and not v.champion_step_seconds for v in mapped)
    assert xcoms["close_run"] == "FINISHED" and xcoms["announce"] == publish["placement_uri"]
    assert publish["champion_version"] == "1"
    assert publish["config_key"] == parent.data.tags["celeritas.config_key"]
    # a second run of the same configuration re-measures champion version 1 next to each placement
    second = dag.test(run_conf={**TINY, "run_dir": str(tmp_path / "run2")})
    assert str(second.state).endswith("success")
    again = _xcoms(second)
    remeasured = [contracts.PlacementValidation.from_xcom(v) for v in again["validate"].values()]
    assert all(v.champion_version == "1" and len(v.champion_step_seconds) == 50 for v in remeasured)
    decided = contracts.PublishResult.from_xcom(again["publish"])
    assert decided.comparison["champion_n"] == 50 and decided.comparison["test"].startswith("one-sided")
    if decided.decision == "kept":  # production did not move: the same version, the same placement
        assert (decided.champion_version, decided.placement_uri) == ("1", publish["placement_uri"])
    client, runs = _mlflow_runs(uri)
    parents = [r for r in runs if r.data.tags.get("celeritas.role") == "parent"]
    assert len({p.info.run_name for p in parents}) == 2  # two runs of one model differ by name
    later = next(p for p in parents if p.info.run_id != parent.info.run_id)
    expected = "Promoted to production as version 2: " if decided.promoted else \
        "Kept the champion (version 1): "
    assert later.data.tags["mlflow.note.content"].startswith(expected)
    # two parent runs compared in MLflow's UI show their charts side by side
    assert {"gantt.png", "memory.png", "memory_all_placers.png", "estimation_cdf.png"} <= \
        _common_artifacts(client, [p.info.run_id for p in parents])


def _xcoms(dag_run) -> dict:
    """Task id → the value it returned (its ``return_value`` XCom) in ``dag_run``."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dag_run.run_id, dag_ids=dag_run.dag_id,
                                                  key="return_value")).all()
        values: dict = {}
        for row in rows:
            value = XComModel.deserialize_value(row)
            if row.map_index >= 0:
                values.setdefault(row.task_id, {})[row.map_index] = value
            else:
                values[row.task_id] = value
        return values


def test_a_model_that_cannot_fit_fails_once_and_closes_its_mlflow_run(dag, airflow_home, tmp_path,
                                                                      monkeypatch):
    from airflow.utils.state import TaskInstanceState

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("CELERITAS_RUNS_ROOT", str(tmp_path))
    conf = {**TINY, "device_memory": "8KB", "run_dir": str(tmp_path / "run"), "validation_steps": 2}
    dag_run = dag.test(run_conf=conf)
    assert str(dag_run.state).endswith("failed")
    states = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    place_ti = states["place"]
    assert place_ti.state == TaskInstanceState.FAILED
    assert place_ti.try_number == 1  # deterministic: failed without a retry
    assert states["validate"].state == TaskInstanceState.UPSTREAM_FAILED
    assert states["close_run"].state == TaskInstanceState.SUCCESS  # the teardown runs after a failure
    _, runs = _mlflow_runs(uri)
    parent = next(r for r in runs if r.data.tags.get("celeritas.role") == "parent")
    assert parent.info.status == "FAILED" and parent.data.tags["celeritas.publish_decision"] == "failed"
    assert not (tmp_path / "run" / "publish.json").exists()
    assert _xcoms(dag_run)["close_run"] == "FAILED"


@pytest.fixture(scope="module")
def fleet_dag(airflow_home):
    from airflow.dag_processing.dagbag import BundleDagBag

    return BundleDagBag(dag_folder=str(ROOT / "dags"), bundle_path=ROOT / "dags").get_dag("celeritas_fleet")


def test_fleet_dag_structure(fleet_dag):
    assert fleet_dag.schedule == os.environ.get("CELERITAS_SCHEDULE", "@weekly")
    assert fleet_dag.catchup is False
    ids = set(fleet_dag.task_ids)
    assert "production_models" in ids
    assert {"model.prepare_model", "model.validate_all", "model.close_run"} <= ids
    assert "model.validate" not in ids  # Airflow cannot map inside a mapped task group: one GPU task
    for t in fleet_dag.tasks:
        assert ((t.queue, t.pool) == ("gpu", "gpu")) == (t.task_id.split(".")[-1] in GPU_TASKS), t.task_id
        assert t.execution_timeout is not None, t.task_id


def test_fleet_dag_replaces_each_model_and_one_failure_stops_no_other(fleet_dag, airflow_home, tmp_path,
                                                                      monkeypatch):
    from airflow.utils.state import TaskInstanceState

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    models = tmp_path / "production_models.yaml"
    shared = {k: v for k, v in TINY.items() if k != "device_memory"} | {"validation_steps": 10}
    models.write_text(json.dumps({"defaults": shared, "models": [
        {"name": "fits", "params": {"device_memory": "60KB"}},
        {"name": "too-small", "params": {"device_memory": "8KB"}}]}))  # JSON is YAML too
    monkeypatch.setenv("CELERITAS_PRODUCTION_MODELS", str(models))
    dag_run = fleet_dag.test()
    assert str(dag_run.state).endswith("failed")  # one model failed: the run says so
    states = {(ti.task_id, ti.map_index): ti.state for ti in dag_run.get_task_instances()}
    assert states[("production_models", -1)] == TaskInstanceState.SUCCESS
    for task in ("prepare_model", "validate_all", "publish", "close_run"):
        assert states[(f"model.{task}", 0)] == TaskInstanceState.SUCCESS, task
    assert states[("model.place", 1)] == TaskInstanceState.FAILED
    assert states[("model.close_run", 1)] == TaskInstanceState.SUCCESS
    _, runs = _mlflow_runs(uri)
    parents = {r.data.tags["celeritas.fleet_model"]: r for r in runs
               if r.data.tags.get("celeritas.role") == "parent"}
    assert parents["fits"].info.status == "FINISHED" and parents["too-small"].info.status == "FAILED"
    assert parents["fits"].data.tags["celeritas.job_id"] == f"{dag_run.run_id}/fits"
    assert parents["fits"].data.tags["celeritas.publish_decision"] == "promoted"
    from tasks import tracking

    (champion,) = tracking.champions("mlp")
    assert champion.run_id == parents["fits"].info.run_id


def test_whole_dag_against_a_real_mlflow_server_and_s3(dag, airflow_home, tmp_path, monkeypatch):
    from tasks import storage
    from tests.mlflow_server import mlflow_server
    from tests.s3_server import moto_s3_env, moto_s3_server

    with moto_s3_server() as endpoint, mlflow_server(tmp_path / "mlflow") as url:
        for key, value in moto_s3_env(endpoint).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        monkeypatch.setenv("CELERITAS_RUNS_S3_PREFIX", "s3://placements/jobs/")  # the allowed prefix
        storage.reset_clients()
        storage.s3_client().create_bucket(Bucket="placements")
        run_dir = "s3://placements/jobs/tiny"
        dag_run = dag.test(run_conf={**TINY, "placers": ["celeritas", "m-topo"], "run_dir": run_dir})
        assert str(dag_run.state).endswith("success")
        client, runs = _mlflow_runs(url)
        _check_run(client, runs, ["celeritas", "m-topo"])
        keys = storage.list_uris(run_dir)
        assert f"{run_dir}/graph.measured.json" in keys and f"{run_dir}/placements/celeritas.json" in keys
        assert storage.read_json(f"{run_dir}/publish.json")["decision"] == "promoted"
    storage.reset_clients()
