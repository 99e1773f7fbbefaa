"""Celeritas fleet: re-place every production model on a schedule, one mapped task group per model.

The production-models file (YAML or JSON, local or ``s3://``; format in ``tasks/fleet.py`` and
docs/pipeline.md) is named by the Airflow Variable ``celeritas_production_models`` or, without it,
the environment variable ``CELERITAS_PRODUCTION_MODELS``. Each listed model runs the whole
placement pipeline in its own task-group instance (job id ``RUN_ID/NAME``, its own MLflow parent
run and run directory); one model's failure never stops the others, and each model is promoted
only within its own configuration. Validation is one GPU task per model here (Airflow cannot map a
task inside a mapped task group); the ad-hoc ``celeritas_placement`` DAG maps it per placement.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import Variable, dag, task, task_group
from celeritas_steps import DEFAULT_ARGS, _call, close_run, placement_steps, prepare_model

#: When the fleet is re-placed (a cron expression or preset; ``CELERITAS_SCHEDULE``).
SCHEDULE = os.environ.get("CELERITAS_SCHEDULE", "@weekly")
VARIABLE = "celeritas_production_models"


@task(retries=0)
def production_models() -> list[dict[str, Any]]:
    """The models to re-place, read from the production-models file."""
    # lazy: the DAG processor parses this file often; the fleet's modules load when the task runs
    from tasks.fleet import load_fleet

    uri = Variable.get(VARIABLE, default=None) or os.environ.get("CELERITAS_PRODUCTION_MODELS", "")
    return _call(lambda: [model.to_json() for model in load_fleet(uri)])


@task_group(group_id="model")
def replace_model(entry: dict[str, Any]) -> None:
    """The placement pipeline for one production model (``entry``: its name and parameters)."""
    job = prepare_model(entry)
    decision, steps = placement_steps(job, mapped_validation=False)
    steps >> close_run(job, decision)


@dag(
    dag_id="celeritas_fleet",
    description="Re-place every production model on a schedule; promote only within each configuration",
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["celeritas", "placement", "ml-platform", "fleet"],
    doc_md=__doc__,
)
def celeritas_fleet() -> None:
    """Map the per-model task group over the production-models file."""
    replace_model.expand(entry=production_models())


celeritas_fleet()
