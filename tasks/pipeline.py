"""The whole pipeline without Airflow (``celeritas run``): the declared steps (:mod:`tasks.steps`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from tasks import tracking
from tasks.contracts import Job
from tasks.params import PipelineParams
from tasks.prepare import prepare
from tasks.steps import STEPS, PipelineResult, Step

#: The steps in the order they run, ``prepare`` first (the fields of :class:`~tasks.steps.PipelineResult`).
STEP_NAMES = PipelineResult.steps()


def run_pipeline(params: Mapping[str, Any] | PipelineParams, *, job_id: str | None = None,
                 progress: Callable[[str], None] | None = None) -> PipelineResult:
    """Run every step of the placement pipeline for ``params``; returns each step's result.

    ``prepare`` resolves the parameters, the model and the cluster once into the job; each later
    step takes the job and the results of its declared inputs. ``progress`` is told each step's
    name as it starts (a mapped step's: once per item, with the item's label). The MLflow parent
    run ends FINISHED, or FAILED when a step raises (the error propagates).
    """
    job_id = job_id or f"manual-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    say = progress or (lambda _msg: None)
    say("prepare")
    prepared = prepare(params, job_id=job_id, tags={"celeritas.trigger": "cli"})
    job = prepared.job
    results: dict[str, Any] = {"prepare": prepared}
    try:
        for step in STEPS:
            results[step.name] = _run_step(step, job, results, say)
    except BaseException:
        tracking.end_run(job.parent_run_id, "FAILED")
        raise
    tracking.end_run(job.parent_run_id, "FINISHED")
    return PipelineResult(**results)


def _run_step(step: Step, job: Job, results: Mapping[str, Any], say: Callable[[str], None]) -> Any:
    """One step on ``job`` and its inputs' results; a mapped step once per item, as a tuple."""
    inputs = [results[name] for name in step.inputs]
    if not step.mapped:
        say(step.name)
        return step.run(job, *inputs)
    runs = []
    for item in inputs[0].items:
        say(f"{step.name} {getattr(item, step.label)}")
        runs.append(step.run(job, item))
    return tuple(runs)
