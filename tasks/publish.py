"""Pipeline step (light): champion/challenger: promote the new placement only if it is faster enough."""

from __future__ import annotations

from tasks import storage, tracking
from tasks.common import artifact
from tasks.contracts import Job, PublishResult, ValidateResult


def publish(job: Job, validation: ValidateResult) -> PublishResult:
    """Compare the run's best measured step time with the model's production placement (the MLflow
    run tagged ``celeritas.production=true``) and promote the new one only if it is faster by at
    least ``improvement_threshold``; record the decision and the reason either way.

    Returns the decision (``promoted`` or ``kept``), the reason and the placement in production
    after it, and writes ``publish.json``. Never replaces a faster production placement with a
    slower one.
    """
    parent_run_id = job.parent_run_id
    model = job.params["model"]
    threshold = float(job.params["improvement_threshold"])
    new_time = validation.best_measured_step_time_s
    new_uri = validation.best_placement_uri
    champion = tracking.production_run(model)
    champion_time = None if champion is None else champion.get("measured_step_time_s")
    if champion is None or champion_time is None:
        decision = "promoted"
        reason = f"no production placement for {model!r} yet; {validation.best_measured} measured " \
                 f"{new_time * 1e3:.3f} ms per step"
    elif champion.get("run_id") == parent_run_id:
        decision = "promoted"
        reason = "this run is already the production placement (a retried publish)"
    else:
        gain = champion_time / new_time - 1.0
        if gain >= threshold:
            decision = "promoted"
            reason = (f"{new_time * 1e3:.3f} ms per step beats production {champion_time * 1e3:.3f} ms by "
                      f"{gain * 100:.1f} % (threshold {threshold * 100:.1f} %)")
        else:
            decision = "kept"
            reason = (f"{new_time * 1e3:.3f} ms per step vs production {champion_time * 1e3:.3f} ms: "
                      f"{gain * 100:+.1f} %, below the {threshold * 100:.1f} % threshold; production kept")
    result = PublishResult(
        model=model, decision=decision, reason=reason,
        placement_uri=new_uri if decision == "promoted" else (champion or {}).get("placement_uri"),
        placer=validation.best_measured, step_time_s=new_time,
        production_run_id=parent_run_id if decision == "promoted" else (champion or {}).get("run_id"),
        previous_step_time_s=champion_time, publish_uri=artifact(job.run_dir, "publish"))
    if result.promoted:
        tracking.promote(parent_run_id, model, placement_uri=new_uri, reason=reason)
    tracking.record_decision(parent_run_id, decision, reason)
    storage.write_json(result.publish_uri, result.document())
    return result
