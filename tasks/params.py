"""The pipeline's parameters: one JSON schema for the Airflow trigger form and ``celeritas run``.

Each field has a title, a description and a form section; the DAG turns them into Airflow
``Param`` objects (the trigger form validates them with the same schema), and
:func:`resolve_params` fills defaults and validates a plain dict for the CLI, raising a one-line
:class:`~celeritas_core.errors.CeleritasInputError` that names the field. Importing this module
is cheap (no numpy), since the DAG file imports it at parse time.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

#: A schema that only NaN satisfies (it passes every bound, as comparisons with NaN are false):
#: ``"not": NOT_NAN`` makes the form's own validation reject NaN; finite bounds reject infinities.
NOT_NAN: dict[str, Any] = {"minimum": 1, "maximum": -1}
#: The largest batch size (:data:`celeritas_core.limits.MAX_BATCH_SIZE`; not imported: this module
#: must stay cheap to import, and a test checks the two agree).
MAX_BATCH_SIZE = 1_000_000
#: The largest exploration range R (the celeritas placer's own maximum).
MAX_R = 2**31 - 1
#: The largest value of a zoo model's size knob (the paper's largest is a 32000-word vocabulary).
MAX_KNOB = 1_000_000

PLACERS = ["celeritas", "metis", "m-topo", "m-etf", "m-sct", "heft", "order-place", "single"]

#: field name → JSON schema (with ``default``, ``title``, ``description`` and ``section``).
FIELDS: dict[str, dict[str, Any]] = {
    "model": {
        "type": "string", "minLength": 1, "default": "tensor_holography", "section": "Model",
        "title": "Model",
        "description": "A zoo model (inception_v3, nmt, transformer, tensor_holography, mlp); a saved "
                       ".keras file under the models root (CELERITAS_MODELS_ROOT, loaded in Keras safe "
                       "mode); or a Python MODULE:FUNCTION under an allowed module prefix "
                       "(CELERITAS_MODEL_MODULES) returning a Keras model, its loss and input signature.",
    },
    "model_knobs": {
        "type": "object", "additionalProperties": {"type": "integer", "minimum": 1, "maximum": MAX_KNOB},
        "default": {}, "section": "Model", "title": "Model size knobs",
        "description": "Overrides of the zoo model's size knobs, e.g. {\"layers\": 8, \"filters\": 16} "
                       "(`celeritas models` lists them; each a positive integer, at most 1000000). "
                       "Ignored for user models.",
    },
    "paper_config": {
        "type": "boolean", "default": False, "section": "Model", "title": "Paper configuration",
        "description": "Build the zoo model at the Celeritas paper's size instead of the small default.",
    },
    "batch_size": {
        "type": "integer", "minimum": 1, "maximum": MAX_BATCH_SIZE, "default": 32, "section": "Model",
        "title": "Batch size",
        "description": "The (large) training batch size to place the model for.",
    },
    "profile_batch_sizes": {
        "type": "array", "items": {"type": "integer", "minimum": 1, "maximum": MAX_BATCH_SIZE}, "minItems": 2,
        "maxItems": 16, "uniqueItems": True,
        "default": [2, 4, 8], "section": "Standard Evaluation", "title": "Profiling batch sizes",
        "description": "Small batch sizes profiled on one device to fit per-op costs (at least two).",
    },
    "num_devices": {
        "type": "integer", "minimum": 1, "maximum": 64, "default": 4, "section": "Cluster",
        "title": "Devices", "description": "Number of GPUs (logical CPU devices where there are none).",
    },
    "device_memory": {
        "type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+([eE][+-]?[0-9]+)?\s*[a-zA-Z]*\s*$",
        "default": "32MiB", "section": "Cluster", "title": "Memory per device",
        "description": "Memory of each device, e.g. 32GiB, 500MB or 1e9 (bytes).",
    },
    "calibrate_comm": {
        "type": "boolean", "default": True, "section": "Cluster", "title": "Calibrate transfers",
        "description": "Measure transfers between two devices and fit t = k·bytes + b; otherwise use the "
                       "default PCIe-like model (1e-4 µs/B + 25 µs).",
    },
    "R": {
        "type": "integer", "minimum": 1, "maximum": MAX_R, "default": 200, "section": "Placement",
        "title": "Exploration range R",
        "description": "Operation fusion puts at most R ops in one cluster (the paper uses 200).",
    },
    "memory_fraction": {
        "type": "number", "exclusiveMinimum": 0, "maximum": 1, "not": NOT_NAN, "default": 0.25,
        "section": "Placement",
        "title": "Cluster memory cap",
        "description": "Per-cluster memory cap M as a fraction of device memory.",
    },
    "placers": {
        "type": "array", "items": {"type": "string", "enum": PLACERS}, "minItems": 1, "uniqueItems": True,
        "default": ["celeritas", "metis", "m-topo", "m-etf", "m-sct", "order-place"],
        "section": "Placement", "title": "Placers to compare",
        "description": "Celeritas and the baselines to run; each becomes a child run in MLflow.",
    },
    "validation_steps": {
        "type": "integer", "minimum": 1, "maximum": 10000, "default": 50, "section": "Validation",
        "title": "Timed steps",
        "description": "Training steps timed per placement after warm-up (paper: 50).",
    },
    "warmup_steps": {
        "type": "integer", "minimum": 0, "maximum": 1000, "default": 5, "section": "Validation",
        "title": "Warm-up steps", "description": "Untimed steps before timing (paper: 5).",
    },
    "improvement_threshold": {
        "type": "number", "minimum": 0, "maximum": 1, "not": NOT_NAN, "default": 0.02,
        "section": "Publishing",
        "title": "Improvement threshold",
        "description": "Promote the new placement only if it beats the champion, re-measured alongside "
                       "it, by at least this fraction with 95 % confidence (0.02 = 2 %).",
    },
    "run_dir": {
        "type": "string", "default": "", "section": "Storage", "title": "Run directory",
        "description": "Where the run's artifacts go: a folder under the runs root (CELERITAS_RUNS_ROOT) "
                       "or s3:// under the allowed prefix (CELERITAS_RUNS_S3_PREFIX). Empty: "
                       "MODEL/RUN_ID under the runs root.",
    },
}


def schema() -> dict[str, Any]:
    """The whole parameter object as one JSON schema (no extra fields allowed)."""
    props = {}
    for name, field in FIELDS.items():
        props[name] = {k: v for k, v in field.items() if k != "section"}
    return {"type": "object", "properties": props, "additionalProperties": False}


def defaults() -> dict[str, Any]:
    """Every field's default value."""
    return {name: copy.deepcopy(field["default"]) for name, field in FIELDS.items()}


def resolve_params(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults overlaid with ``given``, validated against :func:`schema` (one-line errors)."""
    import jsonschema

    from celeritas_core.errors import CeleritasInputError

    if given is not None and not isinstance(given, Mapping):
        raise CeleritasInputError(f"parameter 'params': expected an object, got {type(given).__name__}")
    params = {**defaults(), **dict(given or {})}
    _check_finite(params, "")
    validator = jsonschema.Draft7Validator(schema())
    errors = sorted(validator.iter_errors(params), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = ".".join(str(p) for p in error.absolute_path) or "params"
        raise CeleritasInputError(f"parameter {where!r}: {error.message}")
    from celeritas_core.units import parse_size

    parse_size(params["device_memory"], field="parameter 'device_memory'")
    return params


def _check_finite(value: Any, where: str) -> None:
    """Refuse NaN and infinities anywhere in the parameters (JSON has neither; Python's json does)."""
    from celeritas_core.errors import CeleritasInputError

    if isinstance(value, float) and not math.isfinite(value):
        raise CeleritasInputError(f"parameter {where or 'params'!r}: expected a finite number, got {value}")
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_finite(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_finite(item, f"{where}.{i}")
