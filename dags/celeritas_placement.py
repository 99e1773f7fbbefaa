"""Celeritas placement pipeline: Standard Evaluation, placement, validation and publishing of one model.

One DAG run places one model: calibrate transfers, profile small batches, fit per-op costs,
re-measure the large batch, fuse, place with Celeritas and the chosen baselines, validate the
placements on the devices, and publish the fastest if it beats production (champion/challenger).
Every task calls a plain function from ``tasks/``; XCom carries only artifact URIs and small
summaries. GPU-node tasks carry ``queue="gpu"`` and the ``gpu`` pool, so a Celery or Kubernetes
deployment sends them to GPU workers. This file imports no TensorFlow, MLflow or boto3: the DAG
processor parses it often.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Asset, Param, dag, task

from tasks.params import FIELDS

#: Published placements; downstream training DAGs can use ``schedule=[PUBLISHED_PLACEMENT]``.
PUBLISHED_PLACEMENT = Asset(name="celeritas_published_placement", uri="celeritas://placements/published")

GPU = {"queue": os.environ.get("CELERITAS_GPU_QUEUE", "gpu"),
       "pool": os.environ.get("CELERITAS_GPU_POOL", "gpu")}
SCHEDULE = os.environ.get("CELERITAS_SCHEDULE", "@weekly")

DEFAULT_ARGS = {
    "owner": "ml-platform",
    "retries": int(os.environ.get("CELERITAS_RETRIES", "2")),
    "retry_delay": timedelta(seconds=30),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
}


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a step; deterministic failures (bad input, a model that cannot fit) fail without retry,
    transient ones (storage, tracking server, runtime) raise normally and are retried."""
    from airflow.sdk.exceptions import AirflowFailException

    from celeritas_core.errors import CeleritasInputError

    try:
        return fn(*args, **kwargs)
    except CeleritasInputError as exc:
        raise AirflowFailException(str(exc)) from exc


@dag(
    dag_id="celeritas_placement",
    description="Re-place a model across GPUs with Celeritas; validate; publish if faster",
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["celeritas", "placement", "ml-platform"],
    params={name: Param(field["default"], **{k: v for k, v in field.items() if k != "default"})
            for name, field in FIELDS.items()},
    doc_md=__doc__,
)
def celeritas_placement() -> None:
    """Wire the steps; each task body is a call into ``tasks/``."""

    @task(retries=0)
    def prepare(**context: Any) -> dict[str, Any]:
        """Validate the form's parameters, fix the run directory, open the MLflow parent run."""
        from tasks.prepare import prepare as run

        dag_run = context["dag_run"]
        out = _call(run, context["params"], job_id=dag_run.run_id,
                    tags={"airflow.dag_id": dag_run.dag_id, "airflow.run_id": dag_run.run_id,
                          "celeritas.trigger": str(getattr(dag_run, "run_type", "unknown"))})
        return {"params": out["params"], "run_dir": out["run_dir"], "parent_run_id": out["parent_run_id"]}

    @task(**GPU)
    def calibrate_comm(job: dict[str, Any]) -> dict[str, Any]:
        """Fit the transfer model between two devices of the GPU node."""
        from tasks.calibrate_comm import calibrate_comm as run

        return _call(run, job["params"], job["run_dir"], job["parent_run_id"])

    @task(**GPU)
    def profile_small_batches(job: dict[str, Any]) -> dict[str, Any]:
        """Standard Evaluation 1: trace small batches on one device."""
        from tasks.profile_small_batches import profile_small_batches as run

        return _call(run, job["params"], job["run_dir"])

    @task
    def fit_regression(job: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
        """Per-op linear fits of time and memory on batch size."""
        from tasks.fit_regression import fit_regression as run

        return _call(run, job["params"], job["run_dir"], profile["profile_uri"], job["parent_run_id"])

    @task(**GPU)
    def remeasure_large_batch(job: dict[str, Any], fits: dict[str, Any],
                              cluster: dict[str, Any]) -> dict[str, Any]:
        """Standard Evaluation 2: sequential placement of the large batch, re-measured on the devices."""
        from tasks.remeasure_large_batch import remeasure_large_batch as run

        return _call(run, job["params"], job["run_dir"], fits["fits_uri"], cluster["cluster_uri"],
                     job["parent_run_id"])

    @task
    def fuse(job: dict[str, Any], measured: dict[str, Any], cluster: dict[str, Any]) -> dict[str, Any]:
        """Optimal Operation Fusion of the measured graph (coarse graph and CCR figures)."""
        from tasks.fuse import fuse as run

        return _call(run, job["params"], job["run_dir"], measured["measured_graph_uri"],
                     cluster["cluster_uri"], job["parent_run_id"])

    @task
    def place(job: dict[str, Any], measured: dict[str, Any], cluster: dict[str, Any],
              fusion: dict[str, Any]) -> dict[str, Any]:
        """Celeritas and the chosen baselines; one MLflow child run per placer."""
        from tasks.place import place as run

        out = _call(run, job["params"], job["run_dir"], measured["measured_graph_uri"],
                    cluster["cluster_uri"], job["parent_run_id"])
        return {k: out[k] for k in ("placements", "best_simulated", "oom", "compare_uri")}

    @task(**GPU)
    def validate(job: dict[str, Any], placed: dict[str, Any]) -> dict[str, Any]:
        """Run each placement: warm-up, then timed steps."""
        from tasks.validate import validate as run

        return _call(run, job["params"], job["run_dir"], placed["placements"], job["parent_run_id"],
                     oom=placed["oom"])

    @task
    def publish(job: dict[str, Any], validation: dict[str, Any]) -> dict[str, Any]:
        """Champion/challenger: promote only if faster than production by the threshold."""
        from tasks import tracking
        from tasks.publish import publish as run

        out = _call(run, job["params"], job["run_dir"], validation, job["parent_run_id"])
        tracking.end_run(job["parent_run_id"], "FINISHED")
        return out

    @task.short_circuit
    def promoted(decision: dict[str, Any]) -> bool:
        """Continue to the Asset only when the new placement was promoted."""
        return decision["decision"] == "promoted"

    @task(outlets=[PUBLISHED_PLACEMENT])
    def announce(decision: dict[str, Any], *, outlet_events: Any = None) -> str:
        """Emit the published-placement Asset event with the model and placement URI."""
        outlet_events[PUBLISHED_PLACEMENT].extra = {
            "model": decision["model"], "placement_uri": decision["placement_uri"],
            "step_time_s": decision["step_time_s"], "placer": decision["placer"],
        }
        return decision["placement_uri"]

    @task(trigger_rule="one_failed", retries=0)
    def close_failed_run(job: dict[str, Any]) -> None:
        """When a step has failed for good, end the MLflow parent run as FAILED (not left RUNNING)."""
        from tasks import tracking

        tracking.set_tags(job["parent_run_id"], {"celeritas.publish_decision": "failed"})
        tracking.end_run(job["parent_run_id"], "FAILED")

    job = prepare()
    cluster = calibrate_comm(job)
    profile = profile_small_batches(job)
    fits = fit_regression(job, profile)
    measured = remeasure_large_batch(job, fits, cluster)
    fusion = fuse(job, measured, cluster)
    placed = place(job, measured, cluster, fusion)
    validation = validate(job, placed)
    decision = publish(job, validation)
    promoted(decision) >> announce(decision)
    [cluster, profile, fits, measured, fusion, placed, validation, decision] >> close_failed_run(job)


celeritas_placement()
