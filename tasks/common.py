"""What the pipeline's steps share: artifact names under the run directory, the model and the cluster.

Every artifact of a run lives at a fixed name under the run directory, so a retried task
overwrites its own outputs (atomically, through :mod:`tasks.storage`) and never duplicates them.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from celeritas_core.cluster import Cluster
from celeritas_core.errors import CeleritasInputError
from celeritas_core.formats import cluster_from_json, graph_from_bytes
from celeritas_core.topology import parse_preset
from celeritas_core.units import parse_size
from celeritas_tf.models import get_model
from tasks import storage, tracking
from tasks.policy import resolve_model

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


def model_spec(params: Mapping[str, Any]) -> Any:
    """The run's ModelSpec, loaded only as the policy allows (:func:`tasks.policy.resolve_model`,
    checked again on the worker); a ``.keras`` model on S3 is copied to a local temp file first."""
    reference = resolve_model(params["model"], params.get("model_knobs"),
                              paper=bool(params.get("paper_config")))
    name = reference.location or reference.name
    if reference.kind == "keras" and storage.is_s3(name):
        local = Path(tempfile.mkdtemp(prefix="celeritas-model-")) / Path(name).name
        local.write_bytes(storage.read_bytes(name))
        name = str(local)
    if reference.kind == "function":
        name = reference.name
    knobs = dict(params.get("model_knobs") or {}) if reference.kind == "zoo" else {}
    return get_model(name, paper=bool(params.get("paper_config")), **knobs)


def cluster_from(params: Mapping[str, Any], cluster_uri: str | None) -> Cluster:
    """The run's cluster: the calibrated ``cluster.json`` when given, else the parameters' devices
    with the default transfer model, or the ``topology`` preset's links when one is set."""
    if cluster_uri:
        try:
            return cluster_from_json(storage.read_json(cluster_uri))
        except CeleritasInputError as exc:
            raise exc.with_source(cluster_uri) from None
    cluster = Cluster.homogeneous(int(params["num_devices"]), parse_size(params["device_memory"]))
    if not params.get("topology"):
        return cluster

    return cluster.with_topology(parse_preset(params["topology"], "parameter 'topology'").topology(
        cluster.device_names))


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
