"""Pipeline steps around the GPU validation: plan it (light), then time one placement, with its
recorded execution order enforced and free, against the champion, interleaved in blocks on the
same devices (GPU node; the DAG maps it over the plan)."""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.formats import placement_op_keys_digest
from celeritas_tf.evaluation import (
    ModeTimes,
    PlacementOrder,
    peak_metrics,
    placement_order,
    predicted_peaks,
    predicted_step_us,
    validate_interleaved,
)
from celeritas_tf.microbatch import PipelineRun, placement_pipeline_run
from tasks import storage, tracking
from tasks.common import load_model, validation_uri
from tasks.contracts import Job, PlacementValidation, PlaceResult, ValidationItem, ValidationPlan

log = logging.getLogger(__name__)

#: Timed steps are spread over this many interleaved blocks (fewer when there are fewer steps).
BLOCKS = 5


def plan_validation(job: Job, placed: PlaceResult) -> ValidationPlan:
    """One validation item per placement that fits in memory, each against the configuration's
    current champion (read once here, so every item measures the same one and ``publish`` can
    promote only if it is still the champion)."""
    name = str(job.configuration["registered_model"])
    current = tracking.champion(name)
    digest = (current.placement_sha256 or None) if current else None
    items = tuple(ValidationItem(placer=placer, placement_uri=uri,
                                 champion_version=current.version if current else None,
                                 champion_placement_uri=current.placement_uri if current else None,
                                 champion_placement_sha256=digest)
                  for placer, uri in placed.placements.items() if not placed.oom.get(placer))
    if not items:
        raise CeleritasInputError("no placement fits in memory: nothing to validate")
    who = f"version {current.version} ({current.placer}, run {current.run_id})" if current else "none yet"
    log.info("validating %d placements of configuration %s; champion: %s", len(items), job.config_key, who)
    return ValidationPlan(items=items, registered_model=name,
                          champion_version=current.version if current else None,
                          champion_placer=current.placer if current else None,
                          champion_run_id=current.run_id if current else None)


def _assignment(doc: Any, source: str) -> dict[str, int]:
    assignment = doc.get("assignment") if isinstance(doc, dict) else None
    if not isinstance(assignment, dict):
        raise CeleritasInputError("field 'assignment' missing", source=source)
    return assignment


def _champion_assignment(item: ValidationItem) -> tuple[dict[str, int] | None, str | None,
                                                        PlacementOrder | None, PipelineRun | None]:
    """The champion's published assignment, downloaded from MLflow, the op keys digest, the
    execution order it records and how it runs pipelined (all None without a champion; the last
    None for a single-batch champion)."""
    if item.champion_placement_uri is None:
        return None, None, None, None
    with tempfile.TemporaryDirectory() as tmp:
        local = tracking.download_published(item.champion_placement_uri, tmp,
                                            expected_sha256=item.champion_placement_sha256)
        doc = json.loads(Path(local).read_text())
        return (_assignment(doc, item.champion_placement_uri),
                placement_op_keys_digest(doc, item.champion_placement_uri),
                placement_order(doc, item.champion_placement_uri),
                placement_pipeline_run(doc, item.champion_placement_uri))


def validate(job: Job, item: ValidationItem) -> PlacementValidation:
    """Time ``item``'s placement (``warmup_steps`` untimed, then ``validation_steps`` timed steps)
    in both execution-order modes when it records an order (its ``device_order`` enforced, and
    TensorFlow's free dispatch; free only otherwise) and the champion's in the mode it runs in,
    all interleaved in blocks; write ``validation/PLACER.json`` and log the placer's child run:
    the predicted step, each mode's median and its ratio to the prediction, mean/median/p90 and
    every step time (``step=``) in ms of the mode the placement competes in (its ``order_mode``),
    predicted vs measured peak memory per device (bytes), and the champion's median measured
    alongside."""
    params = job.params
    placement_bytes = storage.read_bytes(item.placement_uri)
    doc = storage.parse_json(placement_bytes, item.placement_uri)
    arms = {"challenger": _assignment(doc, item.placement_uri)}
    orders = {"challenger": placement_order(doc, item.placement_uri)}
    pipelines = {"challenger": placement_pipeline_run(doc, item.placement_uri)}
    champion_error = champion_digest = None
    try:
        champion, champion_digest, champion_order, pipelines["champion"] = _champion_assignment(item)
    except CeleritasInputError as exc:
        champion, champion_order = None, None
        champion_error = f"the champion's placement cannot be read: {exc}"
    modes = {"challenger": orders["challenger"].modes(source=item.placement_uri)}
    if champion is not None and champion_order is not None:
        arms["champion"] = champion
        orders["champion"] = champion_order
        modes["champion"] = (champion_order.order_mode,)  # as it runs in production
    devices = len(doc.get("devices") or []) or job.cluster.num_devices
    kwargs: dict[str, Any] = {"warmup_steps": params.warmup_steps, "steps": params.validation_steps,
                              "blocks": BLOCKS, "progress": log.info, "orders": orders, "modes": modes,
                              "pipelines": {name: run for name, run in pipelines.items() if run is not None}}
    sources = {"challenger": item.placement_uri, "champion": item.champion_placement_uri or ""}
    kwargs["digests"] = {"challenger": placement_op_keys_digest(doc, item.placement_uri),
                         "champion": champion_digest}
    model = load_model(job.model)
    batch = params.batch_size
    try:
        runs = validate_interleaved(model, batch, arms, devices, sources=sources, **kwargs)
    except CeleritasInputError as exc:
        if "champion" not in arms:
            raise
        # e.g. the model's ops were renamed since the champion was placed: it cannot run any more
        champion_error = f"the champion's placement does not run on this model: {exc}"
        del arms["champion"], orders["champion"], modes["champion"]
        runs = validate_interleaved(model, batch, arms, devices, sources=sources, **kwargs)
    mine = runs["challenger"]
    theirs = runs.get("champion")
    run = pipelines["challenger"]
    replayed = doc["pipeline"] if run is not None else doc  # a pipelined step's replay is its prediction
    predicted = predicted_step_us(replayed)
    body = mine.to_json({"placer": item.placer, "placement": item.placement_uri,
                         "predicted_peak_bytes": predicted_peaks(replayed), "blocks": BLOCKS,
                         "micro_batches": run.micro_batches if run is not None else 1,
                         "champion": None if theirs is None else {
                             "version": item.champion_version, "placement": item.champion_placement_uri,
                             "order_mode": theirs.order_mode,
                             "median_s": theirs.median_s, "mean_s": theirs.mean_s,
                             "step_seconds": list(theirs.step_seconds)},
                         "champion_error": champion_error}, predicted_us=predicted)
    uri = storage.write_json(validation_uri(job.run_dir, item.placer), body)
    child = _log_child(job.parent_run_id, item.placer, body, uri)
    if champion_error:
        log.warning("%s: %s", item.placer, champion_error)
    against = "" if theirs is None else \
        f"; champion v{item.champion_version} ({theirs.order_mode} order) {theirs.median_s * 1e3:.3f} ms"
    log.info("%s: %s%s", item.placer,
             _modes_line(mine.modes, mine.order_mode, predicted, len(mine.step_seconds)), against)
    return PlacementValidation(
        placer=item.placer, placement_uri=item.placement_uri, validation_uri=uri,
        step_seconds=tuple(mine.step_seconds), champion_version=item.champion_version if theirs else None,
        champion_step_seconds=tuple(theirs.step_seconds) if theirs else (), champion_error=champion_error,
        mean_s=mine.mean_s, median_s=mine.median_s, p90_s=mine.p90_s, blocks=BLOCKS, child_run_id=child,
        order_mode=mine.order_mode,
        mode_step_seconds={mode: times.step_seconds for mode, times in mine.modes.items()},
        predicted_step_time_s=None if predicted is None else predicted / 1e6,
        devices_used=tuple(mine.devices_used), placement_sha256=hashlib.sha256(placement_bytes).hexdigest())


def _modes_line(modes: Mapping[str, ModeTimes], competing: str, predicted_us: float | None,
                steps: int) -> str:
    """One phrase per mode timed: its median (ms) and ratio to the prediction; the competing
    mode first, so marked."""
    parts = []
    for mode, times in modes.items():
        ratio = "" if predicted_us is None else f" ({times.median_s * 1e6 / predicted_us:.2f} x predicted)"
        mark = ", competing" if mode == competing and len(modes) > 1 else ""
        parts.append(f"{mode} order{mark}: median {times.median_s * 1e3:.3f} ms{ratio}")
    shown = "unknown" if predicted_us is None else f"{predicted_us / 1e3:.3f} ms"
    return f"predicted {shown}; " + "; ".join(parts) + f" over {steps} timed steps each"


def _log_child(parent_run_id: str, placer: str, body: dict[str, Any], uri: str) -> str:
    """Log one placer's measured figures, step times (ms) and validation JSON to its MLflow child
    run; returns the child run's id. ``measured_*_step_time_ms`` are the competing mode's
    (``order_mode``); ``measured_median_step_time_MODE_ms``, ``measured_over_predicted_MODE`` and
    ``order_agreement_MODE`` (the share of the recorded order a traced step followed) each timed
    mode's, with ``predicted_step_time_ms``."""
    metrics = {"measured_mean_step_time_ms": body["mean_s"] * 1e3,
               "measured_median_step_time_ms": body["median_s"] * 1e3,
               "measured_p90_step_time_ms": body["p90_s"] * 1e3,
               **peak_metrics(body.get("measured_peak_bytes"), body.get("predicted_peak_bytes"))}
    if body.get("predicted_step_time_us") is not None:
        metrics["predicted_step_time_ms"] = body["predicted_step_time_us"] / 1e3
    for mode, figures in body["modes"].items():
        metrics[f"measured_median_step_time_{mode}_ms"] = figures["median_s"] * 1e3
        if figures["measured_over_predicted"] is not None:
            metrics[f"measured_over_predicted_{mode}"] = figures["measured_over_predicted"]
        if figures.get("order_agreement") is not None:
            metrics[f"order_agreement_{mode}"] = figures["order_agreement"]
    if body.get("champion"):
        metrics["champion_median_step_time_ms"] = body["champion"]["median_s"] * 1e3
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / f"{placer}.validation.json"
        local.write_text(json.dumps(body, indent=1))
        child = tracking.child_run(parent_run_id, placer, params={"placer": placer}, metrics=metrics,
                                   artifacts={"validation": str(local)},
                                   tags={"celeritas.validation_uri": uri,
                                         "celeritas.order_mode": body["order_mode"]})
    tracking.log_series(child, "validation_step_time_ms", [t * 1e3 for t in body["step_seconds"]])
    if body.get("champion"):
        champion_ms = [t * 1e3 for t in body["champion"]["step_seconds"]]
        tracking.log_series(child, "champion_step_time_ms", champion_ms)
    return child
