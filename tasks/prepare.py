"""Pipeline step 0 (light): validate the parameters, fix the run directory, open the MLflow parent run
(and, at the end, close it: :func:`close_run`)."""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from celeritas_core.defaults import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE
from celeritas_core.errors import CeleritasInputError
from celeritas_core.redact import redact
from celeritas_tf.models import ZOO
from tasks import storage, tracking
from tasks.common import artifact
from tasks.configuration import configuration_of, configuration_to_json, model_identity
from tasks.contracts import ClusterSpec, Job, PrepareResult, PublishResult, ResolvedModel
from tasks.params import PipelineParams, resolve_params
from tasks.policy import ModelReference, check_run_dir, resolve_model, runs_root

log = logging.getLogger(__name__)


def default_run_dir(model: str, job_id: str) -> str:
    """``MODEL/JOB`` under the runs root (:func:`tasks.policy.runs_root`: ``CELERITAS_RUNS_ROOT``,
    default ``build/runs`` under ``CELERITAS_HOME`` or the working folder)."""
    safe = lambda text: re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"  # noqa: E731
    name = Path(model).stem if "/" in model else model.replace(":", "_")
    return str(runs_root() / safe(name) / safe(job_id))


def run_label(params: PipelineParams) -> str:
    """What a parent run's name starts with: the model, the batch and the devices
    (``tensor_holography b16 4dev``; :func:`tasks.tracking.parent_run_name` adds the run id)."""
    name = Path(params.model).stem if "/" in params.model else params.model
    return f"{name} b{params.batch_size} {params.num_devices}dev"


def git_commit() -> str:
    """The project's git commit, or ``unknown`` outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=False, timeout=5, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def prepare(params: Mapping[str, Any] | PipelineParams, *, job_id: str, tags: Mapping[str, str] | None = None,
            reopen: bool = False) -> PrepareResult:
    """Resolve ``params``, the model and the cluster, write ``params.json`` in the run directory and
    start the parent run.

    ``job_id`` identifies the job (the Airflow run id): a retry reuses the same parent run and run
    directory; with ``reopen`` (the DAG, whose cleared tasks re-run ``prepare``) even a parent run
    that has ended. The result's :attr:`~tasks.contracts.PrepareResult.job` is what the other
    steps take: the typed parameters, the model as the policy resolved it and the cluster, so no
    step resolves them again.
    """
    try:
        resolved = resolve_params(params)
        reference = resolve_model(resolved.model, resolved.model_knobs, paper=resolved.paper_config)
        run_dir = check_run_dir(resolved.run_dir) if resolved.run_dir else \
            default_run_dir(resolved.model, job_id)
        resolved = replace(resolved, run_dir=run_dir)
        config = configuration_to_json(configuration_of(resolved, _identity(resolved, reference)))
        _claim_run_dir(run_dir, job_id)
    except CeleritasInputError as exc:
        _record_rejection(params, job_id, tags, exc)
        raise
    all_tags = {"celeritas.batch_size": str(resolved.batch_size),
                "celeritas.devices": str(resolved.num_devices), "celeritas.run_dir": run_dir,
                "celeritas.git_commit": git_commit(), tracking.TAG_CONFIG_KEY: config["key"],
                tracking.TAG_REGISTERED_MODEL: config["registered_model"], **dict(tags or {})}
    parent = tracking.start_parent_run(model=resolved.model, run_name=run_label(resolved), job_id=job_id,
                                       tags=all_tags, params=resolved.to_json(), reopen=reopen)
    params_uri = storage.write_json(artifact(run_dir, "params"), resolved.to_json())
    storage.write_json(artifact(run_dir, "configuration"), config)
    return PrepareResult(params=resolved, run_dir=run_dir, params_uri=params_uri, parent_run_id=parent,
                         configuration=config, model=_resolved_model(resolved, reference),
                         cluster=_cluster(resolved))


def _resolved_model(params: PipelineParams, reference: ModelReference) -> ResolvedModel:
    """What the steps build the model from: the policy's reference, a zoo model's knobs and size."""
    return ResolvedModel(kind=reference.kind, name=reference.name, location=reference.location or None,
                         content_sha256=reference.content_sha256 or None,
                         knobs=dict(params.model_knobs) if reference.kind == "zoo" else {},
                         paper_config=params.paper_config)


def _cluster(params: PipelineParams) -> ClusterSpec:
    """The parameters' devices with the default transfer model or their topology preset
    (``calibrate_comm`` may measure them)."""
    return ClusterSpec(num_devices=params.num_devices, device_memory_bytes=params.device_memory_bytes,
                       slope_us_per_byte=DEFAULT_SLOPE_US_PER_BYTE, intercept_us=DEFAULT_INTERCEPT_US,
                       topology=params.topology)


def configuration_for(params: Mapping[str, Any] | PipelineParams) -> dict[str, Any]:
    """The configuration a run with ``params`` is compared within, as ``prepare`` computes it.

    Parameters
    ----------
    params : Mapping or PipelineParams
        Pipeline parameters (missing ones take :func:`tasks.params.defaults`).

    Returns
    -------
    dict
        :func:`tasks.configuration.configuration_to_json` of it: its ``key``, the registered model's
        name, the model identity, the batch size and the cluster.
    """
    resolved = resolve_params(params)
    reference = resolve_model(resolved.model, resolved.model_knobs, paper=resolved.paper_config)
    return configuration_to_json(configuration_of(resolved, _identity(resolved, reference)))


def _identity(params: PipelineParams, reference: ModelReference) -> dict[str, Any]:
    """The model identity of resolved ``params`` (see :func:`tasks.configuration.model_identity`):
    a zoo model by name and knobs, a user model by the SHA-256 of its content."""
    if reference.kind != "zoo":
        return model_identity(reference.kind, params.model, content_sha256=reference.content_sha256)

    entry, paper = ZOO[params.model], params.paper_config
    # the knobs the model is built with: written-out defaults are the same model as omitted ones
    knobs = {**(entry.paper_config if paper else entry.small_config), **params.model_knobs}
    return model_identity("zoo", params.model, knobs=knobs, paper=paper)


def _record_rejection(params: Any, job_id: str, tags: Mapping[str, str] | None,
                      error: CeleritasInputError) -> None:
    """Record refused parameters as a FAILED parent run (tag ``celeritas.error``), when the
    tracking store can be reached; the refusal itself is raised by the caller either way."""
    model = params.model if isinstance(params, PipelineParams) else \
        params.get("model") if isinstance(params, Mapping) else None
    name = model.strip()[:200] if isinstance(model, str) and model.strip() else "invalid"
    try:
        tracking.record_rejected_job(model=name, job_id=job_id, message=str(error), tags=tags)
    except Exception as exc:  # the refusal matters more than its record
        log.warning("could not record the refused job %s in MLflow: %s", job_id, redact(str(exc)))


def _claim_run_dir(run_dir: str, job_id: str) -> None:
    """Mark ``run_dir`` as the job's (``job.json``); refuse one that holds another job's artifacts,
    so that no run ever rewrites files another run published or points to."""
    marker = storage.join(run_dir, "job.json")
    if storage.exists(marker):
        owner = storage.read_json(marker)
        if not isinstance(owner, dict) or owner.get("job_id") != job_id:
            other = owner.get("job_id") if isinstance(owner, dict) else "?"
            raise CeleritasInputError(f"parameter 'run_dir': {run_dir} already holds the artifacts of job "
                                      f"{other!r}; choose another run directory (or leave it empty)")
        return
    if storage.list_uris(run_dir):
        raise CeleritasInputError(f"parameter 'run_dir': {run_dir} is not empty and belongs to no job; "
                                  "choose another run directory (or leave it empty)")
    storage.write_json(marker, {"job_id": job_id})


def close_run(job: Job | None, decision: PublishResult | None) -> str:
    """End the job's MLflow parent run: FINISHED once ``publish`` has decided, else FAILED (a step
    failed for good; the run is tagged ``celeritas.publish_decision=failed``). Returns the status.
    Without a usable job (``prepare`` failed, or its XCom is unreadable) there is no run to close:
    it says so in the log and returns FAILED. A tracking failure is one line: the store unreachable
    (:class:`~tasks.tracking.TransientTrackingError`, retried) or the run refused (CeleritasInputError)."""
    if not isinstance(job, Job) or not job.parent_run_id:
        log.warning("close_run: no job to close (prepare failed or left no usable job): %r", job)
        return "FAILED"
    status = "FINISHED" if decision is not None else "FAILED"
    try:
        if decision is None:
            tracking.set_tags(job.parent_run_id, {
                "celeritas.publish_decision": "failed",
                tracking.TAG_NOTE: "Failed: a step failed before publish decided; production unchanged "
                                   "(see the failed task's log)"})
        tracking.end_run(job.parent_run_id, status)
    except CeleritasInputError as exc:  # e.g. the run was deleted: say which run and what (one line)
        raise CeleritasInputError(f"close_run: cannot end MLflow parent run {job.parent_run_id} as {status}: "
                                  f"{redact(str(exc))}") from None
    return status
