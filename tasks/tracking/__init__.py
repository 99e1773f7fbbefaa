"""The pipeline's one MLflow module: parent/child runs, metrics, artifacts, champion/challenger tags.

One Airflow DAG run (one placement job for one model) is one MLflow *parent* run tagged
``celeritas.role=parent``, ``celeritas.model`` and ``celeritas.job_id`` and named by the caller
plus the first 6 hex digits of its run id (``tensor_holography b16 4dev 3f9a2c``), so two runs of
the same model differ in MLflow's run list; every placer gets one *child* run
(``mlflow.parentRunId``, ``celeritas.role=child``, ``celeritas.placer``) named
``PLACER · PARENT NAME``. The parent run's description (``mlflow.note.content``) states the publish
decision in one line (:func:`record_decision`).
Airflow tasks run in separate processes, so nothing here relies on MLflow's global active run:
every function takes the run id it works on and talks through an explicit ``MlflowClient``.

Where runs go:

* :func:`tracking_uri`: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<home>/build/mlflow/mlflow.db``
  where ``<home>`` is ``CELERITAS_HOME`` (default: the working folder). MLflow 3 refuses the plain
  file store (``./mlruns``), so such URIs are rejected with a one-line error.
* Experiments created here on a SQLite store keep their artifacts next to the database
  (``<db folder>/artifacts``, i.e. ``<home>/build/mlflow/artifacts`` for the default store), on
  another database in ``<home>/build/mlflow/artifacts``, and on a tracking server in the
  server's default artifact root.

Errors: an unreachable (or overloaded, 5xx) tracking server raises :class:`TransientTrackingError`
(a ``RuntimeError`` worth an Airflow retry, one line naming the URI); bad input (empty names,
quotes in filter values, non-numeric metrics, missing files, unknown run ids) raises
:class:`CeleritasInputError`. Against a server, MLflow's own HTTP retries default here to
2 retries, backoff factor 1 and a 30 s timeout (set ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``,
``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR`` and ``MLFLOW_HTTP_REQUEST_TIMEOUT`` to override; MLflow's own
defaults, 7 retries with exponential backoff and 120 s, would hold a task for minutes before
Airflow's retry policy gets a say).

A task of the pipeline waits for an unreachable server (:func:`wait_for_server`; the DAG's tasks
up to ``CELERITAS_TRACKING_WAIT_S``, default 120 s): each call is repeated after pauses until it
gets through or the wait is spent, so a server restarted within the wait costs a pause, not a
retried task. Elsewhere (the CLI) the wait is 0: a command fails at once.

Retries are idempotent: :func:`start_parent_run` returns the unfinished parent run of the same
``job_id`` and :func:`child_run` the existing child of the same (parent, placer). Parameters, which
MLflow never overwrites, are only logged when not logged yet (a different value is kept and a
warning logged); tags are simply set again; a metric point logged again within one call (repeated
while the server was away) carries the call's first timestamp, and in a pipeline task the DAG
run's start (:func:`pin_metric_time`), so the store keeps a point a retried task logs again once.

The package, by responsibility (everything public is re-exported here: ``tracking.end_run(...)``):

* :mod:`~tasks.tracking.store`: the tracking URI, the client, error translation, tag names, the
  low-level batched logging every other module uses;
* :mod:`~tasks.tracking.lock`: the store-wide lock (promotions, a job's parent run);
* :mod:`~tasks.tracking.runs`: the experiment, parent and child runs, what is logged on them, and
  the parent runs read back (:func:`recent_runs`);
* :mod:`~tasks.tracking.registry`: the Model Registry's champions, promotion and decisions;
* :mod:`~tasks.tracking.presentation`: plain-text tables of runs.

mlflow is imported lazily, inside the functions, so DAG files importing this package parse without it.
"""

from __future__ import annotations

from tasks.tracking.lock import (
    LOCK_LEASE_S,
    LOCK_PREFIX,
    LOCK_WAIT_S,
)
from tasks.tracking.presentation import (
    format_runs_table,
)
from tasks.tracking.registry import (
    ALIAS_CHAMPION,
    PUBLISHED_FOLDER,
    TAG_CONFIG,
    TAG_CONFIG_KEY,
    TAG_DECIDED_AT,
    TAG_MODEL_VERSION,
    TAG_REGISTERED_MODEL,
    Champion,
    Decision,
    Promotion,
    champion,
    champions,
    decision_history,
    download_published,
    promote_if_current,
    record_decision,
)
from tasks.tracking.runs import (
    END_STATUSES,
    EXPERIMENT_DESCRIPTION,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    LIVE_STATUSES,
    MAX_RUN_NAME,
    RUN_LINK_ATTR,
    RUN_METRICS,
    SHORT_ID,
    TAG_ERROR,
    FirstRunLinks,
    child_run,
    child_run_name,
    end_run,
    experiment_id,
    get_run,
    log_artifact,
    log_metrics,
    log_series,
    parent_run_name,
    recent_runs,
    record_rejected_job,
    run_link,
    set_tags,
    start_parent_run,
)
from tasks.tracking.store import (
    DEFAULT_TASK_WAIT_S,
    EXPERIMENT,
    HOME_ENV,
    MAX_PARAM_VALUE,
    MAX_TAG_VALUE,
    MLFLOW_UI_URL_ENV,
    TAG_BATCH_SIZE,
    TAG_BEST_MEASURED,
    TAG_BEST_SIMULATED,
    TAG_DECISION,
    TAG_DEVICES,
    TAG_JOB,
    TAG_MODEL,
    TAG_NOTE,
    TAG_OWNER,
    TAG_PARENT,
    TAG_PLACEMENT_URI,
    TAG_PLACER,
    TAG_PRODUCTION,
    TAG_PROMOTE_REASON,
    TAG_PROMOTED_AT,
    TAG_REASON,
    TAG_ROLE,
    TAG_SUPERSEDED_AT,
    TAG_SUPERSEDED_BY,
    TAG_TRANSFER_MODEL,
    TAG_TRANSFER_REASON,
    TRAINING_VIEW,
    URI_ENV,
    WAIT_ENV,
    TransientTrackingError,
    artifact_root,
    pin_metric_time,
    project_home,
    task_wait_s,
    tracking_uri,
    ui_base_url,
    wait_for_server,
)

__all__ = [
    "ALIAS_CHAMPION",
    "DEFAULT_TASK_WAIT_S",
    "END_STATUSES",
    "EXPERIMENT",
    "EXPERIMENT_DESCRIPTION",
    "EXPERIMENT_KIND",
    "EXPERIMENT_KIND_TAG",
    "HOME_ENV",
    "LIVE_STATUSES",
    "LOCK_LEASE_S",
    "LOCK_PREFIX",
    "LOCK_WAIT_S",
    "MAX_PARAM_VALUE",
    "MAX_RUN_NAME",
    "MAX_TAG_VALUE",
    "MLFLOW_UI_URL_ENV",
    "PUBLISHED_FOLDER",
    "RUN_LINK_ATTR",
    "RUN_METRICS",
    "SHORT_ID",
    "TAG_BATCH_SIZE",
    "TAG_BEST_MEASURED",
    "TAG_BEST_SIMULATED",
    "TAG_CONFIG",
    "TAG_CONFIG_KEY",
    "TAG_DECIDED_AT",
    "TAG_DECISION",
    "TAG_DEVICES",
    "TAG_ERROR",
    "TAG_JOB",
    "TAG_MODEL",
    "TAG_MODEL_VERSION",
    "TAG_NOTE",
    "TAG_OWNER",
    "TAG_PARENT",
    "TAG_PLACEMENT_URI",
    "TAG_PLACER",
    "TAG_PRODUCTION",
    "TAG_PROMOTED_AT",
    "TAG_PROMOTE_REASON",
    "TAG_REASON",
    "TAG_REGISTERED_MODEL",
    "TAG_ROLE",
    "TAG_SUPERSEDED_AT",
    "TAG_SUPERSEDED_BY",
    "TAG_TRANSFER_MODEL",
    "TAG_TRANSFER_REASON",
    "TRAINING_VIEW",
    "URI_ENV",
    "WAIT_ENV",
    "Champion",
    "Decision",
    "FirstRunLinks",
    "Promotion",
    "TransientTrackingError",
    "artifact_root",
    "champion",
    "champions",
    "child_run",
    "child_run_name",
    "decision_history",
    "download_published",
    "end_run",
    "experiment_id",
    "format_runs_table",
    "get_run",
    "log_artifact",
    "log_metrics",
    "log_series",
    "parent_run_name",
    "pin_metric_time",
    "project_home",
    "promote_if_current",
    "recent_runs",
    "record_decision",
    "record_rejected_job",
    "run_link",
    "set_tags",
    "start_parent_run",
    "task_wait_s",
    "tracking_uri",
    "ui_base_url",
    "wait_for_server",
]
