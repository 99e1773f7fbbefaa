"""Pipeline step 0 (light): validate the parameters, fix the run directory, open the MLflow parent run
(and, at the end, close it: :func:`close_run`)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from celeritas_core.errors import CeleritasInputError
from tasks import storage, tracking
from tasks.common import artifact
from tasks.configuration import configuration_of, configuration_to_json, model_identity
from tasks.contracts import Job, PrepareResult, PublishResult
from tasks.params import resolve_params


def default_run_dir(model: str, job_id: str) -> str:
    """``build/runs/MODEL/JOB`` under the project (``CELERITAS_HOME``, default the working folder)."""
    import os
    import re

    home = Path(os.environ.get("CELERITAS_HOME") or Path.cwd())
    safe = lambda text: re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"  # noqa: E731
    return str(home / "build" / "runs" / safe(Path(model).stem if "/" in model else model) / safe(job_id))


def git_commit() -> str:
    """The project's git commit, or ``unknown`` outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=False, timeout=5, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def prepare(params: Mapping[str, Any], *, job_id: str, tags: Mapping[str, str] | None = None,
            reopen: bool = False) -> PrepareResult:
    """Resolve ``params``, write ``params.json`` in the run directory and start the parent run.

    ``job_id`` identifies the job (the Airflow run id): a retry reuses the same parent run and run
    directory; with ``reopen`` (the DAG, whose cleared tasks re-run ``prepare``) even a parent run
    that has ended. The result's :attr:`~tasks.contracts.PrepareResult.job` is what the other
    steps take.
    """
    resolved = resolve_params(params)
    run_dir = resolved["run_dir"] or default_run_dir(resolved["model"], job_id)
    resolved["run_dir"] = run_dir
    config = configuration_to_json(configuration_of(resolved, _identity(resolved)))
    _claim_run_dir(run_dir, job_id)
    all_tags = {"celeritas.batch_size": str(resolved["batch_size"]),
                "celeritas.devices": str(resolved["num_devices"]), "celeritas.run_dir": run_dir,
                "celeritas.git_commit": git_commit(), tracking.TAG_CONFIG_KEY: config["key"],
                tracking.TAG_REGISTERED_MODEL: config["registered_model"], **dict(tags or {})}
    parent = tracking.start_parent_run(model=resolved["model"], run_name=f"{resolved['model']} {job_id}",
                                       job_id=job_id, tags=all_tags, params=resolved, reopen=reopen)
    params_uri = storage.write_json(artifact(run_dir, "params"), resolved)
    storage.write_json(artifact(run_dir, "configuration"), config)
    return PrepareResult(params=resolved, run_dir=run_dir, params_uri=params_uri, parent_run_id=parent,
                         configuration=config)


def _identity(params: Mapping[str, Any]) -> dict[str, Any]:
    """The model identity of resolved ``params`` (see :func:`tasks.configuration.model_identity`)."""
    return model_identity("zoo", params["model"], knobs=params.get("model_knobs"),
                          paper=bool(params.get("paper_config")))


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
    failed for good; the run is tagged ``celeritas.publish_decision=failed``). Returns the status."""
    if job is None:  # prepare itself failed: there is no parent run to close
        return "FAILED"
    if decision is None:
        tracking.set_tags(job.parent_run_id, {"celeritas.publish_decision": "failed"})
        tracking.end_run(job.parent_run_id, "FAILED")
        return "FAILED"
    tracking.end_run(job.parent_run_id, "FINISHED")
    return "FINISHED"
