"""Pipeline step (GPU node): measure transfers between two devices and write the run's cluster.

A calibration that measured nothing useful (a slope of 0, or R² below
:data:`celeritas_tf.calibrate.MIN_R2`) is not used: the run keeps the documented default transfer
model and says so in the task log (a warning), in ``cluster.json`` (``comm.source`` and
``comm.calibration``) and on the MLflow parent run (tags ``celeritas.transfer_model`` and
``celeritas.transfer_model_reason``).

With the ``topology`` parameter (a preset, docs/formats.md) each class of pair is measured
(:func:`celeritas_tf.calibrate.calibrate_topology`) and ``cluster.json`` is a
``celeritas-cluster/2`` with the topology: a link whose fit measured nothing useful keeps the
preset's figures, with the same warning, per link.
"""

from __future__ import annotations

import logging
from typing import Any

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.topology import parse_preset
from celeritas_core.readwrite.formats import cluster_to_json
from celeritas_tf import calibrate
from celeritas_tf.calibrate import MIN_R2, calibration_record, choose_transfer_model
from tasks import storage, tracking
from tasks.common import artifact, build_cluster
from tasks.contracts import CalibrationResult, Job
from tasks.tracking import TAG_TRANSFER_MODEL, TAG_TRANSFER_REASON

log = logging.getLogger(__name__)


def calibrate_comm(job: Job) -> CalibrationResult:
    """Fit t = k·bytes + b between devices 0 and 1 and write ``cluster.json`` with the fit, or with
    the default model when ``calibrate_comm`` is off, there is one device, or the fit measured
    nothing useful (:func:`celeritas_tf.calibrate.choose_transfer_model`; logged as a warning).
    Logs the model used, its source and the fit to the MLflow parent run. Returns the cluster's
    URI and the transfer model. With a ``topology`` preset: :func:`_topology_calibration`."""
    devices, memory = job.cluster.num_devices, job.cluster.device_memory_bytes
    if job.cluster.topology:
        return _topology_calibration(job, devices, memory)
    if job.params.calibrate_comm and devices >= 2:
        cluster, source, reason, r2, fit = _measured_cluster(devices, memory)
    else:
        cluster, source, r2, fit = build_cluster(job.cluster), "default", None, None
        reason = "calibration is off (calibrate_comm)" if devices >= 2 else "one device: no transfers"
    if reason is not None and fit is not None:
        log.warning("calibrate_comm: the fit t = %.4g µs/B · bytes + %.4g µs (R² %.3f): %s; using the "
                    "default transfer model t = %.4g µs/B · bytes + %.4g µs instead",
                    fit["slope_us_per_byte"], fit["intercept_us"], r2, reason,
                    cluster.slope_us_per_byte, cluster.intercept_us)
    doc = cluster_to_json(cluster, source=source, calibration=fit)
    uri = storage.write_json(artifact(job.run_dir, "cluster"), doc)
    metrics = {"comm_slope_us_per_byte": cluster.slope_us_per_byte, "comm_intercept_us": cluster.intercept_us}
    fitted = {} if fit is None else {"comm_fit_slope_us_per_byte": fit["slope_us_per_byte"],
                                     "comm_fit_intercept_us": fit["intercept_us"], "comm_fit_r2": r2}
    tracking.log_metrics(job.parent_run_id, {**metrics, **fitted})
    why = reason or f"the fit measured a transfer (slope > 0, R² {r2:.3f} >= {_min_r2():g})"
    tracking.set_tags(job.parent_run_id, {TAG_TRANSFER_MODEL: source, TAG_TRANSFER_REASON: why})
    return CalibrationResult(cluster_uri=uri, **metrics, r2=r2, transfer_model=source, transfer_reason=reason)


def _measured_cluster(devices: int, memory: int) -> tuple[Cluster, str, str | None, float, dict[str, Any]]:
    """Measure and choose: the cluster, its transfer model's source, why the default (or None),
    the fit's R² and the record of the fit for ``cluster.json``."""
    fit = calibrate.calibrate_comm(2)  # through the module: tests put a fake measurement there
    choice = choose_transfer_model(fit)
    cluster = Cluster.homogeneous(devices, memory, slope_us_per_byte=choice.slope_us_per_byte,
                                  intercept_us=choice.intercept_us)
    return cluster, choice.source, choice.reason, float(fit.r2), calibration_record(fit, choice)


def _min_r2() -> float:
    return MIN_R2


def _topology_calibration(job: Job, devices: int, memory: int) -> CalibrationResult:
    """The ``topology`` preset's cluster with each class of pair measured (``calibrate_comm`` on,
    at least two devices) or the preset's figures; ``transfer_model`` is ``calibrated`` only when
    every measured link's fit was used. Metrics: the flat model (mean over pairs) and each link's
    ``k`` and ``b``."""

    preset = parse_preset(str(job.cluster.topology), "parameter 'topology'")
    base = Cluster.homogeneous(devices, memory)
    topology = preset.topology(base.device_names)
    records: dict[str, Any] = {}
    r2: float | None = None
    if job.params.calibrate_comm and devices >= 2:
        topology, results = calibrate.calibrate_topology(topology)  # through the module, like calibrate_comm
        records = {r.link.name: r.record(base.device_names) for r in results}
        measured = [r for r in results if r.calibration is not None]
        rejected = [r for r in measured if r.source != "calibrated"]
        for r in rejected:
            fit = r.calibration
            log.warning("calibrate_comm: link %s: the fit t = %.4g µs/B · bytes + %.4g µs (R² %.3f): %s; "
                        "keeping the preset's t = %.4g µs/B · bytes + %.4g µs", r.link.name,
                        fit.slope_us_per_byte, fit.intercept_us, fit.r2, r.reason,
                        r.link.slope_us_per_byte, r.link.intercept_us)
        r2 = min((float(r.calibration.r2) for r in measured), default=None)
        source = "default" if rejected or not measured else "calibrated"
        reason = "; ".join(f"link {r.link.name}: {r.reason}" for r in rejected) or None
    else:
        source = "default"
        reason = "calibration is off (calibrate_comm)" if devices >= 2 else "one device: no transfers"
    cluster = base.with_topology(topology)
    uri = storage.write_json(artifact(job.run_dir, "cluster"), cluster_to_json(cluster, link_records=records))
    metrics = {"comm_slope_us_per_byte": cluster.slope_us_per_byte, "comm_intercept_us": cluster.intercept_us}
    per_link = {f"comm_link_{x.name}_{field}": getattr(x, field) for x in topology.links
                for field in ("slope_us_per_byte", "intercept_us")}
    tracking.log_metrics(job.parent_run_id, {**metrics, **per_link})
    why = reason or "every link's fit measured a transfer"
    tracking.set_tags(job.parent_run_id, {TAG_TRANSFER_MODEL: source, TAG_TRANSFER_REASON: why})
    return CalibrationResult(cluster_uri=uri, **metrics, r2=r2, transfer_model=source, transfer_reason=reason)
