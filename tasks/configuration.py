"""The configuration a placement is for: runs are only ever compared within one configuration.

A configuration is the model's identity (a zoo name with its knobs and size, or the content hash
of a user model), the batch size and the cluster's signature (device count, memory per device,
speeds, the transfer model's kind, and ``CELERITAS_CLUSTER_NAME``, which names the GPU node type).
What the pipeline *tries* (placers, R, memory fraction, validation steps) is not part of it: those
are what a challenger may change. Its key, a hash of the canonical JSON, names the configuration's
registered model in MLflow's Model Registry, whose alias ``champion`` marks production.

Importing this module is cheap (no numpy, MLflow or TensorFlow).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tasks.params import PipelineParams

#: Names the kind of GPU node a configuration runs on (e.g. ``a100-40gb``); part of the key.
CLUSTER_NAME_ENV = "CELERITAS_CLUSTER_NAME"
#: Default transfer model t = slope·bytes + intercept used without calibration (µs/B, µs).
DEFAULT_TRANSFER = {"slope_us_per_byte": 1e-4, "intercept_us": 25.0}
KEY_LENGTH = 16


@dataclass(frozen=True)
class Configuration:
    """What a placement is for: model identity, batch size, cluster signature (JSON-able dicts)."""

    model: str
    model_identity: dict[str, Any]
    batch_size: int
    cluster: dict[str, Any]

    def document(self) -> dict[str, Any]:
        """The configuration as canonical JSON-able data (what the key hashes)."""
        return {"model": self.model_identity, "batch_size": self.batch_size, "cluster": self.cluster}

    @property
    def key(self) -> str:
        """A 16-hex-digit hash of :meth:`document` (sorted keys, no spaces)."""
        text = json.dumps(self.document(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]

    @property
    def registered_model_name(self) -> str:
        """The configuration's registered model in MLflow: ``celeritas-MODEL-b<batch>-<key>``."""
        slug = re.sub(r"[^A-Za-z0-9_-]+", "_", self.model.rsplit("/", 1)[-1]).strip("_")[:40] or "model"
        return f"celeritas-{slug}-b{self.batch_size}-{self.key}"

    def describe(self, *, transfer_model: str | None = None, transfer_reason: str = "") -> str:
        """One line for tables and logs, e.g. ``batch 32, 4 x 32.0 MiB, calibrated transfers``.

        Alone it says what the configuration asks for. With the transfer model a run of it used
        (``transfer_model``: ``calibrated``, ``default``, or empty when the run did not record it;
        ``transfer_reason``: why; what ``calibrate_comm`` did, as
        :attr:`tasks.tracking.Champion.transfer_model` reads it back), it says what happened: a
        configuration that asks for calibration runs on the default model when the calibration is
        rejected, e.g. ``default transfer model (calibration not used: the calibration measured
        nothing useful (R² 0.410 below 0.98))``.
        """
        c = self.cluster
        links = f", topology {c['topology']}" if c.get("topology") else ""
        return (f"batch {self.batch_size}, {c['devices']} x {c['memory_bytes'] / 2**20:.1f} MiB, "
                f"{_transfers(c, transfer_model, transfer_reason)}{links}, cluster {c['name']!r}")


def _transfers(cluster: Mapping[str, Any], used: str | None, reason: str) -> str:
    """The transfer model of a configuration's ``cluster``: as asked for (``used`` None), or as a
    run of it ``used`` it (``calibrated``, ``default``; empty: not recorded) and why."""
    if cluster.get("transfer") != "calibrated":
        return "default transfers"
    if used is None or used == "calibrated":
        return "calibrated transfers"
    if used == "default" and cluster.get("topology"):
        return f"the preset's link figures where calibration was not used{f' ({reason})' if reason else ''}"
    if used == "default":
        return f"default transfer model (calibration not used{f': {reason}' if reason else ''})"
    return f"calibration asked for ({used or 'outcome not recorded'})"


def model_identity(kind: str, name: str, *, knobs: Mapping[str, Any] | None = None, paper: bool = False,
                   content_sha256: str | None = None) -> dict[str, Any]:
    """What identifies a model: a zoo name with its knobs and size, or a user model's content hash
    (the ``.keras`` file's bytes, the module's source), so a renamed copy is the same model and an
    edited one is not."""
    if kind == "zoo":
        return {"kind": "zoo", "name": name, "knobs": dict(knobs or {}), "paper_config": bool(paper)}
    return {"kind": kind, "sha256": content_sha256 or "", **({"function": name.rsplit(":", 1)[-1]}
                                                            if kind == "function" else {})}


def configuration_of(params: PipelineParams, model_identity: Mapping[str, Any]) -> Configuration:
    """The configuration of resolved pipeline ``params`` whose model is ``model_identity``."""
    cluster = {
        "name": os.environ.get(CLUSTER_NAME_ENV, "").strip() or "default",
        "devices": params.num_devices,
        "memory_bytes": params.device_memory_bytes,
        "speeds": [1.0] * params.num_devices,
        "transfer": "calibrated" if params.calibrate_comm else dict(DEFAULT_TRANSFER),
    }
    if params.topology:  # only when set: the keys of flat configurations stay as they were
        cluster["topology"] = "".join(params.topology.split()).lower()
    return Configuration(model=params.model, model_identity=dict(model_identity),
                         batch_size=params.batch_size, cluster=cluster)


def configuration_from_json(doc: Mapping[str, Any]) -> Configuration:
    """A :class:`Configuration` from the dict :func:`configuration_to_json` wrote."""
    return Configuration(model=str(doc["model_name"]), model_identity=dict(doc["model"]),
                         batch_size=int(doc["batch_size"]), cluster=dict(doc["cluster"]))


def configuration_to_json(config: Configuration) -> dict[str, Any]:
    """The configuration with its key and the model's name as given (XCom and ``params.json``)."""
    return {"key": config.key, "registered_model": config.registered_model_name, "model_name": config.model,
            "description": config.describe(), **config.document()}
