"""The production-models file: which models the scheduled fleet DAG re-places, with their parameters.

A YAML (``.yaml``/``.yml``) or JSON file, local or ``s3://``::

    defaults:            # optional: parameters every model starts from
      num_devices: 4
      device_memory: 16GiB
    models:
      - name: holography          # unique; names the model's job (RUN_ID/NAME) and task-group row
        params: {model: tensor_holography, batch_size: 32}
      - name: translation
        params: {model: nmt, model_knobs: {layers: 2}, batch_size: 64}

Only the file's shape is checked here (a list of uniquely named entries whose ``params`` are
mappings), so one model's bad parameters fail that model's ``prepare`` and never the others.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from celeritas_core.errors import CeleritasInputError
from tasks import storage

#: What a model's ``name`` may contain (it becomes part of a job id and a run directory).
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class FleetModel:
    """One production model: its name in the fleet and its pipeline parameters (defaults applied)."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The entry as JSON (the fleet DAG maps its task group over these)."""
        return {"name": self.name, "params": dict(self.params)}


def parse_fleet(doc: Any, source: str) -> tuple[FleetModel, ...]:
    """The models of a parsed production-models document (see the module docstring)."""
    if not isinstance(doc, Mapping):
        raise CeleritasInputError("expected a mapping with a 'models' list", source=source)
    unknown = sorted(set(doc) - {"models", "defaults"})
    if unknown:
        raise CeleritasInputError(f"unknown key {unknown[0]!r} (expected 'models' and 'defaults')",
                                  source=source)
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise CeleritasInputError("field 'defaults' must be a mapping of parameters", source=source)
    entries = doc.get("models")
    if not isinstance(entries, list) or not entries:
        raise CeleritasInputError("field 'models' must be a non-empty list", source=source)
    models: list[FleetModel] = []
    for i, entry in enumerate(entries):
        models.append(_entry(entry, f"models[{i}]", defaults, source))
    names = [m.name for m in models]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise CeleritasInputError(f"model name {duplicate!r} appears twice in 'models'", source=source)
    return tuple(models)


def _entry(entry: Any, where: str, defaults: Mapping[str, Any], source: str) -> FleetModel:
    """One ``models`` entry, checked, with ``defaults`` under its parameters."""
    if not isinstance(entry, Mapping):
        raise CeleritasInputError(f"{where} must be a mapping with 'name' and 'params'", source=source)
    extra = sorted(set(entry) - {"name", "params"})
    if extra:
        raise CeleritasInputError(f"{where}: unknown key {extra[0]!r} (expected 'name' and 'params')",
                                  source=source)
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise CeleritasInputError(f"{where}.name must be 1-64 letters, digits, '.', '_' or '-', got {name!r}",
                                  source=source)
    params = entry.get("params", {})
    if not isinstance(params, Mapping):
        raise CeleritasInputError(f"{where}.params must be a mapping of parameters", source=source)
    return FleetModel(name=name, params={**defaults, **params})


def load_fleet(uri: str) -> tuple[FleetModel, ...]:
    """Read and check the production-models file at ``uri`` (YAML or JSON, by its suffix)."""
    if not uri:
        raise CeleritasInputError("no production-models file: set the Airflow Variable "
                                  "'celeritas_production_models' or CELERITAS_PRODUCTION_MODELS to its path")
    try:
        text = storage.read_text(uri)
    except storage.ArtifactNotFound:
        raise CeleritasInputError("production-models file not found", source=uri) from None
    try:
        doc = json.loads(text) if uri.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CeleritasInputError(f"not valid {'JSON' if uri.endswith('.json') else 'YAML'}: {first}",
                                  source=uri) from None
    return parse_fleet(doc, uri)
