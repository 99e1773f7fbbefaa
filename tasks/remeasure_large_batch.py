"""Pipeline step (GPU node): Standard Evaluation 2, sequential placement of the large batch, re-measured."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from celeritas_core.plots import deviation_cdf_chart
from celeritas_core.readwrite.formats import fits_from_json, fits_to_json, graph_to_json
from celeritas_tf.evaluation import accuracy_document, remeasure
from tasks import storage, tracking
from tasks.common import artifact, load_model, log_documents, run_cluster
from tasks.contracts import CalibrationResult, FitResult, Job, RemeasureResult

log = logging.getLogger(__name__)


def remeasure_large_batch(job: Job, fitted: FitResult, calibration: CalibrationResult) -> RemeasureResult:
    """Place the large batch sequentially (CPD-TOPO, memory-bounded, best effort), run it across the
    devices with full tracing, write the estimated and the measured graph, the accuracy and its CDF."""

    run_dir, parent_run_id = job.run_dir, job.parent_run_id
    model = load_model(job.model)
    fits = fits_from_json(storage.read_json(fitted.fits_uri), source=fitted.fits_uri)
    cluster = run_cluster(calibration)
    batch = job.params.batch_size
    result = remeasure(model, batch, fits, cluster, source=fitted.fits_uri)
    note = result.identity_note()
    if note:  # fits of another structure are not applied (the estimated graph's meta lists them)
        expected = result.identity is not None and not result.identity.needs_action
        log.log(logging.INFO if expected else logging.WARNING, "%s: %s", fitted.fits_uri, note)
    memory, timing = result.accuracy()
    peaks = result.peaks(cluster)
    documents = {"graph.estimated.json": graph_to_json(result.estimated),
                 "graph.measured.json": graph_to_json(result.measured),
                 "accuracy.json": accuracy_document(model.name, batch, memory, timing, peaks)}
    uris = {
        "estimated_graph_uri": storage.write_json(artifact(run_dir, "estimated_graph"),
                                                  documents["graph.estimated.json"]),
        "measured_graph_uri": storage.write_json(artifact(run_dir, "measured_graph"),
                                                 documents["graph.measured.json"]),
        "accuracy_uri": storage.write_json(artifact(run_dir, "accuracy"), documents["accuracy.json"]),
    }
    log_documents(parent_run_id, {**documents, "fits.json": fits_to_json(fits)}, "standard_evaluation")
    with tempfile.TemporaryDirectory() as tmp:
        png = deviation_cdf_chart([(model.name, memory, timing)], Path(tmp) / "estimation_cdf.png",
                                  title=f"{model.name}: estimated vs re-measured at batch {batch}")
        uris["accuracy_cdf_uri"] = storage.upload_file(str(png), artifact(run_dir, "accuracy_cdf"))
        tracking.log_artifact(parent_run_id, str(png))  # charts at the top: MLflow's compare view
    ops = result.measured.num_nodes
    metrics = {"estimation_memory_deviation": memory.mean, "estimation_time_deviation": timing.mean,
               "remeasure_predicted_peak_memory_bytes": max(peaks["predicted_bytes"]),
               "remeasure_measured_peak_memory_bytes": max(peaks["measured_bytes"])}
    tracking.log_metrics(parent_run_id, {k: v for k, v in {**metrics, "ops": float(ops)}.items() if v == v})
    return RemeasureResult(**uris, ops=ops, **metrics)
