"""Standard Evaluation (the paper's two steps) and validation of a placement on real devices.

1. :func:`profile_small_batches`: trace the step at small batch sizes on one device;
   :func:`celeritas_core.statistics.regression.fit_costs` fits per-op lines and predicts the large batch.
   Beyond the paper (options, off by default): more traced steps while the per-op times are
   noisy, a profile batch closer to the target, a per-op time model
   (:mod:`celeritas_core.statistics.estimation`).
2. :func:`remeasure`: place the large-batch graph (predicted costs) sequentially in DFS or
   CPD-TOPO order, filling each device to its memory (best effort when all are full), run it
   across the devices with full tracing and re-measure every op: the measured graph feeds the
   placers, with the re-measurement's own figures for every op it traced and the estimate only
   for an op it did not (:func:`measured_costs`). :func:`estimation_accuracy` compares predicted
   with re-measured costs.

:func:`validate` runs a placement: warm-up steps, then timed steps (wall clock of
``Session.run``), as the paper's "Single-step Time" (5 + 50 by default).
:func:`validate_interleaved` times several placements, each in one or both execution-order modes
(its recorded ``device_order`` enforced, and TensorFlow's own dispatch), in interleaved blocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from celeritas_core.defaults import ENFORCED_ORDER, FREE_ORDER, ORDER_MODES
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import anchored_memory, apply_colocation, colocation_anchor
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import cpath, edge_comm_us
from celeritas_core.graphs.opkeys import KeyedFits, KeyMatch, fits_op_keys, match_op_keys, with_op_keys
from celeritas_core.graphs.orders import cpd_topo_order, dfs_topo_order
from celeritas_core.placers.adjusting import order_place
from celeritas_core.readwrite.format_tags import ACCURACY_FORMAT, PROFILE_FORMAT, VALIDATION_FORMAT
from celeritas_core.readwrite.formats import (
    check_device_order,
    check_profile_document,
    placement_device_order,
    placement_order_mode,
    read_output_aliases,
)
from celeritas_core.simulation.memory import memory_profile, one_device_peak_bytes
from celeritas_core.simulation.simulator import simulate
from celeritas_core.statistics.estimation import spanning_batch, traced_steps_needed, weighted_median_error
from celeritas_core.statistics.regression import CostFits, Deviation, fit_costs, relative_deviation
from celeritas_tf.extract import graph_from_step
from celeritas_tf.identity import step_digest, step_op_keys
from celeritas_tf.microbatch import PipelineRun, pipelined_arm
from celeritas_tf.order import enforce_device_order, executed_device_order, free_ops, order_agreement
from celeritas_tf.profile import (
    StepTrace,
    device_index,
    device_kind,
    measured_peak_bytes,
    place_ops,
    resident_bytes,
    trace_costs,
    trace_step,
)
from celeritas_tf.spec import ModelSpec
from celeritas_tf.step import TrainingStep, build_training_step
from celeritas_tf.tf import logical_gpu_limits_mib, run_options, session_config, step_device, tensorflow

Progress = Callable[[str], None]
MAX_LOGICAL_DEVICES = 64


def check_devices(num_devices: int) -> None:
    """Reject a device count the machine cannot provide: the logical GPUs of
    :func:`celeritas_tf.tf.use_logical_gpus` when set up, else logical CPU devices (at most
    :data:`MAX_LOGICAL_DEVICES`), whatever GPUs the machine has: steps then run on logical CPUs."""
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise CeleritasInputError(f"--devices: need at least one device, got {num_devices!r}")
    logical = logical_gpu_limits_mib()
    if logical:
        if num_devices > len(logical):
            raise CeleritasInputError(f"--devices: {num_devices} requested but {len(logical)} logical GPUs "
                                      "are set up")
        return
    if num_devices > MAX_LOGICAL_DEVICES:
        raise CeleritasInputError(
            f"--devices: {num_devices} logical CPU devices requested, at most {MAX_LOGICAL_DEVICES}")


@dataclass(frozen=True)
class ProfilePlan:
    """How Standard Evaluation profiles, beyond the batch sizes. The default is the paper's:
    ``traced_steps`` traced steps per batch size, no more, no other batch.

    ``max_traced_steps`` above ``traced_steps``: trace more while the time-weighted standard
    error of the per-op medians exceeds ``noise_target`` (0.05 = 5 %), at most that many in all
    (:func:`celeritas_core.statistics.estimation.traced_steps_needed`). ``span_target`` (the batch to be
    predicted) with ``device_bytes`` (one device's memory): also profile the batch
    :func:`celeritas_core.statistics.estimation.spanning_batch` picks, the largest doubling of the largest
    batch up to half the target whose predicted one-device peak fits the device."""

    traced_steps: int = 3
    max_traced_steps: int | None = None
    noise_target: float = 0.05
    span_target: int | None = None
    device_bytes: float | None = None

    def more_steps(self) -> Callable[[Mapping[str, Sequence[float]]], int] | None:
        """The extra-traces rule for :func:`celeritas_tf.profile.trace_step` (None: a fixed count)."""
        if self.max_traced_steps is None or self.max_traced_steps <= self.traced_steps:
            return None
        cap, target = self.max_traced_steps, self.noise_target
        return lambda samples: traced_steps_needed(samples, target=target, max_steps=cap)


def profile_small_batches(model: ModelSpec, batch_sizes: Sequence[int], *, traced_steps: int = 3,
                          progress: Progress | None = None,
                          plan: ProfilePlan | None = None) -> list[StepTrace]:
    """Trace ``model``'s step once per batch size on one device (Standard Evaluation, step 1);
    ``plan`` (its ``traced_steps`` replaces ``traced_steps``) may add traced steps and a batch."""
    plan = plan or ProfilePlan(traced_steps=traced_steps)
    sizes = [int(b) for b in batch_sizes]
    if not sizes or any(b <= 0 for b in sizes):
        raise CeleritasInputError(f"batch sizes must be positive integers, got {list(batch_sizes)!r}")
    if len(set(sizes)) < 2:
        raise CeleritasInputError("profiling needs at least two different batch sizes to fit a line")
    if not plan.noise_target > 0:
        raise CeleritasInputError(f"--noise-target: must be above 0, got {plan.noise_target!r}")
    traces = [_profile_one(model, b, plan, f"({i + 1}/{len(sizes)})", progress) for i, b in enumerate(sizes)]
    if plan.span_target is not None:
        extra = spanning_trace(model, traces, plan, progress)
        if extra is not None:
            traces.append(extra)
    return traces


def _profile_one(model: ModelSpec, batch: int, plan: ProfilePlan, where: str,
                 progress: Progress | None) -> StepTrace:
    """One traced profile of ``model`` at ``batch`` on one device, as ``plan`` says."""
    if progress is not None:
        progress(f"profiling batch {batch} {where}")
    return trace_step(build_training_step(model, batch), traced_steps=plan.traced_steps,
                      more_steps=plan.more_steps())


def spanning_trace(model: ModelSpec, traces: Sequence[StepTrace], plan: ProfilePlan,
                   progress: Progress | None = None) -> StepTrace | None:
    """The profile of the batch :func:`spanning_batch` adds to ``traces`` towards
    ``plan.span_target`` (None when no batch qualifies): predicted one-device peaks replay the
    graph the memory fits of ``traces`` predict (the liveness model of
    ``celeritas_core.simulation.memory``)."""
    if plan.device_bytes is None or not plan.device_bytes > 0:
        raise CeleritasInputError("--span-target needs --device-memory, one device's memory")
    largest = max(traces, key=lambda t: t.batch_size)
    fits = fit_costs([(t.batch_size, t.time_us, t.memory_bytes) for t in traces])
    fits = fits.with_aliases(largest.aliases)

    def peak(batch: int) -> float:
        step = build_training_step(model, batch)
        graph = graph_from_step(step, fits.predict_costs(batch), aliases=fits.output_aliases)
        return one_device_peak_bytes(graph)

    sizes = [t.batch_size for t in traces]
    chosen = spanning_batch(sizes, int(plan.span_target), peak, float(plan.device_bytes))
    if progress is not None:
        progress(f"spanning batch towards {plan.span_target}: {'none fits' if chosen is None else chosen}")
    if chosen is None or chosen in sizes:
        return None
    return _profile_one(model, chosen, plan, f"(spans towards batch {plan.span_target})", progress)




def profile_document(model: ModelSpec, traces: Sequence[StepTrace]) -> dict[str, Any]:
    """The ``celeritas-profile/1`` document of small-batch traces (with each traced step's op keys)."""
    return {"format": PROFILE_FORMAT, "model": model.name, "model_config": dict(model.config),
            "profiles": [{"batch_size": t.batch_size, "time_us": t.time_us, "memory_bytes": t.memory_bytes,
                          "traced_steps": len(t.step_seconds),
                          "time_median_error": weighted_median_error(t.time_samples),
                          "scratch_bytes": t.scratch_bytes, "peak_bytes": t.peak_bytes,
                          "output_aliases": {n: [list(e) if isinstance(e, tuple) else e for e in a]
                                             for n, a in t.aliases.items()},
                          "step_seconds": t.step_seconds,
                          **({"op_keys": dict(t.op_keys)} if t.op_keys else {})} for t in traces]}


def fits_from_profile(doc: Any, source: str | None = None, *, time_model: str = "linear") -> KeyedFits:
    """Standard Evaluation's per-op lines fitted on a ``celeritas-profile/1`` document (checked
    once, by :func:`profile_rows`), carrying the output aliases of its largest batch ({} for a
    profile written before they were recorded) and the op keys (:func:`profile_op_keys`).
    ``time_model="choose"``: each op's time model by leave-one-out error
    (:func:`celeritas_core.statistics.regression.fit_costs`).

    An op's point at a batch size where its key is not its key at the largest batch it was
    profiled at is left out of its fit: TensorFlow built another op of that name there (e.g. a
    ``Const`` below 1,000 elements, a ``Fill`` above)."""
    rows = profile_rows(doc, source)
    reference = profile_op_keys(doc)
    if reference:
        rows = [(b, _same_ops(t, p["op_keys"], reference), _same_ops(m, p["op_keys"], reference))
                for (b, t, m), p in zip(rows, doc["profiles"], strict=True)]
    largest = max(doc["profiles"], key=lambda p: p["batch_size"])
    fits = fit_costs(rows, time_model=time_model).with_aliases(
        read_output_aliases(largest.get("output_aliases", {}), source))
    return with_op_keys(fits, reference)


def profile_op_keys(doc: Any) -> dict[str, str]:
    """Each profiled op's key at the largest batch size it was profiled at ({} for a profile
    without op keys; the document must have passed :func:`profile_rows`)."""
    if not all("op_keys" in p for p in doc["profiles"]):
        return {}
    keys: dict[str, str] = {}
    for p in sorted(doc["profiles"], key=lambda p: p["batch_size"]):
        keys.update(p["op_keys"])
    return keys


def _same_ops(costs: Mapping[str, float], keys: Mapping[str, str], reference: Mapping[str, str]
              ) -> dict[str, float]:
    """The ``costs`` of ops whose key at this batch size is their reference key."""
    return {n: v for n, v in costs.items() if keys.get(n) == reference.get(n)}


def profile_rows(doc: Any, source: str | None = None) -> list[tuple[int, dict[str, float], dict[str, float]]]:
    """``[(batch, time_us, memory_bytes)]`` from a ``celeritas-profile/1`` document, checked
    strictly (:func:`celeritas_core.readwrite.formats.check_profile_document`: at least two profiles,
    distinct integer batch sizes, finite costs within the documented limits)."""
    check_profile_document(doc, source)
    return [(p["batch_size"], {str(n): float(v) for n, v in p["time_us"].items()},
             {str(n): float(v) for n, v in p["memory_bytes"].items()}) for p in doc["profiles"]]


def sequential_placement(graph: Graph, cluster: Cluster, order: str = "cpd") -> np.ndarray:
    """Memory-bounded sequential placement: walk ``order`` (``cpd`` or ``dfs``), fill a device to
    its memory, then the next; best effort (most free memory) when none has room. Co-location
    groups follow their first member."""
    if order == "cpd":
        comm = edge_comm_us(graph, cluster)
        sequence = cpd_topo_order(graph, comm, cpath=cpath(graph, comm))
    elif order == "dfs":
        sequence = dfs_topo_order(graph)
    else:
        raise CeleritasInputError(f"order must be 'cpd' or 'dfs', got {order!r}")
    anchor = colocation_anchor(graph, sequence)
    devices = order_place(graph, cluster, sequence, anchored_memory(graph, anchor))
    return apply_colocation(devices, anchor)


@dataclass
class Remeasurement:
    """The large-batch graph with predicted and with re-measured costs, and how it was placed."""

    estimated: Graph
    measured: Graph
    assignment: np.ndarray
    trace: StepTrace
    identity: KeyMatch | None = None
    """How the fits paired with the step's ops (:func:`fitted_costs`)."""

    def identity_note(self) -> str | None:
        """One line when some fits were not applied, or could not be checked (else None):
        :func:`fits_identity_note`."""
        return fits_identity_note(self.identity)

    def accuracy(self) -> tuple[Deviation, Deviation]:
        """Memory and time deviations of the prediction from the re-measurement (over the ops it
        traced: an op that kept its estimate would compare the estimate with itself)."""
        return estimation_accuracy(self.estimated, self.measured, traced=set(self.trace.time_us))

    def peaks(self, cluster: Cluster) -> dict[str, list[float]]:
        """Per device index: the estimated graph's replayed peak under the sequential placement
        and the peak TensorFlow measured running it (bytes; see :func:`measured_peak_bytes`)."""
        result = simulate(self.estimated, cluster, self.assignment)
        predicted = memory_profile(self.estimated, cluster.num_devices, self.assignment, result).peak_bytes
        measured = _peaks_by_index(self.trace.peak_bytes)
        return {"predicted_bytes": [float(x) for x in predicted],
                "measured_bytes": [measured.get(k, 0.0) for k in range(cluster.num_devices)]}


def fits_identity_note(identity: KeyMatch | None) -> str | None:
    """One line on the fits the re-measurement could not apply (None when it applied them all): which
    ops, why, whether it matters and what to do. A warning only when
    :attr:`~celeritas_core.graphs.opkeys.KeyMatch.needs_action` (fits without op keys); ops built
    differently at the target batch are expected, and harmless to the placement, which uses every
    traced op's re-measured costs (:func:`measured_costs`): they only count as free in the estimate."""
    note = None if identity is None else identity.note("fits")
    if note is None or identity is None or identity.needs_action:
        return note
    return (f"{note}; harmless to the placement, which uses their re-measured costs (only the estimate "
            "counts them as free): nothing to do unless they are much of the step, when the fits are of "
            "another configuration of the model (profile this one)")


def remeasure(model: ModelSpec, batch_size: int, fits: CostFits, cluster: Cluster, *, order: str = "cpd",
              traced_steps: int = 3, progress: Progress | None = None,
              source: str | None = None) -> Remeasurement:
    """Standard Evaluation, step 2: place the large batch sequentially and re-measure every op.
    A fit predicts only the op of its name and structure key (:func:`fitted_costs`; ``source``
    names the fits in its error)."""
    check_devices(cluster.num_devices)
    step = build_training_step(model, batch_size)
    costs, aliases, identity = fitted_costs(fits, step, batch_size, source)
    estimated = graph_from_step(step, costs, aliases=aliases,
                                meta={"costs": "regression", "fit_batch_sizes": list(fits.batch_sizes),
                                      "fit_identity": _identity_meta(identity)})
    assignment = sequential_placement(estimated, cluster, order)
    if progress is not None:
        progress(f"re-measuring batch {batch_size} on {cluster.num_devices} devices ({order} order)")
    trace = trace_step(step, num_devices=cluster.num_devices,
                       assignment=dict(zip(estimated.node_names, assignment.tolist(), strict=True)),
                       traced_steps=traced_steps)
    measured_ops, estimated_ops = measured_costs(trace, costs)
    measured = graph_from_step(step, measured_ops, aliases=trace.aliases,
                               meta={"costs": "measured", "order": order, "devices": cluster.num_devices,
                                     "estimated_ops": estimated_ops})
    return Remeasurement(estimated, measured, assignment, trace, identity)


def fitted_costs(fits: CostFits, step: TrainingStep, batch_size: int, source: str | None = None
                 ) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[Any, ...]], KeyMatch]:
    """The fits' predicted ``(time_us, memory_bytes)`` and output aliases at ``batch_size`` for
    the ops of ``step`` they belong to: same name and same structure key. An op whose name was
    fitted as another structure gets neither (its graph node keeps time 0 and its static output
    bytes); fits without keys (older documents) pair by name and say so in the :class:`KeyMatch`.
    Fits that pair with no op of the step belong to another model or configuration: refused."""
    keys = step_op_keys(step)
    identity = match_op_keys(fits_op_keys(fits), keys, fits.names)
    if not identity.matched:
        raise CeleritasInputError(
            f"the fits do not belong to this step of {step.model.name!r}: none of its {len(keys):,} ops was "
            f"fitted with the same name and structure (fit a profile of this model and configuration)",
            source=source)
    costs = {n: c for n, c in fits.predict_costs(batch_size).items() if n in identity.matched}
    aliases = {n: a for n, a in fits.output_aliases.items() if n in identity.matched}
    return costs, aliases, identity


def _identity_meta(identity: KeyMatch) -> dict[str, Any]:
    """The graph's record of how its fits paired with its ops."""
    return {"checked": identity.checked, "fitted_ops": len(identity.matched),
            "differing_ops": len(identity.differing), "differing": list(identity.differing[:20])}


def measured_costs(trace: StepTrace, estimate: Mapping[str, tuple[float, float]]
                   ) -> tuple[dict[str, tuple[float, float]], int]:
    """The placement graph's costs ``op → (time µs, memory bytes)``: the re-measurement's own
    figures for every op it traced (at the target batch, on the devices: they replace the
    estimates), the estimate for an op it did not trace but the profile fitted (on a split
    placement TensorFlow leaves a few scalar constants untraced, e.g. Adam's hyper-parameters).
    Also returns how many ops kept their estimate (the measured graph's ``meta.estimated_ops``)."""
    costs = trace_costs(trace)
    kept = {n: c for n, c in estimate.items() if n not in costs}
    return {**kept, **costs}, len(kept)


def estimation_accuracy(estimated: Graph, measured: Graph, *,
                        traced: Collection[str] | None = None) -> tuple[Deviation, Deviation]:
    """Per-op ``|estimate − actual| / actual`` of memory and of time (ops with actual > 0; only
    the ``traced`` ones when given)."""
    keep = (lambda n: True) if traced is None else traced.__contains__
    names = measured.node_names
    e_mem = dict(zip(estimated.node_names, estimated.memory_bytes.tolist(), strict=True))
    a_mem = {n: v for n, v in zip(names, measured.memory_bytes.tolist(), strict=True) if keep(n)}
    e_time = dict(zip(estimated.node_names, estimated.time_us.tolist(), strict=True))
    a_time = {n: v for n, v in zip(names, measured.time_us.tolist(), strict=True) if keep(n)}
    return relative_deviation("memory", e_mem, a_mem), relative_deviation("time", e_time, a_time)


def accuracy_document(model: str, batch: int, memory: Deviation, timing: Deviation,
                      peaks: Mapping[str, Sequence[float]] | None = None) -> dict[str, Any]:
    """The estimation-accuracy summary (celeritas-accuracy/1) of ``celeritas remeasure
    --accuracy-out`` and the pipeline's re-measure step: per-op ``memory`` and ``timing``
    deviations (from :meth:`Remeasurement.accuracy`) and ``peaks``, the predicted and measured
    peak memory per device (from :meth:`Remeasurement.peaks`)."""
    def part(d: Deviation) -> dict[str, Any]:
        return {"mean": d.mean, "ops": len(d.names), "cdf": {str(k): v for k, v in d.cdf().items()}}

    doc = {"format": ACCURACY_FORMAT, "model": model, "batch_size": batch,
           "memory": part(memory), "time": part(timing)}
    if peaks is not None:
        doc["peak_memory"] = {k: list(v) for k, v in peaks.items()}
    return doc


def measured_over_predicted(measured_s: float, predicted_us: float | None) -> float | None:
    """``measured_s`` (a measured step, s) over ``predicted_us`` (the placement's predicted step,
    µs); None when the prediction is unknown or not above 0."""
    if predicted_us is None or not predicted_us > 0 or not np.isfinite(predicted_us):
        return None
    return float(measured_s * 1e6 / predicted_us)


@dataclass(frozen=True)
class ModeTimes:
    """The timed steps (s) of one placement in one execution-order mode: ``enforced`` (each
    device runs its ops in the placement's recorded ``device_order``, through control
    dependencies) or ``free`` (TensorFlow's own dispatch). ``order_agreement``: the share of the
    recorded order that a traced step in this mode followed (:func:`celeritas_tf.order.order_agreement`;
    None when the placement records no order)."""

    mode: str
    step_seconds: tuple[float, ...]
    order_agreement: float | None = None

    @property
    def mean_s(self) -> float:
        """Mean step time (s)."""
        return float(np.mean(self.step_seconds))

    @property
    def median_s(self) -> float:
        """Median step time (s)."""
        return float(np.median(self.step_seconds))

    @property
    def p90_s(self) -> float:
        """90th-percentile step time (s)."""
        return float(np.percentile(self.step_seconds, 90))

    def to_json(self, predicted_us: float | None = None) -> dict[str, Any]:
        """The mode's entry of ``celeritas-validation/1``'s ``modes``: its figures (s) and the
        ratio of its median to the predicted step (``predicted_us``, µs; null when unknown)."""
        return {"steps": len(self.step_seconds), "mean_s": self.mean_s, "median_s": self.median_s,
                "p90_s": self.p90_s, "step_seconds": list(self.step_seconds),
                "measured_over_predicted": measured_over_predicted(self.median_s, predicted_us),
                "order_agreement": self.order_agreement}


@dataclass
class Validation:
    """Measured step times (seconds) of a placement after warm-up.

    ``step_seconds`` are those of ``order_mode``, the mode the placement runs in (its
    ``order_mode`` when that was timed); ``modes`` holds every mode timed, that one included
    (a :func:`validate` run: its one mode)."""

    model: str
    batch_size: int
    num_devices: int
    warmup_steps: int
    step_seconds: list[float]
    devices_used: list[str] = field(default_factory=list)
    measured_peak_bytes: dict[str, float] = field(default_factory=dict)
    """Per device (TensorFlow's name): peak bytes of the traced step that precedes the timed ones
    (:func:`celeritas_tf.profile.measured_peak_bytes`)."""
    order_mode: str = FREE_ORDER
    modes: dict[str, ModeTimes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.modes:
            self.modes = {self.order_mode: self.times}

    @property
    def times(self) -> ModeTimes:
        """``step_seconds`` as the :class:`ModeTimes` of ``order_mode``."""
        return ModeTimes(self.order_mode, tuple(self.step_seconds))

    @property
    def mean_s(self) -> float:
        """Mean step time (s)."""
        return self.times.mean_s

    @property
    def median_s(self) -> float:
        """Median step time (s)."""
        return self.times.median_s

    @property
    def p90_s(self) -> float:
        """90th-percentile step time (s)."""
        return self.times.p90_s

    def to_json(self, extra: Mapping[str, Any] | None = None, *,
                predicted_us: float | None = None) -> dict[str, Any]:
        """The ``celeritas-validation/1`` document: the top-level figures are ``order_mode``'s;
        ``modes`` gives each timed mode's, with the ratio of its median to ``predicted_us`` (the
        placement's ``predicted_step_time_us``)."""
        return {
            "format": VALIDATION_FORMAT, "model": self.model, "batch_size": self.batch_size,
            "devices": self.num_devices, "warmup_steps": self.warmup_steps, "steps": len(self.step_seconds),
            "mean_s": self.mean_s, "median_s": self.median_s, "p90_s": self.p90_s,
            "step_seconds": list(self.step_seconds), "devices_used": self.devices_used,
            "measured_peak_bytes": dict(self.measured_peak_bytes),
            "predicted_step_time_us": predicted_us, "order_mode": self.order_mode,
            "modes": {mode: times.to_json(predicted_us) for mode, times in self.modes.items()},
            **dict(extra or {}),
        }


def check_assignment(step_ops: Sequence[str], assignment: Mapping[str, int], num_devices: int,
                     source: str | None = None) -> None:
    """A placement must name exactly the step's ops, with device indices below ``num_devices``."""
    ops = set(step_ops)
    missing = sorted(ops - set(assignment))
    unknown = sorted(set(assignment) - ops)
    if missing:
        raise CeleritasInputError(
            f"placement does not match the model's step: op {missing[0]!r} is not placed "
            f"({len(missing)} ops missing)", source=source)
    if unknown:
        raise CeleritasInputError(
            f"placement does not match the model's step: {unknown[0]!r} is not an op of the step "
            f"({len(unknown)} unknown)", source=source)
    worst = max(assignment.values(), default=0)
    if worst >= num_devices:
        raise CeleritasInputError(f"placement uses device {worst} but only {num_devices} devices are run",
                                  source=source)


def check_structure(step: TrainingStep, op_keys_digest: str | None, source: str | None = None) -> None:
    """A placement that records the op keys digest of the graph it was made for (``op_keys_digest``
    of a ``celeritas-placement/1``) must have been made for a step of this structure."""
    if op_keys_digest is None:
        return
    mine = step_digest(step)
    if op_keys_digest != mine:
        raise CeleritasInputError(
            f"placement does not match the model's step: it was made for ops of another structure (op keys "
            f"digest {op_keys_digest}, this step {mine}: another configuration, batch size or TensorFlow)",
            source=source)


def validate(model: ModelSpec, batch_size: int, assignment: Mapping[str, int], num_devices: int, *,
             warmup_steps: int = 5, steps: int = 50, seed: int = 0, progress: Progress | None = None,
             source: str | None = None, op_keys_digest: str | None = None) -> Validation:
    """Run ``assignment`` (op → device) for ``warmup_steps`` untimed and ``steps`` timed steps;
    ``op_keys_digest``: the placement's record of the structure it was made for (checked)."""
    if warmup_steps < 0 or steps < 1:
        raise CeleritasInputError(f"need warm-up >= 0 and steps >= 1, got {warmup_steps} and {steps}")
    check_devices(num_devices)
    tf = tensorflow()
    tf1 = tf.compat.v1
    step = build_training_step(model, batch_size)
    check_assignment(step.step_op_names(), assignment, num_devices, source)
    check_structure(step, op_keys_digest, source)
    place_ops(step, assignment)
    rng = np.random.default_rng(seed)
    feeds = [step.feed_dict(rng) for _ in range(4)]  # reused: input generation is not timed
    fetches = [step.train_op, step.loss]
    options = run_options(num_devices)  # one device: every op on the caller's thread, as when profiled
    seconds: list[float] = []
    with tf1.Session(graph=step.graph, config=session_config(num_devices)) as session:
        session.run(step.init_op)
        metadata = tf1.RunMetadata()
        session.run(fetches, feeds[0], options=run_options(num_devices, trace=True), run_metadata=metadata)
        used = sorted({d.device for d in metadata.step_stats.dev_stats})
        peaks = measured_peak_bytes(metadata.step_stats, resident_bytes(step))
        for i in range(warmup_steps):
            session.run(fetches, feeds[i % len(feeds)], options=options)
        for i in range(steps):
            start = time.perf_counter()
            session.run(fetches, feeds[i % len(feeds)], options=options)
            seconds.append(time.perf_counter() - start)
            if progress is not None and (i + 1) % 10 == 0:
                progress(f"timed step {i + 1}/{steps}")
    return Validation(model.name, int(batch_size), num_devices, warmup_steps, seconds, used, peaks)


def block_sizes(steps: int, blocks: int) -> list[int]:
    """``steps`` timed steps split into ``min(blocks, steps)`` blocks as evenly as possible."""
    blocks = max(1, min(blocks, steps))
    return [steps // blocks + (1 if i < steps % blocks else 0) for i in range(blocks)]


#: What ``--order`` may ask for: one mode, or ``both`` (every mode the placement can run in).
BOTH_ORDERS = "both"
ORDER_CHOICES: tuple[str, ...] = (*ORDER_MODES, BOTH_ORDERS)


@dataclass(frozen=True)
class PlacementOrder:
    """A placement document's execution order: ``device_order`` (per device index, its op names
    in the order the simulator ran them; None when not recorded) and ``order_mode``, the mode it
    is meant to run in (and competes in)."""

    device_order: tuple[tuple[str, ...], ...] | None
    order_mode: str

    def modes(self, choice: str | None = None, source: str | None = None) -> tuple[str, ...]:
        """The modes to time for ``choice`` (``enforced``, ``free``, ``both``; None: both when
        the placement records an order, else free); ``order_mode`` first when timed."""
        if choice is not None and choice not in ORDER_CHOICES:
            raise CeleritasInputError(f"--order: must be one of {', '.join(ORDER_CHOICES)}, got {choice!r}")
        if choice is None:
            choice = BOTH_ORDERS if self.device_order is not None else FREE_ORDER
        wanted = ORDER_MODES if choice == BOTH_ORDERS else (choice,)
        if ENFORCED_ORDER in wanted and self.device_order is None:
            raise CeleritasInputError(f"--order {choice}: the placement records no device_order to "
                                      "enforce (place it again with this version, or use --order free)",
                                      source=source)
        return tuple(sorted(wanted, key=lambda mode: mode != self.order_mode))


def placement_order(doc: Any, source: str | None = None) -> PlacementOrder:
    """The execution order a ``celeritas-placement/1`` document records
    (:func:`~celeritas_core.readwrite.formats.placement_device_order`, ``placement_order_mode``);
    one line when it says ``enforced`` but records no order."""
    order = placement_device_order(doc, source)
    mode = placement_order_mode(doc, source)
    if mode == ENFORCED_ORDER and order is None:
        raise CeleritasInputError("field 'order_mode' is 'enforced' but the placement records no "
                                  "'device_order'", source=source)
    return PlacementOrder(order, mode)


def predicted_step_us(doc: Any) -> float | None:
    """A placement document's ``predicted_step_time_us`` (µs) when it is a finite number above 0."""
    value = doc.get("predicted_step_time_us") if isinstance(doc, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value) or value <= 0:
        return None
    return float(value)


def validate_interleaved(model: ModelSpec, batch_size: int, assignments: Mapping[str, Mapping[str, int]],
                         num_devices: int, *, warmup_steps: int = 5, steps: int = 50, blocks: int = 5,
                         seed: int = 0, progress: Progress | None = None,
                         sources: Mapping[str, str] | None = None,
                         digests: Mapping[str, str | None] | None = None,
                         orders: Mapping[str, PlacementOrder] | None = None,
                         modes: Mapping[str, Sequence[str]] | None = None,
                         pipelines: Mapping[str, PipelineRun] | None = None) -> dict[str, Validation]:
    """Time several placements of one model in interleaved blocks, so that drift over time (heat,
    other tenants) hits each alike: block b runs every arm in turn (the order rotates by one each
    block), each in a fresh session with ``warmup_steps`` untimed steps, then its share of the
    ``steps`` timed steps. Sessions never overlap, so the devices hold one arm at a time.

    An arm is a placement in one execution-order mode: ``enforced`` (its ``orders[name]``
    ``device_order`` enforced with control dependencies, :func:`celeritas_tf.order.enforce_device_order`)
    or ``free`` (TensorFlow's own dispatch). ``modes[name]`` lists the modes to time (default:
    :meth:`PlacementOrder.modes`: both when the placement records an order, else free). A
    placement's :class:`Validation` holds every mode's steps (``modes``); its ``step_seconds``,
    traced peaks and ``order_mode`` are those of the placement's ``order_mode`` when timed (else of
    the first mode timed). ``digests``: each placement's record of the structure it was made for
    (checked, as :func:`check_structure`). Each arm of a placement that records an order runs
    one traced, untimed step first, from which its ``order_agreement`` is read: 1.0 when every
    device followed the recorded order (the enforced arm), lower as TensorFlow's own dispatch
    strays from it. ``pipelines[name]``: the placement runs as a pipelined step
    (:func:`celeritas_tf.microbatch.pipelined_arm`: its micro-batch replicas placed by the
    assignment, the ``enforced`` arm following the plan's per-device order of runs, which the
    agreement is then read against)."""
    if warmup_steps < 0 or steps < 1 or blocks < 1:
        raise CeleritasInputError(f"need warm-up >= 0, steps >= 1 and blocks >= 1, got {warmup_steps}, "
                                  f"{steps} and {blocks}")
    check_devices(num_devices)
    tf = tensorflow()
    tf1 = tf.compat.v1
    names = list(assignments)
    timed: dict[str, tuple[str, ...]] = {}
    headline: dict[str, str] = {}
    followed: dict[str, tuple[tuple[str, ...], ...]] = {}  # a pipelined plan's order, in its step's names
    built: dict[tuple[str, str], TrainingStep] = {}
    for name in names:
        source = (sources or {}).get(name)
        order = (orders or {}).get(name) or PlacementOrder(None, FREE_ORDER)
        wanted = tuple(modes[name]) if modes and name in modes else order.modes(source=source)
        if not wanted or len(set(wanted)) != len(wanted) or any(m not in ORDER_MODES for m in wanted):
            raise CeleritasInputError(f"{name}: modes to time must be distinct, from "
                                      f"{', '.join(ORDER_MODES)}; got {list(wanted)!r}", source=source)
        if ENFORCED_ORDER in wanted and order.device_order is None:
            raise CeleritasInputError(f"{name}: the enforced order needs the placement's device_order, "
                                      "which it does not record", source=source)
        if order.device_order is not None:
            check_device_order(order.device_order, assignments[name], source)
        timed[name] = wanted
        headline[name] = order.order_mode if order.order_mode in wanted else wanted[0]
        run = (pipelines or {}).get(name)
        for mode in wanted:
            if run is not None:
                step, followed[name] = pipelined_arm(model, batch_size, assignments[name], run,
                                                     enforced=mode == ENFORCED_ORDER, source=source)
                built[name, mode] = step
                continue
            step = build_training_step(model, batch_size)
            check_assignment(step.step_op_names(), assignments[name], num_devices, source)
            check_structure(step, (digests or {}).get(name), source)
            place_ops(step, assignments[name])
            if mode == ENFORCED_ORDER:
                enforce_device_order(step, order.device_order or (), source=source)
            built[name, mode] = step
    arms = list(built)
    rng = np.random.default_rng(seed)
    seconds: dict[tuple[str, str], list[float]] = {arm: [] for arm in arms}
    used: dict[str, list[str]] = {}
    peaks: dict[str, dict[str, float]] = {}
    agreement: dict[tuple[str, str], float] = {}
    options = run_options(num_devices)
    device_names = [step_device(d) for d in range(num_devices)]
    for b, count in enumerate(block_sizes(steps, blocks)):
        for arm in arms[b % len(arms):] + arms[:b % len(arms)]:
            name, mode = arm
            step = built[arm]
            feeds = [step.feed_dict(rng) for _ in range(4)]  # input generation is not timed
            fetches = [step.train_op, step.loss]
            with tf1.Session(graph=step.graph, config=session_config(num_devices)) as session:
                session.run(step.init_op)
                recorded = (orders or {}).get(name)
                follow = recorded is not None and recorded.device_order is not None and arm not in agreement
                if (mode == headline[name] and name not in peaks) or follow:
                    metadata = tf1.RunMetadata()
                    session.run(fetches, feeds[0], options=run_options(num_devices, trace=True),
                                run_metadata=metadata)
                    if mode == headline[name] and name not in peaks:
                        used[name] = sorted({d.device for d in metadata.step_stats.dev_stats})
                        peaks[name] = measured_peak_bytes(metadata.step_stats, resident_bytes(step))
                    if follow:
                        executed = executed_device_order(metadata.step_stats, ops=step.step_op_names())
                        agreement[arm] = order_agreement(followed.get(name, recorded.device_order), executed,
                                                         device_names, skip=free_ops(step))
                for i in range(warmup_steps):
                    session.run(fetches, feeds[i % len(feeds)], options=options)
                for i in range(count):
                    start = time.perf_counter()
                    session.run(fetches, feeds[i % len(feeds)], options=options)
                    seconds[arm].append(time.perf_counter() - start)
            if progress is not None:
                label = name if len(timed[name]) == 1 else f"{name} ({mode} order)"
                progress(f"block {b + 1}: {label} {len(seconds[arm])}/{steps} timed steps")
    return {name: Validation(model.name, int(batch_size), num_devices, warmup_steps,
                             seconds[name, headline[name]], used[name], peaks[name], headline[name],
                             {mode: ModeTimes(mode, tuple(seconds[name, mode]), agreement.get((name, mode)))
                              for mode in timed[name]})
            for name in names}


def predicted_peaks(placement_doc: Mapping[str, Any]) -> list[float] | None:
    """A ``celeritas-placement/1`` document's replayed peak per device index (bytes), if recorded."""
    peaks = placement_doc.get("device_peak_memory_bytes")
    if not isinstance(peaks, list) or not all(isinstance(x, int | float) and not isinstance(x, bool)
                                              for x in peaks):
        return None
    return [float(x) for x in peaks]


def peak_metrics(measured: Mapping[str, float] | None, predicted: Sequence[float] | None) -> dict[str, float]:
    """Predicted (the placement's replay) and measured (TensorFlow's allocation records) peak
    memory per device index and of the fullest device (bytes), and the relative error
    ``predicted / measured − 1`` of the fullest."""
    by_index = _peaks_by_index(measured or {})
    out = {f"measured_peak_memory_bytes_dev{k}": v for k, v in sorted(by_index.items())}
    out.update({f"predicted_peak_memory_bytes_dev{k}": float(v) for k, v in enumerate(predicted or [])})
    if by_index:
        out["measured_peak_memory_bytes"] = max(by_index.values())
    if predicted:
        out["predicted_peak_memory_bytes"] = float(max(predicted))
    if by_index and predicted and out["measured_peak_memory_bytes"] > 0:
        ratio = out["predicted_peak_memory_bytes"] / out["measured_peak_memory_bytes"]
        out["peak_memory_relative_error"] = ratio - 1.0
    return out


def _peaks_by_index(measured: Mapping[str, float]) -> dict[int, float]:
    """Measured peaks (TensorFlow device name → bytes) by index of the devices a placement uses:
    ``GPU:k`` when any GPU was measured (the host's ``CPU:0``, which runs the feeds and the ops
    without a GPU kernel, is no placement device then), else ``CPU:k``; names without an index
    (:func:`celeritas_tf.profile.device_index`) are left out."""
    kind = "GPU" if any(device_kind(str(name)) == "GPU" for name in measured) else "CPU"
    out: dict[int, float] = {}
    for name, value in measured.items():
        index = device_index(str(name))
        if index is not None and device_kind(str(name)) == kind:
            out[index] = float(value)
    return out
