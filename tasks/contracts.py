"""The pipeline's typed contracts: what each step takes and what it returns.

Every step in ``tasks/`` takes the :class:`Job` (the typed parameters, the run directory, the MLflow
parent run, and the model and cluster ``prepare`` resolved once) and the results of the steps it
depends on (declared in :mod:`tasks.steps`), and returns one frozen dataclass below.
``celeritas run`` (:func:`tasks.pipeline.run_pipeline`) passes them between the steps as they are;
the Airflow DAG passes them as XCom, which holds plain JSON: :meth:`Contract.to_xcom` gives a
JSON-able dict and :meth:`Contract.from_xcom` checks one and builds the dataclass back.

Fields are checked against their annotations whenever a contract is built (by a step or from
XCom): a missing or ill-typed field raises a one-line
:class:`~celeritas_core.errors.CeleritasInputError` that names the contract and the field, e.g.
``PlacementValidation: field 'median_s' must be a number, got 'fast'``, instead of a
``KeyError`` somewhere downstream (the DAG fails such a task without a retry). NumPy scalars become
Python numbers, lists of a ``tuple[...]`` field become tuples, mappings are copied. Extra keys in
an XCom dict are ignored, so a newer producer does not break an older consumer, and a field with a
default may be missing (it takes its default), so a newer consumer reads an older producer's XCom.

Importing this module is cheap (no numpy, MLflow or TensorFlow): the DAG files import it.
"""

from __future__ import annotations

import functools
import statistics
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, Self

from celeritas_core.defaults import FREE_ORDER, ORDER_MODES
from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.format_tags import PUBLISH_FORMAT
from tasks.params import PipelineParams
from tasks.report import format_table, mib, number, percent


@dataclass(frozen=True)
class Contract:
    """Base of the contracts: field checks on construction, ``to_xcom`` and ``from_xcom``."""

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in fields(self):
            object.__setattr__(self, f.name, _check(getattr(self, f.name), hints[f.name],
                                                    type(self).__name__, f.name))

    def summary(self) -> str:
        """What the step did, in a few lines for the task log (its figures with units)."""
        return "; ".join(f"{f.name}={_show(getattr(self, f.name))}" for f in fields(self))

    def to_xcom(self) -> dict[str, Any]:
        """The contract as plain JSON types (dicts, lists, strings, numbers, booleans, None)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_xcom(cls, data: Any) -> Self:
        """Build the contract from :meth:`to_xcom`'s dict, checking every field.

        Raises :class:`CeleritasInputError` naming the first missing or bad field.
        """
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise CeleritasInputError(f"{cls.__name__}: expected a JSON object, got {_show(data)}")
        for f in fields(cls):
            if f.name not in data and f.default is MISSING and f.default_factory is MISSING:
                raise CeleritasInputError(f"{cls.__name__}: field {f.name!r} missing")
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


# --------------------------------------------------------------------------------------- contracts
@dataclass(frozen=True)
class ResolvedModel(Contract):
    """The run's model as ``prepare`` resolved it under the deployment's policy
    (:func:`tasks.policy.resolve_model`), once: what every step that runs the model builds it from.
    ``kind`` ``zoo`` (``name`` with its ``knobs``, at the paper's size when ``paper_config``),
    ``keras`` (``location``: the file, resolved inside the models root, or its ``s3://`` URI) or
    ``function`` (``name``: ``MODULE:FUNCTION``; ``location``: the module's file); the SHA-256 of a
    user model's bytes (None for the zoo)."""

    kind: Literal["zoo", "keras", "function"]
    name: str
    location: str | None
    content_sha256: str | None
    knobs: dict[str, int]
    paper_config: bool


@dataclass(frozen=True)
class ClusterSpec(Contract):
    """The run's devices as ``prepare`` read them from the parameters, once: ``num_devices``
    identical devices of ``device_memory_bytes`` each, with the transfer model t =
    ``slope_us_per_byte``·bytes + ``intercept_us`` (µs; the default model) or, when ``topology``
    names a preset, its links. ``calibrate_comm`` builds the run's cluster from it (measuring the
    transfers or keeping these figures) and writes it to ``cluster.json``, which the later steps
    read (:class:`CalibrationResult`)."""

    num_devices: int
    device_memory_bytes: int
    slope_us_per_byte: float
    intercept_us: float
    topology: str | None


@dataclass(frozen=True)
class Job(Contract):
    """What every step takes: the resolved parameters (:func:`tasks.params.resolve_params`, with
    ``run_dir`` filled in), the run directory (a folder or ``s3://``), the MLflow parent run, the
    configuration the placement is for (:func:`tasks.configuration.configuration_to_json`), and the
    model and the cluster resolved once by ``prepare`` (no step resolves them again)."""

    params: PipelineParams
    run_dir: str
    parent_run_id: str
    configuration: dict[str, Any]
    model: ResolvedModel
    cluster: ClusterSpec

    @property
    def config_key(self) -> str:
        """The configuration's key (runs are only compared within one)."""
        return str(self.configuration["key"])

    def summary(self) -> str:
        p = self.params
        return (f"model {p.model} at batch {p.batch_size} on {p.num_devices} devices of "
                f"{p.device_memory} (configuration {self.config_key}); placers {', '.join(p.placers)}; "
                f"artifacts in {self.run_dir}")


@dataclass(frozen=True)
class PrepareResult(Job):
    """``prepare``: the job, and the URI of the ``params.json`` it wrote."""

    params_uri: str

    @property
    def job(self) -> Job:
        """The :class:`Job` the other steps take."""
        return Job(**{f.name: getattr(self, f.name) for f in fields(Job)})


@dataclass(frozen=True)
class CalibrationResult(Contract):
    """``calibrate_comm``: the run's cluster (``cluster.json``) and the transfer model it uses,
    t = slope·bytes + intercept. ``r2`` is the measured fit's (None when nothing was measured);
    ``transfer_model`` says whether the run uses that fit (``calibrated``) or the documented
    default model (``default``), and ``transfer_reason`` why the default (None: not recorded, an
    older producer)."""

    cluster_uri: str
    comm_slope_us_per_byte: float
    comm_intercept_us: float
    r2: float | None
    transfer_model: Literal["calibrated", "default"] | None = None
    transfer_reason: str | None = None

    def summary(self) -> str:
        if self.transfer_model == "calibrated" or (self.transfer_model is None and self.r2 is not None):
            how = "calibrated" + (f", R² {self.r2:.3f}" if self.r2 is not None else "")
        else:
            how = f"the default model: {self.transfer_reason or 'not measured'}"
        return (f"transfer time t = {self.comm_slope_us_per_byte:.3g} µs/B · bytes + "
                f"{self.comm_intercept_us:.1f} µs ({how})")


@dataclass(frozen=True)
class ProfileResult(Contract):
    """``profile_small_batches``: ``profile.json``, the number of traced ops and the batch sizes."""

    profile_uri: str
    ops: int
    batch_sizes: tuple[int, ...]

    def summary(self) -> str:
        return f"traced {self.ops} ops at batch sizes {', '.join(map(str, self.batch_sizes))}"


@dataclass(frozen=True)
class FitResult(Contract):
    """``fit_regression``: ``fits.json`` and the predicted totals at the large batch (medians of the
    fits' R² may be NaN when no op has a finite one)."""

    fits_uri: str
    ops: int
    predicted_total_time_us: float
    predicted_total_memory_bytes: float
    fit_median_memory_r2: float
    fit_median_time_r2: float

    def summary(self) -> str:
        total_ms = number(self.predicted_total_time_us, ".3f", 1e-3)
        return (f"fitted {self.ops} ops: at the large batch, total op time {total_ms} ms and "
                f"memory {mib(self.predicted_total_memory_bytes)} MiB; median R² time "
                f"{number(self.fit_median_time_r2)}, memory {number(self.fit_median_memory_r2)}")


@dataclass(frozen=True)
class RemeasureResult(Contract):
    """``remeasure_large_batch``: the estimated and measured graphs, the estimation accuracy and
    its CDF chart, and the accuracy figures."""

    estimated_graph_uri: str
    measured_graph_uri: str
    accuracy_uri: str
    accuracy_cdf_uri: str
    estimation_memory_deviation: float
    estimation_time_deviation: float
    ops: int
    remeasure_predicted_peak_memory_bytes: float
    remeasure_measured_peak_memory_bytes: float

    def summary(self) -> str:
        return (f"re-measured {self.ops} ops at the large batch: estimate off by "
                f"{percent(self.estimation_time_deviation)} in time, "
                f"{percent(self.estimation_memory_deviation)} "
                f"in memory; peak {mib(self.remeasure_measured_peak_memory_bytes)} MiB measured, "
                f"{mib(self.remeasure_predicted_peak_memory_bytes)} MiB predicted")


@dataclass(frozen=True)
class FuseResult(Contract):
    """``fuse``: ``fusion.json``, the coarse graph and the fusion figures."""

    fusion_uri: str
    coarse_graph_uri: str
    nodes: int
    coarse_nodes: int
    ccr_before: float
    ccr_after: float
    cut_cost_us: float

    def summary(self) -> str:
        return (f"fused {self.nodes} ops into {self.coarse_nodes} clusters; communication-to-computation "
                f"ratio {number(self.ccr_before)} -> {number(self.ccr_after)}; cut edges cost "
                f"{number(self.cut_cost_us, '.3f', 1e-3)} ms")


@dataclass(frozen=True)
class PlaceResult(Contract):
    """``place``: per placer, its placement URI, MLflow child run, simulated step time and whether
    it overfills a device; the comparison and the fastest simulated placer."""

    placements: dict[str, str]
    child_runs: dict[str, str]
    compare_uri: str
    best_simulated: str
    simulated_step_time_us: dict[str, float]
    oom: dict[str, bool]

    def summary(self) -> str:
        times = self.simulated_step_time_us
        ranked = sorted(times, key=lambda p: (self.oom.get(p, False), times[p]))
        rows = [(p, number(times[p], ".3f", 1e-3), "no" if self.oom.get(p, False) else "yes",
                 "*" if p == self.best_simulated else "") for p in ranked]
        table = format_table(("placer", "simulated step (ms)", "fits", "best"), rows, {1})
        return f"compared {len(rows)} placers (compare table: {self.compare_uri}):\n{table}"


@dataclass(frozen=True)
class ValidationItem(Contract):
    """One GPU validation task: a placement to time, against the configuration's champion (its
    model version and published placement) when there is one. ``plan_validation`` makes one per
    placement that fits; the DAG maps ``validate`` over them. ``champion_placement_sha256``: the
    digest the registry recorded for the champion's placement (its download is checked against it;
    None: not recorded, or an older producer)."""

    placer: str
    placement_uri: str
    champion_version: str | None
    champion_placement_uri: str | None
    champion_placement_sha256: str | None = None


@dataclass(frozen=True)
class ValidationPlan(Contract):
    """``plan_validation``: the placements to validate and the champion they are measured
    against (version None: the configuration has none yet)."""

    items: tuple[ValidationItem, ...]
    registered_model: str
    champion_version: str | None
    champion_placer: str | None
    champion_run_id: str | None

    def summary(self) -> str:
        champion = (f"champion version {self.champion_version} ({self.champion_placer})"
                    if self.champion_version else "no champion yet")
        placers = ", ".join(i.placer for i in self.items)
        return f"validating {len(self.items)} placements that fit ({placers}) against {champion} of " \
            f"{self.registered_model}"


#: An execution-order mode (``celeritas_core.defaults.ORDER_MODES``: ``enforced`` or ``free``).
OrderMode = Literal[ORDER_MODES]


@dataclass(frozen=True)
class PlacementValidation(Contract):
    """``validate`` of one placement: its timed steps and, interleaved with them in blocks on the
    same devices, the champion's (empty when there is none, or when it could not run:
    ``champion_error`` says why); ``validation/PLACER.json``, the summary figures (s) and the
    placer's MLflow child run (``child_run_id``; None: not recorded, an older producer).

    ``step_seconds`` and the summary figures are those of ``order_mode``, the execution-order mode
    the placement competes in (its own ``order_mode``; None: an older producer, which timed the
    free order only); ``mode_step_seconds`` holds every mode timed (both when the placement
    records an order), that one included; ``predicted_step_time_s`` is the placement's simulated
    step (None when it records none); ``devices_used`` the TensorFlow devices that ran its ops;
    ``placement_sha256`` the SHA-256 of the placement file's bytes that were timed (``publish``
    promotes only those bytes; None: an older producer)."""

    placer: str
    placement_uri: str
    validation_uri: str
    step_seconds: tuple[float, ...]
    champion_version: str | None
    champion_step_seconds: tuple[float, ...]
    champion_error: str | None
    mean_s: float
    median_s: float
    p90_s: float
    blocks: int
    child_run_id: str | None = None
    order_mode: OrderMode | None = None
    mode_step_seconds: dict[str, tuple[float, ...]] = field(default_factory=dict)
    predicted_step_time_s: float | None = None
    devices_used: tuple[str, ...] = ()
    placement_sha256: str | None = None

    def mode_median_s(self, mode: str) -> float | None:
        """The median step (s) of ``mode`` (``enforced`` or ``free``), None when not timed (an
        older producer's steps count as the free order's)."""
        steps = self.mode_step_seconds.get(mode)
        if steps is None and not self.mode_step_seconds and mode == FREE_ORDER:
            steps = self.step_seconds
        return statistics.median(steps) if steps else None

    def summary(self) -> str:
        mine = (f"{self.placer}: median {number(self.median_s, '.3f', 1e3)} ms, p90 "
                f"{number(self.p90_s, '.3f', 1e3)} ms over {len(self.step_seconds)} timed steps in "
                f"{self.blocks} blocks")
        others = [m for m in self.mode_step_seconds if m != self.order_mode]
        if self.order_mode is not None and others:
            other = ", ".join(f"{m} order {number(self.mode_median_s(m), '.3f', 1e3)} ms" for m in others)
            mine = f"{mine} ({self.order_mode} order; {other})"
        if self.champion_step_seconds:
            champion_ms = number(statistics.median(self.champion_step_seconds), ".3f", 1e3)
            return f"{mine}; champion version {self.champion_version}: median {champion_ms} ms"
        if self.champion_error:
            return f"{mine}; the champion could not run: {self.champion_error}"
        return f"{mine}; no champion to compare with"


@dataclass(frozen=True)
class PublishResult(Contract):
    """``publish``: the champion/challenger decision for the job's configuration. ``placer``,
    ``step_time_s`` (median, s) and ``challenger_placement_uri`` are the run's best; the
    ``champion_*`` fields and ``placement_uri`` describe production *after* the decision (None
    when a kept configuration has no champion); ``comparison`` holds the statistical test
    (:class:`celeritas_core.statistics.step_time_comparison.StepTimeComparison`, empty without a champion to
    compare).
    :meth:`document` is ``publish.json``."""

    model: str
    config_key: str
    decision: Literal["promoted", "kept"]
    reason: str
    placer: str
    step_time_s: float
    challenger_placement_uri: str
    placement_uri: str | None
    champion_version: str | None
    production_run_id: str | None
    previous_step_time_s: float | None
    comparison: dict[str, Any]
    validation_summary_uri: str
    publish_uri: str

    @property
    def promoted(self) -> bool:
        """Whether the new placement went to production."""
        return self.decision == "promoted"

    def summary(self) -> str:
        head = "PROMOTED" if self.promoted else "kept production"
        production = f"configuration {self.config_key} has no champion"
        if self.champion_version:
            production = (f"production for {self.config_key}: version {self.champion_version} "
                          f"({self.placement_uri})")
        return f"{head}: {self.reason}\n{production}"

    def document(self) -> dict[str, Any]:
        """The ``publish.json`` document (``celeritas-publish/1``): every field but ``publish_uri``."""
        return {"format": PUBLISH_FORMAT, **{k: v for k, v in self.to_xcom().items() if k != "publish_uri"}}


#: Every contract between the steps, by name (the tests round-trip each; the pipeline's whole result,
#: :class:`tasks.steps.PipelineResult`, is derived from the declaration of the steps).
CONTRACTS: dict[str, type[Contract]] = {
    cls.__name__: cls for cls in (ResolvedModel, ClusterSpec, Job, PrepareResult, CalibrationResult,
                                  ProfileResult, FitResult, RemeasureResult, FuseResult, PlaceResult,
                                  ValidationItem, ValidationPlan, PlacementValidation, PublishResult)
}


# ------------------------------------------------------------------------------------------- checks
@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _scalar(value: Any) -> Any:
    """A NumPy scalar as the Python number or bool it holds (without importing numpy)."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return value.item()
    return value


def _check(value: Any, hint: Any, owner: str, path: str) -> Any:
    """``value`` checked against the annotation ``hint`` and normalised; ``path`` names the field."""

    def bad(expected: str) -> CeleritasInputError:
        return CeleritasInputError(f"{owner}: field {path!r} must be {expected}, got {_show(value)}")

    value = _scalar(value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return _plain(value)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = (a for a in args if a is not type(None))
        try:
            return _check(value, inner, owner, path)
        except CeleritasInputError:
            raise bad(f"{_describe(inner)} or null") from None
    if origin is Literal:
        if value not in args:
            raise bad("one of " + ", ".join(repr(a) for a in args))
        return value
    if isinstance(hint, type) and issubclass(hint, Contract):
        if isinstance(value, hint):
            return value
        if not isinstance(value, Mapping):
            raise bad(f"a {hint.__name__} object")
        return hint.from_xcom(value)
    if hint is PipelineParams:
        if isinstance(value, PipelineParams):
            return value
        if not isinstance(value, Mapping):
            raise bad("an object of pipeline parameters")
        try:
            return PipelineParams.from_json(value)
        except CeleritasInputError as exc:
            raise CeleritasInputError(f"{owner}: field {path!r}: {exc}") from None
    if origin is dict:
        if not isinstance(value, Mapping):
            raise bad("an object")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise bad("an object with string keys")
            out[key] = _check(item, args[1], owner, f"{path}.{key}")
        return out
    if origin is tuple:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
            raise bad("a list")
        return tuple(_check(item, args[0], owner, f"{path}.{i}") for i, item in enumerate(value))
    if hint is bool:
        if not isinstance(value, bool):
            raise bad("a boolean")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str) or not value:
            raise bad("a non-empty string")
        return value
    raise TypeError(f"{owner}.{path}: unsupported annotation {hint!r}")  # a contract's own mistake


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a non-empty string"}
    return names.get(hint, "an object" if typing.get_origin(hint) is dict else repr(hint))


def _plain(value: Any) -> Any:
    """``value`` as plain JSON types: contracts as dicts, tuples as lists, mappings copied."""
    if isinstance(value, Contract):
        return value.to_xcom()
    if isinstance(value, PipelineParams):
        return value.to_json()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
