"""The tracking store: where runs go (:func:`tracking_uri`), the ``MlflowClient`` on it, MLflow's
errors turned into one line (:class:`TransientTrackingError` or ``CeleritasInputError``), the
tag names and value checks every part of :mod:`tasks.tracking` shares, and the low-level calls
that log within MLflow's per-request limits.

mlflow is imported inside the functions that talk to the store, so DAG files parse without it.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import numbers
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar
from urllib.parse import urlsplit, urlunsplit

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.redact import redact

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
#: The transfer model a run used (``calibrated`` or ``default``: ``calibrate_comm``'s outcome, whatever
#: the configuration asked for) and why the default (a rejected calibration's reason), on its parent run.
TAG_TRANSFER_MODEL = "celeritas.transfer_model"
TAG_TRANSFER_REASON = "celeritas.transfer_model_reason"
TAG_PARENT = "mlflow.parentRunId"
#: The run's description in MLflow's UI.
TAG_NOTE = "mlflow.note.content"
TAG_OWNER = "celeritas.owner"
#: Where the MLflow UI is, for the links in task logs (default: the tracking URI, when it is http).
MLFLOW_UI_URL_ENV = "CELERITAS_MLFLOW_UI_URL"
#: MLflow 3's UI picks its GenAI or model-training view with a switch kept in the browser; this
#: query parameter on a link opens the model-training view (the experiment's kind tag does not).
TRAINING_VIEW = "workflowType=machine_learning"

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

P = ParamSpec("P")
R = TypeVar("R")

#: How long a call waits for an unreachable tracking server before it fails (s): the pipeline's
#: tasks set it (:func:`wait_for_server`; the DAG's from ``CELERITAS_TRACKING_WAIT_S``, default
#: 120); 0 elsewhere, so an interactive command fails at once.
WAIT_ENV = "CELERITAS_TRACKING_WAIT_S"
DEFAULT_TASK_WAIT_S = 120.0
_MAX_PAUSE_S = 15.0
_server_wait_s = [0.0]
#: When the outermost tracked call began (ms since the epoch), None outside one: the timestamp of
#: every metric point it logs, so a call repeated after a lost answer logs identical points, which
#: the store keeps once (its metric key is name, timestamp, step and value).
_call_began_ms: ContextVar[int | None] = ContextVar("celeritas_tracking_call_began_ms", default=None)
#: The timestamp of every metric point this process logs, when pinned (:func:`pin_metric_time`).
_pinned_metric_ms: list[int | None] = [None]


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
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
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
        # lazy: mlflow loads only when the store is used, so DAG files parse without it
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


def task_wait_s() -> float:
    """The wait of a pipeline task (s): ``CELERITAS_TRACKING_WAIT_S``, default
    :data:`DEFAULT_TASK_WAIT_S`; a value that is not a number is refused in one line."""
    text = (os.environ.get(WAIT_ENV) or "").strip()
    try:
        return float(text) if text else DEFAULT_TASK_WAIT_S
    except ValueError:
        raise CeleritasInputError(f"{WAIT_ENV}={text!r}: expected seconds (e.g. 120)") from None


def wait_for_server(seconds: float) -> None:
    """Make every later tracked call wait up to ``seconds`` for an unreachable tracking server
    (retrying with pauses of 1, 2, 4 … 15 s) before it raises :class:`TransientTrackingError`."""
    if not math.isfinite(seconds) or seconds < 0:
        raise CeleritasInputError(f"{WAIT_ENV}: expected seconds >= 0, not {seconds!r}")
    _server_wait_s[0] = float(seconds)


def _tracked(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` under :func:`_translated`; the outermost tracked call is repeated while the
    tracking server stays unreachable, for up to :func:`wait_for_server`'s seconds. Every call
    here is safe to repeat: runs are found before they are created, parameters are logged once,
    tags overwritten, and metric points repeated identically (:data:`_call_began_ms`)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if _call_began_ms.get() is not None:  # inside another tracked call, which repeats the whole
            with _translated():
                return fn(*args, **kwargs)
        token = _call_began_ms.set(int(time.time() * 1000))
        try:
            return _repeated_while_unreachable(lambda: fn(*args, **kwargs))
        finally:
            _call_began_ms.reset(token)

    return wrapper


def _repeated_while_unreachable(call: Callable[[], R]) -> R:
    """``call()``, repeated after pauses while it raises :class:`TransientTrackingError`, until the
    wait (:func:`wait_for_server`) is spent; then the error, saying how long it waited."""
    wait_s = _server_wait_s[0]
    deadline = time.monotonic() + wait_s
    pause = 1.0
    while True:
        try:
            with _translated():
                return call()
        except TransientTrackingError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                if wait_s <= 0:
                    raise
                raise TransientTrackingError(exc.uri, f"{exc.cause} (for {wait_s:.0f} s)") from None
            log.warning("%s: trying again in %.0f s (waiting up to %.0f s more)", exc, min(pause, left), left)
            time.sleep(min(pause, left))
            pause = min(2 * pause, _MAX_PAUSE_S)


def pin_metric_time(ms: int | None) -> None:
    """Give every metric point this process logs the timestamp ``ms`` (ms since the epoch; None:
    the tracked call's start again). A pipeline task pins its DAG run's start: a retried task then
    logs the points its killed try had logged identically, and the store keeps them once (a
    cleared run starts again, so its tasks log anew)."""
    if ms is not None and (not isinstance(ms, int) or isinstance(ms, bool) or ms < 0):
        raise CeleritasInputError(f"metric time: expected ms since the epoch, not {ms!r}")
    _pinned_metric_ms[0] = ms


def _metric_ms() -> int:
    """The timestamp of the metric points logged now: the pinned time (:func:`pin_metric_time`),
    else the outermost tracked call's start."""
    if _pinned_metric_ms[0] is not None:
        return _pinned_metric_ms[0]
    began = _call_began_ms.get()
    return began if began is not None else _now_ms()


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
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
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
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
    from mlflow.entities import Metric

    ts = _metric_ms()
    _log_batch(client, run_id, metrics=[Metric(k, v, ts, step) for k, v in metrics.items()])


def _set_tag_dict(client: MlflowClient, run_id: str, tags: Mapping[str, str]) -> None:
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
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
