"""The placement pipeline's Airflow tasks, shared by the ad-hoc DAG and the scheduled fleet DAG.

The steps' tasks are made from their declaration (``tasks/steps.py``: name, inputs, contract, GPU or
not), one per step and wired by their inputs, so a new step needs no change here. Each task body
decodes its XCom inputs into the contracts of ``tasks/contracts.py`` (``from_xcom``), calls one
step from ``tasks/`` and encodes the result (``to_xcom``). GPU-node
tasks carry ``queue="gpu"`` and the ``gpu`` pool, so a Celery or Kubernetes deployment sends them
to GPU workers. Every task has an ``execution_timeout``; failures are redacted of credentials.
This module imports no TensorFlow, MLflow, boto3 or numpy (the DAG processor parses it often), and
is listed in ``.airflowignore``: it holds tasks, not DAGs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import Asset, get_current_context, setup, task, teardown
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.log import mask_secret

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.redact import install_log_redaction, redact
from tasks.contracts import Job, PublishResult
from tasks.params import DEFAULT_GPU_POOL, GPU_POOL_ENV
from tasks.steps import BY_NAME, STEPS, Step

#: Published placements; downstream training DAGs can use ``schedule=[PUBLISHED_PLACEMENT]``.
PUBLISHED_PLACEMENT = Asset(name="celeritas_published_placement", uri="celeritas://placements/published")

log = logging.getLogger("celeritas.steps")
#: The steps a later step maps over (``plan_validation``, whose items ``validate`` maps over).
MAP_SOURCES = frozenset(step.inputs[0] for step in STEPS if step.mapped)
#: The XCom key under which such a step leaves its whole result (its return value is the items).
#: Named ``plan`` before the steps were declared, and kept: a task cleared after an upgrade still
#: reads what an older worker left.
WHOLE_RESULT_KEY = "plan"


def _minutes(name: str, default: int) -> timedelta:
    """A task time limit from the environment variable ``name`` (minutes)."""
    return timedelta(minutes=float(os.environ.get(name) or default))


#: The limit of a light task (parsing, fitting, placing, publishing) and of a GPU-node task.
TASK_TIMEOUT = _minutes("CELERITAS_TASK_TIMEOUT_MINUTES", 60)
GPU_TASK_TIMEOUT = _minutes("CELERITAS_GPU_TASK_TIMEOUT_MINUTES", 240)
GPU = {"queue": os.environ.get("CELERITAS_GPU_QUEUE", "gpu"),
       "pool": os.environ.get(GPU_POOL_ENV, DEFAULT_GPU_POOL), "execution_timeout": GPU_TASK_TIMEOUT}

DEFAULT_ARGS = {
    "owner": "ml-platform",
    "retries": int(os.environ.get("CELERITAS_RETRIES", "2")),
    # the first retry's delay; each further one doubles it (at most 10 minutes)
    "retry_delay": timedelta(seconds=float(os.environ.get("CELERITAS_RETRY_DELAY_SECONDS") or 30)),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
    "execution_timeout": TASK_TIMEOUT,
    # each step logs its own summary and the MLflow link (_run_step), not the whole XCom dict
    "show_return_value_in_logs": False,
}


def _call(step: Callable[[], Any]) -> Any:
    """Run ``step`` (a call into ``tasks/``, decoding and encoding its XCom) with credentials masked
    in the task log; deterministic failures (bad input or XCom, a model that cannot fit) fail
    without retry, transient ones (storage, tracking server, runtime) are retried. A tracking server
    that cannot be reached is waited for first (``CELERITAS_TRACKING_WAIT_S``, default 120 s), and
    metric points carry the DAG run's start as their time, so a retry logs nothing twice.
    Messages are redacted of credentials either way; a transient storage or tracking failure is
    raised as its one line, without the client library's chain of causes."""
    # lazy: the DAG processor parses this file often; the task's modules load when it runs
    from tasks import tracking
    from tasks.storage import TransientStorageError

    install_log_redaction()
    _mask_tracking_credentials()
    try:
        tracking.wait_for_server(tracking.task_wait_s())
        tracking.pin_metric_time(_run_start_ms())
        return step()
    except CeleritasInputError as exc:
        raise AirflowFailException(redact(str(exc))) from None
    except (TransientStorageError, tracking.TransientTrackingError) as exc:
        raise type(exc)(exc.uri, redact(exc.cause)) from None  # one line, retried
    except Exception as exc:
        if _holds_secrets(exc):  # the traceback would print them: raise a clean one (still retried)
            raise RuntimeError(f"{type(exc).__name__}: {redact(str(exc))}") from None
        raise
    finally:  # back to the defaults: a process running tasks in turn (dag.test) starts each afresh
        tracking.wait_for_server(0)
        tracking.pin_metric_time(None)


def _run_start_ms() -> int | None:
    """The DAG run's start (ms since the epoch), the same for every try of its tasks; None outside
    a task."""
    try:
        started = getattr(get_current_context()["dag_run"], "start_date", None)
    except Exception:  # no task context (a test calling a body directly)
        return None
    return int(started.timestamp() * 1000) if started else None


def _run_step(step: Callable[[], Any], job: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``step`` (a call into ``tasks/`` returning a contract) through :func:`_call`, logging its
    start, its duration, its summary (tables and figures), the MLflow parent run's link and the
    link of each placer's child run the step worked on; returns the contract as XCom."""
    task_id = get_current_context()["ti"].task_id
    log.info("%s: started", task_id)
    started = time.monotonic()
    result = _call(step)
    log.info("%s: done in %.1f s\n%s", task_id, time.monotonic() - started, result.summary())
    parent_run_id = getattr(result, "parent_run_id", None) or (job or {}).get("parent_run_id")
    if parent_run_id:
        _log_run_link(str(parent_run_id))
    for placer, run_id in _child_runs(result).items():  # the parent's line above says how to serve a UI
        _log_run_link(run_id, f"MLflow run of placer {placer}", serve_hint=not parent_run_id)
    return result.to_xcom()


def _child_runs(result: Any) -> dict[str, str]:
    """Placer → MLflow child run of the placers a step's result is about: one (``validate``:
    ``child_run_id``) or every placer (``place``: ``child_runs``)."""
    one = getattr(result, "child_run_id", None)
    if one:
        return {str(result.placer): str(one)}
    return {str(k): str(v) for k, v in (getattr(result, "child_runs", None) or {}).items()}


def _log_run_link(run_id: str, label: str = "MLflow run", *, serve_hint: bool = True) -> None:
    """Log where the MLflow run is (the record carries the run id as
    :data:`tasks.tracking.RUN_LINK_ATTR`, so a console showing every task's log can show each run's
    link once: ``make demo``); a tracking store that cannot answer only costs the link."""
    # lazy: the DAG processor parses this file often; a step's modules load when its task runs
    from tasks.tracking import RUN_LINK_ATTR, run_link

    try:
        log.info("%s: %s", label, run_link(run_id, serve_hint=serve_hint), extra={RUN_LINK_ATTR: run_id})
    except Exception as exc:  # the step itself succeeded: a missing link must not fail it
        log.warning("%s %s: no link (%s)", label, run_id, redact(str(exc)))


def _holds_secrets(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from or during has a credential in its text."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if redact(str(current)) != str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def _mask_tracking_credentials() -> None:
    """Tell Airflow's secrets masker the password of a tracking URI with credentials, if any."""
    password = urlsplit(os.environ.get("MLFLOW_TRACKING_URI", "")).password
    if password:
        mask_secret(password)


def _run_tags(**context: Any) -> dict[str, str]:
    """The Airflow tags of a job's MLflow parent run."""
    dag_run = context["dag_run"]
    return {"airflow.dag_id": dag_run.dag_id, "airflow.run_id": dag_run.run_id,
            "celeritas.trigger": str(getattr(dag_run, "run_type", "unknown"))}


@setup
@task(retries=0)
def prepare(**context: Any) -> dict[str, Any]:
    """Validate the form's parameters, fix the run directory, open the MLflow parent run."""
    # lazy: the DAG processor parses this file often; a step's modules load when its task runs
    from tasks.prepare import prepare as run

    job_id = context["dag_run"].run_id
    # reopen: clearing a task re-runs this setup, which then reuses the run's ended parent run
    return _run_step(lambda: run(context["params"], job_id=job_id, tags=_run_tags(**context),
                                 reopen=True).job)


@setup
@task(retries=0)
def prepare_model(entry: dict[str, Any], **context: Any) -> dict[str, Any]:
    """A fleet model's ``prepare``: its parameters from the production-models file; job id
    ``RUN_ID/NAME``."""
    # lazy: the DAG processor parses this file often; a step's modules load when its task runs
    from tasks.fleet import FleetModel
    from tasks.prepare import prepare as run

    model = _call(lambda: FleetModel(name=str(entry["name"]), params=dict(entry["params"])))
    job_id = f"{context['dag_run'].run_id}/{model.name}"
    tags = {**_run_tags(**context), "celeritas.fleet_model": model.name}
    return _run_step(lambda: run(model.params, job_id=job_id, tags=tags, reopen=True).job)


def _decode(name: str, value: Any) -> Any:
    """The XCom of step ``name``'s result as its contract (a mapped step's: the tuple of them)."""
    step = BY_NAME[name]
    if step.mapped:  # a mapped task's results: a lazy sequence, read by index
        return tuple(step.returns.from_xcom(value[i]) for i in range(len(value)))
    return step.returns.from_xcom(value)


def _step_task(step: Step) -> Any:
    """The task of a step that runs once: it decodes the job and its inputs' XCom into contracts,
    runs the step and returns its result as XCom. A step that a later one maps over returns the
    items (Airflow maps only over a task's return value) and leaves its whole result under XCom key
    :data:`WHOLE_RESULT_KEY` for the others."""
    source = step.name in MAP_SOURCES

    def body(job: dict[str, Any], *inputs: Any) -> Any:
        result = _run_step(lambda: step.run(Job.from_xcom(job), *(
            _decode(name, value) for name, value in zip(step.inputs, inputs, strict=True))), job)
        if not source:
            return result
        get_current_context()["ti"].xcom_push(key=WHOLE_RESULT_KEY, value=result)
        return result["items"]

    return task(_named(body, step.name, step.summary), task_id=step.name, multiple_outputs=not source,
                **(GPU if step.gpu else {}))


def _mapped_task(step: Step) -> Any:
    """The task of a mapped step: one task instance per item, named in the UI by its label."""
    item_type = step.item_type(BY_NAME[step.inputs[0]])

    def body(job: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
        get_current_context()[step.label] = str(item.get(step.label, "?"))  # type: ignore[literal-required]
        return _run_step(lambda: step.run(Job.from_xcom(job), item_type.from_xcom(item)), job)

    return task(_named(body, step.name, step.summary), task_id=step.name, multiple_outputs=True,
                map_index_template=f"{{{{ {step.label} }}}}", **(GPU if step.gpu else {}))


def _all_items_task(step: Step) -> Any:
    """A mapped step as one task over every item, one after another (``<step>_all``: the fleet DAG's,
    as Airflow cannot map a task inside a mapped task group)."""
    source = BY_NAME[step.inputs[0]]

    def body(job: dict[str, Any], whole: dict[str, Any]) -> list[dict[str, Any]]:
        decoded_job, plan = _call(lambda: (Job.from_xcom(job), source.returns.from_xcom(whole)))
        return [_run_step(lambda item=item: step.run(decoded_job, item), job) for item in plan.items]

    summary = f"{step.summary} Every item in one task: Airflow cannot map inside a mapped task group."
    return task(_named(body, f"{step.name}_all", summary), task_id=f"{step.name}_all", multiple_outputs=False,
                **(GPU if step.gpu else {}))


def _named(body: Callable[..., Any], name: str, doc: str) -> Callable[..., Any]:
    """``body`` named and documented as the step's task (the UI shows the docstring)."""
    body.__name__ = body.__qualname__ = name
    body.__doc__ = doc
    return body


@task.short_circuit
def promoted(decision: dict[str, Any]) -> bool:
    """Continue to the Asset only when the new placement was promoted."""
    return _call(lambda: PublishResult.from_xcom(decision).promoted)


@task(outlets=[PUBLISHED_PLACEMENT])
def announce(decision: dict[str, Any], *, outlet_events: Any = None) -> str | None:
    """Emit the published-placement Asset event: model, configuration, version, placer, URI."""
    published = _call(lambda: PublishResult.from_xcom(decision))
    outlet_events[PUBLISHED_PLACEMENT].extra = {
        "model": published.model, "config_key": published.config_key,
        "version": published.champion_version, "placement_uri": published.placement_uri,
        "step_time_s": published.step_time_s, "placer": published.placer,
    }
    return published.placement_uri


def close_run(job: Any, decision: Any) -> Any:
    """The teardown task ``close_run`` for ``job`` and ``decision`` (XComArgs), built afresh for each
    DAG: Airflow's teardown decorator can be applied only once."""
    closing = task(task_id="close_run", retries=1)(_close_run)
    return teardown(closing, on_failure_fail_dagrun=True)(job, decision)


def _close_run(job: dict[str, Any] | None, decision: dict[str, Any] | None) -> str:
    """End the MLflow parent run once every step is done: FINISHED when ``publish`` decided,
    FAILED when a step failed for good (then ``publish`` left no decision: ``None``)."""
    # lazy: the DAG processor parses this file often; a step's modules load when its task runs
    from tasks.prepare import close_run as run

    try:  # whatever failed upstream, the run is closed: an unreadable job or decision counts as none
        decoded = Job.from_xcom(job) if job else None
    except CeleritasInputError:
        decoded = None
    try:
        outcome = PublishResult.from_xcom(decision) if decision else None
    except CeleritasInputError:
        outcome = None
    return _call(lambda: run(decoded, outcome))


def placement_steps(job: Any, *, mapped_validation: bool) -> tuple[Any, list[Any]]:
    """Wire the declared steps (:data:`tasks.steps.STEPS`) after ``prepare`` for ``job`` (an XComArg),
    each fed its inputs' outputs; returns ``publish``'s output and every step's, for the teardown.
    ``mapped_validation``: a mapped step is one mapped GPU task per item (the ad-hoc DAG) or one
    GPU task for them all (inside the fleet's mapped task group)."""
    outputs: dict[str, Any] = {}
    for step in STEPS:
        inputs = [outputs[name][WHOLE_RESULT_KEY] if name in MAP_SOURCES else outputs[name]
                  for name in step.inputs]
        if step.mapped and mapped_validation:
            out = _mapped_task(step).partial(job=job).expand(item=outputs[step.inputs[0]])
        elif step.mapped:
            out = _all_items_task(step)(job, *inputs)
        else:
            out = _step_task(step)(job, *inputs)
        for name in step.after:
            outputs[name] >> out
        outputs[step.name] = out
    decision = outputs["publish"]
    promoted(decision) >> announce(decision)
    return decision, list(outputs.values())
