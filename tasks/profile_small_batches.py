"""Pipeline step (GPU node): Standard Evaluation 1, trace the model at small batch sizes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks import storage
from tasks.common import artifact, model_spec

PROFILE_FORMAT = "celeritas-profile/1"


def profile_small_batches(params: Mapping[str, Any], run_dir: str) -> dict[str, Any]:
    """Trace the training step at each of ``profile_batch_sizes`` on one device; write
    ``profile.json`` (celeritas-profile/1). Returns its URI and the number of traced ops."""
    from celeritas_tf.evaluation import profile_small_batches as trace

    model = model_spec(params)
    traces = trace(model, params["profile_batch_sizes"])
    doc = {"format": PROFILE_FORMAT, "model": model.name, "model_config": dict(model.config),
           "profiles": [{"batch_size": t.batch_size, "time_us": t.time_us, "memory_bytes": t.memory_bytes,
                         "step_seconds": t.step_seconds} for t in traces]}
    uri = storage.write_json(artifact(run_dir, "profile"), doc)
    return {"profile_uri": uri, "ops": len(traces[0].time_us), "batch_sizes": [t.batch_size for t in traces]}
