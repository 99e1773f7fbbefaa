"""The pipeline's parameters: one JSON schema for the Airflow trigger form and ``celeritas run``.

Each field has a title, a description and a form section; the DAG turns them into Airflow
``Param`` objects (the trigger form validates them with the same schema), and
:func:`resolve_params` fills defaults and validates a plain dict for the CLI, raising a one-line
:class:`~celeritas_core.errors.CeleritasInputError` that names the field. Importing this module
is cheap (no numpy), since the DAG file imports it at parse time.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from typing import Any

from celeritas_core.errors import CeleritasInputError
from celeritas_core.limits import MAX_BYTES
from celeritas_core.units import parse_size

#: The DAG whose trigger form these fields are (dags/celeritas_placement.py).
PLACEMENT_DAG_ID = "celeritas_placement"
#: The Airflow pool of the GPU-node tasks (environment variable, default): without it they never run.
GPU_POOL_ENV, DEFAULT_GPU_POOL = "CELERITAS_GPU_POOL", "gpu"
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
#: The zoo's model names (:data:`celeritas_tf.models.ZOO`; a copy, as above, and a test checks it):
#: the form proposes them and still takes a path or a MODULE:FUNCTION.
ZOO_MODELS = ["tensor_holography", "inception_v3", "nmt", "transformer", "mlp"]
#: What a memory size looks like, for the message when ``device_memory`` does not parse.
MEMORY_SIZE_EXAMPLE = "a number of bytes with an optional unit, e.g. 32GiB, 500MB or 1e9"
#: What a topology preset looks like, for the message when ``topology`` does not parse.
TOPOLOGY_EXAMPLE = "a preset NODESxDEVICES:LINK[,NETWORK], e.g. 2x2:nvlink,ib"
#: The demo's Tensor Holography sizes (``examples/run_pipeline_demo.py``): the trigger form's default
#: ``model_knobs``, so that the form's first run is the demo's configuration (a test checks both).
DEMO_KNOBS: dict[str, int] = {"layers": 6, "filters": 8, "image_size": 24}
#: Bounds the trigger form reads to clamp a number box (its ``min``/``max``): a field keeps them
#: under ``allOf`` instead, where the form does not look and every validator still does.
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")

#: field name → JSON schema (with ``default``, ``title``, ``description`` and ``section``).
FIELDS: dict[str, dict[str, Any]] = {
    "model": {
        "type": "string", "minLength": 1, "default": "tensor_holography", "section": "Model",
        "examples": ZOO_MODELS, "title": "Model",
        "description": "A zoo model (inception_v3, nmt, transformer, tensor_holography, mlp); a saved "
                       ".keras file under the models root (CELERITAS_MODELS_ROOT, loaded in Keras safe "
                       "mode); or a Python MODULE:FUNCTION under an allowed module prefix "
                       "(CELERITAS_MODEL_MODULES) returning a Keras model, its loss and input signature.",
    },
    "model_knobs": {
        "type": ["object", "null"],
        "additionalProperties": {"type": "integer", "minimum": 1, "maximum": MAX_KNOB},
        "default": {}, "section": "Model", "title": "Model size knobs",
        "description": "Optional. Overrides of the zoo model's size knobs, e.g. "
                       "{\"layers\": 8, \"filters\": 16} "
                       "(`celeritas models` lists them; each a positive integer, at most 1000000). "
                       "Empty: the model's own sizes. Ignored for user models. The form starts with "
                       "the demo's tensor_holography sizes: empty it for another zoo model.",
    },
    "paper_config": {
        "type": ["boolean", "null"], "default": False, "section": "Model", "title": "Paper configuration",
        "description": "Build the zoo model at the Celeritas paper's size instead of the small default.",
    },
    "batch_size": {
        "type": "integer", "minimum": 1, "maximum": MAX_BATCH_SIZE, "default": 16, "section": "Model",
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
        "default": "30MiB", "section": "Cluster", "title": "Memory per device",
        "description": "Memory of each device, e.g. 32GiB, 500MB or 1e9 (bytes). The default, the "
                       "demo's, holds less than the default model needs on one device: it must be split.",
    },
    "calibrate_comm": {
        "type": ["boolean", "null"], "default": True, "section": "Cluster", "title": "Calibrate transfers",
        "description": "Measure transfers between two devices and fit t = k·bytes + b; otherwise use the "
                       "default PCIe-like model (1e-4 µs/B + 25 µs).",
    },
    "topology": {
        "type": ["string", "null"], "default": None, "section": "Cluster", "title": "Link topology",
        "pattern": r"^\s*[0-9]+\s*[xX]\s*[0-9]+(\s*[xX]\s*[0-9]+)?\s*:[A-Za-z0-9,=\s-]+$",
        "description": "Optional. A preset grouping the devices into nodes (and islands) joined by their "
                       "links, e.g. 2x2:nvlink,ib: 2 nodes of 2 devices, NVLink inside a node, InfiniBand "
                       "between nodes (docs/formats.md, \"Topology presets\"); its devices must number "
                       "Devices. Calibration then measures each class of pair. Empty: one transfer model "
                       "for every pair of devices.",
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
        "examples": PLACERS, "default": ["celeritas", "metis", "m-topo", "m-etf", "m-sct", "order-place"],
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
        "type": ["string", "null"], "default": None, "section": "Storage", "title": "Run directory",
        "description": "Optional. Where the run's artifacts go: a folder under the runs root "
                       "(CELERITAS_RUNS_ROOT) or s3:// under the allowed prefix (CELERITAS_RUNS_S3_PREFIX). "
                       "Empty: MODEL/RUN_ID under the runs root.",
    },
}

#: The fields whose type admits null: the form marks them optional (no ``*``; a switch always holds
#: a value, a text field may be left empty), and null means the default.
OPTIONAL: tuple[str, ...] = tuple(name for name, f in FIELDS.items() if isinstance(f["type"], list))
#: Where the trigger form's defaults differ from :func:`defaults`: ``celeritas run`` and the fleet
#: keep empty knobs (a model's own sizes), as the demo's fit only tensor_holography and a model is
#: refused knobs it does not have.
FORM_DEFAULTS: dict[str, Any] = {"model_knobs": DEMO_KNOBS}

#: How the messages name a JSON type.
_TYPE_WORDS = {"integer": "a whole number", "number": "a number", "string": "text",
               "boolean": "true or false", "array": "a list", "object": "an object of names and values",
               "null": "empty"}


def value_type(name: str) -> str:
    """The JSON type of field ``name``'s value when it is given (its schema type without null)."""
    kind = FIELDS[name]["type"]
    return next(k for k in kind if k != "null") if isinstance(kind, list) else kind


def form_schema(name: str) -> dict[str, Any]:
    """Field ``name``'s JSON schema as the DAG's ``Param`` holds it (without its default).

    The trigger form gives a number box the field's ``minimum`` and ``maximum``, and the box then
    silently clamps what is typed (-5 becomes 1) instead of letting the check refuse it; so the
    bounds go under ``allOf``, which the form ignores and every JSON-schema validator applies.

    Parameters
    ----------
    name : str
        A key of :data:`FIELDS`.

    Returns
    -------
    dict
        The schema, ``title``, ``description`` and ``section`` included.
    """
    field = {k: copy.deepcopy(v) for k, v in FIELDS[name].items() if k != "default"}
    bounds = {k: field.pop(k) for k in BOUNDS if k in field}
    if bounds:
        field["allOf"] = [bounds]
    return field


def schema() -> dict[str, Any]:
    """The whole parameter object as one JSON schema (no extra fields allowed): the fields'
    :func:`form_schema`, so Airflow and :func:`resolve_params` validate with the same one."""
    props = {}
    for name in FIELDS:
        props[name] = {k: v for k, v in form_schema(name).items() if k != "section"}
    return {"type": "object", "properties": props, "additionalProperties": False}


def defaults() -> dict[str, Any]:
    """Every field's default value (``celeritas run``, the fleet)."""
    return {name: copy.deepcopy(field["default"]) for name, field in FIELDS.items()}


def form_defaults() -> dict[str, Any]:
    """The trigger form's defaults: :func:`defaults` with :data:`FORM_DEFAULTS` (the demo's
    configuration). Airflow fills a trigger's missing fields with them, the REST API's too."""
    return {**defaults(), **copy.deepcopy(FORM_DEFAULTS)}


def resolve_params(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults overlaid with ``given``, validated against :func:`schema` (one-line errors)."""
    if given is not None and not isinstance(given, Mapping):
        raise CeleritasInputError(f"parameter 'params': expected an object, got {type(given).__name__}")
    params = {**defaults(), **dict(given or {})}
    _check_finite(params, "")
    problem = first_problem(params)
    if problem is not None:
        raise CeleritasInputError(problem)
    for name in OPTIONAL:
        if params[name] is None:
            params[name] = copy.deepcopy(FIELDS[name]["default"])
    _check_device_memory(params["device_memory"])
    _check_topology(params["topology"], params["num_devices"])
    return params


def _check_topology(text: str | None, devices: int) -> None:
    """Refuse a topology preset that does not parse or whose devices are not ``num_devices``."""
    if text is None:
        return
    # lazy: numpy (through topology) loads only for a preset, not for --help or the DAG file
    from celeritas_core.topology import parse_preset

    title = FIELDS["topology"]["title"]
    preset = parse_preset(text, f"parameter 'topology': {title}")
    if preset.num_devices != devices:
        raise CeleritasInputError(f"parameter 'topology': {title} {json_text(text)} has {preset.num_devices} "
                                  f"devices, but Devices (num_devices) is {devices}")


def _check_device_memory(text: str) -> None:
    """Refuse a memory size that does not parse, is not positive, or exceeds the engine's limit."""
    title = FIELDS["device_memory"]["title"]
    if parse_size(text, field=f"parameter 'device_memory': {title}") > MAX_BYTES:
        raise CeleritasInputError(f"parameter 'device_memory': {title} must be at most {MAX_BYTES:.0e} bytes "
                                  f"(1 EB), not {json_text(text)}")


def first_problem(params: Mapping[str, Any]) -> str | None:
    """The first schema violation in ``params`` as one sentence naming the parameter, or None.

    Shared by :func:`resolve_params` and the API server's trigger check (``celeritas_plugins``), so
    the CLI, the REST API and the trigger form say the same thing.
    """
    # lazy: jsonschema loads only to check parameters, not for --help or the DAG file
    import jsonschema

    validator = jsonschema.Draft7Validator(schema())
    errors = sorted(validator.iter_errors(dict(params)), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return None
    error = errors[0]
    where = ".".join(str(p) for p in error.absolute_path) or "params"
    return f"parameter {where!r}: {_sentence(error)}"


def trigger_problem(body: bytes) -> str | None:
    """What is wrong with a REST trigger body's ``conf`` for the placement DAG, as one sentence, or None.

    The API server's trigger check (``celeritas_plugins``) asks this for the form and the REST API
    alike; :func:`check_trigger` decides. None also when the body is not a JSON object with a
    ``conf``: Airflow's own checks answer for those.
    """
    try:
        request = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return None
    conf = request.get("conf") if isinstance(request, dict) else None
    if conf is None:
        return None
    try:
        check_trigger(conf)
    except CeleritasInputError as error:
        return str(error)
    return None


def check_trigger(conf: Any) -> dict[str, Any]:
    """A trigger's ``conf`` as the DAG's tasks will get it, checked as ``prepare`` will check it.

    Airflow fills the fields a trigger leaves out with the form's defaults (:func:`form_defaults`),
    so they are filled here too; then :func:`resolve_params` and the deployment's policy on the
    model and the run directory (:func:`tasks.policy.check_model`, :func:`tasks.policy.check_run_dir`)
    judge it, without TensorFlow and without reading the model itself.

    Parameters
    ----------
    conf : Any
        The trigger's ``conf`` (a JSON object; anything else is refused).

    Returns
    -------
    dict
        The resolved parameters.

    Raises
    ------
    CeleritasInputError
        The first problem, as one sentence naming the parameter.
    """
    # lazy: the model checks (and the zoo) load only for a trigger, not for --help or the DAG file
    from tasks.policy import check_model, check_run_dir

    params = resolve_params({**form_defaults(), **conf} if isinstance(conf, Mapping) else conf)
    check_model(params["model"], params["model_knobs"], paper=bool(params["paper_config"]))
    if params["run_dir"]:
        check_run_dir(params["run_dir"])
    return params


def _check_finite(value: Any, where: str) -> None:
    """Refuse NaN and infinities anywhere in the parameters (JSON has neither; Python's json does)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise CeleritasInputError(f"parameter {where or 'params'!r}: expected a finite number, got {value}")
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_finite(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_finite(item, f"{where}.{i}")


def _sentence(error: Any) -> str:
    """A jsonschema error as a sentence a person can act on (the value, what is allowed instead)."""
    keyword, limit, value = error.validator, error.validator_value, error.instance
    field = FIELDS.get(str(error.absolute_path[0])) if error.absolute_path else None
    title = field["title"] if field else "the parameters"
    got = json_text(value)
    if keyword == "type":
        kinds = [limit] if isinstance(limit, str) else list(limit)
        wanted = " or ".join(_TYPE_WORDS.get(k, k) for k in kinds)
        return f"{title} must be {wanted}, not {got}"
    if keyword in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        relation = {"minimum": "at least", "exclusiveMinimum": "more than", "maximum": "at most",
                    "exclusiveMaximum": "less than"}[keyword]
        return f"{title} must be {relation} {json_text(limit)}, not {got}"
    if keyword == "not":
        return f"{title} must be a finite number, not {got}"
    if keyword == "pattern":
        if field is FIELDS["device_memory"]:
            return f"{title}: {got} is not {MEMORY_SIZE_EXAMPLE}"
        if field is FIELDS["topology"]:
            return f"{title}: {got} is not {TOPOLOGY_EXAMPLE}"
        return f"{title}: {got} is not in the expected form"
    if keyword == "enum":
        return f"{title}: {got} is not one of {', '.join(map(str, limit))}"
    if keyword == "minLength":
        return f"{title} must not be empty"
    if keyword in ("minItems", "maxItems"):
        relation = "at least" if keyword == "minItems" else "at most"
        return f"{title} needs {relation} {limit} value{'s' if limit != 1 else ''}, not {len(value)}"
    if keyword == "uniqueItems":
        return f"{title} lists a value twice: {got}"
    if keyword == "additionalProperties":
        extra = ", ".join(map(repr, sorted(set(value) - set(error.schema.get("properties", {})))))
        return f"unknown parameter {extra}; the parameters are {', '.join(FIELDS)}"
    return str(error.message)


def json_text(value: Any) -> str:
    """``value`` as the JSON a person typed (strings quoted, lists in brackets), cut to 80 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
