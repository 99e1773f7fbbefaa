"""A real distributed run: the placement DAG triggered through the REST API on Airflow with the
CeleryExecutor (PostgreSQL, Redis, two workers), every GPU-node task on the gpu worker, and the
run in MLflow."""

from __future__ import annotations

from tests.integration.stack import Stack

DAG = "celeritas_placement"
TINY = {
    "model": "mlp", "model_knobs": {"features": 16, "hidden": 32, "layers": 2, "classes": 10},
    "batch_size": 16, "profile_batch_sizes": [2, 4], "num_devices": 2, "device_memory": "60KB",
    "calibrate_comm": False, "placers": ["celeritas", "m-topo", "single"],
    "validation_steps": 20, "warmup_steps": 2,
}
GPU_TASKS = {"calibrate_comm", "profile_small_batches", "remeasure_large_batch", "validate"}
RUN_TIMEOUT_S = 900


def task_instances(stack: Stack, run_id: str) -> list[dict]:
    status, answer = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=100")
    assert status == 200, answer
    return list(answer["task_instances"])


def test_the_placement_dag_runs_on_celery_with_gpu_tasks_on_the_gpu_worker(stack: Stack) -> None:
    stack.wait_for_dag(DAG)
    status, run = stack.call("POST", f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": TINY})
    assert status == 200, run
    state = stack.wait_for_run(DAG, run["dag_run_id"], RUN_TIMEOUT_S)
    instances = task_instances(stack, run["dag_run_id"])
    failed = {ti["task_id"]: ti["state"] for ti in instances if ti["state"] not in ("success", "skipped")}
    assert state == "success", (failed, stack.log_tail("worker-gpu"), stack.log_tail("worker-default"))
    ran = [ti for ti in instances if ti["state"] == "success"]
    assert {ti["task_id"] for ti in ran} >= GPU_TASKS | {"prepare", "place", "publish", "close_run"}
    for ti in ran:
        on_gpu = ti["task_id"] in GPU_TASKS
        assert ti["queue"] == ("gpu" if on_gpu else "default"), ti["task_id"]
        worker = "gpu-worker" if on_gpu else "default-worker"
        assert ti["hostname"] == worker, (ti["task_id"], ti["hostname"])
        if on_gpu:
            assert ti["pool"] == "gpu", ti["task_id"]
    assert sum(ti["task_id"] == "validate" for ti in ran) == len(TINY["placers"])  # mapped, one per placer
    _check_mlflow(stack, run["dag_run_id"])


def _check_mlflow(stack: Stack, run_id: str) -> None:
    """The MLflow server holds the run: a FINISHED parent tagged with the DAG run, one child per placer."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=stack.mlflow_url)
    experiment = client.get_experiment_by_name("celeritas-placement")
    assert experiment is not None
    (parent,) = client.search_runs([experiment.experiment_id], f"tags.`airflow.run_id` = '{run_id}'")
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["celeritas.publish_decision"] == "promoted"
    children = client.search_runs([experiment.experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert sorted(c.data.tags["celeritas.placer"] for c in children) == sorted(TINY["placers"])
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"gantt.png", "memory.png"} <= artifacts  # served by the MLflow server, at the top


def test_a_rest_trigger_with_a_bad_parameter_gets_one_sentence_and_starts_no_run(stack: Stack) -> None:
    stack.wait_for_dag(DAG)
    before = len(stack.runs(DAG))
    status, answer = stack.call("POST", f"/api/v2/dags/{DAG}/dagRuns",
                                {"logical_date": None, "conf": {**TINY, "batch_size": 0}})
    assert status == 400, answer
    assert answer["detail"] == "parameter 'batch_size': Batch size must be at least 1, not 0"
    status, answer = stack.call("POST", f"/api/v2/dags/{DAG}/dagRuns",
                                {"logical_date": None, "conf": {**TINY, "placers": ["fastest"]}})
    assert status == 400 and "\"fastest\" is not one of celeritas" in answer["detail"], answer
    assert len(stack.runs(DAG)) == before
