"""Pipeline step (light): Standard Evaluation 1, per-op linear fits of time and memory on batch size."""

from __future__ import annotations

import numpy as np

from celeritas_core.readwrite.formats import fits_to_json
from celeritas_tf.evaluation import fits_from_profile
from tasks import storage, tracking
from tasks.common import artifact
from tasks.contracts import FitResult, Job, ProfileResult


def fit_regression(job: Job, profile: ProfileResult) -> FitResult:
    """Fit ``profile.json`` into ``fits.json`` (each op's time model as ``time_model`` says) and log the
    predicted totals at the large batch."""
    fits = fits_from_profile(storage.read_json(profile.profile_uri), profile.profile_uri,
                             time_model=job.params.time_model)
    uri = storage.write_json(artifact(job.run_dir, "fits"), fits_to_json(fits))
    time_us, memory = fits.predict(job.params.batch_size)
    metrics = {"predicted_total_time_us": float(time_us.sum()),
               "predicted_total_memory_bytes": float(memory.sum()),
               "fit_median_memory_r2": _median(fits.memory_r2), "fit_median_time_r2": _median(fits.time_r2)}
    tracking.log_metrics(job.parent_run_id, {k: v for k, v in metrics.items() if np.isfinite(v)})
    return FitResult(fits_uri=uri, ops=len(fits.names), **metrics)


def _median(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if len(finite) else float("nan")
