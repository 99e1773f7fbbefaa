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

Retries are idempotent: :func:`start_parent_run` returns the unfinished parent run of the same
``job_id`` and :func:`child_run` the existing child of the same (parent, placer). Parameters, which
MLflow never overwrites, are only logged when not logged yet (a different value is kept and a
warning logged); metrics and tags are simply logged again (the newest value wins).

mlflow is imported lazily, inside the functions, so DAG files importing this module parse without it.
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import json
import logging
import math
import numbers
import os
import random
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from celeritas_core.errors import CeleritasInputError
from celeritas_core.redact import redact
from tasks.policy import file_sha256
from tasks.report import format_table

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

log = logging.getLogger(__name__)

EXPERIMENT = "celeritas-placement"
HOME_ENV = "CELERITAS_HOME"
URI_ENV = "MLFLOW_TRACKING_URI"

TAG_MODEL = "celeritas.model"
TAG_ROLE = "celeritas.role"
TAG_JOB = "celeritas.job_id"
TAG_PLACER = "celeritas.placer"
TAG_PRODUCTION = "celeritas.production"
TAG_PLACEMENT_URI = "celeritas.placement_uri"
TAG_PROMOTED_AT = "celeritas.promoted_at"
TAG_PROMOTE_REASON = "celeritas.promote_reason"
TAG_SUPERSEDED_BY = "celeritas.superseded_by"
TAG_SUPERSEDED_AT = "celeritas.superseded_at"
TAG_DECISION = "celeritas.publish_decision"
TAG_REASON = "celeritas.publish_reason"
TAG_BATCH_SIZE = "celeritas.batch_size"
TAG_DEVICES = "celeritas.devices"
TAG_BEST_MEASURED = "celeritas.best_measured_placer"
TAG_BEST_SIMULATED = "celeritas.best_simulated_placer"
TAG_PARENT = "mlflow.parentRunId"
#: The run's description in MLflow's UI.
TAG_NOTE = "mlflow.note.content"
#: Hex digits of the run id appended to a parent run's name.
SHORT_ID = 6
#: MLflow keeps at most this many characters of a run name.
MAX_RUN_NAME = 250
#: MLflow's experiment type: this one opens in the UI's model-training view (runs, charts), not
#: the GenAI view (traces) that MLflow 3 shows an untyped experiment in.
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
EXPERIMENT_DESCRIPTION = ("Celeritas device placements: one parent run per placement job (a DAG run), one "
                          "child run per placer; the champion per configuration is in the Model Registry.")
#: Where the MLflow UI is, for the links in task logs (default: the tracking URI, when it is http).
MLFLOW_UI_URL_ENV = "CELERITAS_MLFLOW_UI_URL"
#: MLflow 3's UI picks its GenAI or model-training view with a switch kept in the browser; this
#: query parameter on a link opens the model-training view (the experiment's kind tag does not).
TRAINING_VIEW = "workflowType=machine_learning"

END_STATUSES = ("FINISHED", "FAILED", "KILLED")
LIVE_STATUSES = ("RUNNING", "SCHEDULED")
# MLflow's limits (mlflow.utils.validation): values longer than these are rejected or truncated.
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
_BATCH_METRICS = 1000
_BATCH_PARAMS_TAGS = 100
# Defaults for MLflow's HTTP client against a server: fail within seconds, let Airflow retry.
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                  "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
_INPUT_ERROR_CODES = frozenset({"INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST", "INVALID_STATE",
                                "BAD_REQUEST", "RESOURCE_ALREADY_EXISTS"})
_TRANSIENT_ERROR_CODES = frozenset({"TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"})
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

P = ParamSpec("P")
R = TypeVar("R")


class TransientTrackingError(RuntimeError):
    """The tracking server could not be reached or answered 5xx: worth a retry."""

    def __init__(self, uri: str, cause: str) -> None:
        self.uri = uri
        self.cause = cause
        super().__init__(f"MLflow tracking server {redact(uri)} unreachable: {redact(cause)}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.uri, self.cause))


# ---------------------------------------------------------------------------- configuration
def project_home() -> Path:
    """The project root: ``CELERITAS_HOME`` if set, else the working folder (absolute)."""
    return Path(os.environ.get(HOME_ENV) or os.getcwd()).resolve()


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for in-memory or other schemes)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path).resolve()


def _is_remote(uri: str) -> bool:
    return uri.split(":", 1)[0].lower() in ("http", "https", "databricks", "databricks-uc", "uc")


def tracking_uri(*, create: bool = True) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<home>/build/mlflow/mlflow.db``.

    Parameters
    ----------
    create : bool
        Create the folder of a SQLite store's database file (False: a look-up that must leave
        the disk as it is).

    Returns
    -------
    str
        The tracking URI.
    """
    uri = os.environ.get(URI_ENV, "").strip()
    if not uri:
        folder = project_home() / "build" / "mlflow"
        uri = f"sqlite:///{folder / 'mlflow.db'}"
    scheme = uri.split(":", 1)[0].lower() if "://" in uri or uri.startswith("databricks") else ""
    if scheme in ("", "file"):
        raise CeleritasInputError(f"{URI_ENV}={uri}: MLflow 3 no longer accepts the file store; use a "
                                  "database (sqlite:///path/mlflow.db) or a server (http://host:5000)")
    db = _sqlite_path(uri)
    if db is not None and create:
        db.parent.mkdir(parents=True, exist_ok=True)
    return uri


#: Tables of MLflow's first schema: a SQLite file with tables but none of these is not a store.
_MLFLOW_TABLES = frozenset({"experiments", "runs", "metrics", "params", "tags"})


def _sqlite_tables(uri: str) -> set[str] | None:
    """The tables of a SQLite store's database file, read without writing (None: no such file).

    A file that is not an SQLite database, or one with tables but not MLflow's, is refused
    before MLflow opens it: MLflow would create its tables in it, or half-migrate it.
    """
    db = _sqlite_path(uri)
    if db is None or not db.exists():
        return None
    where = f"{URI_ENV}={redact(uri)}"
    if not db.is_file():
        raise CeleritasInputError(f"{where}: {db} is not a regular file, not an SQLite database")
    import sqlite3

    try:
        con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise CeleritasInputError(f"{where}: {db} is not a readable SQLite database ({exc})") from None
    tables = {str(name) for (name,) in rows}
    if tables - {"alembic_version"} and not tables & _MLFLOW_TABLES:  # (one being created has some)
        raise CeleritasInputError(f"{where}: {db} is an SQLite database without MLflow's tables (no "
                                  "'experiments' table), not an MLflow store")
    return tables


def _store_is_empty() -> bool:
    """Whether the tracking store is a SQLite database that does not exist yet or has no tables:
    a look-up then finds nothing, and creates nothing. False for any other store."""
    uri = tracking_uri(create=False)
    if _sqlite_path(uri) is None:
        return False
    tables = _sqlite_tables(uri)
    return tables is None or not (tables - {"alembic_version"})


def ui_base_url() -> str | None:
    """The MLflow UI's address for links: ``CELERITAS_MLFLOW_UI_URL``, else an http(s) tracking URI
    without its credentials; None for a database store (no UI is known)."""
    from urllib.parse import urlsplit, urlunsplit

    given = os.environ.get(MLFLOW_UI_URL_ENV, "").strip()
    uri = given or tracking_uri()
    if not uri.lower().startswith(("http://", "https://")):
        return None
    parts = urlsplit(uri)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def artifact_root(uri: str) -> str | None:
    """Artifact root for experiments created here on ``uri`` (None: the server decides)."""
    if _is_remote(uri):
        return None
    db = _sqlite_path(uri)
    folder = db.parent / "artifacts" if db is not None else project_home() / "build" / "mlflow" / "artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder.as_uri()


def _client() -> MlflowClient:
    """An ``MlflowClient`` on :func:`tracking_uri` (HTTP retry defaults applied for servers; a
    SQLite file that is not an MLflow store refused)."""
    uri = tracking_uri()
    _sqlite_tables(uri)
    if _is_remote(uri):
        for name, value in _HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


# ---------------------------------------------------------------------------- errors
def _one_line(text: object, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _transient_cause(exc: BaseException) -> str | None:
    """Why ``exc`` is a transient tracking failure, or None when it is not one."""
    message = str(getattr(exc, "message", exc))
    context = exc.__cause__ or exc.__context__
    if isinstance(exc, ConnectionError | TimeoutError):
        return type(exc).__name__
    if type(exc).__module__.split(".")[0] in ("requests", "urllib3"):
        return type(exc).__name__
    if getattr(exc, "error_code", None) in _TRANSIENT_ERROR_CODES:
        return _one_line(message, 160)
    if message.startswith("API request to"):  # mlflow.utils.rest_utils.http_request gave up
        if context is not None and type(context).__module__.split(".")[0] in ("requests", "urllib3"):
            inner = str(context)
            if "Connection refused" in inner:
                return f"connection refused ({type(context).__name__})"
            if "too many" in inner and "error responses" in inner:
                return _one_line(inner[inner.find("too many"):].rstrip(")'\""), 120)
            return type(context).__name__
        return "request failed" + (" (timeout)" if "timeout" in message else "")
    return None


@contextmanager
def _translated() -> Iterator[None]:
    """Turn MLflow/network exceptions into TransientTrackingError or CeleritasInputError."""
    try:
        yield
    except (CeleritasInputError, TransientTrackingError):
        raise
    except Exception as exc:
        if isinstance(exc, ImportError):
            raise
        from mlflow.exceptions import MlflowException

        uri = os.environ.get(URI_ENV, "").strip() or "(the default SQLite store)"
        _raise_database_error(exc, uri)
        cause = _transient_cause(exc)
        if cause is not None and (_is_remote(uri) or not isinstance(exc, MlflowException)):
            raise TransientTrackingError(uri, cause) from exc
        if isinstance(exc, MlflowException) and exc.error_code in _INPUT_ERROR_CODES:
            raise CeleritasInputError(f"MLflow: {_one_line(exc.message)}") from exc
        raise


def _raise_database_error(exc: BaseException, uri: str) -> None:
    """A database store's error as one line: an unreachable or locked database is transient, any
    other SQLAlchemy or Alembic error means the database is not a usable MLflow store."""
    package = type(exc).__module__.split(".")[0]
    if package not in ("sqlalchemy", "alembic"):
        return
    orig = getattr(exc, "orig", None)  # the driver's own error, without SQLAlchemy's SQL and links
    cause = _one_line(orig if orig is not None else exc, 200)
    if type(exc).__name__ == "OperationalError":
        raise TransientTrackingError(uri, cause) from exc
    raise CeleritasInputError(f"{URI_ENV}={redact(uri)}: not a usable MLflow store ({cause})") from exc


def _tracked(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` under :func:`_translated`."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with _translated():
            return fn(*args, **kwargs)

    return wrapper


# ---------------------------------------------------------------------------- value helpers
def _text(value: object, what: str) -> str:
    """A non-empty one-line string, usable inside an MLflow search filter."""
    if not isinstance(value, str) or not value.strip():
        raise CeleritasInputError(f"{what}: expected a non-empty string, got {value!r}")
    if "\n" in value or "\r" in value or ("'" in value and '"' in value):
        raise CeleritasInputError(f"{what}: must be one line without both quote characters, got {value!r}")
    return value


def _quote(value: str) -> str:
    """``value`` as an MLflow filter string literal (validated by :func:`_text`)."""
    return f'"{value}"' if "'" in value else f"'{value}'"


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _param_value(value: object) -> str:
    """A parameter value as MLflow stores it: a string of at most 6000 characters."""
    if isinstance(value, str):
        text = value
    elif value is None or isinstance(value, bool | int | float):
        text = str(value)
    else:
        try:
            text = json.dumps(value, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = str(value)
    return _truncate(text, MAX_PARAM_VALUE)


def _tag_values(tags: Mapping[str, object] | None) -> dict[str, str]:
    if tags is None:
        return {}
    if not isinstance(tags, Mapping):
        raise CeleritasInputError(f"tags: expected a mapping, got {type(tags).__name__}")
    out: dict[str, str] = {}
    for key, value in tags.items():
        _text(key, "tag key")
        out[key] = _truncate(str(value), MAX_TAG_VALUE)
    return out


def _metric_values(metrics: Mapping[str, object] | None) -> dict[str, float]:
    """Metrics as floats; non-finite values are dropped with a warning, non-numbers rejected."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise CeleritasInputError(f"metrics: expected a mapping, got {type(metrics).__name__}")
    out: dict[str, float] = {}
    for key, value in metrics.items():
        _text(key, "metric name")
        if not isinstance(value, numbers.Real):
            raise CeleritasInputError(f"metric {key!r}: expected a number, got {value!r}")
        number = float(value)
        if math.isfinite(number):
            out[key] = number
        else:
            log.warning("metric %s=%s is not finite: not logged", key, number)
    return out


def _now_ms() -> int:
    return int(time.time() * 1000)


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i: i + size]


# ---------------------------------------------------------------------------- low-level logging
def _log_batch(client: MlflowClient, run_id: str, *, metrics: Sequence[Any] = (),
               params: Sequence[Any] = (), tags: Sequence[Any] = ()) -> None:
    """``log_batch`` within MLflow's per-request limits."""
    for chunk in _chunks(list(metrics), _BATCH_METRICS):
        client.log_batch(run_id, metrics=list(chunk))
    for chunk in _chunks(list(params), _BATCH_PARAMS_TAGS):
        client.log_batch(run_id, params=list(chunk))
    for chunk in _chunks(list(tags), _BATCH_PARAMS_TAGS):
        client.log_batch(run_id, tags=list(chunk))


def _log_params(client: MlflowClient, run: Run, params: Mapping[str, object] | None) -> None:
    """Log the parameters not yet logged on ``run``; differing values are kept, with a warning."""
    from mlflow.entities import Param

    if not params:
        return
    if not isinstance(params, Mapping):
        raise CeleritasInputError(f"params: expected a mapping, got {type(params).__name__}")
    existing = run.data.params
    new: list[Param] = []
    for key, value in params.items():
        _text(key, "param name")
        text = _param_value(value)
        if key not in existing:
            new.append(Param(key, text))
        elif existing[key] != text:
            log.warning("run %s: param %s already logged as %r; %r not logged (MLflow params are "
                        "immutable)", run.info.run_id, key, existing[key], text)
    _log_batch(client, run.info.run_id, params=new)


def _log_metric_dict(client: MlflowClient, run_id: str, metrics: Mapping[str, float], step: int) -> None:
    from mlflow.entities import Metric

    ts = _now_ms()
    _log_batch(client, run_id, metrics=[Metric(k, v, ts, step) for k, v in metrics.items()])


def _set_tag_dict(client: MlflowClient, run_id: str, tags: Mapping[str, str]) -> None:
    from mlflow.entities import RunTag

    _log_batch(client, run_id, tags=[RunTag(k, v) for k, v in tags.items()])


def _upload(client: MlflowClient, run_id: str, local: Path, artifact_path: str | None) -> None:
    if local.is_dir():
        client.log_artifacts(run_id, str(local), artifact_path)
    else:
        client.log_artifact(run_id, str(local), artifact_path)


def _local_path(local_path: str | os.PathLike[str], what: str = "artifact") -> Path:
    path = Path(local_path)
    if not path.exists():
        raise CeleritasInputError(f"{what} not found", source=str(local_path))
    return path


def _search(client: MlflowClient, experiment_ids: list[str], filter_string: str, *,
            max_results: int = 1000, order_by: Sequence[str] = ("attributes.start_time DESC",)) -> list[Run]:
    """Active runs matching ``filter_string``, newest first, all pages up to ``max_results``."""
    runs: list[Run] = []
    token = None
    while len(runs) < max_results:
        page = client.search_runs(experiment_ids, filter_string, order_by=list(order_by), page_token=token,
                                  max_results=min(1000, max_results - len(runs)))
        runs.extend(page)
        token = page.token
        if not token:
            break
    return runs


def _experiment_ids(client: MlflowClient, name: str) -> list[str]:
    """The id of experiment ``name`` as a list, empty when it does not exist (no creation)."""
    exp = client.get_experiment_by_name(name)
    return [] if exp is None or exp.lifecycle_stage != "active" else [exp.experiment_id]


# ---------------------------------------------------------------------------- experiments and runs
@_tracked
def experiment_id(name: str = EXPERIMENT) -> str:
    """The id of experiment ``name``, created (artifacts per :func:`artifact_root`) if missing."""
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
def run_link(run_id: str) -> str:
    """Where a person opens run ``run_id``: its page in the MLflow UI, or, for a database store
    with no UI known, the command that serves one."""
    run = _client().get_run(run_id)
    base = ui_base_url()
    if base is not None:
        return f"{base}/#/experiments/{run.info.experiment_id}/runs/{run_id}?{TRAINING_VIEW}"
    return (f"run {run_id} in experiment {run.info.experiment_id} of {redact(tracking_uri())} "
            f"(serve it with `mlflow ui --backend-store-uri {redact(tracking_uri())}` or `make ui`, "
            f"or set {MLFLOW_UI_URL_ENV})")


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
    from mlflow.entities import Metric

    _text(run_id, "run id")
    _text(key, "metric name")
    ts = _now_ms()
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


# ---------------------------------------------------------------------------- champions (Model Registry)
# One registered model per configuration (tasks/configuration.py); its versions are the placements
# ever promoted for it and its alias ``champion`` the one in production. Promotion is a
# compare-and-set under a lock the tracking store provides: registering a model name is atomic
# (names are unique in every MLflow store), so creating ``celeritas-lock-<name>`` takes the lock and
# deleting it releases it. A lock whose holder's lease has expired (a killed process) is broken.
ALIAS_CHAMPION = "champion"
LOCK_PREFIX = "celeritas-lock-"
LOCK_LEASE_S = 120.0
LOCK_WAIT_S = 60.0
PUBLISHED_FOLDER = "published"
TAG_CONFIG_KEY = "celeritas.config_key"
TAG_CONFIG = "celeritas.configuration"
TAG_REGISTERED_MODEL = "celeritas.registered_model"
TAG_MODEL_VERSION = "celeritas.model_version"
TAG_DECIDED_AT = "celeritas.decided_at"
TAG_OWNER = "celeritas.owner"
TAG_ERROR = "celeritas.error"
_LOCK_OWNER = "celeritas.lock_owner"
_LOCK_EXPIRES = "celeritas.lock_expires"


@dataclass(frozen=True)
class Champion:
    """The production placement of one configuration: a version of its registered model."""

    model: str
    config_key: str
    configuration: str
    registered_model: str
    version: str
    run_id: str
    job_id: str
    placer: str
    placement_uri: str
    placement_sha256: str
    step_time_s: float
    promoted_at: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The champion as a JSON object (``celeritas production show --json``), its configuration
        parsed (``configuration.json`` of the version)."""
        try:
            configuration: Any = json.loads(self.configuration)
        except ValueError:
            configuration = self.configuration
        return {**asdict(self), "configuration": configuration}


@dataclass(frozen=True)
class Decision:
    """One publish decision about a model (``celeritas production history``): when (ISO UTC), the
    configuration, promoted or kept, the run's best placer and its median step time (s), the
    champion's measured alongside, the relative gain and the test's p-value (None without a
    champion), the version promoted (None when kept), the parent run, the job and the reason."""

    decided_at: str
    config_key: str
    decision: str
    placer: str
    step_time_s: float | None
    champion_step_time_s: float | None
    gain: float | None
    p_value: float | None
    version: str | None
    run_id: str
    job_id: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The decision as a JSON object (``celeritas production history --json``)."""
        return asdict(self)


@dataclass(frozen=True)
class Promotion:
    """The outcome of :func:`promote_if_current`: promoted or not, why, and the champion after it."""

    promoted: bool
    reason: str
    champion: Champion | None


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _owner_token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _lock_expired(client: MlflowClient, lock: str) -> bool:
    """Whether the lock ``lock`` exists with an expired lease (its holder died)."""
    from mlflow.exceptions import MlflowException

    try:
        tags = client.get_registered_model(lock).tags
    except MlflowException:
        return False
    try:
        return float(tags.get(_LOCK_EXPIRES, "inf")) < time.time()
    except ValueError:
        return True


@contextmanager
def _registry_lock(client: MlflowClient, name: str, *, lease_s: float = LOCK_LEASE_S,
                   wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the store-wide lock ``name`` during the block (see the section's comment).

    Waits up to ``wait_s`` (then :class:`TransientTrackingError`: a retry may find it free); a
    lock older than its lease ``lease_s`` is taken to belong to a killed process and broken.
    """
    from mlflow.exceptions import MlflowException

    lock = LOCK_PREFIX + hashlib.sha256(name.encode()).hexdigest()[:24]
    token = _owner_token()
    deadline, delay = time.monotonic() + wait_s, 0.02
    while True:
        try:
            lease = {_LOCK_OWNER: token, _LOCK_EXPIRES: str(time.time() + lease_s)}
            client.create_registered_model(lock, tags=lease,
                                           description=f"celeritas lock for {name} (deleted when released)")
            break
        except MlflowException as exc:
            # taken; or taken and released at once: the store reports a duplicate by reading the
            # existing row back, which is gone if its holder deleted it meanwhile
            if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST"):
                raise
        if _lock_expired(client, lock):
            log.warning("breaking the expired lock %s (for %s)", lock, name)
            with suppress(MlflowException):
                client.delete_registered_model(lock)
            continue
        if time.monotonic() > deadline:
            raise TransientTrackingError(tracking_uri(), f"lock for {name} still held after {wait_s:.0f} s")
        time.sleep(delay * (1.0 + random.random()))
        delay = min(delay * 2.0, 0.5)
    try:
        yield
    finally:
        with suppress(MlflowException):
            if client.get_registered_model(lock).tags.get(_LOCK_OWNER) == token:
                client.delete_registered_model(lock)


def _ensure_registered_model(client: MlflowClient, name: str, model: str, config_key: str,
                             configuration: str) -> None:
    """Create the configuration's registered model if it does not exist yet (concurrency-safe)."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
        return
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    with suppress(MlflowException):  # created concurrently: fine
        client.create_registered_model(
            name, tags={TAG_MODEL: model, TAG_CONFIG_KEY: config_key,
                        TAG_CONFIG: _truncate(configuration, MAX_TAG_VALUE)},
            description=f"Celeritas placements of {model} for configuration {config_key}; alias "
                        f"'{ALIAS_CHAMPION}' is the one in production.")


def _champion_of(client: MlflowClient, name: str) -> Champion | None:
    """The version the alias ``champion`` of ``name`` points to, or None."""
    from mlflow.exceptions import MlflowException

    try:
        version = client.get_model_version_by_alias(name, ALIAS_CHAMPION)
        registered = client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None
        raise
    t = version.tags
    try:
        step = float(t.get("celeritas.step_time_s", "nan"))
    except ValueError:
        step = float("nan")
    return Champion(model=registered.tags.get(TAG_MODEL, ""),
                    config_key=registered.tags.get(TAG_CONFIG_KEY, ""),
                    configuration=registered.tags.get(TAG_CONFIG, ""), registered_model=name,
                    version=str(version.version), run_id=version.run_id or "", job_id=t.get(TAG_JOB, ""),
                    placer=t.get(TAG_PLACER, ""), placement_uri=f"{version.source}/placement.json",
                    placement_sha256=t.get("celeritas.placement_sha256", ""), step_time_s=step,
                    promoted_at=t.get(TAG_PROMOTED_AT, ""), reason=t.get(TAG_PROMOTE_REASON, ""))


@_tracked
def champion(registered_model: str) -> Champion | None:
    """The champion of the configuration whose registered model is ``registered_model``, or None."""
    _text(registered_model, "registered model")
    return _champion_of(_client(), registered_model)


@_tracked
def download_published(placement_uri: str, dest_dir: str | os.PathLike[str]) -> Path:
    """Download a champion's published file (:attr:`Champion.placement_uri`) into ``dest_dir``."""
    import mlflow.artifacts

    _text(placement_uri, "placement URI")
    return Path(mlflow.artifacts.download_artifacts(artifact_uri=placement_uri, dst_path=str(dest_dir),
                                                    tracking_uri=tracking_uri()))


@_tracked
def promote_if_current(*, registered_model: str, model: str, config_key: str, configuration: str,
                       run_id: str, expected_version: str | None, published: Mapping[str, str],
                       tags: Mapping[str, object], reason: str) -> Promotion:
    """Make the run's placement the configuration's champion if the champion is still
    ``expected_version`` (None: there was none): compare-and-set under the configuration's lock.

    ``published`` maps file names (``placement.json`` must be one) to local files, logged once to
    the run under ``published/``: the version's immutable artifacts. A retry of a promotion that
    went through returns it again instead of creating a second version.
    """
    for key in (registered_model, model, config_key, run_id):
        _text(key, "promotion field")
    if "placement.json" not in published:
        raise CeleritasInputError("promote_if_current: published files must include placement.json")
    client = _client()
    run = client.get_run(run_id)
    _ensure_registered_model(client, registered_model, model, config_key, configuration)
    with _registry_lock(client, registered_model):
        current = _champion_of(client, registered_model)
        if current is not None and current.run_id == run_id:
            return Promotion(True, "this run is already the champion (a retried publish)", current)
        if (current.version if current else None) != expected_version:
            now = current.version if current else "none"
            return Promotion(False, "the champion changed while this run measured it (measured against "
                                    f"version {expected_version or 'none'}, now {now}); production kept",
                             current)
        mine = [v for v in client.search_model_versions(f"name = {_quote(registered_model)}")
                if v.run_id == run_id]
        if mine:
            version = mine[0]
        else:
            with tempfile.TemporaryDirectory() as tmp:
                for filename, local in published.items():
                    shutil.copyfile(_local_path(local), Path(tmp) / filename)
                client.log_artifacts(run_id, tmp, PUBLISHED_FOLDER)
            version_tags = {**_tag_values(tags), TAG_PROMOTED_AT: _now_iso(),
                            TAG_PROMOTE_REASON: _truncate(reason, MAX_TAG_VALUE),
                            TAG_JOB: run.data.tags.get(TAG_JOB, ""),
                            "celeritas.placement_sha256": file_sha256(published["placement.json"])}
            source = f"{run.info.artifact_uri}/{PUBLISHED_FOLDER}"
            version = client.create_model_version(registered_model, source, run_id=run_id, tags=version_tags,
                                                  description=reason)
        client.set_registered_model_alias(registered_model, ALIAS_CHAMPION, str(version.version))
        promoted = _champion_of(client, registered_model)
    _set_tag_dict(client, run_id, {TAG_MODEL_VERSION: str(version.version),
                                   TAG_REGISTERED_MODEL: registered_model,
                                   TAG_PRODUCTION: "true", TAG_PROMOTED_AT: _now_iso()})
    if current is not None:
        with suppress(Exception):
            _set_tag_dict(client, current.run_id, {TAG_PRODUCTION: "false", TAG_SUPERSEDED_BY: run_id,
                                                   TAG_SUPERSEDED_AT: _now_iso()})
    return Promotion(True, reason, promoted)


@_tracked
def record_decision(run_id: str, decision: str, reason: str, *, config_key: str | None = None,
                    metrics: Mapping[str, float] | None = None, note: str | None = None) -> None:
    """Record the publish decision (``promoted``/``kept``), its reason, the configuration and the
    statistics' figures on the parent run (tags and metrics); ``note`` becomes the run's
    description in MLflow's UI (``mlflow.note.content``)."""
    _text(decision, "decision")
    tags: dict[str, object] = {TAG_DECISION: decision, TAG_REASON: str(reason), TAG_DECIDED_AT: _now_iso()}
    if note:
        tags[TAG_NOTE] = note
    if config_key:
        tags[TAG_CONFIG_KEY] = config_key
    set_tags(run_id, tags)
    if metrics:
        log_metrics(run_id, metrics)


@_tracked
def champions(model: str) -> list[Champion]:
    """The champion of every configuration of ``model`` (configurations without one are left out)."""
    _text(model, "model")
    if _store_is_empty():
        return []
    client = _client()
    found = client.search_registered_models(f"tags.`{TAG_MODEL}` = {_quote(model)}")
    names = [r.name for r in found if not r.name.startswith(LOCK_PREFIX)]
    out = [c for c in (_champion_of(client, name) for name in names) if c]
    return sorted(out, key=lambda c: (c.configuration, c.config_key))


@_tracked
def decision_history(model: str, *, experiment: str = EXPERIMENT, limit: int = 1000) -> list[Decision]:
    """Every publish decision about ``model`` (all its configurations), oldest first."""
    _text(model, "model")
    if _store_is_empty():
        return []
    runs = _parent_runs(_client(), model, experiment, limit)
    rows = [_decision_of(run) for run in runs if TAG_DECISION in run.data.tags]
    return sorted(rows, key=lambda d: d.decided_at)


def _parent_runs(client: MlflowClient, model: str, experiment: str, limit: int) -> list[Run]:
    """The newest ``limit`` parent runs of ``model`` in ``experiment`` (none if it does not exist)."""
    exp_ids = _experiment_ids(client, experiment)
    if not exp_ids:
        return []
    return _search(client, exp_ids, f"tags.`{TAG_MODEL}` = {_quote(model)} and tags.`{TAG_ROLE}` = 'parent'",
                   max_results=limit)


def _decision_of(run: Run) -> Decision:
    """The :class:`Decision` recorded on a parent run by :func:`record_decision` (step times in s)."""
    t, m = run.data.tags, _current_names(run.data.metrics)
    return Decision(decided_at=t.get(TAG_DECIDED_AT) or _iso(run.info.end_time or run.info.start_time) or "",
                    config_key=t.get(TAG_CONFIG_KEY, ""), decision=t.get(TAG_DECISION, ""),
                    placer=t.get(TAG_BEST_MEASURED, ""),
                    step_time_s=_seconds(m.get("challenger_median_step_time_ms")),
                    champion_step_time_s=_seconds(m.get("champion_median_step_time_ms")),
                    gain=m.get("gain_vs_champion"),
                    p_value=m.get("ab_p_value"), version=t.get(TAG_MODEL_VERSION) if t.get(TAG_DECISION)
                    == "promoted" else None, run_id=run.info.run_id, job_id=t.get(TAG_JOB, ""),
                    reason=t.get(TAG_REASON, ""))


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


def _fmt(value: object, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def format_runs_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text table of :func:`recent_runs` rows: a header, then one line per run."""
    if not rows:
        return "no runs"
    header = ("started (UTC)", "run_id", "status", "batch", "devices", "placer", "measured_ms",
              "simulated_ms", "speedup", "placement_s", "prod", "decision")
    lines = [header]
    for r in rows:
        started = (r.get("start_time") or "-").replace("T", " ").rstrip("Z")
        lines.append((started, str(r.get("run_id")), str(r.get("status")), _fmt(r.get("batch_size"), ""),
                      _fmt(r.get("devices"), ""), _fmt(r.get("placer"), ""),
                      _fmt(r.get("best_measured_step_time_ms"), ".3f"),
                      _fmt(r.get("best_simulated_step_time_ms"), ".3f"),
                      _fmt(r.get("speedup_vs_single"), ".2f"), _fmt(r.get("placement_time_s"), ".2f"),
                      "*" if r.get("production") else "", _fmt(r.get("decision"), "")))
    return format_table(lines[0], lines[1:], {6, 7, 8, 9})


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
