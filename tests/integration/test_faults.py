"""Faults on the real deployment (tests/integration/stack.py): a worker killed with SIGKILL in the
middle of ``validate`` and of ``publish``, the MLflow server gone for a minute and for good, the
object store resetting connections and answering 503, a full disk in the run directory, and a
failed run cleared and resumed. Each run places a configuration of its own (the model's hidden
width differs), so it starts without a champion and, when it succeeds, promotes exactly one.

After each fault the test checks what a platform team relies on: the run recovers (or fails with
one sentence, leaving production as it was); exactly one champion per configuration and no version
of a failed run; the published ``placement.json`` is byte for byte the file ``validate`` timed
(and its SHA-256 the one the registry records); no MLflow run of the job is left RUNNING; no metric
point is logged twice; no registry lock is left behind; every JSON document in the run directory
parses and no staged write is left. The figures (time to recover, attempts, the registry's and
MLflow's state) go to ``build/integration/fault-figures.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from tests.integration.stack import S3_BUCKET, S3_RUNS_PREFIX, Stack

DAG = "celeritas_placement"
PLACERS = ["celeritas", "m-topo", "single"]
RUN_TIMEOUT_S = 900
FIGURES = Path(__file__).resolve().parents[2] / "build" / "integration" / "fault-figures.json"


def conf(hidden: int, **extra: Any) -> dict[str, Any]:
    """The tiny job of test_distributed_run, with a hidden width (so a configuration) of its own."""
    return {"model": "mlp", "model_knobs": {"features": 16, "hidden": hidden, "layers": 2, "classes": 10},
            "batch_size": 16, "profile_batch_sizes": [2, 4], "num_devices": 2, "device_memory": "60KB",
            "calibrate_comm": False, "placers": PLACERS, "validation_steps": 20, "warmup_steps": 2, **extra}


# ------------------------------------------------------------------------------------ Airflow
def trigger(stack: Stack, job: dict[str, Any]) -> str:
    stack.wait_for_dag(DAG)
    status, run = stack.call("POST", f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": job})
    assert status == 200, run
    return str(run["dag_run_id"])


def instances(stack: Stack, run_id: str) -> list[dict[str, Any]]:
    status, answer = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=100")
    assert status == 200, answer
    return list(answer["task_instances"])


def tries(stack: Stack, run_id: str) -> dict[str, int]:
    """Task id (``validate[i]`` for a mapped one) → its try number."""
    return {_name(ti): int(ti["try_number"]) for ti in instances(stack, run_id)}


def _name(ti: dict[str, Any]) -> str:
    return ti["task_id"] if ti.get("map_index", -1) < 0 else f"{ti['task_id']}[{ti['map_index']}]"


def wait_until(what: str, ready: Callable[[], Any], timeout_s: float = RUN_TIMEOUT_S,
               every_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := ready()):
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        time.sleep(every_s)
    return found


def running(stack: Stack, run_id: str, task_id: str) -> dict[str, Any] | None:
    """The task instance of ``task_id`` (any map index) that is running, if one is; fails the test
    when the run has already ended (the moment for the fault has passed)."""
    found = [ti for ti in instances(stack, run_id) if ti["task_id"] == task_id and ti["state"] == "running"]
    if found:
        return found[0]
    _, run = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}")
    assert run["state"] not in ("success", "failed"), f"run {run_id} ended before {task_id} ran"
    return None


def clear(stack: Stack, run_id: str, task_id: str) -> None:
    """Clear ``task_id`` and everything downstream in the run, as the UI's Clear does (its setup and
    teardown come along)."""
    status, answer = stack.call("POST", f"/api/v2/dags/{DAG}/clearTaskInstances", {
        "dry_run": False, "dag_run_id": run_id, "task_ids": [task_id], "include_downstream": True,
        "only_failed": False, "reset_dag_runs": True})
    assert status == 200, answer


def task_log(stack: Stack, run_id: str, ti: dict[str, Any], attempt: int | None = None) -> str:
    """The text of a task instance's log file (its last attempt by default)."""
    folder = Path(stack.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={DAG}" / f"run_id={run_id}" / \
        f"task_id={ti['task_id']}"
    if ti.get("map_index", -1) >= 0:
        folder /= f"map_index={ti['map_index']}"
    path = folder / f"attempt={attempt or ti['try_number']}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def finish(stack: Stack, run_id: str) -> str:
    return stack.wait_for_run(DAG, run_id, RUN_TIMEOUT_S)


# ------------------------------------------------------------------------------------ MLflow
def client(stack: Stack) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=stack.mlflow_url)


def parent_run(stack: Stack, run_id: str) -> Any:
    mlflow = client(stack)
    experiment = mlflow.get_experiment_by_name("celeritas-placement")
    (parent,) = mlflow.search_runs([experiment.experiment_id], f"tags.`airflow.run_id` = '{run_id}'")
    return parent


def job_runs(stack: Stack, parent: Any) -> list[Any]:
    """The job's parent run and its children."""
    mlflow = client(stack)
    children = mlflow.search_runs([parent.info.experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    return [mlflow.get_run(parent.info.run_id), *children]


def versions(stack: Stack, registered_model: str) -> list[Any]:
    return list(client(stack).search_model_versions(f"name = '{registered_model}'"))


def champions(stack: Stack) -> dict[str, str]:
    """Every registered model (but the locks) → the version its ``champion`` alias points to."""
    from mlflow.exceptions import MlflowException

    mlflow, out = client(stack), {}
    for model in mlflow.search_registered_models(max_results=1000):
        if model.name.startswith("celeritas-lock-"):
            continue
        try:
            out[model.name] = str(mlflow.get_model_version_by_alias(model.name, "champion").version)
        except MlflowException:
            out[model.name] = "none"
    return out


def locks(stack: Stack) -> list[str]:
    return [m.name for m in client(stack).search_registered_models(max_results=1000)
            if m.name.startswith("celeritas-lock-")]


def duplicated_points(stack: Stack, runs: list[Any]) -> list[str]:
    """``run/metric@step`` of every metric logged more than once at one step."""
    mlflow, out = client(stack), []
    for run in runs:
        for key in run.data.metrics:
            steps = [m.step for m in mlflow.get_metric_history(run.info.run_id, key)]
            out += [f"{run.info.run_name}/{key}@{s}" for s in set(steps) if steps.count(s) > 1]
    return out


# ------------------------------------------------------------------------------------ run directories
def read_artifact(stack: Stack, uri: str) -> bytes:
    if uri.startswith("s3://"):
        bucket, _, key = uri[5:].partition("/")
        return stack.s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
    return Path(uri).read_bytes()


def run_dir_files(stack: Stack, run_dir: str) -> list[str]:
    if run_dir.startswith("s3://"):
        bucket, _, prefix = run_dir[5:].partition("/")
        listing = stack.s3_client().get_paginator("list_objects_v2")
        pages = listing.paginate(Bucket=bucket, Prefix=prefix + "/")
        return [f"s3://{bucket}/{o['Key']}" for page in pages for o in page.get("Contents", [])]
    return [str(p) for p in Path(run_dir).rglob("*") if p.is_file()]


def check_run_dir(stack: Stack, run_dir: str) -> int:
    """Every JSON document in the run directory parses and no staged write is left; returns how many."""
    files = run_dir_files(stack, run_dir)
    staged = [f for f in files if Path(f).name.startswith(".") and f.endswith((".tmp", ".bak"))]
    assert staged == [], f"staged writes left in {run_dir}: {staged}"
    documents = [f for f in files if f.endswith(".json")]
    for uri in documents:
        json.loads(read_artifact(stack, uri))  # a truncated document fails here
    assert documents, f"no JSON document in {run_dir}"
    return len(documents)


# ------------------------------------------------------------------------------------ the checks
def check_published(stack: Stack, run_id: str) -> dict[str, Any]:
    """After a run that succeeded: one champion version, made by this run, whose ``placement.json``
    is byte for byte the file validate timed; every run of the job FINISHED; no metric point twice;
    no lock left; the run directory whole. Returns the figures for the note."""
    parent = parent_run(stack, run_id)
    tags = parent.data.tags
    assert tags["celeritas.publish_decision"] == "promoted", tags.get("celeritas.publish_reason")
    registered = tags["celeritas.registered_model"]
    (version,) = versions(stack, registered)
    assert version.run_id == parent.info.run_id
    assert champions(stack)[registered] == str(version.version)
    import mlflow.artifacts

    with tempfile.TemporaryDirectory() as tmp:
        local = mlflow.artifacts.download_artifacts(artifact_uri=f"{version.source}/placement.json",
                                                    dst_path=tmp, tracking_uri=stack.mlflow_url)
        published = Path(local).read_bytes()
    placer = version.tags["celeritas.placer"]
    run_dir = tags["celeritas.run_dir"]
    timed_uri = json.loads(read_artifact(stack, f"{run_dir}/validation/{placer}.json"))["placement"]
    assert published == read_artifact(stack, timed_uri), "the published placement is not the one validated"
    assert version.tags["celeritas.placement_sha256"] == hashlib.sha256(published).hexdigest()
    runs = job_runs(stack, parent)
    unfinished = {r.info.run_name: r.info.status for r in runs if r.info.status != "FINISHED"}
    assert unfinished == {}, unfinished
    assert duplicated_points(stack, runs) == []
    assert locks(stack) == []
    documents = check_run_dir(stack, run_dir)
    return {"registered_model": registered, "champion_version": str(version.version), "versions": 1,
            "placer": placer, "mlflow_runs": {r.info.run_name: r.info.status for r in runs},
            "json_documents_checked": documents}


def record(name: str, **figures: Any) -> None:
    """Add the figures of fault ``name`` to :data:`FIGURES` (and the test's output)."""
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    known = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    known[name] = figures
    FIGURES.write_text(json.dumps(known, indent=1, sort_keys=True))
    print(name, json.dumps(figures, indent=1, sort_keys=True))


# ------------------------------------------------------------------------------------ the tests
@pytest.mark.parametrize(("task_id", "queue", "hidden"),
                         [("validate", "gpu", 33), ("publish", "default", 34)])
def test_a_worker_killed_mid_task_is_retried_and_publishes_once(stack: Stack, task_id: str, queue: str,
                                                                hidden: int) -> None:
    run_id = trigger(stack, conf(hidden))
    ti = wait_until(f"{task_id} running", lambda: running(stack, run_id, task_id), every_s=0.5)
    if task_id == "publish":  # kill as the promotion starts: the registry holds its lock or version
        registered = parent_run(stack, run_id).data.tags["celeritas.registered_model"]
        wait_until("publish in the registry", lambda: locks(stack) or versions(stack, registered),
                   timeout_s=120, every_s=0.03)
    else:  # kill while it measures
        wait_until("validate measuring", lambda: "validate: started" in task_log(stack, run_id, ti), 120, 0.5)
        time.sleep(2)
    registered = parent_run(stack, run_id).data.tags["celeritas.registered_model"]
    half_published = {"locks": len(locks(stack)), "versions": len(versions(stack, registered))}
    killed = time.monotonic()
    stack.kill(f"worker-{queue}")
    stack.start_worker(queue)
    assert finish(stack, run_id) == "success", stack.log_tail(f"worker-{queue}")
    recovered_s = time.monotonic() - killed
    attempts = tries(stack, run_id)
    assert attempts[_name(ti)] == 2, attempts  # the killed attempt, then Airflow's retry
    figures = check_published(stack, run_id)
    if task_id == "validate":  # the retry's measurements replaced the killed attempt's, unmixed
        (done,) = [t for t in instances(stack, run_id) if _name(t) == _name(ti)]
        placer = done["rendered_map_index"]  # the placer's name, rendered once the task ran
        (child,) = [r for r in job_runs(stack, parent_run(stack, run_id))
                    if r.data.tags.get("celeritas.placer") == placer]
        timed = json.loads(read_artifact(stack, child.data.tags["celeritas.validation_uri"]))["step_seconds"]
        history = client(stack).get_metric_history(child.info.run_id, "validation_step_time_ms")
        assert sorted((m.step, m.value) for m in history) == \
            [(i, pytest.approx(t * 1e3)) for i, t in enumerate(timed)]
    record(f"worker killed during {task_id}", recovered_s=round(recovered_s, 1), attempts=attempts,
           at_kill=half_published, **figures)


def test_the_tracking_server_gone_for_a_minute_is_waited_for(stack: Stack) -> None:
    run_id = trigger(stack, conf(35))
    wait_until("place running", lambda: running(stack, run_id, "place"), every_s=0.5)
    port = int(stack.mlflow_url.rsplit(":", 1)[1])
    stack.kill("mlflow")
    down = time.monotonic()
    time.sleep(60)
    stack.start_mlflow(stack.pg_port, port)
    back = time.monotonic()
    assert finish(stack, run_id) == "success", stack.log_tail("worker-default")
    attempts = tries(stack, run_id)
    assert set(attempts.values()) == {1}, attempts  # waited within the task: no retry needed
    waited = [name for name, ti in ((_name(ti), ti) for ti in instances(stack, run_id))
              if "trying again in" in task_log(stack, run_id, ti)]
    assert waited, "no task waited for the tracking server"
    figures = check_published(stack, run_id)
    record("tracking server down for 60 s", down_s=round(back - down, 1), waited_tasks=waited,
           run_done_s_after_restart=round(time.monotonic() - back, 1), attempts=attempts, **figures)


def test_the_object_store_failing_is_retried_and_publishes_whole_objects(stack: Stack) -> None:
    assert stack.s3_proxy is not None
    run_dir = f"{S3_RUNS_PREFIX}/faults-{uuid.uuid4().hex[:8]}"
    run_id = trigger(stack, conf(36, run_dir=run_dir))
    wait_until("place running", lambda: running(stack, run_id, "place"), every_s=0.5)
    started = time.monotonic()
    stack.s3_proxy.fail("error", 6)
    time.sleep(6)
    stack.s3_proxy.fail("reset", 6)
    time.sleep(6)
    assert finish(stack, run_id) == "success", stack.log_tail("worker-default")
    attempts = tries(stack, run_id)
    assert attempts["place"] >= 2, attempts  # the faults failed an attempt; a retry finished it
    assert sum(stack.s3_proxy.injected.values()) > 0
    assert read_artifact(stack, f"{run_dir}/job.json")  # the run directory is on the S3 endpoint
    figures = check_published(stack, run_id)
    record("object store failing for 12 s", faults_injected=dict(stack.s3_proxy.injected),
           recovered_s=round(time.monotonic() - started, 1), attempts=attempts, bucket=S3_BUCKET, **figures)


@contextmanager
def small_disk(folder: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``folder`` (as root, or through sudo), unmounted after."""
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([*sudo, "mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs",
                           str(folder)], capture_output=True, text=True)
    assert done.returncode == 0, \
        f"cannot mount a tmpfs (needs root or sudo, as make test-integration does): {done.stderr}"
    try:
        yield folder
    finally:
        subprocess.run([*sudo, "umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path, leave_bytes: int) -> Path:
    """A file that takes all of ``folder``'s file system but ``leave_bytes``."""
    stat = os.statvfs(folder)
    filler = folder / "filler"
    with open(filler, "wb") as out:
        out.truncate(0)
        out.write(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave_bytes))
    return filler


def test_a_full_disk_fails_the_step_cleanly_and_a_cleared_run_resumes(stack: Stack) -> None:
    before = champions(stack)
    with small_disk(stack.folder / "home" / "build" / "runs" / "small-disk") as disk:
        filler = fill(disk, 48 * 1024)
        run_dir = str(disk / "run")
        job = conf(37, run_dir=run_dir)
        run_id = trigger(stack, job)
        assert finish(stack, run_id) == "failed"
        failed = [ti for ti in instances(stack, run_id)
                  if ti["state"] == "failed" and ti["task_id"] != "close_run"]
        assert len(failed) == 1, [(_name(ti), ti["state"]) for ti in instances(stack, run_id)]
        (ti,) = failed
        log = task_log(stack, run_id, ti)
        sentence = "No space left on device; nothing was written: free space on its file system, then clear"
        assert sentence in log, log[-3000:]
        documents = check_run_dir(stack, run_dir)
        assert champions(stack) == before  # production exactly as it was
        parent = parent_run(stack, run_id)
        assert parent.info.status == "FAILED" and parent.data.tags["celeritas.publish_decision"] == "failed"
        done_before = tries(stack, run_id)
        filler.unlink()
        cleared = time.monotonic()
        clear(stack, run_id, ti["task_id"])
        assert finish(stack, run_id) == "success"
        resumed_s = time.monotonic() - cleared
        after = tries(stack, run_id)
        upstream = steps_before(ti["task_id"])
        assert {name: after[name] for name in upstream} == {name: done_before[name] for name in upstream}
        assert parent_run(stack, run_id).info.run_id == parent.info.run_id  # the same job, resumed
        figures = check_published(stack, run_id)
    record("full disk", failed_task=ti["task_id"], attempts_before_clear=done_before, attempts_after=after,
           json_documents_after_failure=documents, resumed_s=round(resumed_s, 1), **figures)


def steps_before(task_id: str) -> list[str]:
    """The (unmapped) steps before ``task_id`` in the pipeline, ``prepare`` left out (clearing a task
    runs its setup again): a clear of ``task_id`` must not run them again."""
    from tasks.steps import STEPS

    order = [step.name for step in STEPS if not step.mapped]
    return order[:order.index(task_id)] if task_id in order else order


def test_the_tracking_server_down_for_good_fails_in_one_sentence_then_a_clear_resumes(stack: Stack) -> None:
    before = champions(stack)
    stack.kill("worker-default")
    stack.start_worker("default", CELERITAS_TRACKING_WAIT_S="10")  # fail within seconds, not two minutes
    port = int(stack.mlflow_url.rsplit(":", 1)[1])
    try:
        run_id = trigger(stack, conf(38))
        wait_until("publish running", lambda: running(stack, run_id, "publish"), every_s=0.2)
        stack.kill("mlflow")
        down = time.monotonic()
        assert finish(stack, run_id) == "failed"
        failed_s = time.monotonic() - down
        (ti,) = [ti for ti in instances(stack, run_id) if ti["task_id"] == "publish"]
        assert ti["state"] == "failed" and ti["try_number"] == 3, ti  # the task and its 2 retries
        log = task_log(stack, run_id, ti)
        sentence = f"MLflow tracking server {stack.mlflow_url} unreachable: "
        assert sentence in log and "(for 10 s)" in log, log[-3000:]
        stack.start_mlflow(stack.pg_port, port)
        assert champions(stack) == before  # production exactly as it was
        parent = parent_run(stack, run_id)
        assert versions(stack, parent.data.tags["celeritas.registered_model"]) == []
        done_before = tries(stack, run_id)
        cleared = time.monotonic()
        clear(stack, run_id, "publish")
        assert finish(stack, run_id) == "success"
        after = tries(stack, run_id)
        upstream = steps_before("publish")
        assert {name: after[name] for name in upstream} == {name: done_before[name] for name in upstream}
        assert parent_run(stack, run_id).info.run_id == parent.info.run_id
        figures = check_published(stack, run_id)
        record("tracking server down for good, then cleared", failed_after_s=round(failed_s, 1),
               publish_attempts=ti["try_number"], resumed_s=round(time.monotonic() - cleared, 1),
               attempts_after=after, **figures)
    finally:
        with suppress(Exception):
            if stack.procs["mlflow"].poll() is not None:
                stack.start_mlflow(stack.pg_port, port)
        stack.kill("worker-default")
        stack.start_worker("default")
