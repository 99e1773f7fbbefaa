"""The pipeline's parameters: one typed declaration, :class:`PipelineParams`, from which the JSON
schema of the Airflow trigger form and of ``celeritas run`` (:data:`FIELDS`) is derived.

Each field has a type, a default, its bounds, a title, a description and a form section; the DAG
turns them into Airflow ``Param`` objects (the trigger form validates them with the same schema),
and :func:`resolve_params` fills defaults and validates a plain dict into a frozen
:class:`PipelineParams` (what every step reads), raising a one-line
:class:`~celeritas_core.errors.CeleritasInputError` that names the field. Importing this module
is cheap (no numpy), since the DAG file imports it at parse time.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from celeritas_core.defaults import (
    AUTO_SCHEDULE,
    DEFAULT_MEMORY_FRACTION,
    DEFAULT_ORDER_MODE,
    DEFAULT_R,
    ORDER_MODES,
    SCHEDULES,
)
from celeritas_core.errors import CeleritasInputError
from celeritas_core.limits import MAX_BYTES
from celeritas_core.readwrite.units import parse_device_memory
from tasks.policy import check_model, check_run_dir

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

PLACERS = ["celeritas", "metis", "m-topo", "m-etf", "m-sct", "heft", "order-place", "single", "gpipe-even",
           "alpa-stages", "pipedream"]
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

def _param(default: Any, title: str, description: str, *, section: str, optional: bool = False,
           finite: bool = False, **schema: Any) -> Any:
    """A field of :class:`PipelineParams`, declared as a placer's parameter is
    (:func:`celeritas_core.placers.base.param`): its default, the trigger form's ``title``,
    ``description`` and ``section``, and its JSON-schema constraints (bounds, items, pattern, …).
    ``optional``: the form admits null (which means the default) for a field that always holds a
    value once resolved; ``finite``: a number the form must refuse NaN for (:data:`NOT_NAN`)."""
    if finite:
        schema["not"] = NOT_NAN
    metadata = {"title": title, "description": description, "section": section, "optional": optional,
                "schema": schema}
    if isinstance(default, dict):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class PipelineParams:
    """The parameters of one pipeline run: the trigger form's fields and ``celeritas run``'s flags.

    The one declaration of the parameters: each field's type, default, bounds, title, description
    and form section; :data:`FIELDS` (the JSON schema the form and the REST API validate with) is
    derived from it. Every instance is valid (it is checked against that schema when built:
    :func:`resolve_params` and :meth:`from_json` build it from a plain dict, filling defaults); it
    travels as plain JSON (:meth:`to_json`, which is also ``params.json``). A field the form lets
    be empty (``null``) holds its default here, except ``run_dir``, which ``prepare`` fills in.
    """

    model: str = _param(
        "tensor_holography", "Model",
        "A zoo model (inception_v3, nmt, transformer, tensor_holography, mlp); a saved "
        ".keras file under the models root (CELERITAS_MODELS_ROOT, loaded in Keras safe "
        "mode); or a Python MODULE:FUNCTION under an allowed module prefix "
        "(CELERITAS_MODEL_MODULES) returning a Keras model, its loss and input signature.",
        section="Model", minLength=1, examples=ZOO_MODELS)
    model_knobs: dict[str, int] = _param(  # noqa: RUF009 (a field with a default_factory: a fresh dict)
        {}, "Model size knobs",
        "Optional. Overrides of the zoo model's size knobs, e.g. "
        "{\"layers\": 8, \"filters\": 16} "
        "(`celeritas models` lists them; each a positive integer, at most 1000000). "
        "Empty: the model's own sizes. Ignored for user models. The form starts with "
        "the demo's tensor_holography sizes: empty it for another zoo model.",
        section="Model", optional=True,
        additionalProperties={"type": "integer", "minimum": 1, "maximum": MAX_KNOB})
    paper_config: bool = _param(
        False, "Paper configuration",
        "Build the zoo model at the Celeritas paper's size instead of the small default.",
        section="Model", optional=True)
    batch_size: int = _param(
        16, "Batch size", "The (large) training batch size to place the model for.",
        section="Model", minimum=1, maximum=MAX_BATCH_SIZE)
    profile_batch_sizes: tuple[int, ...] = _param(
        (2, 4, 8), "Profiling batch sizes",
        "Small batch sizes profiled on one device to fit per-op costs (at least two).",
        section="Standard Evaluation", items={"type": "integer", "minimum": 1, "maximum": MAX_BATCH_SIZE},
        minItems=2, maxItems=16, uniqueItems=True)
    time_model: str = _param(
        "linear", "Per-op time model",
        "linear: the paper's line in the batch size for every op's time. choose: each op's "
        "model (line, line with a floor, or power law) by leave-one-out error on the profiled "
        "batches; needs more batches than the model has parameters (docs/tensorflow.md).",
        section="Standard Evaluation", enum=["linear", "choose"])
    profile_span: bool = _param(
        False, "Profile a batch towards the target",
        "Also profile the largest doubling of the largest profiling batch, up to half the batch "
        "size, whose predicted one-device peak fits one device, so the fits span towards the "
        "batch they predict (docs/tensorflow.md).",
        section="Standard Evaluation", optional=True)
    num_devices: int = _param(
        4, "Devices", "Number of GPUs (logical CPU devices where there are none).",
        section="Cluster", minimum=1, maximum=64)
    device_memory: str = _param(
        "30MiB", "Memory per device",
        "Memory of each device, e.g. 32GiB, 500MB or 1e9 (a bare number is bytes, at least 1MiB). "
        "The default, the demo's, holds less than the default model needs on one device: it must be split.",
        section="Cluster", pattern=r"^\s*[0-9]*\.?[0-9]+([eE][+-]?[0-9]+)?\s*[a-zA-Z]*\s*$")
    calibrate_comm: bool = _param(
        True, "Calibrate transfers",
        "Measure transfers between two devices and fit t = k·bytes + b; otherwise use the "
        "default PCIe-like model (1e-4 µs/B + 25 µs).",
        section="Cluster", optional=True)
    topology: str | None = _param(
        None, "Link topology",
        "Optional. A preset grouping the devices into nodes (and islands) joined by their "
        "links, e.g. 2x2:nvlink,ib: 2 nodes of 2 devices, NVLink inside a node, InfiniBand "
        "between nodes (docs/formats.md, \"Topology presets\"); its devices must number "
        "Devices. Calibration then measures each class of pair. Empty: one transfer model "
        "for every pair of devices.",
        section="Cluster", pattern=r"^\s*[0-9]+\s*[xX]\s*[0-9]+(\s*[xX]\s*[0-9]+)?\s*:[A-Za-z0-9,=\s-]+$")
    R: int = _param(
        DEFAULT_R, "Exploration range R",
        "Operation fusion puts at most R ops in one cluster (the paper uses 200).",
        section="Placement", minimum=1, maximum=MAX_R)
    memory_fraction: float = _param(
        DEFAULT_MEMORY_FRACTION, "Cluster memory cap",
        "Per-cluster memory cap M as a fraction of device memory.",
        section="Placement", exclusiveMinimum=0, maximum=1, finite=True)
    placers: tuple[str, ...] = _param(
        ("celeritas", "metis", "m-topo", "m-etf", "m-sct", "order-place"), "Placers to compare",
        "Celeritas and the baselines to run; each becomes a child run in MLflow.",
        section="Placement", items={"type": "string", "enum": PLACERS}, minItems=1, uniqueItems=True,
        examples=PLACERS)
    order_mode: str = _param(
        DEFAULT_ORDER_MODE, "Execution order",
        "enforced: each device runs its ops in the order the simulator ran them (recorded in the "
        "placement; TensorFlow follows it through control dependencies), so the step that runs is "
        "the one predicted. free: TensorFlow picks among ready ops its own way. Validation times "
        "both; this one competes for promotion and is what the champion asks of its consumers.",
        section="Placement", enum=list(ORDER_MODES))
    micro_batches: str = _param(
        "1", "Micro-batches",
        "1: one batch per step. M (a divisor of the batch size): place and run the step as a "
        "pipeline of M micro-batches, gradients accumulated and the optimizer applied once; auto: "
        "the fastest that fits of every divisor up to 4 per device, or one batch per step "
        "(docs/pipelining.md). Validation then times the pipelined step.",
        section="Placement", pattern=r"^\s*(auto|[1-9][0-9]{0,5})\s*$")
    schedule: str = _param(
        AUTO_SCHEDULE, "Pipeline schedule",
        "With micro-batches: gpipe (all forwards, then all backwards), 1f1b (one forward, one "
        "backward: fewer activations in flight) or auto (the faster that fits).",
        section="Placement", enum=[AUTO_SCHEDULE, *SCHEDULES])
    validation_steps: int = _param(
        50, "Timed steps", "Training steps timed per placement after warm-up (paper: 50).",
        section="Validation", minimum=1, maximum=10000)
    warmup_steps: int = _param(
        5, "Warm-up steps", "Untimed steps before timing (paper: 5).",
        section="Validation", minimum=0, maximum=1000)
    improvement_threshold: float = _param(
        0.02, "Improvement threshold",
        "Promote the new placement only if it beats the champion, re-measured alongside "
        "it, by at least this fraction with 95 % confidence (0.02 = 2 %).",
        section="Publishing", minimum=0, maximum=1, finite=True)
    run_dir: str | None = _param(
        None, "Run directory",
        "Optional. Where the run's artifacts go: a folder under the runs root "
        "(CELERITAS_RUNS_ROOT) or s3:// under the allowed prefix (CELERITAS_RUNS_S3_PREFIX). "
        "Empty: MODEL/RUN_ID under the runs root.",
        section="Storage")

    def __post_init__(self) -> None:
        _check(self.to_json())
        hints = _hints()
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata["optional"]:  # the form's empty field: the default
                value = f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]
            object.__setattr__(self, f.name, _typed(value, hints[f.name]))

    @classmethod
    def from_json(cls, given: Mapping[str, Any] | None) -> PipelineParams:
        """Defaults overlaid with ``given`` (a JSON object: the form's ``conf``, ``celeritas run``'s
        flags, an XCom, ``params.json``), checked: one-line
        :class:`~celeritas_core.errors.CeleritasInputError` naming the first bad field."""
        if given is not None and not isinstance(given, Mapping):
            raise CeleritasInputError(f"parameter 'params': expected an object, got {type(given).__name__}")
        params = {**defaults(), **dict(given or {})}
        _check(params)  # unknown fields among them too: refused before they reach the dataclass
        return cls(**params)

    def to_json(self) -> dict[str, Any]:
        """The parameters as plain JSON (lists, not tuples), in the form's order: ``params.json``,
        the XCom of the job, the MLflow parent run's params."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @property
    def device_memory_bytes(self) -> int:
        """``device_memory`` in bytes."""
        return parse_device_memory(self.device_memory, field="parameter 'device_memory'")


@functools.cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(PipelineParams)


#: JSON-schema type of each Python type a field may have.
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", tuple: "array",
               dict: "object"}


def _json_type(hint: Any, optional: bool) -> str | list[str]:
    """The JSON-schema ``type`` of a field annotated ``hint`` (``null`` admitted when ``optional``
    or when the annotation admits None)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    nullable = optional or (typing.get_origin(hint) in (typing.Union, types.UnionType))
    inner = args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) else hint
    kind = _JSON_TYPES[typing.get_origin(inner) or inner]
    return [kind, "null"] if nullable else kind


def _typed(value: Any, hint: Any) -> Any:
    """A checked field value as its annotation's type: tuples for lists, a copied dict, integers
    for the whole numbers JSON may spell 16.0 (a float field keeps the number as given)."""
    origin = typing.get_origin(hint)
    if origin is tuple:
        return tuple(int(v) if typing.get_args(hint)[0] is int else v for v in value)
    if origin is dict:
        return {str(k): int(v) for k, v in value.items()}
    if hint is int:
        return int(value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def _field_schema(f: Any) -> dict[str, Any]:
    """Field ``f`` of :class:`PipelineParams` as its JSON schema, with its default."""
    default = f.default_factory() if f.default is MISSING else f.default
    return {"type": _json_type(_hints()[f.name], f.metadata["optional"]), **f.metadata["schema"],
            "default": _plain(copy.deepcopy(default)), "section": f.metadata["section"],
            "title": f.metadata["title"], "description": f.metadata["description"]}


#: field name → JSON schema (with ``default``, ``title``, ``description`` and ``section``), derived
#: from :class:`PipelineParams`.
FIELDS: dict[str, dict[str, Any]] = {f.name: _field_schema(f) for f in fields(PipelineParams)}

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
    spec = {k: copy.deepcopy(v) for k, v in FIELDS[name].items() if k != "default"}
    bounds = {k: spec.pop(k) for k in BOUNDS if k in spec}
    if bounds:
        spec["allOf"] = [bounds]
    return spec


def schema() -> dict[str, Any]:
    """The whole parameter object as one JSON schema (no extra fields allowed): the fields'
    :func:`form_schema`, so Airflow and :func:`resolve_params` validate with the same one."""
    props = {}
    for name in FIELDS:
        props[name] = {k: v for k, v in form_schema(name).items() if k != "section"}
    return {"type": "object", "properties": props, "additionalProperties": False}


def defaults() -> dict[str, Any]:
    """Every field's default value (``celeritas run``, the fleet)."""
    return {name: copy.deepcopy(spec["default"]) for name, spec in FIELDS.items()}


def form_defaults() -> dict[str, Any]:
    """The trigger form's defaults: :func:`defaults` with :data:`FORM_DEFAULTS` (the demo's
    configuration). Airflow fills a trigger's missing fields with them, the REST API's too."""
    return {**defaults(), **copy.deepcopy(FORM_DEFAULTS)}


def resolve_params(given: Mapping[str, Any] | PipelineParams | None) -> PipelineParams:
    """The typed parameters of ``given``: defaults overlaid with it, validated against :func:`schema`
    (one-line errors naming the field); a :class:`PipelineParams` is returned as it is."""
    return given if isinstance(given, PipelineParams) else PipelineParams.from_json(given)


def _check(params: Mapping[str, Any]) -> None:
    """Refuse the first problem of ``params`` (every field present) in one line: NaN or an infinity
    anywhere, a schema violation, a device memory that does not parse or exceeds the engine's limit."""
    _check_finite(params, "")
    problem = first_problem(params)
    if problem is not None:
        raise CeleritasInputError(problem)
    _check_device_memory(params["device_memory"])
    _check_topology(params["topology"], params["num_devices"])


def _check_topology(text: str | None, devices: int) -> None:
    """Refuse a topology preset that does not parse or whose devices are not ``num_devices``."""
    if text is None:
        return
    # lazy: numpy, not at DAG parse time (the DAG processor imports this module often)
    from celeritas_core.graphs.topology import parse_preset

    title = FIELDS["topology"]["title"]
    preset = parse_preset(text, f"parameter 'topology': {title}")
    if preset.num_devices != devices:
        raise CeleritasInputError(f"parameter 'topology': {title} {json_text(text)} has {preset.num_devices} "
                                  f"devices, but Devices (num_devices) is {devices}")


def _check_device_memory(text: str) -> None:
    """Refuse a memory size that does not parse, is not positive, is a bare number too small for a
    device (a forgotten unit), or exceeds the engine's limit."""
    title = FIELDS["device_memory"]["title"]
    if parse_device_memory(text, field=f"parameter 'device_memory': {title}") > MAX_BYTES:
        raise CeleritasInputError(f"parameter 'device_memory': {title} must be at most {MAX_BYTES:.0e} bytes "
                                  f"(1 EB), not {json_text(text)}")


def first_problem(params: Mapping[str, Any]) -> str | None:
    """The first schema violation in ``params`` as one sentence naming the parameter, or None.

    Shared by :func:`resolve_params` and the API server's trigger check (``celeritas_plugins``), so
    the CLI, the REST API and the trigger form say the same thing.
    """
    # lazy: only when checking; the DAG processor imports this module often
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


def check_trigger(conf: Any) -> PipelineParams:
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
    PipelineParams
        The resolved parameters.

    Raises
    ------
    CeleritasInputError
        The first problem, as one sentence naming the parameter.
    """
    params = resolve_params({**form_defaults(), **conf} if isinstance(conf, Mapping) else conf)
    check_model(params.model, params.model_knobs, paper=params.paper_config)
    if params.run_dir:
        check_run_dir(params.run_dir)
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
    spec = FIELDS.get(str(error.absolute_path[0])) if error.absolute_path else None
    title = spec["title"] if spec else "the parameters"
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
        if spec is FIELDS["device_memory"]:
            return f"{title}: {got} is not {MEMORY_SIZE_EXAMPLE}"
        if spec is FIELDS["topology"]:
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
