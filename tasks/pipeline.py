"""The whole pipeline without Airflow: the same step functions in order (``celeritas run``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from tasks import tracking
from tasks.calibrate_comm import calibrate_comm
from tasks.fit_regression import fit_regression
from tasks.fuse import fuse
from tasks.place import place
from tasks.prepare import prepare
from tasks.profile_small_batches import profile_small_batches
from tasks.publish import publish
from tasks.remeasure_large_batch import remeasure_large_batch
from tasks.validate import validate

STEPS = ("prepare", "calibrate_comm", "profile_small_batches", "fit_regression", "remeasure_large_batch",
         "fuse", "place", "validate", "publish")


def run_pipeline(params: Mapping[str, Any], *, job_id: str | None = None,
                 progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every step of the placement pipeline for ``params``; returns each step's result.

    The MLflow parent run ends FINISHED, or FAILED when a step raises (the error propagates).
    """
    job = job_id or f"manual-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    say = progress or (lambda _msg: None)
    out: dict[str, Any] = {}
    say("prepare")
    out["prepare"] = prepared = prepare(params, job_id=job, tags={"celeritas.trigger": "cli"})
    p, run_dir, parent = prepared["params"], prepared["run_dir"], prepared["parent_run_id"]
    try:
        say("calibrate_comm")
        out["calibrate_comm"] = cal = calibrate_comm(p, run_dir, parent)
        say("profile_small_batches")
        out["profile_small_batches"] = prof = profile_small_batches(p, run_dir)
        say("fit_regression")
        out["fit_regression"] = fits = fit_regression(p, run_dir, prof["profile_uri"], parent)
        say("remeasure_large_batch")
        out["remeasure_large_batch"] = rem = remeasure_large_batch(p, run_dir, fits["fits_uri"],
                                                                   cal["cluster_uri"], parent)
        say("fuse")
        out["fuse"] = fuse(p, run_dir, rem["measured_graph_uri"], cal["cluster_uri"], parent)
        say("place")
        out["place"] = placed = place(p, run_dir, rem["measured_graph_uri"], cal["cluster_uri"], parent)
        say("validate")
        out["validate"] = val = validate(p, run_dir, placed["placements"], parent, oom=placed["oom"])
        say("publish")
        out["publish"] = publish(p, run_dir, val, parent)
    except BaseException:
        tracking.end_run(parent, "FAILED")
        raise
    tracking.end_run(parent, "FINISHED")
    return out
