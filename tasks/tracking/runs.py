"""MLflow run logging: the experiment, one parent run per job and one child run per placer, their
parameters, metrics, tags and artifacts, and the parent runs read back for ``celeritas runs``."""

from __future__ import annotations

import getpass
import logging
import math
import numbers
import os
import socket
from collections.abc import Iterable, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.redact import redact
from tasks.tracking.lock import _registry_lock
from tasks.tracking.store import (
    EXPERIMENT,
    MAX_TAG_VALUE,
    MLFLOW_UI_URL_ENV,
    TAG_BEST_MEASURED,
    TAG_BEST_SIMULATED,
    TAG_DECISION,
    TAG_JOB,
    TAG_MODEL,
    TAG_NOTE,
    TAG_OWNER,
    TAG_PARENT,
    TAG_PLACER,
    TAG_PRODUCTION,
    TAG_ROLE,
    TRAINING_VIEW,
    _client,
    _experiment_ids,
    _iso,
    _local_path,
    _log_batch,
    _log_metric_dict,
    _log_params,
    _metric_ms,
    _metric_values,
    _one_line,
    _quote,
    _search,
    _set_tag_dict,
    _store_is_empty,
    _tag_values,
    _text,
    _tracked,
    _truncate,
    _upload,
    artifact_root,
    tracking_uri,
    ui_base_url,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

log = logging.getLogger(__name__)

#: Hex digits of the run id appended to a parent run's name.
SHORT_ID = 6
#: MLflow keeps at most this many characters of a run name.
MAX_RUN_NAME = 250
#: MLflow's experiment type: this one opens in the UI's model-training view (runs, charts), not
#: the GenAI view (traces) that MLflow 3 shows an untyped experiment in.
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
EXPERIMENT_DESCRIPTION = ("Celeritas device placements: one parent run per placement job (a DAG run), one "
                          "child run per placer; the champion per configuration is in the Model Registry.")
END_STATUSES = ("FINISHED", "FAILED", "KILLED")
LIVE_STATUSES = ("RUNNING", "SCHEDULED")
# Metric columns of `celeritas runs compare` (parent-run metrics). MLflow metric names end in their
# unit: step times in milliseconds (_ms), placement times in seconds (_s), memory in bytes (_bytes);
# the rest are ratios or counts.
RUN_METRICS = ("best_measured_step_time_ms", "best_simulated_step_time_ms", "speedup_vs_single",
               "placement_time_s")
# Runs logged under older names: old name → (current name, factor to the current unit).
_RENAMED_METRICS = {"best_simulated_step_time_us": ("best_simulated_step_time_ms", 1e-3),
                    "best_simulated_step_time_s": ("best_simulated_step_time_ms", 1e3),
                    "best_measured_step_time_s": ("best_measured_step_time_ms", 1e3),
                    "single_device_time_us": ("single_device_step_time_ms", 1e-3),
                    "single_device_step_time_s": ("single_device_step_time_ms", 1e3),
                    "challenger_median_step_time_s": ("challenger_median_step_time_ms", 1e3),
                    "champion_median_step_time_s": ("champion_median_step_time_ms", 1e3),
                    "placement_seconds": ("placement_time_s", 1.0)}

TAG_ERROR = "celeritas.error"
#: The attribute (``extra``) of a log record that links to an MLflow run: the run's id
#: (:class:`FirstRunLinks`).
RUN_LINK_ATTR = "celeritas_run_link"


# ---------------------------------------------------------------------------- experiments and runs
@_tracked
def experiment_id(name: str = EXPERIMENT) -> str:
    """The id of experiment ``name``, created (artifacts per :func:`artifact_root`) if missing."""
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
    from mlflow.exceptions import MlflowException

    _text(name, "experiment name")
    client = _client()
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage != "active":
            raise CeleritasInputError(f"MLflow experiment {name!r} is deleted; restore it or use another")
        if exp.tags.get(EXPERIMENT_KIND_TAG) is None:  # made before experiments were typed
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return exp.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_root(tracking_uri()),
                                        tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND,
                                              "mlflow.note.content": EXPERIMENT_DESCRIPTION})
    except MlflowException as exc:  # created concurrently by another task
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


@_tracked
def run_link(run_id: str, *, serve_hint: bool = True) -> str:
    """Where a person opens run ``run_id``: its page in the MLflow UI, or, for a database store
    with no UI known, the run in the store and (``serve_hint``) the command that serves a UI; a
    line just above that already says how (a child run's link under its parent's) leaves it out."""
    run = _client().get_run(run_id)
    base = ui_base_url()
    if base is not None:
        return f"{base}/#/experiments/{run.info.experiment_id}/runs/{run_id}?{TRAINING_VIEW}"
    where = f"run {run_id} in experiment {run.info.experiment_id} of {redact(tracking_uri())}"
    if not serve_hint:
        return where
    return (f"{where} (serve it with `mlflow ui --backend-store-uri {redact(tracking_uri())}` or `make ui`, "
            f"or set {MLFLOW_UI_URL_ENV})")


class FirstRunLinks(logging.Filter):
    """Passes the first log record that links to each MLflow run (one carrying
    :data:`RUN_LINK_ATTR`, the run's id) and drops the later ones; every other record passes.

    Each pipeline task logs its run's link in its own task log, as a deployment shows them. A
    console that shows the logs of a whole DAG run at once (``make demo``: ``dag.test()`` in one
    process) would repeat the parent run's link once per task: with this filter on its handler it
    shows each run's link once.

    Examples
    --------
    >>> import logging
    >>> first = FirstRunLinks()
    >>> def record(run_id):
    ...     return logging.makeLogRecord({"msg": "MLflow run: ...", RUN_LINK_ATTR: run_id})
    >>> [first.filter(record(r)) for r in ("parent", "child", "parent")]
    [True, True, False]
    >>> first.filter(logging.makeLogRecord({"msg": "place: done"}))
    True
    """

    def __init__(self) -> None:
        super().__init__()
        self.shown: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is shown: not a run link, or the first link to its run."""
        run_id = getattr(record, RUN_LINK_ATTR, None)
        if run_id is None:
            return True
        if run_id in self.shown:
            return False
        self.shown.add(run_id)
        return True


@_tracked
def start_parent_run(*, model: str, run_name: str, job_id: str, tags: Mapping[str, object] | None = None,
                     params: Mapping[str, object] | None = None, experiment: str = EXPERIMENT,
                     reopen: bool = False) -> str:
    """Start the job's parent run, or take over the same ``job_id``'s earlier one: one parent run
    per job, however often it is started. A new run is named ``run_name`` plus the first 6 hex
    digits of its run id (:func:`parent_run_name`); a reused one keeps its name.

    Without ``reopen`` (``celeritas run``): a job whose run ended FAILED or KILLED is retried in
    that run; a job that FINISHED, or whose run is RUNNING under a live process (the same job
    started twice at once), is refused with one line. A RUNNING run whose owner process on this
    host has died is taken over. With ``reopen`` (the DAG: Airflow runs a task instance once at a
    time, and clearing a task re-runs its setup task ``prepare`` with the same DAG run id), the
    job's newest parent run is reused whatever its status and set RUNNING again. The check and
    the creation happen under the job's store-wide lock, so two starts at once make one run.
    """
    _text(model, "model")
    _text(job_id, "job_id")
    if not isinstance(run_name, str) or not run_name.strip():
        raise CeleritasInputError(f"run_name: expected a non-empty string, got {run_name!r}")
    reserved = {TAG_MODEL: model, TAG_ROLE: "parent", TAG_JOB: job_id}
    extra = _tag_values(tags)
    for key, value in reserved.items():
        if key in extra and extra[key] != value:
            raise CeleritasInputError(f"tag {key}: set by start_parent_run to {value!r}, got {extra[key]!r}")
    all_tags = {**extra, **reserved, TAG_OWNER: f"{socket.gethostname()}:{os.getpid()}"}
    client = _client()
    exp = experiment_id(experiment)
    with _registry_lock(client, f"job\n{exp}\n{model}\n{job_id}"):
        existing = _search(client, [exp], f"tags.`{TAG_JOB}` = {_quote(job_id)} and "
                                          f"tags.`{TAG_ROLE}` = 'parent' and "
                                          f"tags.`{TAG_MODEL}` = {_quote(model)}")
        run = existing[0] if existing else None
        if run is not None and not reopen:
            _refuse_duplicate_job(run, job_id)
        if run is not None:
            log.info("reusing parent run %s of job %s", run.info.run_id, job_id)
            if run.info.status not in LIVE_STATUSES:
                client.update_run(run.info.run_id, status="RUNNING")
            _set_tag_dict(client, run.info.run_id, all_tags)
        else:
            with suppress(Exception):
                all_tags.setdefault("mlflow.user", getpass.getuser())
            run = client.create_run(exp, run_name=run_name, tags=all_tags)
            client.update_run(run.info.run_id, name=parent_run_name(run_name, run.info.run_id))
    _log_params(client, run, params)
    return run.info.run_id


def parent_run_name(label: str, run_id: str) -> str:
    """A parent run's name: ``label`` and the first :data:`SHORT_ID` hex digits of its run id
    (``tensor_holography b16 4dev 3f9a2c``), at most :data:`MAX_RUN_NAME` characters."""
    suffix = f" {run_id[:SHORT_ID]}"
    return label.strip()[: MAX_RUN_NAME - len(suffix)] + suffix


def child_run_name(placer: str, parent_name: str | None) -> str:
    """A child run's name: the placer, then its parent run's name (``celeritas · tensor_holography
    b16 4dev 3f9a2c``), so children of different runs differ when compared side by side."""
    name = f"{placer} · {parent_name}" if parent_name else placer
    return name[:MAX_RUN_NAME]


def _owner_alive(owner: str | None) -> bool:
    """Whether the process ``host:pid`` that owns a run may still be running (other hosts: assumed)."""
    host, _, pid = (owner or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return bool(owner)
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _refuse_duplicate_job(run: Run, job_id: str) -> None:
    """Refuse to start ``job_id`` again when its run finished or runs under a live process."""
    status, owner = run.info.status, run.data.tags.get(TAG_OWNER)
    if status == "FINISHED":
        raise CeleritasInputError(f"job {job_id!r} already finished (MLflow run {run.info.run_id}); "
                                  "use another job id")
    if status in LIVE_STATUSES and _owner_alive(owner) and owner != f"{socket.gethostname()}:{os.getpid()}":
        raise CeleritasInputError(f"job {job_id!r} is already running (MLflow run {run.info.run_id}, "
                                  f"process {owner}); wait for it to end or use another job id")


@_tracked
def child_run(parent_id: str, placer: str, *, params: Mapping[str, object] | None = None,
              metrics: Mapping[str, float] | None = None, artifacts: Mapping[str, str] | None = None,
              tags: Mapping[str, object] | None = None) -> str:
    """Create (or reuse, per (parent, placer)) the placer's child run (named by
    :func:`child_run_name`), log to it and end it FINISHED.

    ``artifacts`` maps an artifact folder in the run (``""`` for its root) to a local file or
    folder to upload there, e.g. ``{"placement": "/tmp/x/celeritas.json"}``; a folder's files go
    into that folder (at the root for ``""``: where MLflow's compare view looks for common files).
    """
    _text(parent_id, "parent run id")
    _text(placer, "placer")
    values = _metric_values(metrics)
    extra = _tag_values(tags)
    uploads = [(_local_path(local), folder or None) for folder, local in (artifacts or {}).items()]
    client = _client()
    parent = client.get_run(parent_id)
    exp = parent.info.experiment_id
    found = _search(client, [exp], f"tags.`{TAG_PARENT}` = {_quote(parent_id)} "
                                   f"and tags.`{TAG_PLACER}` = {_quote(placer)}")
    if found:
        run = found[0]
        if extra:
            _set_tag_dict(client, run.info.run_id, extra)
    else:
        ptags = parent.data.tags
        inherited = {k: ptags[k] for k in (TAG_MODEL, TAG_JOB, "mlflow.user") if k in ptags}
        run = client.create_run(exp, run_name=child_run_name(placer, parent.info.run_name), tags={
            **extra, **inherited, TAG_PARENT: parent_id, TAG_ROLE: "child", TAG_PLACER: placer})
    run_id = run.info.run_id
    _log_params(client, run, params)
    _log_metric_dict(client, run_id, values, 0)
    for local, folder in uploads:
        _upload(client, run_id, local, folder)
    client.set_terminated(run_id, "FINISHED")
    return run_id


@_tracked
def log_metrics(run_id: str, metrics: Mapping[str, float], step: int | None = None) -> None:
    """Log metrics at ``step`` (default 0); non-finite values are skipped."""
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise CeleritasInputError(f"step: expected an integer, got {step!r}")
    _log_metric_dict(_client(), _text(run_id, "run id"), _metric_values(metrics), step or 0)


@_tracked
def log_series(run_id: str, key: str, values: Iterable[float]) -> None:
    """Log one point of metric ``key`` per value with ``step=i`` (batched), e.g. validation step times."""
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
    from mlflow.entities import Metric

    _text(run_id, "run id")
    _text(key, "metric name")
    ts = _metric_ms()
    points = []
    for i, value in enumerate(values):
        if not isinstance(value, numbers.Real):
            raise CeleritasInputError(f"metric {key!r} step {i}: expected a number, got {value!r}")
        if math.isfinite(float(value)):
            points.append(Metric(key, float(value), ts, i))
        else:
            log.warning("metric %s step %d is not finite: not logged", key, i)
    _log_batch(_client(), run_id, metrics=points)


@_tracked
def log_artifact(run_id: str, local_path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
    """Upload a local file (or a folder's files) to the run, under ``artifact_path`` if given."""
    local = _local_path(local_path)
    _upload(_client(), _text(run_id, "run id"), local, artifact_path or None)


@_tracked
def set_tags(run_id: str, tags: Mapping[str, object]) -> None:
    """Set tags (values stringified, ≤ 8000 characters) on the run."""
    _set_tag_dict(_client(), _text(run_id, "run id"), _tag_values(tags))


@_tracked
def end_run(run_id: str, status: str = "FINISHED") -> None:
    """End the run as FINISHED, FAILED or KILLED."""
    if status not in END_STATUSES:
        raise CeleritasInputError(f"run status: expected one of {', '.join(END_STATUSES)}, got {status!r}")
    _client().set_terminated(_text(run_id, "run id"), status)


@_tracked
def get_run(run_id: str) -> dict[str, Any]:
    """The run as a plain dict: run_id, run_name, status, start/end time, params, metrics, tags."""
    return _run_dict(_client().get_run(_text(run_id, "run id")))


def _run_dict(run: Run) -> dict[str, Any]:
    info, data = run.info, run.data
    return {"run_id": info.run_id, "run_name": info.run_name, "experiment_id": info.experiment_id,
            "status": info.status, "start_time": _iso(info.start_time), "end_time": _iso(info.end_time),
            "model": data.tags.get(TAG_MODEL), "job_id": data.tags.get(TAG_JOB),
            "params": dict(data.params), "metrics": dict(data.metrics), "tags": dict(data.tags)}


def _parent_runs(client: MlflowClient, model: str, experiment: str, limit: int) -> list[Run]:
    """The newest ``limit`` parent runs of ``model`` in ``experiment`` (none if it does not exist)."""
    exp_ids = _experiment_ids(client, experiment)
    if not exp_ids:
        return []
    return _search(client, exp_ids, f"tags.`{TAG_MODEL}` = {_quote(model)} and tags.`{TAG_ROLE}` = 'parent'",
                   max_results=limit)


# ---------------------------------------------------------------------------- comparing runs
def _lookup(run: Run, key: str) -> str | None:
    """``celeritas.<key>`` tag, else param ``key``."""
    return run.data.tags.get(f"celeritas.{key}") or run.data.params.get(key)


@_tracked
def recent_runs(model: str, n: int = 10, *, experiment: str = EXPERIMENT) -> list[dict[str, Any]]:
    """The last ``n`` parent runs of ``model``, newest first, with key params and metrics."""
    _text(model, "model")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise CeleritasInputError(f"number of runs: expected an integer >= 1, got {n!r}")
    if _store_is_empty():  # nothing to list, and a look-up creates no store
        return []
    client = _client()
    runs = _parent_runs(client, model, experiment, n)
    rows = []
    for run in runs:
        tags, metrics = run.data.tags, _current_names(run.data.metrics)
        placer = tags.get(TAG_BEST_MEASURED) or tags.get(TAG_BEST_SIMULATED) or _lookup(run, "best_placer")
        values: dict[str, float | None] = {k: metrics.get(k) for k in RUN_METRICS}
        single = metrics.get("single_device_step_time_ms")
        best_sim = metrics.get("best_simulated_step_time_ms")
        if values["speedup_vs_single"] is None and single and best_sim:
            values["speedup_vs_single"] = single / best_sim
        if placer and (values["placement_time_s"] is None or values["speedup_vs_single"] is None):
            child = _search(client, [run.info.experiment_id],
                            f"tags.`{TAG_PARENT}` = {_quote(run.info.run_id)} and "
                            f"tags.`{TAG_PLACER}` = {_quote(placer)}", max_results=1)
            if child:
                child_metrics = _current_names(child[0].data.metrics)
                for key in ("placement_time_s", "speedup_vs_single"):
                    if values[key] is None:
                        values[key] = child_metrics.get(key)
        rows.append({"run_id": run.info.run_id, "run_name": run.info.run_name,
                     "start_time": _iso(run.info.start_time), "status": run.info.status,
                     "batch_size": _lookup(run, "batch_size"),
                     "devices": _lookup(run, "devices") or _lookup(run, "num_devices"),
                     "placer": placer, **values,
                     "production": tags.get(TAG_PRODUCTION) == "true",
                     "decision": tags.get(TAG_DECISION)})
    return rows


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _current_names(metrics: Mapping[str, float]) -> dict[str, float]:
    """``metrics`` with the names of runs logged before the unit suffixes (:data:`_RENAMED_METRICS`)."""
    out = dict(metrics)
    for old, (new, factor) in _RENAMED_METRICS.items():
        if old in out and new not in out:
            out[new] = out[old] * factor
    return out


# ---------------------------------------------------------------------------- rejected jobs
@_tracked
def record_rejected_job(*, model: str, job_id: str, message: str,
                        tags: Mapping[str, object] | None = None) -> str:
    """Record a job whose parameters were refused: its parent run, ended FAILED, tagged with the
    (redacted) reason under ``celeritas.error``, so the MLflow UI shows every attempt."""
    reason = _truncate(redact(message), MAX_TAG_VALUE)
    note = _truncate(f"Rejected: {_one_line(redact(message), 500)}", MAX_TAG_VALUE)
    run = start_parent_run(model=model, run_name=f"{model} (rejected)", job_id=job_id,
                           tags={**dict(tags or {}), TAG_ERROR: reason, TAG_DECISION: "failed",
                                 TAG_NOTE: note}, reopen=True)
    end_run(run, "FAILED")
    return run
