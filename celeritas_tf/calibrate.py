"""Calibrate the transfer model t = k·bytes + b (µs) by moving tensors between logical devices.

**Method.** One ``tf.compat.v1`` graph holds, for every size d, two copies of a tiny pipeline:
a producer ``tf.fill([d/4], 1.0)`` pinned to CPU:0 and a consumer ``tf.reduce_sum`` of it,
pinned to CPU:1 (*cross*) or to CPU:0 (*local*). Each is run with ``FULL_TRACE``; the step stats
give, on one clock, the producer's end (``all_start_nanos + all_end_rel_nanos``) and the
consumer's start (``all_start_nanos``). That gap is the transfer (``_Send``/``_Recv`` through
the rendezvous; these are not traced themselves on CPU) plus executor scheduling; the *local* gap
is scheduling alone. The sample for size d is ``median(cross gaps) − median(local gaps)`` over
``repeats`` traced runs of each (after ``warmup`` untraced-for-the-result runs), cross and local
runs interleaved so drift hits both alike, clipped at 0. Producer and consumer times themselves
are excluded, so the fill and the sum do not pollute the transfer.

Between logical CPU devices of one process TensorFlow passes host tensors by reference (no
copy), so what this measures is the rendezvous and cross-device scheduling cost — with more than
one inter-op thread, mostly the hand-off to another thread — not a memory copy: a few to tens of
µs, noisy, and not necessarily linear in size (a 64 MiB copy would take milliseconds).
:func:`fit_transfer_model` is well defined whatever the samples are (one size, all zeros,
decreasing): k and b are clipped at ≥ 0, and ``r2`` says how well a line explains them.

**When the fit is used.** :func:`choose_transfer_model` keeps the fit only when it measured a
transfer: a slope above 0 (a copy takes longer the more bytes it moves) and ``r2`` of at least
:data:`MIN_R2`. Otherwise the calibration measured nothing useful (on logical CPU devices it never
does: t = 0 µs/B · bytes + ~100 µs, R² 0.000) and the documented default model of
:mod:`celeritas_core.graphs.cluster` (1e-4 µs/B, 25 µs) is used instead, with the reason.

**With a link topology** (:func:`calibrate_topology`) every class of pair is measured: each link
some pair of devices uses (inside an island, between islands, between nodes) is timed on one
representative pair, the first in index order. Each fit replaces its link's figures when it
measured a transfer, else the link keeps its preset's nominal figures (``source`` ``preset``, with
the reason). On logical CPU devices every pair is the same hand-off, so every class measures
nothing useful and the preset stands: the code path runs, the numbers come from the preset.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE, Cluster
from celeritas_core.graphs.topology import Link, Topology
from celeritas_tf.profile import is_tracer_device
from celeritas_tf.tf import session_config, step_device, tensorflow

KIB = 1024
MIB = 1024 * KIB

#: Default sizes (bytes): 4 KiB to 64 MiB, ×4 apart.
DEFAULT_SIZES: tuple[int, ...] = (4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB,
                                  1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB)

FLOAT32_BYTES = 4

#: The least R² a fit must have to be used (docs/tensorflow.md, "Communication calibration"). A
#: real copy's time is linear in the bytes moved: with the default sizes (4 KiB to 64 MiB) and up
#: to 10 % noise on each size's median, simulated calibrations of PCIe- and NVLink-like links give
#: R² >= 0.98 in over 99 % of cases (>= 0.995 at 5 % noise). Logical CPU devices, which hand
#: tensors over by reference, gave R² from 0 to 0.94 over nine runs on a busy 2-core machine: a
#: line pulled by one or two large sizes, not a transfer model.
MIN_R2 = 0.98


@dataclass
class CommCalibration:
    """A fitted transfer model and the samples it was fitted to."""

    slope_us_per_byte: float
    intercept_us: float
    samples: list[tuple[int, float]]
    """(bytes, median transfer µs) per size, in the order measured."""
    r2: float
    """Coefficient of determination of the (clipped) fit on the samples (1.0 for a perfect fit,
    also when every sample is the same and the fit is that constant)."""
    method: str = "step-stats gap, cross-device minus same-device, median"
    details: dict[str, Any] = field(default_factory=dict)
    """Raw medians per size: ``{"cross_us": [...], "local_us": [...]}``."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (used by the CLI to record the calibration next to the cluster)."""
        return {"slope_us_per_byte": self.slope_us_per_byte, "intercept_us": self.intercept_us,
                "r2": self.r2, "samples": [[int(d), float(t)] for d, t in self.samples],
                "method": self.method, **self.details}


def fit_transfer_model(samples: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Least-squares fit of t = k·d + b to ``(bytes, µs)`` samples with k, b ≥ 0; returns (k, b, r²).

    A negative slope is refitted as a constant (k = 0, b = mean t); a negative intercept as a line
    through the origin (b = 0). Fewer than two distinct sizes give k = 0, b = mean t (clipped ≥ 0).
    """
    if len(samples) == 0:
        raise CeleritasInputError("cannot fit a transfer model to no samples")
    d = np.asarray([float(s[0]) for s in samples])
    t = np.asarray([float(s[1]) for s in samples])
    if not (np.all(np.isfinite(d)) and np.all(np.isfinite(t))):
        raise CeleritasInputError("transfer samples must be finite numbers")
    if np.unique(d).size < 2:
        k, b = 0.0, max(float(t.mean()), 0.0)
    else:
        design = np.column_stack([d, np.ones_like(d)])
        (k, b), *_ = np.linalg.lstsq(design, t, rcond=None)
        k, b = float(k), float(b)
        if k < 0:
            k, b = 0.0, float(t.mean())
        if b < 0:
            denom = float(np.dot(d, d))
            k, b = (max(float(np.dot(d, t)) / denom, 0.0) if denom > 0 else 0.0), 0.0
        b = max(b, 0.0)
    residual = float(np.sum((t - (k * d + b)) ** 2))
    total = float(np.sum((t - t.mean()) ** 2))
    if total > 0:
        r2 = 1.0 - residual / total
    else:
        r2 = 1.0 if residual <= 1e-18 * max(1.0, float(np.sum(t**2))) else 0.0
    return k, b, r2


def _check_args(num_devices: Any, sizes: Any, repeats: Any, warmup: Any, pair: Any = (0, 1)) -> list[int]:
    def is_int(x: Any) -> bool:
        return isinstance(x, int | np.integer) and not isinstance(x, bool)

    if not is_int(num_devices) or num_devices < 2:
        raise CeleritasInputError(f"calibration needs num_devices >= 2, got {num_devices!r}")
    if (not isinstance(pair, tuple) or len(pair) != 2 or pair[0] == pair[1]
            or not all(is_int(d) and 0 <= d < num_devices for d in pair)):
        raise CeleritasInputError(
            f"pair must be two different device indices below {num_devices}, got {pair!r}")
    if not is_int(repeats) or repeats < 1:
        raise CeleritasInputError(f"repeats must be an integer >= 1, got {repeats!r}")
    if not is_int(warmup) or warmup < 0:
        raise CeleritasInputError(f"warmup must be an integer >= 0, got {warmup!r}")
    try:
        values = list(sizes)
    except TypeError:
        raise CeleritasInputError(f"sizes must be a sequence of byte counts, got {sizes!r}") from None
    if not values:
        raise CeleritasInputError("sizes is empty: give at least one tensor size in bytes")
    for s in values:
        if not is_int(s) or s <= 0:
            raise CeleritasInputError(f"sizes must be positive integers (bytes), got {s!r}")
    return [int(s) for s in values]


def calibrate_comm(
    num_devices: int = 2,
    sizes: Sequence[int] = DEFAULT_SIZES,
    repeats: int = 20,
    warmup: int = 3,
    progress: Callable[[str], None] | None = None,
    pair: tuple[int, int] = (0, 1),
) -> CommCalibration:
    """Measure transfers of float32 tensors of ``sizes`` bytes from device ``pair[0]`` to
    ``pair[1]`` (CPU:0 to CPU:1 by default; GPU:i after
    :func:`celeritas_tf.tf.use_logical_gpus`) and fit t = k·bytes + b (µs); see the module docstring
    for the method. ``num_devices`` logical CPU devices are configured (only the pair's are used).
    Sizes are rounded up to whole float32s."""
    byte_sizes = _check_args(num_devices, sizes, repeats, warmup, pair)
    src, dst = (int(d) for d in pair)
    tf = tensorflow()
    tf1 = tf.compat.v1
    graph = tf.Graph()
    pipelines: dict[tuple[int, str], tuple[str, str, Any]] = {}
    with graph.as_default():
        for i, size in enumerate(byte_sizes):
            elements = max(1, math.ceil(size / FLOAT32_BYTES))
            for variant, consumer_device in (("cross", dst), ("local", src)):
                with tf.device(step_device(src)):
                    produced = tf.fill([elements], 1.0, name=f"calibrate/{i}_{variant}/producer")
                with tf.device(step_device(consumer_device)):
                    consumed = tf.reduce_sum(produced, name=f"calibrate/{i}_{variant}/consumer")
                pipelines[(i, variant)] = (produced.op.name, consumed.op.name, consumed.op)
    options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
    samples: list[tuple[int, float]] = []
    cross_medians: list[float] = []
    local_medians: list[float] = []
    with tf1.Session(graph=graph, config=session_config(num_devices)) as session:
        for i, size in enumerate(byte_sizes):
            nbytes = max(1, math.ceil(size / FLOAT32_BYTES)) * FLOAT32_BYTES
            gaps: dict[str, list[float]] = {"cross": [], "local": []}
            for r in range(warmup + repeats):
                for variant in ("cross", "local"):
                    producer, consumer, target = pipelines[(i, variant)]
                    metadata = tf1.RunMetadata()
                    session.run(target, options=options, run_metadata=metadata)
                    if r >= warmup:
                        gaps[variant].append(_gap_us(metadata.step_stats, producer, consumer))
            cross = float(np.median(gaps["cross"]))
            local = float(np.median(gaps["local"]))
            cross_medians.append(cross)
            local_medians.append(local)
            samples.append((nbytes, max(cross - local, 0.0)))
            if progress is not None:
                progress(f"calibrate: {src}->{dst}: {nbytes} bytes: {samples[-1][1]:.2f} µs "
                         f"(cross {cross:.2f} µs, same device {local:.2f} µs, median of {repeats})")
    k, b, r2 = fit_transfer_model(samples)
    return CommCalibration(k, b, samples, r2,
                           details={"cross_us": cross_medians, "local_us": local_medians,
                                    "repeats": repeats, "warmup": warmup, "pair": [src, dst]})


def _gap_us(step_stats: Any, producer: str, consumer: str) -> float:
    """µs from the end of ``producer`` to the start of ``consumer`` in one traced run, both read
    from the executor's entries (on a GPU, the tracer's entries of the same name time a kernel,
    not the op the executor ran: :func:`celeritas_tf.profile.is_tracer_device`)."""
    end = start = None
    for dev in step_stats.dev_stats:
        if is_tracer_device(dev.device):
            continue
        for ns in dev.node_stats:
            if ns.node_name == producer:
                end = _nanos(ns.all_start_nanos, ns.all_start_micros) + _nanos(
                    ns.all_end_rel_nanos, ns.all_end_rel_micros)
            elif ns.node_name == consumer:
                start = _nanos(ns.all_start_nanos, ns.all_start_micros)
    if end is None or start is None:
        missing = producer if end is None else consumer
        raise RuntimeError(f"calibration: op {missing!r} is missing from the step stats")
    return (start - end) / 1e3


def _nanos(nanos: int, micros: int) -> int:
    return int(nanos) if nanos else int(micros) * 1000


@dataclass(frozen=True)
class TransferChoice:
    """The transfer model a calibration leads to: its fit (``source="calibrated"``) or the default
    model (``source="default"``) with the ``reason`` the fit was not used."""

    slope_us_per_byte: float
    intercept_us: float
    source: str
    reason: str | None

    def describe(self) -> str:
        """``t = K µs/B · bytes + B µs (calibrated)`` or ``(the default model)``."""
        how = "calibrated" if self.source == "calibrated" else "the default model"
        return f"t = {self.slope_us_per_byte:.4g} µs/B · bytes + {self.intercept_us:.4g} µs ({how})"


def rejection(calibration: CommCalibration, min_r2: float = MIN_R2) -> str | None:
    """Why ``calibration`` measured nothing useful, or None when its fit can be used: a slope of
    0 (the time does not grow with the bytes moved) or R² below ``min_r2``."""
    problems = []
    if not calibration.slope_us_per_byte > 0:
        problems.append(f"slope {calibration.slope_us_per_byte:.4g} µs/B: the time does not grow with the "
                        "bytes moved")
    if not calibration.r2 >= min_r2:
        problems.append(f"R² {calibration.r2:.3f} below {min_r2:g}")
    if not problems:
        return None
    return f"the calibration measured nothing useful ({'; '.join(problems)})"


def choose_transfer_model(calibration: CommCalibration, min_r2: float = MIN_R2) -> TransferChoice:
    """The fit of ``calibration`` when it can be used (:func:`rejection`), else the default model
    (:data:`~celeritas_core.graphs.cluster.DEFAULT_SLOPE_US_PER_BYTE`, ``DEFAULT_INTERCEPT_US``) with the
    reason."""
    reason = rejection(calibration, min_r2)
    if reason is None:
        return TransferChoice(float(calibration.slope_us_per_byte), float(calibration.intercept_us),
                              "calibrated", None)
    return TransferChoice(DEFAULT_SLOPE_US_PER_BYTE, DEFAULT_INTERCEPT_US, "default", reason)


def calibrated_cluster(calibration: CommCalibration, num_devices: int, device_memory_bytes: float) -> Cluster:
    """A homogeneous cluster of ``num_devices`` devices with the transfer model
    :func:`choose_transfer_model` picks: the calibrated k and b, or the default ones."""
    choice = choose_transfer_model(calibration)
    return Cluster.homogeneous(num_devices, device_memory_bytes, slope_us_per_byte=choice.slope_us_per_byte,
                               intercept_us=choice.intercept_us)


def calibration_record(calibration: CommCalibration, choice: TransferChoice) -> dict[str, Any]:
    """What a cluster file records of the calibration (``comm.calibration``, docs/formats.md): the
    fit, its R², the threshold, the sizes measured and, when the default model replaced it, why."""
    r2 = float(calibration.r2)
    return {"slope_us_per_byte": float(calibration.slope_us_per_byte),
            "intercept_us": float(calibration.intercept_us), "r2": r2 if math.isfinite(r2) else None,
            "min_r2": MIN_R2, "sizes": len(calibration.samples), "rejected": choice.reason}


# ---------------------------------------------------------------------------- link topology
@dataclass(frozen=True)
class LinkCalibration:
    """One class of pair of a topology: its link as the cluster uses it (the fit, ``source``
    ``calibrated``, or the link as it was, ``preset``, with the ``reason``), the representative
    ``pair`` measured (device indices; None when no pair uses the link) and the measurement."""

    link: Link
    source: str
    reason: str | None
    pair: tuple[int, int] | None
    calibration: CommCalibration | None

    def record(self, device_names: Sequence[str]) -> dict[str, Any]:
        """The link's ``source`` and ``calibration`` for the cluster file (docs/formats.md)."""
        if self.calibration is None:
            return {"source": self.source, "calibration": {"rejected": self.reason}}
        choice = TransferChoice(self.link.slope_us_per_byte, self.link.intercept_us, self.source, self.reason)
        record = calibration_record(self.calibration, choice)
        if self.pair is not None:
            record["pair"] = [device_names[self.pair[0]], device_names[self.pair[1]]]
        return {"source": self.source, "calibration": record}

    def describe(self) -> str:
        """``nvlink4 (gpu:0 -> gpu:1): t = … (calibrated)`` or ``… (preset: why)``."""
        how = "calibrated" if self.source == "calibrated" else f"the preset's: {self.reason}"
        return (f"{self.link.name}: t = {self.link.slope_us_per_byte:.4g} µs/B · bytes + "
                f"{self.link.intercept_us:.4g} µs ({how})")


def link_classes(topology: Topology) -> dict[int, tuple[int, int]]:
    """Link index → the first ordered pair of devices (row-major) that uses it, for each link in use."""
    link = topology.pair_link()
    classes: dict[int, tuple[int, int]] = {}
    for i, j in zip(*np.nonzero(link >= 0), strict=True):
        classes.setdefault(int(link[i, j]), (int(i), int(j)))
    return classes


def calibrate_topology(topology: Topology, sizes: Sequence[int] = DEFAULT_SIZES, repeats: int = 20,
                       warmup: int = 3, progress: Callable[[str], None] | None = None,
                       min_r2: float = MIN_R2) -> tuple[Topology, list[LinkCalibration]]:
    """Measure each class of pair of ``topology`` (:func:`link_classes`) on its logical devices and
    return the topology with every link whose fit measured a transfer replaced by the fit, and what
    happened to each link (in the order of ``topology.links``)."""
    classes = link_classes(topology)
    results: list[LinkCalibration] = []
    for index, link in enumerate(topology.links):
        pair = classes.get(index)
        if pair is None:
            results.append(LinkCalibration(link, "preset", "no pair of devices uses this link", None, None))
            continue
        if progress is not None:
            progress(f"calibrate: link {link.name}, measured between devices {pair[0]} and {pair[1]}")
        fit = calibrate_comm(topology.num_devices, sizes, repeats, warmup, progress, pair=pair)
        reason = rejection(fit, min_r2)
        used = link if reason is not None else Link(link.name, float(fit.slope_us_per_byte),
                                                    float(fit.intercept_us))
        results.append(LinkCalibration(used, "preset" if reason else "calibrated", reason, pair, fit))
    return replace(topology, links=tuple(r.link for r in results)), results
