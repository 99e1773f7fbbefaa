"""Celeritas placement pipeline: Standard Evaluation, placement, validation and publishing of one model.

One DAG run places one model, triggered from the UI's form (or the REST API): calibrate
transfers, profile small batches, fit per-op costs, re-measure the large batch, fuse, place with
Celeritas and the chosen baselines, validate every placement that fits against the configuration's
champion (one mapped GPU task per placement, interleaved in blocks), and publish the fastest only
if it beats the champion with confidence and by the threshold (MLflow Model Registry, alias
``champion``). ``prepare``, a setup task, opens the MLflow parent run; ``close_run``, its teardown,
ends it FINISHED or FAILED once every step is done. It has no schedule: the scheduled re-placement
of production models is the ``celeritas_fleet`` DAG. The tasks live in ``celeritas_steps.py``; this
file imports no TensorFlow, MLflow or boto3: the DAG processor parses it often.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import Param, dag
from celeritas_steps import DEFAULT_ARGS, close_run, placement_steps, prepare

from tasks.params import PLACEMENT_DAG_ID, form_defaults, form_schema


@dag(
    dag_id=PLACEMENT_DAG_ID,
    description="Re-place a model across GPUs with Celeritas; validate against the champion; "
                "promote if faster",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=int(os.environ.get("CELERITAS_MAX_ACTIVE_RUNS", "4")),
    default_args=DEFAULT_ARGS,
    tags=["celeritas", "placement", "ml-platform"],
    params={name: Param(value, **form_schema(name)) for name, value in form_defaults().items()},
    doc_md=__doc__,
)
def celeritas_placement() -> None:
    """Wire the steps: ``prepare`` (setup) → … → ``publish``; ``close_run`` (teardown) after all."""
    job = prepare()
    decision, steps = placement_steps(job, mapped_validation=True)
    steps >> close_run(job, decision)


celeritas_placement()
