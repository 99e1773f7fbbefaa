"""Pipeline step (GPU node): Standard Evaluation 1, trace the model at small batch sizes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks import storage
from tasks.common import artifact, model_spec


def profile_small_batches(params: Mapping[str, Any], run_dir: str) -> dict[str, Any]:
    """Trace the training step at each of ``profile_batch_sizes`` on one device; write
    ``profile.json`` (celeritas-profile/1). Returns its URI and the number of traced ops."""
    from celeritas_tf.evaluation import profile_document
    from celeritas_tf.evaluation import profile_small_batches as trace

    model = model_spec(params)
    traces = trace(model, params["profile_batch_sizes"])
    uri = storage.write_json(artifact(run_dir, "profile"), profile_document(model, traces))
    return {"profile_uri": uri, "ops": len(traces[0].time_us), "batch_sizes": [t.batch_size for t in traces]}
