"""The whole pipeline without Airflow: the same step functions in order (``celeritas run``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from tasks import tracking
from tasks.calibrate_comm import calibrate_comm
from tasks.contracts import PipelineResult
from tasks.fit_regression import fit_regression
from tasks.fuse import fuse
from tasks.place import place
from tasks.prepare import prepare
from tasks.profile_small_batches import profile_small_batches
from tasks.publish import publish
from tasks.remeasure_large_batch import remeasure_large_batch
from tasks.validate import plan_validation, validate

#: The steps in the order they run (the fields of :class:`~tasks.contracts.PipelineResult`).
STEPS = PipelineResult.steps()


def run_pipeline(params: Mapping[str, Any], *, job_id: str | None = None,
                 progress: Callable[[str], None] | None = None) -> PipelineResult:
    """Run every step of the placement pipeline for ``params``; returns each step's result.

    The MLflow parent run ends FINISHED, or FAILED when a step raises (the error propagates).
    """
    job_id = job_id or f"manual-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    say = progress or (lambda _msg: None)
    say("prepare")
    prepared = prepare(params, job_id=job_id, tags={"celeritas.trigger": "cli"})
    job = prepared.job
    try:
        say("calibrate_comm")
        calibration = calibrate_comm(job)
        say("profile_small_batches")
        profile = profile_small_batches(job)
        say("fit_regression")
        fits = fit_regression(job, profile)
        say("remeasure_large_batch")
        measured = remeasure_large_batch(job, fits, calibration)
        say("fuse")
        fusion = fuse(job, measured, calibration)
        say("place")
        placed = place(job, measured, calibration)
        say("plan_validation")
        plan = plan_validation(job, placed)
        validations = []
        for item in plan.items:
            say(f"validate {item.placer}")
            validations.append(validate(job, item))
        say("publish")
        decision = publish(job, plan, validations)
    except BaseException:
        tracking.end_run(job.parent_run_id, "FAILED")
        raise
    tracking.end_run(job.parent_run_id, "FINISHED")
    return PipelineResult(prepare=prepared, calibrate_comm=calibration, profile_small_batches=profile,
                          fit_regression=fits, remeasure_large_batch=measured, fuse=fusion, place=placed,
                          plan_validation=plan, validate=tuple(validations), publish=decision)
