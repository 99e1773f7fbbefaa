"""Pipeline step (GPU node): measure transfers between two devices and write the run's cluster."""

from __future__ import annotations

from celeritas_core.formats import cluster_to_json
from tasks import storage, tracking
from tasks.common import artifact, cluster_from
from tasks.contracts import CalibrationResult, Job


def calibrate_comm(job: Job) -> CalibrationResult:
    """Fit t = k·bytes + b between devices 0 and 1 (or keep the default model when
    ``calibrate_comm`` is off) and write ``cluster.json``. Returns its URI and the fit."""
    from celeritas_core.units import parse_size

    params = job.params
    memory = parse_size(params["device_memory"])
    if params.get("calibrate_comm", True) and int(params["num_devices"]) >= 2:
        from celeritas_tf.calibrate import calibrate_comm as measure
        from celeritas_tf.calibrate import calibrated_cluster

        fit = measure(2)
        cluster = calibrated_cluster(fit, int(params["num_devices"]), memory)
        r2 = fit.r2
    else:
        cluster = cluster_from(params, None)
        r2 = float("nan")
    uri = storage.write_json(artifact(job.run_dir, "cluster"), cluster_to_json(cluster))
    metrics = {"comm_slope_us_per_byte": cluster.slope_us_per_byte, "comm_intercept_us": cluster.intercept_us}
    tracking.log_metrics(job.parent_run_id, metrics)
    return CalibrationResult(cluster_uri=uri, **metrics, r2=r2 if r2 == r2 else None)
