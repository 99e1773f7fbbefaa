"""What the pipeline's steps share: artifact names under the run directory, building the model and
the cluster that ``prepare`` resolved.

Every artifact of a run lives at a fixed name under the run directory, so a retried task
overwrites its own outputs (atomically, through :mod:`tasks.storage`) and never duplicates them.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from celeritas_core.cluster import Cluster
from celeritas_core.errors import CeleritasInputError
from celeritas_core.formats import cluster_from_json, graph_from_bytes
from celeritas_core.topology import parse_preset
from celeritas_tf.models import get_model
from tasks import storage, tracking
from tasks.contracts import CalibrationResult, ClusterSpec, ResolvedModel
from tasks.policy import file_sha256

#: Artifact names relative to the run directory.
ARTIFACTS = {
    "params": "params.json",
    "configuration": "configuration.json",
    "cluster": "cluster.json",
    "profile": "profile.json",
    "fits": "fits.json",
    "estimated_graph": "graph.estimated.json",
    "measured_graph": "graph.measured.json",
    "accuracy": "accuracy.json",
    "accuracy_cdf": "estimation_cdf.png",
    "fusion": "fusion.json",
    "coarse_graph": "graph.coarse.json",
    "compare": "compare.json",
    "compare_csv": "compare.csv",
    "gantt": "gantt.png",
    "memory_chart": "memory.png",
    "memory_all_placers": "memory_all_placers.png",
    "validation_summary": "validation.json",
    "publish": "publish.json",
}


def artifact(run_dir: str, name: str) -> str:
    """URI of the artifact ``name`` (a key of :data:`ARTIFACTS`) of the run at ``run_dir``."""
    return storage.join(run_dir, ARTIFACTS[name])


def placement_uri(run_dir: str, placer: str) -> str:
    """URI of one placer's placement in the run."""
    return storage.join(run_dir, "placements", f"{placer}.json")


def chart_uri(run_dir: str, placer: str, name: str) -> str:
    """URI of one placer's chart (``gantt.png`` or ``memory.png``) in the run."""
    return storage.join(run_dir, "charts", placer, name)


def validation_uri(run_dir: str, placer: str) -> str:
    """URI of one placer's validation in the run."""
    return storage.join(run_dir, "validation", f"{placer}.json")


def load_model(model: ResolvedModel) -> Any:
    """The run's ModelSpec, built from the model ``prepare`` resolved
    (:class:`~tasks.contracts.ResolvedModel`; nothing is resolved again). A ``.keras`` model is
    loaded from a local file (one on S3 copied to a temp file first) whose bytes must still be those
    ``prepare`` hashed, so a worker loads only the file the policy allowed and the configuration
    names."""
    name = model.location or model.name
    if model.kind == "keras":
        name = _unchanged_keras_file(model)
    if model.kind == "function":
        name = model.name
    return get_model(name, paper=model.paper_config, **model.knobs)


def _unchanged_keras_file(model: ResolvedModel) -> str:
    """A local path to the ``.keras`` model's bytes, refused in one line when they are not the ones
    ``prepare`` hashed (the file changed, or is gone, since the run was prepared)."""
    where = model.location or model.name
    try:
        data = storage.read_bytes(where) if storage.is_s3(where) else None
        digest = hashlib.sha256(data).hexdigest() if data is not None else file_sha256(where)
    except (FileNotFoundError, storage.ArtifactNotFound) as exc:
        raise CeleritasInputError(f"parameter 'model': cannot read {model.name} ({where}) that prepare "
                                  f"checked: {exc}") from None
    if digest != model.content_sha256:
        raise CeleritasInputError(f"parameter 'model': {model.name} changed since prepare checked it "
                                  f"(SHA-256 {str(model.content_sha256)[:12]}…, now {digest[:12]}…); "
                                  "trigger a new run")
    if data is None:
        return where
    local = Path(tempfile.mkdtemp(prefix="celeritas-model-")) / Path(where).name
    local.write_bytes(data)
    return str(local)


def build_cluster(devices: ClusterSpec) -> Cluster:
    """The cluster of the job's devices (``prepare``'s :class:`~tasks.contracts.ClusterSpec`) with
    the default transfer model, or its ``topology`` preset's links: what ``calibrate_comm``
    starts from, and uses when it measures nothing."""
    cluster = Cluster.homogeneous(devices.num_devices, devices.device_memory_bytes,
                                  slope_us_per_byte=devices.slope_us_per_byte,
                                  intercept_us=devices.intercept_us)
    if not devices.topology:
        return cluster
    preset = parse_preset(devices.topology, "parameter 'topology'")
    return cluster.with_topology(preset.topology(cluster.device_names))


def run_cluster(calibration: CalibrationResult) -> Cluster:
    """The run's cluster as ``calibrate_comm`` computed it, once: its ``cluster.json`` (the devices,
    and the transfer model or topology it measured or chose); errors name the file."""
    try:
        return cluster_from_json(storage.read_json(calibration.cluster_uri))
    except CeleritasInputError as exc:
        raise exc.with_source(calibration.cluster_uri) from None


def load_graph_uri(uri: str) -> Any:
    """A graph artifact (``celeritas-graph/1`` JSON or the columnar ``.npz``, told apart by content)
    as a Graph; errors name ``uri``."""
    return graph_from_bytes(storage.read_bytes(uri), uri)


def log_documents(run_id: str, documents: Mapping[str, Any], artifact_path: str | None = None) -> None:
    """Log JSON documents (file name → document) to the MLflow run ``run_id`` as artifacts."""
    with tempfile.TemporaryDirectory() as tmp:
        for filename, doc in documents.items():
            path = Path(tmp) / filename
            path.write_text(json.dumps(doc, indent=1, allow_nan=False))
            tracking.log_artifact(run_id, str(path), artifact_path)
