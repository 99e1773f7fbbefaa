"""GPU benchmark: every placer's placement run on logical GPUs split from one real GPU.

The first GPU is split into ``--devices`` logical GPUs of ``--device-memory`` MiB each
(``tf.config.set_logical_device_configuration``: each has its own allocator and limit). For each
zoo model (small configurations; the paper's with ``--paper``) the pipeline runs as in
``bench/bench_tf.py`` and the Airflow DAG: profile small batches on GPU 0, fit per-op lines,
re-measure the large batch placed sequentially, place the re-measured graph with every placer on
the calibrated cluster of logical GPUs, then run each placement in both execution-order modes,
interleaved in blocks (:func:`celeritas_tf.evaluation.validate_interleaved`): free (TensorFlow's
own dispatch) and enforced (each device runs its ops in the order the simulator ran them, through
control dependencies), ``--steps`` timed steps each after 5 warm-up steps per block. Per model
and placer it reports:

* peak memory per logical GPU: predicted (the placement's liveness replay) and measured
  (TensorFlow's allocator, ``tf.config.experimental.get_memory_info(..)['peak']`` after
  ``reset_memory_stats``), and their relative error ``predicted / measured − 1``;
* step time: simulated (the placement's ``predicted_step_time_us``) and measured (mean of the
  timed steps) in each mode, their ratio, and per model and mode the Spearman rank correlation of
  the two across the placers that ran.

The logical GPUs share one chip: transfers between them are copies within its memory and they
share its SMs and memory bandwidth, so every figure is contention on one chip, not a multi-GPU
result; the report says so (``topology``, with the physical GPU count). It also records whether
float32 matmuls and convolutions ran in TF32 (``tf32``), which the analytical FP32 costs do not
model. Ops it counts off the device leave out the feeds, which always run on the client's CPU.
A ``TF_GPU_ALLOCATOR`` other than BFC is refused (one line, exit 2): the memory figures assume it.

Without a GPU it prints one line saying so, writes nothing and exits 0. ``--cpu-rehearsal`` runs the
same steps on logical CPU devices (peaks from TensorFlow's allocation records, no memory limits) to
check the harness end to end; its figures are not GPU figures. Not part of ``make bench``. Results
go to ``build/bench/gpu.json`` (docs/tensorflow.md, "Measuring on a GPU").
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from scipy.stats import spearmanr

from celeritas_core.defaults import ENFORCED_ORDER, FREE_ORDER
from celeritas_core.errors import CeleritasInputError, one_line
from celeritas_core.placers import PLACERS
from celeritas_core.placers.compare import DEFAULT_PLACERS
from celeritas_core.readwrite.formats import write_json_atomic
from celeritas_core.readwrite.safe_io import check_output_path
from celeritas_core.readwrite.units import format_bytes, format_us
from celeritas_tf.models import ZOO  # names only: celeritas_tf.models imports no TensorFlow
from celeritas_tf.profile import device_kind  # imports no TensorFlow either

MIB = 2**20
DEFAULT_BATCH = 32
DEFAULT_DEVICES = 4
DEFAULT_DEVICE_MIB = 8192
DEFAULT_STEPS = 50
WARMUP_STEPS = 5
DEFAULT_TRACED = 3
#: Each placement's timed steps are spread over this many blocks, the two modes taking turns.
BLOCKS = 5
#: The execution-order modes timed, free first (the figures before the order was recorded).
MODES = (FREE_ORDER, ENFORCED_ORDER)
MAX_DEVICES = 16
MIN_BATCH = 8
#: Profiled batch sizes are the large batch divided by these (32 -> 2, 4, 8, as bench_tf.py).
PROFILE_DIVISORS = (16, 8, 4)
NO_GPU = "bench_gpu: no GPU visible to TensorFlow"
NOTHING_DONE = "nothing measured, nothing written"
DEFAULT_OUT = "build/bench/gpu.json"
#: What the logical GPUs split from one physical GPU are (the only set-up this benchmark runs).
ONE_CHIP = "logical GPUs on one chip (contention on one chip, not a multi-GPU result)"
#: The same for the rehearsal's logical CPU devices.
CPU_THREADS = "logical CPU devices: threads of one host (rehearsal: not GPU figures)"
#: Op types whose trace entries are feeds: the session runs them on the client's CPU (``_arg_…``).
FEED_OPS = frozenset({"Placeholder"})


@dataclass(frozen=True)
class PlacerRun:
    """One placer's placement of one model: the simulator's figures and what running it gave."""

    placer: str
    simulated_us: float
    """The placement's simulated step time (µs)."""
    predicted_peak_bytes: tuple[float, ...]
    """Per logical device: the placement's replayed peak memory (bytes)."""
    predicted_oom: bool
    step_seconds: tuple[float, ...] = ()
    """The timed steps in the free order, TensorFlow's own dispatch (s); empty when the placement
    did not run."""
    enforced_step_seconds: tuple[float, ...] = ()
    """The timed steps with the simulator's order enforced (s), interleaved with the free ones."""
    measured_peak_bytes: tuple[float | None, ...] = ()
    """Per logical device: the measured peak (bytes; None where unknown)."""
    peak_source: str = "allocator"
    """``allocator`` (TensorFlow's per-GPU allocator stats) or ``trace`` (allocation records)."""
    trace_peak_bytes: tuple[float | None, ...] = ()
    """Per logical device: the peak of the traced step before the timed ones (bytes)."""
    error: str | None = None
    """Why the placement did not run (e.g. out of memory on a logical GPU)."""


@dataclass(frozen=True)
class ModelResult:
    """One model's figures: how it was measured, and every placer's run."""

    model: str
    batch: int
    profile_batches: tuple[int, ...]
    ops: int
    ops_off_device: int
    """Ops the re-measurement traced on another kind of device (soft placement, no GPU kernel);
    feeds, which always run on the client's CPU, are not counted (:func:`ops_off_device`)."""
    memory_dev: float
    """Standard Evaluation's mean per-op memory deviation (fraction)."""
    time_dev: float
    """Standard Evaluation's mean per-op time deviation (fraction)."""
    runs: tuple[PlacerRun, ...] = field(default_factory=tuple)
    seconds: float = 0.0


def no_gpu_line(cuda_build: bool) -> str:
    """The one line printed without a GPU; it names the CPU-only build of TensorFlow (the one
    ``make setup`` installs) when that is why."""
    why = "" if cuda_build else (" (this TensorFlow is a CPU-only build; docs/tensorflow.md says how to "
                                 "get the GPU one)")
    return f"{NO_GPU}{why}; {NOTHING_DONE}"


def profile_batches(batch: int) -> tuple[int, ...]:
    """The small batch sizes profiled for the large ``batch``: ``batch // d`` for the divisors of
    :data:`PROFILE_DIVISORS`, at least 1, distinct, increasing."""
    return tuple(sorted({max(1, batch // d) for d in PROFILE_DIVISORS}))


def ops_off_device(devices: Mapping[str, str], op_types: Mapping[str, str], kind: str) -> int:
    """How many traced ops ran on another kind of device than ``kind`` (``devices``: op name to
    TensorFlow device name; ``op_types``: op name to op type), leaving out the feeds: a fed
    placeholder is replaced by the session's ``_arg_…`` node on the client's CPU, whatever device
    the placement gave it, so counting it would report every placement as partly off the GPU."""
    def is_feed(op: str) -> bool:
        return op.startswith("_arg_") or op_types.get(op) in FEED_OPS

    return sum(1 for op, device in devices.items() if device_kind(device) != kind and not is_feed(op))


def topology_label(kind: str, chips_used: int = 1) -> str:
    """What the devices were: :data:`ONE_CHIP` for logical GPUs split from one physical GPU (what
    this benchmark runs), :data:`CPU_THREADS` for the rehearsal."""
    if kind != "GPU":
        return CPU_THREADS
    if chips_used == 1:
        return ONE_CHIP
    return f"logical GPUs on {chips_used} chips"


def tf32_note(enabled: bool | None, kind: str, compute_capability: Sequence[int] | None) -> str:
    """One line on TF32 for the report: whether float32 matmuls and convolutions ran in TF32
    (TensorFlow's default on GPUs of compute capability 8.0 and newer), which the analytical
    costs (FP32 peaks) do not model."""
    if kind != "GPU":
        return "TF32: n/a (logical CPU devices run float32 in FP32)"
    if enabled is None:
        return "TF32: unknown (not recorded)"
    if not enabled:
        return "TF32: off (float32 matmul/conv run in FP32, as the analytical FP32 costs assume)"
    if compute_capability is not None and tuple(compute_capability)[:1] < (8,):
        version = ".".join(str(int(v)) for v in compute_capability)
        return (f"TF32: on, but this GPU (compute capability {version}) has no TF32: float32 matmul/conv "
                "run in FP32")
    where = "" if compute_capability is not None else " on Ampere and newer GPUs"
    return (f"TF32: on (float32 matmul/conv run in TF32{where}; analytical FP32 costs do not model it; "
            "NVIDIA_TF32_OVERRIDE=0 measures FP32)")


def device_info(kind: str, description: str, logical_devices: int, memory_limit_mib: int | None, *,
                physical_gpus: int, tf32: bool | None,
                compute_capability: Sequence[int] | None) -> dict[str, Any]:
    """The ``device`` part of the document: what the figures were measured on, how the logical
    devices relate to physical GPUs (one chip: :data:`ONE_CHIP`) and whether TF32 was on."""
    chips = 1 if kind == "GPU" else 0
    return {"kind": kind, "description": description, "logical_devices": logical_devices,
            "memory_limit_mib": memory_limit_mib if kind == "GPU" else None,
            "physical_gpus": int(physical_gpus), "chips_used": chips, "topology": topology_label(kind, chips),
            "tf32": tf32, "compute_capability": None if compute_capability is None else
            [int(v) for v in compute_capability],
            "tf32_note": tf32_note(tf32, kind, compute_capability)}


def spearman(simulated: Sequence[float], measured: Sequence[float]) -> float | None:
    """Spearman's rank correlation of simulated and measured step times (ties get mean ranks);
    None with fewer than 3 pairs or when either side is constant (no ranking to compare)."""
    if len(simulated) != len(measured):
        raise ValueError(f"{len(simulated)} simulated but {len(measured)} measured times")
    if len(simulated) < 3 or len(set(simulated)) < 2 or len(set(measured)) < 2:
        return None
    return float(spearmanr(simulated, measured).statistic)


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    """``predicted / measured − 1``; None when either is unknown or nothing was measured."""
    if predicted is None or measured is None or not measured > 0:
        return None
    return float(predicted) / float(measured) - 1.0


def memory_table(predicted: Sequence[float], measured: Sequence[float | None]) -> list[dict[str, Any]]:
    """Per logical device: predicted and measured peak bytes and the relative error."""
    count = max(len(predicted), len(measured))
    rows = []
    for k in range(count):
        p = float(predicted[k]) if k < len(predicted) else None
        m = measured[k] if k < len(measured) else None
        rows.append({"device": k, "predicted_bytes": p, "measured_bytes": None if m is None else float(m),
                     "error": relative_error(p, m)})
    return rows


def mode_figures(step_seconds: Sequence[float], simulated_us: float) -> dict[str, Any]:
    """The step-time figures of one mode's timed steps (µs): mean, median, p90, how many, and
    the ratio of the mean to the simulated step (None where nothing ran)."""
    seconds = np.asarray(step_seconds, dtype=float)
    ran = seconds.size > 0
    measured_us = float(seconds.mean() * 1e6) if ran else None
    return {"measured_mean_us": measured_us,
            "measured_median_us": float(np.median(seconds) * 1e6) if ran else None,
            "measured_p90_us": float(np.percentile(seconds, 90) * 1e6) if ran else None,
            "timed_steps": int(seconds.size),
            "measured_over_simulated": (measured_us / simulated_us
                                        if measured_us is not None and simulated_us > 0 else None)}


def placer_row(run: PlacerRun) -> dict[str, Any]:
    """The JSON figures of one placer's run: step times (µs; at the top level the free order's,
    under ``modes`` each mode's), memory per device, errors."""
    free = mode_figures(run.step_seconds, run.simulated_us)
    enforced = mode_figures(run.enforced_step_seconds, run.simulated_us)
    known = [m for m in run.measured_peak_bytes if m is not None]
    return {"placer": run.placer, "simulated_us": run.simulated_us, "predicted_oom": run.predicted_oom,
            "ran": free["timed_steps"] > 0, "error": run.error, **free,
            "modes": {FREE_ORDER: free, ENFORCED_ORDER: enforced},
            "peak_source": run.peak_source,
            "memory": memory_table(run.predicted_peak_bytes, run.measured_peak_bytes),
            "fullest_error": relative_error(max(run.predicted_peak_bytes, default=None),
                                            max(known, default=None)),
            "trace_peak_bytes": list(run.trace_peak_bytes)}


def model_row(result: ModelResult) -> dict[str, Any]:
    """The JSON figures of one model: every placer's row and, per mode, the Spearman rank
    correlation of simulated and measured (mean) step time across the placers that ran in it
    (``spearman``: the free order's, as before the order was recorded)."""
    rows = [placer_row(r) for r in result.runs]
    ran = [r for r in rows if r["ran"]]
    errors = [abs(r["fullest_error"]) for r in rows if r["fullest_error"] is not None]
    by_mode = {}
    for mode in MODES:
        timed = [r for r in rows if r["modes"][mode]["timed_steps"] > 0]
        by_mode[mode] = spearman([r["simulated_us"] for r in timed],
                                 [r["modes"][mode]["measured_mean_us"] for r in timed])
    return {"model": result.model, "batch": result.batch, "profile_batches": list(result.profile_batches),
            "ops": result.ops, "ops_off_device": result.ops_off_device,
            "estimation": {"memory_dev": _finite(result.memory_dev), "time_dev": _finite(result.time_dev)},
            "spearman": by_mode[FREE_ORDER], "spearman_by_mode": by_mode,
            "placers_ran": len(ran), "worst_fullest_memory_error": max(errors, default=None),
            "placers": rows, "seconds": result.seconds}


def _finite(value: float) -> float | None:
    """``value``, or None when it is NaN or infinite (JSON has neither)."""
    return float(value) if math.isfinite(value) else None


def _percent(value: float | None, *, sign: bool = True) -> str:
    return "n/a" if value is None else f"{value * 100:{'+' if sign else ''}.1f}%"


def _mode_cells(figures: dict[str, Any]) -> str:
    """A mode's measured mean and its ratio to the simulated step, as two columns."""
    if not figures["timed_steps"]:
        return f"{'-':>12} {'':>8}"
    ratio = figures["measured_over_simulated"]
    return f"{format_us(figures['measured_mean_us']):>12} {'n/a' if ratio is None else f'{ratio:.2f}':>8}"


def _placer_line(row: dict[str, Any], kind: str) -> str:
    """One line of a model's table: times (free, then enforced), then predicted / measured peak
    per device."""
    sim = format_us(row["simulated_us"]) + (" OOM" if row["predicted_oom"] else "")
    if row["ran"]:
        times = "  ".join(_mode_cells(row["modes"][mode]) for mode in MODES)
    else:
        times = f"{'did not run':>12} {'':>8}  {'':>12} {'':>8}"
    cells = [f"{kind}{m['device']} {format_bytes(m['predicted_bytes'] or 0)} / "
             f"{'?' if m['measured_bytes'] is None else format_bytes(m['measured_bytes'])} "
             f"({_percent(m['error'])})" for m in row["memory"]]
    line = f"  {row['placer']:<12} {sim:>14} {times}   " + "  ".join(cells)
    return line + (f"\n  {'':<12} {row['error']}" if row["error"] else "")


def report_lines(doc: dict[str, Any]) -> list[str]:
    """The printed report of a benchmark document (as :func:`build_document` makes it)."""
    dev, settings = doc["device"], doc["settings"]
    kind = "GPU" if dev["kind"] == "GPU" else "CPU"
    # documents from before the label came from the same one-chip split
    chips = dev.get("chips_used", 1 if kind == "GPU" else 0)
    topology = dev.get("topology") or topology_label(kind, chips)
    one_chip = kind == "GPU" and chips == 1
    lines = [f"GPU benchmark on {dev['description']}: {dev['logical_devices']} logical {kind}s x "
             f"{settings['device_memory_mib']} MiB; {settings['warmup_steps']} warm-up + "
             f"{settings['steps']} timed steps per placement; {topology}"]
    if kind == "GPU":
        physical = dev.get("physical_gpus")
        count = "physical GPUs: unknown" if physical is None else f"{physical} physical GPU(s) in the machine"
        lines.append(f"  {count}, {chips} used" + (": the logical GPUs share its SMs and memory bandwidth, "
                                                  "and transfers between them are same-chip copies"
                                                  if one_chip else ""))
    lines.append(dev.get("tf32_note") or tf32_note(dev.get("tf32"), kind, dev.get("compute_capability")))
    lines += [f"transfer model{' (same-chip copies)' if one_chip else ''}: "
              f"{doc['transfer_model']['describe']}", ""]
    for m in doc["models"]:
        if "error" in m:
            lines += [f"{m['model']}: failed: {m['error']}", ""]
            continue
        rhos = m.get("spearman_by_mode") or {FREE_ORDER: m["spearman"]}
        rho = ", ".join(f"{mode} {'n/a' if r is None else f'{r:.3f}'}" for mode, r in rhos.items())
        est = m["estimation"]
        source = m["placers"][0]["peak_source"] if m["placers"] else "-"
        lines.append(f"{m['model']} (batch {m['batch']}, profiled at {m['profile_batches']}, {m['ops']} ops, "
                     f"{m['ops_off_device']} off the {kind}; per-op deviation memory "
                     f"{_percent(est['memory_dev'], sign=False)}, "
                     f"time {_percent(est['time_dev'], sign=False)}): "
                     f"Spearman {rho} over {m['placers_ran']} placers")
        lines.append(f"  {'placer':<12} {'simulated':>14} {'free':>12} {'free/sim':>8}  {'enforced':>12} "
                     f"{'enf/sim':>8}   peak per device: predicted / measured ({source}) (error)")
        lines += [_placer_line(row, kind) for row in m["placers"]]
        lines.append("")
    return lines


def build_document(device: dict[str, Any], settings: dict[str, Any], transfer: dict[str, Any],
                   models: Sequence[ModelResult | dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The JSON document of a run (``models``: results, or ``{"model", "error"}`` for a failure)."""
    return {"bench": "gpu", "device": device, "settings": settings, "transfer_model": transfer,
            "models": [m if isinstance(m, dict) else model_row(m) for m in models], "seconds": seconds}


# ---------------------------------------------------------------------------------------------
# Arguments


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line (``bench_gpu.py: error: …``), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"expected an integer {bound}, got {value}")
        return value
    return parse


def _names(known: Sequence[str], what: str) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        if not names:
            raise argparse.ArgumentTypeError(f"no {what} given")
        for n in names:
            if n not in known:
                raise argparse.ArgumentTypeError(f"unknown {what} {n!r} (known: {', '.join(known)})")
        return names
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The options; defaults were meant to fit about 8 minutes on one H100 (TensorFlow start-up
    included) when each placement ran once in the free order: Inception v3's 10k-op step dominates
    (12 builds, about 20 traced and 440 timed steps). Timing both orders in :data:`BLOCKS` blocks
    builds each placement twice and runs twice the timed steps and ten times the warm-up steps."""
    parser = _OneLineParser(
        prog="bench_gpu.py", description=__doc__.splitlines()[0],
        epilog=f"Defaults (all zoo models, small configurations, batch {DEFAULT_BATCH}, {DEFAULT_DEVICES} "
               f"logical GPUs of {DEFAULT_DEVICE_MIB} MiB, {WARMUP_STEPS} + {DEFAULT_STEPS} steps, every "
               "placer) were chosen to take about 8 minutes on one H100, TensorFlow's start-up included, "
               "when each placement ran in one order (an estimate from this harness's CPU timings, not yet "
               f"measured on a GPU); both orders in {BLOCKS} blocks take up to about twice that; --paper "
               "takes far longer. Without a GPU: one line, nothing written, exit 0.")
    parser.add_argument("--models", type=_names(tuple(ZOO), "model"), default=tuple(ZOO),
                        help=f"comma-separated zoo models (default: all: {','.join(ZOO)})")
    parser.add_argument("--placers", type=_names(tuple(PLACERS), "placer"), default=DEFAULT_PLACERS,
                        help=f"comma-separated placers (default: {','.join(DEFAULT_PLACERS)})")
    parser.add_argument("--paper", action="store_true",
                        help="the paper's model configurations (default: the small ones), and each model's "
                             "paper batch size unless --batch is given")
    parser.add_argument("--devices", type=_int_in(2, MAX_DEVICES), default=DEFAULT_DEVICES,
                        help=f"logical GPUs the first GPU is split into (2 to {MAX_DEVICES}; default "
                             f"{DEFAULT_DEVICES})")
    parser.add_argument("--device-memory", type=_int_in(1), default=DEFAULT_DEVICE_MIB, metavar="MIB",
                        help=f"memory limit of each logical GPU in MiB, also the placers' device memory "
                             f"(default {DEFAULT_DEVICE_MIB}; devices x this must fit the GPU)")
    parser.add_argument("--batch", type=_int_in(MIN_BATCH), default=None,
                        help=f"the large batch size placed and run (at least {MIN_BATCH}; default "
                             f"{DEFAULT_BATCH}, or the paper's with --paper); profiled at batch/16, /8, /4")
    parser.add_argument("--steps", type=_int_in(1), default=DEFAULT_STEPS,
                        help=f"timed steps per placement after {WARMUP_STEPS} warm-up "
                             f"(default {DEFAULT_STEPS})")
    parser.add_argument("--traced-steps", type=_int_in(1), default=DEFAULT_TRACED,
                        help=f"traced steps per profile and re-measurement (default {DEFAULT_TRACED})")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    parser.add_argument("--cpu-rehearsal", action="store_true",
                        help="run the same steps on logical CPU devices to check the harness without a GPU "
                             "(peaks from allocation records; not GPU figures)")
    return parser


# ---------------------------------------------------------------------------------------------
# Running (TensorFlow from here on)


def _say(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


class PeakMeter:
    """Peak memory per logical device around one run: TensorFlow's allocator stats on GPUs (reset
    before, read after); where they cannot be read, the traced step's allocation records."""

    def __init__(self, tf: Any, kind: str, devices: int) -> None:
        self.tf, self.kind, self.devices = tf, kind, devices
        self.unavailable: str | None = (None if kind == "GPU"
                                        else "logical CPU devices have no allocator stats")

    def reset(self) -> None:
        """Set each device's peak to its current use."""
        if self.unavailable is None:
            try:
                for k in range(self.devices):
                    self.tf.config.experimental.reset_memory_stats(f"{self.kind}:{k}")
            except Exception as exc:  # whatever fails (an API missing, a device name): use the trace's peaks
                self.unavailable = _first_line(exc)
                _say(f"allocator stats unavailable ({self.unavailable}); using allocation records")

    def read(self, trace_peaks: Sequence[float | None]) -> tuple[tuple[float | None, ...], str]:
        """Per device: the peak since :meth:`reset`, and where it came from."""
        if self.unavailable is None:
            try:
                return tuple(float(self.tf.config.experimental.get_memory_info(f"{self.kind}:{k}")["peak"])
                             for k in range(self.devices)), "allocator"
            except Exception as exc:  # as in reset
                self.unavailable = _first_line(exc)
        return tuple(trace_peaks), "trace"


def simulated_device_order(graph: Any, placement: Any) -> tuple[tuple[str, ...], ...]:
    """Per device, the op names of ``placement`` in the order the simulator ran them (the
    ``device_order`` every placer records)."""
    names = graph.node_names
    return tuple(tuple(names[int(i)] for i in ops) for ops in placement.device_order)


def run_placer(model: Any, batch: int, graph: Any, cluster: Any, placer: str, steps: int,
               meter: PeakMeter) -> PlacerRun:
    """Place ``graph`` with ``placer`` and run the placement free and with the simulator's order
    enforced, interleaved in :data:`BLOCKS` blocks (warm-up, then ``steps`` timed steps each)."""
    from celeritas_core.placers import place
    from celeritas_core.placers.compare import params_for
    from celeritas_tf.evaluation import PlacementOrder, validate_interleaved
    from celeritas_tf.tf import device_name

    placement = place(graph, cluster, placer, params_for(placer, {}))
    base = PlacerRun(placer, float(placement.predicted_step_time_us),
                     tuple(float(x) for x in placement.device_peak_memory_bytes), bool(placement.oom))
    assignment = dict(zip(graph.node_names, placement.assignment.tolist(), strict=True))
    order = PlacementOrder(simulated_device_order(graph, placement), MODES[0])
    _say(f"{model.name}: running {placer}'s placement, {' and '.join(MODES)} order interleaved")
    meter.reset()
    try:
        run = validate_interleaved(model, batch, {placer: assignment}, cluster.num_devices,
                                   warmup_steps=WARMUP_STEPS, steps=steps, blocks=BLOCKS,
                                   orders={placer: order}, modes={placer: MODES})[placer]
    except meter.tf.errors.OpError as exc:  # out of memory on a logical GPU, a kernel missing, …
        peaks, source = meter.read([None] * cluster.num_devices)
        return replace(base, measured_peak_bytes=peaks, peak_source=source, error=_first_line(exc))
    traced = tuple(run.measured_peak_bytes.get(device_name(k, meter.kind))
                   for k in range(cluster.num_devices))
    peaks, source = meter.read(traced)
    return replace(base, step_seconds=run.modes[FREE_ORDER].step_seconds,
                   enforced_step_seconds=run.modes[ENFORCED_ORDER].step_seconds, measured_peak_bytes=peaks,
                   peak_source=source, trace_peak_bytes=traced)


def run_model(name: str, args: argparse.Namespace, transfer: Any, meter: PeakMeter) -> ModelResult:
    """The pipeline on one model: profile, fit, re-measure, then every placer placed and run."""
    from celeritas_core.graphs.cluster import Cluster
    from celeritas_tf.evaluation import fits_from_profile, profile_document, profile_small_batches, remeasure
    from celeritas_tf.models import get_model

    start = time.perf_counter()
    model = get_model(name, paper=args.paper)
    batch = args.batch or (ZOO[name].paper_batch_size if args.paper else DEFAULT_BATCH)
    sizes = profile_batches(batch)
    traces = profile_small_batches(model, sizes, traced_steps=args.traced_steps, progress=_say)
    fits = fits_from_profile(profile_document(model, traces))
    cluster = Cluster.homogeneous(args.devices, float(args.device_memory * MIB),
                                  slope_us_per_byte=transfer.slope_us_per_byte,
                                  intercept_us=transfer.intercept_us)
    result = remeasure(model, batch, fits, cluster, traced_steps=args.traced_steps, progress=_say)
    memory, timing = result.accuracy()
    off = ops_off_device(result.trace.devices, dict(zip(result.measured.node_names, result.measured.ops,
                                                        strict=True)), meter.kind)
    runs = tuple(run_placer(model, batch, result.measured, cluster, p, args.steps, meter)
                 for p in args.placers)
    return ModelResult(name, batch, sizes, result.measured.num_nodes, off, memory.mean, timing.mean, runs,
                       time.perf_counter() - start)


def _device_info(tf: Any, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """What the figures were measured on (:func:`device_info`), read from TensorFlow."""
    from celeritas_tf.tf import tf32_enabled

    gpus = tf.config.list_physical_devices("GPU")
    capability = None
    if kind == "GPU":
        details = tf.config.experimental.get_device_details(gpus[0])
        description = str(details.get("device_name") or gpus[0].name)
        capability = details.get("compute_capability")
    else:
        description = "this host's CPU"
    return device_info(kind, description, args.devices, args.device_memory, physical_gpus=len(gpus),
                       tf32=tf32_enabled(), compute_capability=capability)


def run(args: argparse.Namespace) -> int:
    """Set up the devices (or say there is no GPU), measure every model, write and print."""
    # TensorFlow is imported only here: it takes seconds to load, and --help, argument errors and
    # the pure report functions (tests) must neither wait for it nor need it.
    from celeritas_tf.calibrate import calibrate_comm, choose_transfer_model
    from celeritas_tf.tf import tensorflow, use_logical_gpus

    start = time.perf_counter()
    kind = "CPU" if args.cpu_rehearsal else "GPU"
    tf = tensorflow()
    try:
        physical = use_logical_gpus([args.device_memory] * args.devices) if kind == "GPU" else 0
    except CeleritasInputError as exc:  # an allocator the memory figures cannot be read from
        print(f"bench_gpu.py: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    if kind == "GPU" and not physical:
        print(no_gpu_line(tf.test.is_built_with_cuda()))
        return 0
    print(f"GPU benchmark ({'CPU rehearsal' if kind == 'CPU' else ONE_CHIP})", file=sys.stderr)
    _say("calibrating transfers between two logical devices")
    try:  # the first thing that runs on the devices: a set-up the GPU cannot hold fails here
        calibration = calibrate_comm(2, repeats=10)
    except Exception as exc:
        hint = "; do --devices x --device-memory fit the GPU's free memory?" if kind == "GPU" else ""
        print(f"bench_gpu.py: error: cannot run on {args.devices} logical {kind}s of "
              f"{args.device_memory} MiB ({_first_line(exc)}){hint}", file=sys.stderr)
        return 2
    choice = choose_transfer_model(calibration)
    meter = PeakMeter(tf, kind, args.devices)
    results: list[ModelResult | dict[str, Any]] = []
    for name in args.models:
        try:
            results.append(run_model(name, args, choice, meter))
        except Exception as exc:  # one model failing must not lose the others' figures
            _say(f"{name}: failed: {_first_line(exc)}")
            results.append({"model": name, "error": _first_line(exc)})
    settings = {"models": list(args.models), "placers": list(args.placers), "paper": args.paper,
                "batch": args.batch, "device_memory_mib": args.device_memory, "warmup_steps": WARMUP_STEPS,
                "steps": args.steps, "traced_steps": args.traced_steps,
                "peak_source_note": meter.unavailable}
    transfer = {"describe": choice.describe(), "slope_us_per_byte": choice.slope_us_per_byte,
                "intercept_us": choice.intercept_us, "source": choice.source, "reason": choice.reason,
                "r2": calibration.r2 if math.isfinite(calibration.r2) else None}
    doc = build_document(_device_info(tf, kind, args), settings, transfer, results,
                         time.perf_counter() - start)
    write_json_atomic(Path(args.out), doc, indent=1)
    print("\n".join(report_lines(doc)))
    print(f"wrote {args.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options (bad ones, an --out that cannot be written: one line, exit 2) and run."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_output_path(args.out)
    except CeleritasInputError as exc:
        parser.error(f"argument --out: {one_line(str(exc))}")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
