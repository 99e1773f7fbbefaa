"""Pipeline step (GPU node): run each placement, warm-up then timed steps; log step times to MLflow."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.formats import VALIDATION_SUMMARY_FORMAT
from tasks import storage, tracking
from tasks.common import artifact, model_spec, validation_uri
from tasks.contracts import Job, PlaceResult, ValidateResult


def validate(job: Job, placed: PlaceResult) -> ValidateResult:
    """Validate every placement of the place step that fits in memory: ``warmup_steps``
    untimed and ``validation_steps`` timed steps each; write ``validation/PLACER.json`` and
    ``validation.json``, log mean/median/p90 and every step time (``step=``) to the placer's child
    run, speed-ups over one device and over the best baseline, and predicted vs measured peak
    memory per device (bytes)."""
    from celeritas_tf.evaluation import predicted_peaks
    from celeritas_tf.evaluation import validate as run_placement

    params, run_dir, parent_run_id = job.params, job.run_dir, job.parent_run_id
    model = model_spec(params)
    batch = int(params["batch_size"])
    results: dict[str, dict[str, Any]] = {}
    for placer, uri in placed.placements.items():
        if placed.oom.get(placer):
            continue  # an over-full placement would not run on real devices
        doc = storage.read_json(uri)
        assignment = doc.get("assignment") if isinstance(doc, dict) else None
        if not isinstance(assignment, dict):
            raise CeleritasInputError("field 'assignment' missing", source=uri)
        devices = len(doc.get("devices") or []) or int(params["num_devices"])
        run = run_placement(model, batch, assignment, devices, warmup_steps=int(params["warmup_steps"]),
                            steps=int(params["validation_steps"]), source=uri)
        body = run.to_json({"placer": placer, "placement": uri,
                            "predicted_step_time_us": doc.get("predicted_step_time_us"),
                            "predicted_peak_bytes": predicted_peaks(doc)})
        storage.write_json(validation_uri(run_dir, placer), body)
        results[placer] = body
    if not results:
        raise CeleritasInputError("no placement fits in memory: nothing to validate")
    single = results.get("single", {}).get("mean_s")
    baselines = [r["mean_s"] for p, r in results.items() if p not in ("celeritas", "single")]
    best_baseline = min(baselines) if baselines else float("nan")
    for placer, body in results.items():
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / f"{placer}.validation.json"
            local.write_text(json.dumps(body, indent=1))
            child = _log_child(parent_run_id, placer, body, single, best_baseline, str(local))
        tracking.log_series(child, "validation_step_time_s", body["step_seconds"])
    best = min(results, key=lambda p: results[p]["mean_s"])
    summary = {"format": VALIDATION_SUMMARY_FORMAT, "best_measured": best,
               "best_measured_step_time_s": results[best]["mean_s"],
               "placers": {p: {k: r[k] for k in ("mean_s", "median_s", "p90_s", "predicted_step_time_us")}
                           for p, r in results.items()},
               "validations": {p: validation_uri(run_dir, p) for p in results}}
    uri = storage.write_json(artifact(run_dir, "validation_summary"), summary)
    tracking.log_metrics(parent_run_id, {"best_measured_step_time_s": results[best]["mean_s"]})
    tracking.log_series(parent_run_id, "best_validation_step_time_s", results[best]["step_seconds"])
    tracking.set_tags(parent_run_id, {"celeritas.best_measured_placer": best})
    return ValidateResult(validation_summary_uri=uri, best_measured=best,
                          best_measured_step_time_s=results[best]["mean_s"],
                          best_placement_uri=placed.placements[best],
                          measured_mean_s={p: r["mean_s"] for p, r in results.items()})


def _log_child(parent_run_id: str, placer: str, body: Mapping[str, Any], single: float | None,
               best_baseline: float, validation_file: str) -> str:
    """Log one placer's measured figures and its validation JSON to its MLflow child run."""
    from celeritas_tf.evaluation import peak_metrics

    metrics = {"measured_mean_step_time_s": body["mean_s"],
               "measured_median_step_time_s": body["median_s"], "measured_p90_step_time_s": body["p90_s"],
               **peak_metrics(body.get("measured_peak_bytes"), body.get("predicted_peak_bytes"))}
    if single:
        metrics["measured_speedup_vs_single"] = single / body["mean_s"]
    if np.isfinite(best_baseline):
        metrics["measured_speedup_vs_best_baseline"] = best_baseline / body["mean_s"]
    return tracking.child_run(parent_run_id, placer, params={"placer": placer}, metrics=metrics,
                              artifacts={"validation": validation_file})
