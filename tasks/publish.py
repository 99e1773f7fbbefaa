"""Pipeline step (light): champion/challenger. Promote the run's best placement to production for
its configuration only when it beats the champion, measured in the same tasks, with confidence
and by the threshold; the promotion itself is a compare-and-set in MLflow's Model Registry. It
also judges the simulator across every placer validated: Spearman's rank correlation of predicted
and measured step time per execution-order mode, and the predicted-vs-measured chart."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from celeritas_core.defaults import ORDER_MODES
from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.format_tags import VALIDATION_SUMMARY_FORMAT
from celeritas_core.statistics.step_time_comparison import StepTimeComparison, compare_step_times
from tasks import storage, tracking
from tasks.common import artifact, chart_uri
from tasks.contracts import Job, PlacementValidation, PublishResult, ValidationPlan
from tasks.report import format_table, number

log = logging.getLogger(__name__)

#: Family-wise significance level of the promotion test (split over the challengers compared).
ALPHA = 0.05
#: Spearman's rank correlation needs at least this many placers (two points always rank ±1).
MIN_RANKED = 3
#: The parent run's predicted-vs-measured chart, at the top of its artifacts and of the run directory.
PREDICTION_CHART = "predicted_vs_measured.png"
#: What the log and the chart say of figures measured on logical CPU devices.
CPU_NOTE = ("CPU-only run: the measured figures are noise-bound (the logical CPU devices share the "
            "machine's cores, so placements that run ops in parallel contend for them)")


def publish(job: Job, plan: ValidationPlan, validations: Sequence[PlacementValidation]) -> PublishResult:
    """Decide, record and (if promoted) register the run's best placement as the champion.

    The best challenger is the validated placement with the lowest median step time. Without a
    champion (or with one that cannot run any more) it is promoted; otherwise
    :func:`~celeritas_core.statistics.step_time_comparison.compare_step_times` on its steps and the
    champion's steps from
    the same task decides, at level ``ALPHA`` split over the challengers that were compared. A
    promotion goes through only if the champion is still the one measured (compare-and-set).
    Writes ``validation.json`` and ``publish.json``; records the decision, reason and figures on
    the MLflow parent run and in the task log.
    """
    if not validations:
        raise CeleritasInputError("publish: no placement was validated")
    threshold = float(job.params.improvement_threshold)
    best = min(validations, key=lambda v: v.median_s)
    compared = [v for v in validations if v.champion_step_seconds]
    comparison = None
    if best.champion_step_seconds:
        comparison = compare_step_times(best.champion_step_seconds, best.step_seconds, threshold=threshold,
                                        alpha=ALPHA, comparisons=len(compared))
    prediction = _prediction_accuracy(job, validations)
    summary_uri = _write_summary(job, plan, validations, best, comparison, prediction)
    wants, reason = _verdict(job, plan, best, comparison)
    figures = reason
    log.info("publish: %s %s", "promote" if wants else "keep production:", reason)
    champion, previous = None, None
    if plan.champion_version is not None:
        champion = tracking.champion(plan.registered_model)
        previous = float(comparison.champion_median_s) if comparison else None
    if wants:
        outcome = _promote(job, plan, best, reason, comparison)
        wants, reason, champion = outcome.promoted, outcome.reason, outcome.champion
    decision = "promoted" if wants else "kept"
    result = PublishResult(
        model=job.params.model, config_key=job.config_key, decision=decision, reason=reason,
        placer=best.placer, step_time_s=best.median_s, challenger_placement_uri=best.placement_uri,
        placement_uri=champion.placement_uri if champion else None,
        champion_version=champion.version if champion else None,
        production_run_id=champion.run_id if champion else None, previous_step_time_s=previous,
        comparison=comparison.to_json() if comparison else {}, validation_summary_uri=summary_uri,
        publish_uri=artifact(job.run_dir, "publish"))
    tracking.record_decision(job.parent_run_id, decision, reason, config_key=job.config_key,
                             metrics=_decision_metrics(best, comparison), note=_note(result, figures))
    _attach_charts(job, best.placer)
    storage.write_json(result.publish_uri, _finite(result.document()))
    log.info("publish: %s; production for configuration %s: version %s (%s)", decision, job.config_key,
             result.champion_version, result.placement_uri)
    return result


def _note(result: PublishResult, figures: str) -> str:
    """The parent run's one-line description: promoted or kept, and the figures that decided it
    (``figures``: the verdict's sentence; the outcome's reason too when the promotion did not go
    through, e.g. the champion changed meanwhile)."""
    if result.promoted:
        return f"Promoted to production as version {result.champion_version}: {figures}"
    kept = f"the champion (version {result.champion_version})" if result.champion_version else "no champion"
    extra = "" if result.reason == figures else f" ({result.reason})"
    return f"Kept {kept}: {figures}{extra}"


def _attach_charts(job: Job, placer: str) -> None:
    """The chosen placement's Gantt and memory charts as the run's own: ``gantt.png`` and
    ``memory.png`` in the run directory and at the top of the MLflow parent run's artifacts
    (where MLflow's compare view matches files)."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, key in (("gantt.png", "gantt"), ("memory.png", "memory_chart")):
            local = Path(tmp) / name
            try:
                local.write_bytes(storage.read_bytes(chart_uri(job.run_dir, placer, name)))
            except storage.ArtifactNotFound as exc:  # a chart is no reason to stop a decision
                log.warning("publish: no %s for %s to attach to the run: %s", name, placer, exc)
                return
            storage.upload_file(str(local), artifact(job.run_dir, key))
            tracking.log_artifact(job.parent_run_id, str(local))
    tracking.set_tags(job.parent_run_id, {"celeritas.charts_placer": placer})


def _verdict(job: Job, plan: ValidationPlan, best: PlacementValidation,
             comparison: StepTimeComparison | None) -> tuple[bool, str]:
    """Whether to try promoting ``best``, and why (one sentence with the figures)."""
    head = f"{best.placer}: {best.median_s * 1e3:.3f} ms per step (median of {len(best.step_seconds)})"
    if plan.champion_version is None:
        return True, f"{head}; no champion for configuration {job.config_key} yet"
    if comparison is None:
        return True, f"{head}; champion version {plan.champion_version} could not run ({best.champion_error})"
    return comparison.promote, f"{head} vs champion version {plan.champion_version}: {comparison.reason}"


def _promote(job: Job, plan: ValidationPlan, best: PlacementValidation, reason: str,
             comparison: StepTimeComparison | None) -> tracking.Promotion:
    """Register ``best`` as the configuration's champion if the champion is still the one measured."""
    config = job.configuration
    with tempfile.TemporaryDirectory() as tmp:
        files = {"placement.json": best.placement_uri, "validation.json": best.validation_uri,
                 "configuration.json": None}
        local: dict[str, str] = {}
        for name, uri in files.items():
            path = Path(tmp) / name
            if uri is None:
                path.write_text(json.dumps(config, indent=1, sort_keys=True))
            else:
                data = storage.read_bytes(uri)
                if name == "placement.json":
                    _check_timed_bytes(best, data)
                path.write_bytes(data)
            local[name] = str(path)
        tags = {tracking.TAG_PLACER: best.placer, "celeritas.step_time_s": repr(best.median_s),
                tracking.TAG_CONFIG_KEY: job.config_key, "celeritas.batch_size": config["batch_size"],
                "celeritas.previous_version": plan.champion_version or "none"}
        if comparison is not None:
            tags.update({"celeritas.gain": f"{comparison.gain:.6f}",
                         "celeritas.p_value": f"{comparison.p_value:.3g}"})
        return tracking.promote_if_current(
            registered_model=plan.registered_model, model=job.params.model, config_key=job.config_key,
            configuration=json.dumps(config, sort_keys=True), run_id=job.parent_run_id,
            expected_version=plan.champion_version, published=local, tags=tags, reason=reason)


def _check_timed_bytes(best: PlacementValidation, placement: bytes) -> None:
    """Refuse to promote a placement whose bytes are not those ``validate`` timed (the file was
    rewritten or damaged since): production stays as it is."""
    digest = hashlib.sha256(placement).hexdigest()
    if best.placement_sha256 is not None and digest != best.placement_sha256:
        raise CeleritasInputError(
            f"publish: {best.placement_uri} changed since validate timed it (SHA-256 "
            f"{best.placement_sha256[:12]}… timed, {digest[:12]}… now); production unchanged: "
            "trigger a new run")


def _decision_metrics(best: PlacementValidation, comparison: StepTimeComparison | None) -> dict[str, float]:
    median_ms = best.median_s * 1e3
    out = {"challenger_median_step_time_ms": median_ms, "best_measured_step_time_ms": median_ms}
    if comparison is not None:
        out.update({"champion_median_step_time_ms": comparison.champion_median_s * 1e3,
                    "gain_vs_champion": comparison.gain, "gain_vs_champion_lower_bound": comparison.gain_low,
                    "ab_p_value": comparison.p_value})
    return out


def prediction_points(validations: Sequence[PlacementValidation]
                      ) -> list[tuple[str, float, dict[str, float]]]:
    """``(placer, predicted ms, {mode: measured median ms})`` of every validated placer whose
    placement records a predicted step, with each execution-order mode it was timed in."""
    points = []
    for v in validations:
        if v.predicted_step_time_s is None:
            continue
        measured = {mode: median * 1e3 for mode in ORDER_MODES
                    if (median := v.mode_median_s(mode)) is not None}
        if measured:
            points.append((v.placer, v.predicted_step_time_s * 1e3, measured))
    return points


def rank_correlation(predicted: Sequence[float], measured: Sequence[float]) -> tuple[float | None, str]:
    """Spearman's rank correlation of ``predicted`` and ``measured`` (ties get mean ranks), and
    why it is None: fewer than :data:`MIN_RANKED` pairs, or a side whose values are all equal
    (no ranking to compare)."""
    if len(predicted) < MIN_RANKED:
        return None, f"fewer than {MIN_RANKED} placers ({len(predicted)})"
    if len(set(predicted)) < 2 or len(set(measured)) < 2:
        return None, "the predicted or the measured step times are all equal"
    from scipy.stats import spearmanr  # lazy: as numpy, only when figures are ranked

    rho = float(spearmanr(predicted, measured).statistic)
    return (rho, "") if math.isfinite(rho) else (None, "not a number")


def _cpu_only(validations: Sequence[PlacementValidation]) -> bool:
    """Whether every placement ran on logical CPU devices only (no validation recorded a GPU;
    False when none recorded its devices: an older producer)."""
    seen = [d.upper() for v in validations for d in v.devices_used]
    return bool(seen) and not any("DEVICE:GPU" in d for d in seen)


def _prediction_accuracy(job: Job, validations: Sequence[PlacementValidation]) -> dict[str, Any]:
    """How well the simulator predicted the measured step across the placers, per execution-order
    mode: Spearman's rank correlation logged on the parent run
    (``spearman_predicted_measured_MODE``, not logged with fewer than :data:`MIN_RANKED` placers,
    which the log says) and ``predicted_vs_measured.png`` (both modes, one point per placer, the
    line y = x) at the top of its artifacts and in the run directory. On logical CPU devices the
    log and the chart's title say the figures are noise-bound. Returns the summary's
    ``prediction`` entry."""
    from celeritas_core.plots import predicted_vs_measured_chart  # lazy: matplotlib

    points = prediction_points(validations)
    cpu_only = _cpu_only(validations)
    if cpu_only:
        log.warning("publish: %s", CPU_NOTE)
    spearman: dict[str, float | None] = {}
    metrics: dict[str, float] = {}
    for mode in ORDER_MODES:
        pairs = [(predicted, measured[mode]) for _, predicted, measured in points if mode in measured]
        if not pairs:
            continue
        rho, why = rank_correlation([p for p, _ in pairs], [m for _, m in pairs])
        spearman[mode] = rho
        if rho is None:
            log.info("publish: Spearman of predicted vs measured step time (%s order) not logged: %s",
                     mode, why)
            continue
        metrics[f"spearman_predicted_measured_{mode}"] = rho
        log.info("publish: Spearman of predicted vs measured step time (%s order): %.3f over %d placers",
                 mode, rho, len(pairs))
    if metrics:
        tracking.log_metrics(job.parent_run_id, metrics)
    chart = None
    if points:
        title = "predicted vs measured step time, every placer validated"
        if cpu_only:
            title += "\n" + CPU_NOTE.replace(" (", "\n(", 1)
        with tempfile.TemporaryDirectory() as tmp:
            local = predicted_vs_measured_chart(points, Path(tmp) / PREDICTION_CHART, title=title)
            chart = storage.join(job.run_dir, PREDICTION_CHART)
            storage.upload_file(str(local), chart)
            tracking.log_artifact(job.parent_run_id, str(local))
    else:
        log.info("publish: no placement records a predicted step: no %s", PREDICTION_CHART)
    return {"spearman": spearman, "cpu_only": cpu_only, "chart": chart,
            "points": [{"placer": placer, "predicted_s": predicted / 1e3,
                        "measured_median_s": {m: v / 1e3 for m, v in measured.items()}}
                       for placer, predicted, measured in points]}


def _write_summary(job: Job, plan: ValidationPlan, validations: Sequence[PlacementValidation],
                   best: PlacementValidation, comparison: StepTimeComparison | None,
                   prediction: dict[str, Any]) -> str:
    """``validation.json``: every placer's figures (each execution-order mode's median and the
    predicted step too), the champion, the test and the prediction's accuracy; speed-ups logged
    to the placers' child runs."""
    placers = {v.placer: {"mean_s": v.mean_s, "median_s": v.median_s, "p90_s": v.p90_s,
                          "order_mode": v.order_mode, "predicted_step_time_s": v.predicted_step_time_s,
                          "median_s_by_mode": {m: v.mode_median_s(m) for m in ORDER_MODES
                                               if v.mode_median_s(m) is not None},
                          "champion_median_s": _median(v.champion_step_seconds),
                          "validation": v.validation_uri}
               for v in validations}
    single = placers.get("single", {}).get("median_s")
    baselines = [p["median_s"] for name, p in placers.items() if name not in ("celeritas", "single")]
    for name, figures in placers.items():
        metrics = {}
        if single:
            metrics["measured_speedup_vs_single"] = single / figures["median_s"]
        if baselines:
            metrics["measured_speedup_vs_best_baseline"] = min(baselines) / figures["median_s"]
        if metrics:
            tracking.child_run(job.parent_run_id, name, metrics=metrics)
    summary = {"format": VALIDATION_SUMMARY_FORMAT, "configuration": job.config_key,
               "best_measured": best.placer, "best_measured_step_time_s": best.median_s,
               "champion_version": plan.champion_version, "champion_placer": plan.champion_placer,
               "comparison": comparison.to_json() if comparison else None, "prediction": prediction,
               "placers": placers}
    tracking.set_tags(job.parent_run_id, {tracking.TAG_BEST_MEASURED: best.placer})
    log.info("validation summary (champion version %s):\n%s", plan.champion_version or "none",
             _validation_table(placers, best.placer))
    tracking.log_series(job.parent_run_id, "best_validation_step_time_ms",
                        [t * 1e3 for t in best.step_seconds])
    return storage.write_json(artifact(job.run_dir, "validation_summary"), _finite(summary))


def _validation_table(placers: dict[str, dict[str, Any]], best: str) -> str:
    """The validated placers, fastest first: median and p90 step (the mode each competes in), the
    predicted step, each execution-order mode's median and the champion's median (ms)."""
    ranked = sorted(placers, key=lambda name: placers[name]["median_s"])
    rows = [(name, number(placers[name]["median_s"], ".3f", 1e3), number(placers[name]["p90_s"], ".3f", 1e3),
             number(placers[name]["predicted_step_time_s"], ".3f", 1e3),
             *(number(placers[name]["median_s_by_mode"].get(m), ".3f", 1e3) for m in ORDER_MODES),
             number(placers[name]["champion_median_s"], ".3f", 1e3), "*" if name == best else "")
            for name in ranked]
    header = ("placer", "median (ms)", "p90 (ms)", "predicted (ms)", *(f"{m} (ms)" for m in ORDER_MODES),
              "champion median (ms)", "best")
    return format_table(header, rows, set(range(1, len(header) - 1)))


def _median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
