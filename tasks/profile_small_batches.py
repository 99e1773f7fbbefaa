"""Pipeline step (GPU node): Standard Evaluation 1, trace the model at small batch sizes."""

from __future__ import annotations

from celeritas_tf.evaluation import ProfilePlan, profile_document
from celeritas_tf.evaluation import profile_small_batches as trace
from tasks import storage
from tasks.common import artifact, load_model
from tasks.contracts import Job, ProfileResult


def profile_small_batches(job: Job) -> ProfileResult:
    """Trace the training step at each of ``profile_batch_sizes`` on one device (and, with
    ``profile_span``, at a batch towards ``batch_size`` that fits one device); write
    ``profile.json`` (celeritas-profile/1). Returns its URI and the number of traced ops."""
    params = job.params
    plan = ProfilePlan()
    if params.profile_span:
        plan = ProfilePlan(span_target=params.batch_size, device_bytes=float(params.device_memory_bytes))
    model = load_model(job.model)
    traces = trace(model, list(params.profile_batch_sizes), plan=plan)
    uri = storage.write_json(artifact(job.run_dir, "profile"), profile_document(model, traces))
    return ProfileResult(profile_uri=uri, ops=len(traces[0].time_us),
                         batch_sizes=tuple(t.batch_size for t in traces))
