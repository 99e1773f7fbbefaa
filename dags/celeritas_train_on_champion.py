"""Celeritas downstream training (example): train with each newly published champion placement.

Scheduled on the Asset ``celeritas_published_placement`` (Airflow's data-aware scheduling), which
the placement DAGs' ``announce`` task emits when a placement is promoted: a run starts after each
promotion. ``published_placements`` reads the triggering events' extra (model, configuration key,
model version, placer, placement URI; the latest event of each configuration when several
arrived together), then one mapped ``train`` task per configuration, on the ``gpu`` queue and
pool like the pipeline's GPU tasks, downloads that version's published placement and
configuration from MLflow, builds the model it was placed for (under the deployment's policy),
pins each op to its device in the placement's recorded order and trains ``steps`` steps on
synthetic batches (``tasks/training.py``, ``celeritas_tf/training.py``). The trained weights
(``model.weights.h5``, Keras's format) and ``training.json`` (the losses) go under
``<runs root>/training/<registered model>/v<version>/<run id>/``. Triggered by hand (no event),
it trains the champion of the ``registered_model`` parameter. A real training DAG would read its
data instead of synthetic batches. This file imports no TensorFlow, MLflow, boto3 or numpy.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from celeritas_steps import DEFAULT_ARGS, GPU, PUBLISHED_PLACEMENT, _call

from celeritas_core.defaults import ORDER_MODES

log = logging.getLogger("celeritas.train")
#: Training steps per published placement (``CELERITAS_TRAIN_STEPS``, default 100).
STEPS = int(os.environ.get("CELERITAS_TRAIN_STEPS") or 100)


@task(retries=0)
def published_placements(**context: Any) -> list[dict[str, Any]]:
    """The placements to train with: the triggering Asset events' extra, the latest of each
    configuration (or, triggered by hand, the ``registered_model`` parameter's champion)."""
    # lazy: the DAG processor parses this file often; the training's modules load when a task runs
    from tasks.training import training_items

    events = context.get("triggering_asset_events") or {}
    extras = [dict(event.extra or {}) for event in events.get(PUBLISHED_PLACEMENT, [])]
    registered = context["params"].get("registered_model")
    return _call(lambda: [item.to_xcom() for item in training_items(extras, registered)])


@task(map_index_template="{{ config_key }}", **GPU)
def train(item: dict[str, Any], **context: Any) -> dict[str, Any]:
    """Train ``steps`` steps with one published placement; save the weights and the losses."""
    # lazy: the DAG processor parses this file often; TensorFlow and MLflow load when the task runs
    from tasks.training import TrainingItem, train_item

    get_current_context()["config_key"] = str(item.get("config_key", "?"))  # type: ignore[literal-required]
    params = context["params"]

    def run() -> dict[str, Any]:
        done = train_item(TrainingItem.from_xcom(item), job_id=context["dag_run"].run_id,
                          steps=int(params["steps"]), order=params.get("order"))
        log.info("%s", done.summary())
        return done.to_xcom()

    return _call(run)


@dag(
    dag_id="celeritas_train_on_champion",
    description="Example downstream training: train with each newly published champion placement",
    schedule=[PUBLISHED_PLACEMENT],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["celeritas", "training", "ml-platform", "example"],
    params={
        "steps": Param(STEPS, type="integer", minimum=1, maximum=100_000, title="Training steps",
                       description="Training steps per published placement (synthetic batches)."),
        "order": Param(None, type=["null", "string"], enum=[None, *ORDER_MODES], title="Execution order",
                       description="enforced: each device runs its ops in the placement's recorded "
                                   "order; free: in TensorFlow's own. Empty: the placement's order_mode."),
        "registered_model": Param(None, type=["null", "string"], title="Registered model",
                                  description="Triggered by hand (no Asset event): the registered model "
                                              "(celeritas-MODEL-bBATCH-KEY) whose champion to train."),
    },
    doc_md=__doc__,
)
def celeritas_train_on_champion() -> None:
    """``published_placements`` → ``train`` (mapped: one GPU task per configuration)."""
    train.expand(item=published_placements())


celeritas_train_on_champion()
