"""Celeritas placement pipeline: Standard Evaluation, placement, validation and publishing of one model.

One DAG run places one model: calibrate transfers, profile small batches, fit per-op costs,
re-measure the large batch, fuse, place with Celeritas and the chosen baselines, validate the
placements on the devices, and publish the fastest if it beats production (champion/challenger).
Every task calls a plain function from ``tasks/``; XCom carries only artifact URIs and small
summaries, the JSON form of the typed contracts in ``tasks/contracts.py``. ``prepare``, a setup
task, opens the MLflow parent run; ``close_run``, its teardown, ends it FINISHED or FAILED once every
step is done. GPU-node tasks carry ``queue="gpu"`` and the ``gpu`` pool, so a Celery or Kubernetes
deployment sends them to GPU workers. This file imports no TensorFlow, MLflow or boto3: the DAG
processor parses it often.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Asset, Param, dag, setup, task, teardown

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


def _call(step: Callable[[], Any]) -> Any:
    """Run ``step`` (a call into ``tasks/``, decoding and encoding its XCom); deterministic failures
    (bad input or XCom, a model that cannot fit) fail without retry, transient ones (storage,
    tracking server, runtime) raise normally and are retried."""
    from airflow.sdk.exceptions import AirflowFailException

    from celeritas_core.errors import CeleritasInputError

    try:
        return step()
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
    """Wire the steps. Each task body decodes its XCom inputs into the contracts of
    ``tasks/contracts.py`` (``from_xcom``), calls a step from ``tasks/`` and encodes its result
    (``to_xcom``). ``prepare`` (setup) opens the MLflow parent run and ``close_run`` (teardown)
    closes it, FINISHED or FAILED, once every step has finished or failed."""

    @setup
    @task(retries=0)
    def prepare(**context: Any) -> dict[str, Any]:
        """Validate the form's parameters, fix the run directory, open the MLflow parent run."""
        from tasks.prepare import prepare as run

        dag_run = context["dag_run"]
        tags = {"airflow.dag_id": dag_run.dag_id, "airflow.run_id": dag_run.run_id,
                "celeritas.trigger": str(getattr(dag_run, "run_type", "unknown"))}
        # reopen: clearing a task re-runs this setup, which then reuses the run's ended parent run
        return _call(lambda: run(context["params"], job_id=dag_run.run_id, tags=tags,
                                 reopen=True).job.to_xcom())

    @task(**GPU)
    def calibrate_comm(job: dict[str, Any]) -> dict[str, Any]:
        """Fit the transfer model between two devices of the GPU node."""
        from tasks.calibrate_comm import calibrate_comm as run
        from tasks.contracts import Job

        return _call(lambda: run(Job.from_xcom(job)).to_xcom())

    @task(**GPU)
    def profile_small_batches(job: dict[str, Any]) -> dict[str, Any]:
        """Standard Evaluation 1: trace small batches on one device."""
        from tasks.contracts import Job
        from tasks.profile_small_batches import profile_small_batches as run

        return _call(lambda: run(Job.from_xcom(job)).to_xcom())

    @task
    def fit_regression(job: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
        """Per-op linear fits of time and memory on batch size."""
        from tasks.contracts import Job, ProfileResult
        from tasks.fit_regression import fit_regression as run

        return _call(lambda: run(Job.from_xcom(job), ProfileResult.from_xcom(profile)).to_xcom())

    @task(**GPU)
    def remeasure_large_batch(job: dict[str, Any], fits: dict[str, Any],
                              cluster: dict[str, Any]) -> dict[str, Any]:
        """Standard Evaluation 2: sequential placement of the large batch, re-measured on the devices."""
        from tasks.contracts import CalibrationResult, FitResult, Job
        from tasks.remeasure_large_batch import remeasure_large_batch as run

        return _call(lambda: run(Job.from_xcom(job), FitResult.from_xcom(fits),
                                 CalibrationResult.from_xcom(cluster)).to_xcom())

    @task
    def fuse(job: dict[str, Any], measured: dict[str, Any], cluster: dict[str, Any]) -> dict[str, Any]:
        """Optimal Operation Fusion of the measured graph (coarse graph and CCR figures)."""
        from tasks.contracts import CalibrationResult, Job, RemeasureResult
        from tasks.fuse import fuse as run

        return _call(lambda: run(Job.from_xcom(job), RemeasureResult.from_xcom(measured),
                                 CalibrationResult.from_xcom(cluster)).to_xcom())

    @task
    def place(job: dict[str, Any], measured: dict[str, Any], cluster: dict[str, Any],
              fusion: dict[str, Any]) -> dict[str, Any]:
        """Celeritas and the chosen baselines; one MLflow child run per placer (after ``fuse``, whose
        figures it does not read)."""
        from tasks.contracts import CalibrationResult, Job, RemeasureResult
        from tasks.place import place as run

        return _call(lambda: run(Job.from_xcom(job), RemeasureResult.from_xcom(measured),
                                 CalibrationResult.from_xcom(cluster)).to_xcom())

    @task(**GPU)
    def validate(job: dict[str, Any], placed: dict[str, Any]) -> dict[str, Any]:
        """Run each placement: warm-up, then timed steps."""
        from tasks.contracts import Job, PlaceResult
        from tasks.validate import validate as run

        return _call(lambda: run(Job.from_xcom(job), PlaceResult.from_xcom(placed)).to_xcom())

    @task
    def publish(job: dict[str, Any], validation: dict[str, Any]) -> dict[str, Any]:
        """Champion/challenger: promote only if faster than production by the threshold."""
        from tasks.contracts import Job, ValidateResult
        from tasks.publish import publish as run

        return _call(lambda: run(Job.from_xcom(job), ValidateResult.from_xcom(validation)).to_xcom())

    @task.short_circuit
    def promoted(decision: dict[str, Any]) -> bool:
        """Continue to the Asset only when the new placement was promoted."""
        from tasks.contracts import PublishResult

        return _call(lambda: PublishResult.from_xcom(decision).promoted)

    @task(outlets=[PUBLISHED_PLACEMENT])
    def announce(decision: dict[str, Any], *, outlet_events: Any = None) -> str | None:
        """Emit the published-placement Asset event with the model and placement URI."""
        from tasks.contracts import PublishResult

        published = _call(lambda: PublishResult.from_xcom(decision))
        outlet_events[PUBLISHED_PLACEMENT].extra = {
            "model": published.model, "placement_uri": published.placement_uri,
            "step_time_s": published.step_time_s, "placer": published.placer,
        }
        return published.placement_uri

    @teardown(on_failure_fail_dagrun=True)
    @task
    def close_run(job: dict[str, Any], decision: dict[str, Any] | None) -> str:
        """End the MLflow parent run once every step is done: FINISHED when ``publish`` decided,
        FAILED when a step failed for good (then ``publish`` left no decision: ``None``)."""
        from tasks.contracts import Job, PublishResult
        from tasks.prepare import close_run as run

        return _call(lambda: run(Job.from_xcom(job),
                                 None if decision is None else PublishResult.from_xcom(decision)))

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
    [cluster, profile, fits, measured, fusion, placed, validation] >> close_run(job, decision)


celeritas_placement()
