"""TensorFlow benchmark: Standard Evaluation accuracy, simulator fidelity and paper-scale node counts.

1. **Estimation accuracy** (the paper's "Estimation Accuracy"), per zoo model at CPU scale (its
   small configuration): profile the training step at small batch sizes on one device, estimate
   a larger batch four ways (:data:`ESTIMATORS`: the paper's lines, a time model per op with
   noise-driven traced steps, the same with a batch towards the target, and the one-device
   measurement as a reference), re-measure it placed sequentially (CPD-TOPO) on 4 logical CPU
   devices that each hold 30 % of the predicted memory, and report per estimate the paper's mean
   per-op time deviation, the time-weighted deviation Σ|e − a| / Σa, the share of the step time
   in ops within 10 %, next to the noise floor (a second trace of the same placement), and the
   memory deviation. Targets: time-weighted <= 15 %, per-op mean <= 1.5x the noise floor, memory
   <= 2 % per op and the one-device peak within 10 %. ``--only-accuracy`` runs this part alone.
2. **Simulator fidelity**: on two models, place the re-measured graph with every placer on the
   calibrated 4-device cluster, simulate, then run each placement (5 warm-up + 50 timed steps) and
   compute Spearman's rank correlation between simulated and measured step times. Target >= 0.8.
3. **Paper scale**: the four training steps at the paper's configurations and batch sizes (built,
   not run), their node counts next to the paper's CCR table, analytical V100 costs, and the
   Celeritas placement on 4 × 32 GiB devices (the paper's testbed).

Logical CPU devices share this machine's cores, so measured step times are not GPU step times:
they check that the method runs end to end and how well the simulator ranks placements here.
Run: ``make bench`` (or ``.venv/bin/python bench/bench_tf.py --help``). Figures go to
``build/bench/tf.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from celeritas_core.cluster import Cluster  # noqa: E402
from celeritas_core.compare import params_for  # noqa: E402
from celeritas_core.estimation import weighted_median_error  # noqa: E402
from celeritas_core.formats import write_json_atomic  # noqa: E402
from celeritas_core.levels import ccr  # noqa: E402
from celeritas_core.memory import one_device_peak_bytes  # noqa: E402
from celeritas_core.placers import place  # noqa: E402
from celeritas_core.plots import deviation_cdf_chart  # noqa: E402
from celeritas_core.regression import CostFits, fit_costs, relative_deviation  # noqa: E402
from celeritas_core.units import format_bytes, format_us  # noqa: E402
from celeritas_tf.analytical import analytical_costs, parse_cost_source  # noqa: E402
from celeritas_tf.calibrate import calibrate_comm  # noqa: E402
from celeritas_tf.evaluation import (  # noqa: E402
    ProfilePlan,
    estimation_accuracy,
    profile_small_batches,
    remeasure,
    spanning_trace,
    validate,
)
from celeritas_tf.extract import graph_from_step, view_aliases  # noqa: E402
from celeritas_tf.models import ZOO, ModelSpec, get_model  # noqa: E402
from celeritas_tf.profile import StepTrace, trace_costs, trace_step  # noqa: E402
from celeritas_tf.step import build_training_step  # noqa: E402

PAPER_NODES = {"inception_v3": 6332, "nmt": 25463, "transformer": 36352, "tensor_holography": 3810}
MODELS = ("mlp", "tensor_holography", "inception_v3", "nmt", "transformer")
SMALL_BATCHES = (2, 4, 8)
LARGE_BATCH = 32
DEVICES = 4
DEVICE_SHARE = 0.30
FIDELITY_MODELS = ("tensor_holography", "nmt")
FIDELITY_PLACERS = ("single", "metis", "m-topo", "m-etf", "m-sct", "order-place", "celeritas")
MEMORY_TARGET, SPEARMAN_TARGET, PEAK_TARGET = 0.02, 0.8, 0.10
CDF_FIGURE = Path("build/bench/estimation_cdf.png")


def _say(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


#: How the accuracy section estimates per-op times at the large batch (docs/tensorflow.md):
#: ``paper``: the paper's lines through the small batches, each traced ``--traced-steps`` times;
#: ``chosen``: the same batches, more traced steps while the times are noisy, each op's time model
#: by leave-one-out error; ``spanned``: ``chosen`` plus the batch the span rule adds towards the
#: large one. ``one-device`` is no estimate: the large batch measured on one device, the best any
#: estimate from one-device profiles can do against a re-measurement on several devices.
ESTIMATORS = ("paper", "chosen", "spanned", "one-device")
NOISE_TARGET = 0.05
WEIGHTED_TARGET, FLOOR_RATIO_TARGET, WITHIN = 0.15, 1.5, 0.10


FitRow = tuple[int, dict[str, float], dict[str, float]]


def _rows(traces: list[StepTrace], steps: int | None = None) -> list[FitRow]:
    """Fit rows of traces, times the median of each op's first ``steps`` traced steps (all: None)."""
    return [(t.batch_size, {n: float(np.median(v[:steps])) for n, v in t.time_samples.items()},
             t.memory_bytes) for t in traces]


def _time_figures(estimate: dict[str, float], actual: dict[str, float]) -> dict[str, float]:
    """Per-op mean deviation (the paper's), time-weighted deviation Σ|e − a| / Σa and the share of
    the step time (Σa) in ops whose estimate is within :data:`WITHIN`, over ops with a > 0."""
    dev = relative_deviation("time", estimate, actual)
    a = np.array([actual[n] for n in dev.names])
    e = np.array([estimate[n] for n in dev.names])
    total = float(a.sum())
    return {"mean": dev.mean, "weighted": float(np.abs(e - a).sum() / total) if total else float("nan"),
            "within_share": float(a[dev.values <= WITHIN + 1e-12].sum() / total) if total else float("nan"),
            "ops": len(dev.names)}


def _estimates(model: ModelSpec, traced: int, max_traced: int, cluster_of: Callable[[CostFits], Cluster]
               ) -> tuple[dict[str, CostFits], Cluster, dict[str, list[float]]]:
    """Profile once and fit every estimator: ``{estimator: CostFits}``, the cluster and the
    profile's figures (batches, traced steps and time-weighted median errors). The ``paper`` fits
    use each op's first ``traced`` steps only: what a fixed count of traced steps measures."""
    plan = ProfilePlan(traced_steps=traced, max_traced_steps=max_traced, noise_target=NOISE_TARGET)
    traces = profile_small_batches(model, SMALL_BATCHES, plan=plan, progress=_say)
    largest = max(traces, key=lambda t: t.batch_size)
    paper = fit_costs(_rows(traces, traced)).with_aliases(largest.aliases)
    cluster = cluster_of(paper)
    span_plan = replace(plan, span_target=LARGE_BATCH, device_bytes=float(cluster.memory_bytes[0]))
    extra = spanning_trace(model, traces, span_plan, progress=_say)
    spanned_traces = traces + ([extra] if extra is not None else [])
    top = max(spanned_traces, key=lambda t: t.batch_size)
    fits = {"paper": paper,
            "chosen": fit_costs(_rows(traces), time_model="choose").with_aliases(largest.aliases),
            "spanned": fit_costs(_rows(spanned_traces), time_model="choose").with_aliases(top.aliases)}
    profile = {"batches": [t.batch_size for t in spanned_traces],
               "traced_steps": [len(t.step_seconds) for t in spanned_traces],
               "median_error": [weighted_median_error(t.time_samples) for t in spanned_traces]}
    return fits, cluster, profile


def accuracy(models: list[str], traced: int, comm: tuple[float, float],
             max_traced: int) -> tuple[list[dict[str, object]], dict[str, object], dict[str, object]]:
    """Estimation accuracy per zoo model and estimator (:data:`ESTIMATORS`); also returns each
    model's measured graph and cluster, and the paper's fits.

    Every estimator is compared with the same re-measurement (the sequential placement of the
    paper's estimate, ``traced`` steps). The *noise floor* is a second trace of that placement
    compared with the first: no estimate can be expected to beat it. Memory: the mean per-op
    deviation, and the one-device peak the estimate's graph replays against the peak TensorFlow
    measured at the large batch on one device.
    """
    rows, measured, curves, paper_fits = [], {}, [], {}
    for name in models:
        model = get_model(name)
        start = time.perf_counter()

        def cluster_of(fits: object) -> Cluster:
            return Cluster.homogeneous(DEVICES, DEVICE_SHARE * float(fits.predict(LARGE_BATCH)[1].sum()),
                                       slope_us_per_byte=comm[0], intercept_us=comm[1])

        fits, cluster, profile = _estimates(model, traced, max_traced, cluster_of)
        paper_fits[name] = fits["paper"]
        result = remeasure(model, LARGE_BATCH, fits["paper"], cluster, traced_steps=traced, progress=_say)
        mem, tim = result.accuracy()
        curves.append((name, mem, tim))
        actual = dict(result.trace.time_us)
        assignment = dict(zip(result.measured.node_names, result.assignment.tolist(), strict=True))
        _say(f"{name}: re-tracing the same placement (noise floor)")
        again = trace_step(build_training_step(model, LARGE_BATCH), num_devices=DEVICES, traced_steps=traced,
                           assignment=assignment)
        _say(f"{name}: batch {LARGE_BATCH} on one device (the one-device reference and peak)")
        one_step = build_training_step(model, LARGE_BATCH)
        one = trace_step(one_step, traced_steps=traced)
        measured_peak = max(one.peak_bytes.values())
        row = {"model": name, "ops": result.measured.num_nodes, "profile": profile,
               "noise": _time_figures(again.time_us, actual), "estimators": {},
               "measured_peak_bytes": measured_peak}
        for est in ESTIMATORS:
            if est == "one-device":
                graph = graph_from_step(one_step, trace_costs(one), aliases=one.aliases)
            else:
                graph = graph_from_step(one_step, fits[est].predict_costs(LARGE_BATCH),
                                        aliases=fits[est].output_aliases)
            memory, _ = estimation_accuracy(graph, result.measured, traced=actual)
            figures = _time_figures(dict(zip(graph.node_names, graph.time_us.tolist(), strict=True)), actual)
            peak = one_device_peak_bytes(graph)
            chosen = fits[est].time_models if est in fits else None
            figures.update({"memory_mean": memory.mean, "peak_bytes": peak,
                            "peak_error": peak / measured_peak - 1.0,
                            "models": chosen.counts() if chosen is not None else None})
            row["estimators"][est] = figures
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
        measured[name] = (model, result.measured, cluster)
    deviation_cdf_chart(curves, CDF_FIGURE, title=f"Standard Evaluation (paper): batch {list(SMALL_BATCHES)} "
                        f"-> {LARGE_BATCH}, re-measured on {DEVICES} logical CPU devices")
    return rows, measured, paper_fits


def _print_accuracy(rows: list[dict[str, object]], comm: tuple[float, float]) -> None:
    """The accuracy table: one line per zoo model and estimator."""
    print(f"Estimation accuracy: small batches {list(SMALL_BATCHES)} -> batch {LARGE_BATCH}, re-measured on "
          f"{DEVICES} logical CPU devices\n")
    print(f"transfer model (calibrated): {comm[0]:.3g} µs/B + {comm[1]:.3g} µs\n")
    print(f"{'model':<18} {'estimator':<11} {'time/op':>8} {'weighted':>9} {'<=10%':>6} {'noise/op':>9} "
          f"{'noise w':>8} {'mem/op':>7} {'peak err':>9}  time models")
    for r in rows:
        noise = r["noise"]
        for est, f in r["estimators"].items():
            kinds = ", ".join(f"{k} {v}" for k, v in (f["models"] or {}).items())
            print(f"{r['model']:<18} {est:<11} {f['mean'] * 100:>7.1f}% {f['weighted'] * 100:>8.1f}% "
                  f"{f['within_share'] * 100:>5.1f}% {noise['mean'] * 100:>8.1f}% "
                  f"{noise['weighted'] * 100:>7.1f}% "
                  f"{f['memory_mean'] * 100:>6.2f}% {f['peak_error'] * 100:>+8.1f}%  {kinds}")
        p = r["profile"]
        print(f"{'':<18} profiled batches {p['batches']}, traced steps {p['traced_steps']}, time-weighted "
              f"median error " + ", ".join(f"{e * 100:.1f}%" for e in p["median_error"]))
    print("(time/op: the paper's per-op mean |e−a|/a; weighted: Σ|e−a|/Σa; <=10%: share of the step time "
          "in ops within 10 %;\n noise: the same for a second trace of the re-measured placement; mem/op: "
          "per-op memory deviation; peak err: replayed vs measured one-device peak at the large batch)\n")


def _accuracy_checks(rows: list[dict[str, object]]) -> list[str]:
    """PASS/MISS lines of the accuracy targets, per zoo model and estimator."""
    checks = []
    for r in rows:
        floor = r["noise"]["mean"]
        for est, f in r["estimators"].items():
            if est == "one-device":
                continue
            where = f"{r['model']} [{est}]"
            checks.append(f"{'PASS' if f['weighted'] <= WEIGHTED_TARGET else 'MISS'} {where}: time-weighted "
                          f"deviation {f['weighted'] * 100:.1f}% (target <= {WEIGHTED_TARGET:.0%})")
            ok = f["mean"] <= FLOOR_RATIO_TARGET * floor
            checks.append(f"{'PASS' if ok else 'MISS'} {where}: per-op mean time deviation "
                          f"{f['mean'] * 100:.1f}% = {f['mean'] / floor:.2f}x the noise floor "
                          f"{floor * 100:.1f}% (target <= {FLOOR_RATIO_TARGET}x)")
            checks.append(f"{'PASS' if f['memory_mean'] <= MEMORY_TARGET else 'MISS'} {where}: mean memory "
                          f"deviation {f['memory_mean'] * 100:.2f}% (target <= {MEMORY_TARGET:.0%})")
            checks.append(f"{'PASS' if abs(f['peak_error']) <= PEAK_TARGET else 'MISS'} {where}: one-device "
                          f"peak at batch {LARGE_BATCH} within {f['peak_error'] * 100:+.1f}% (target <= "
                          f"{PEAK_TARGET:.0%})")
    return checks


PEAK_BATCHES = (8, 16, 32)


def peak_estimation(models: list[str], all_fits: dict[str, object], traced: int) -> list[dict[str, object]]:
    """Predicted vs measured single-device peak memory per zoo model and batch size (bytes).

    Measured: TensorFlow's allocation records of ``traced`` steps on one device (the largest).
    Predicted two ways: the liveness replay of the graph with the costs and aliases measured at
    that batch (the memory model alone), and of the graph Standard Evaluation predicts from the
    small-batch fits (what the placers see before anything runs at that batch).
    """
    rows = []
    for name in models:
        model, fits = get_model(name), all_fits[name]
        for batch in PEAK_BATCHES:
            _say(f"{name}: measuring the one-device peak at batch {batch}")
            step = build_training_step(model, batch)
            trace = trace_step(step, traced_steps=traced)
            measured = max(trace.peak_bytes.values())
            replayed = one_device_peak_bytes(graph_from_step(step, trace_costs(trace), aliases=trace.aliases))
            estimated = one_device_peak_bytes(graph_from_step(step, fits.predict_costs(batch),
                                                              aliases=fits.output_aliases))
            rows.append({"model": name, "batch": batch, "measured_bytes": measured,
                         "predicted_from_measured_costs_bytes": replayed,
                         "predicted_from_fits_bytes": estimated,
                         "error_measured_costs": replayed / measured - 1.0,
                         "error_fits": estimated / measured - 1.0})
    return rows


def _print_peak_table(rows: list[dict[str, object]]) -> None:
    """The peak-estimation table."""
    print(f"Single-device peak memory: TensorFlow's allocation records vs our liveness replay (fits from "
          f"batches {list(SMALL_BATCHES)})")
    print(f"{'model':<18} {'batch':>6} {'measured':>11} {'replay(meas)':>13} {'err':>7} {'replay(fits)':>13} "
          f"{'err':>7}")
    for r in rows:
        print(f"{r['model']:<18} {r['batch']:>6} {format_bytes(r['measured_bytes']):>11} "
              f"{format_bytes(r['predicted_from_measured_costs_bytes']):>13} "
              f"{r['error_measured_costs'] * 100:>+6.1f}% {format_bytes(r['predicted_from_fits_bytes']):>13} "
              f"{r['error_fits'] * 100:>+6.1f}%")
    print()


def fidelity(measured: dict[str, object], steps: int) -> list[dict[str, object]]:
    """Simulated vs measured step time of every placer on each fidelity model."""
    rows = []
    for name in FIDELITY_MODELS:
        if name not in measured:
            continue
        model, graph, cluster = measured[name]
        points = []
        for placer in FIDELITY_PLACERS:
            placement = place(graph, cluster, placer, params_for(placer, {}))
            assignment = dict(zip(graph.node_names, placement.assignment.tolist(), strict=True))
            _say(f"{name}: validating {placer}")
            run = validate(model, LARGE_BATCH, assignment, DEVICES, warmup_steps=5, steps=steps)
            points.append({"placer": placer, "simulated_us": placement.predicted_step_time_us,
                           "measured_us": run.mean_s * 1e6, "oom": placement.oom})
        sim = [p["simulated_us"] for p in points]
        real = [p["measured_us"] for p in points]
        rho = float(spearmanr(sim, real).statistic) if len(set(sim)) > 1 else float("nan")
        rows.append({"model": name, "spearman": rho, "points": points})
    return rows


#: The paper's Table "average single-step training time" on 4 GPUs (seconds, measured; None = OOM).
PAPER_STEP_S = {
    "inception_v3": {"metis": None, "m-topo": 3.100, "m-etf": 10.548, "m-sct": 7.610, "order-place": 2.931,
                     "celeritas": 2.859},
    "nmt": {"metis": None, "m-topo": None, "m-etf": None, "m-sct": None, "order-place": 9.117,
            "celeritas": 9.099},
    "transformer": {"metis": None, "m-topo": None, "m-etf": 8.613, "m-sct": 8.411, "order-place": 6.935,
                    "celeritas": 6.536},
    "tensor_holography": {"metis": 6.591, "m-topo": 2.220, "m-etf": 6.376, "m-sct": 6.013,
                          "order-place": 1.520, "celeritas": 1.461},
}
PAPER_PLACERS = ("metis", "m-topo", "m-etf", "m-sct", "order-place", "celeritas")


def paper_scale(models: list[str]) -> list[dict[str, object]]:
    """Training steps at the paper's configuration and batch size, with analytical V100 costs and
    liveness fields, placed by every placer of the paper's table on 4 × 32 GiB V100s (the paper's
    testbed); nothing runs."""
    rows = []
    spec = parse_cost_source("analytical:v100")
    for name in models:
        entry = ZOO[name]
        start = time.perf_counter()
        _say(f"building {name} at the paper's configuration, batch {entry.paper_batch_size}")
        step = build_training_step(get_model(name, paper=True), entry.paper_batch_size)
        graph = graph_from_step(step, analytical_costs(step.step_graph_def(), spec),
                                aliases=view_aliases(step))
        built = time.perf_counter() - start
        cluster = Cluster.homogeneous(DEVICES, spec.memory_bytes)
        _say(f"placing {name} with {', '.join(PAPER_PLACERS)}")
        placements = {p: place(graph, cluster, p) for p in PAPER_PLACERS}
        placement = placements["celeritas"]
        rows.append({"model": name, "batch": entry.paper_batch_size, "ops": graph.num_nodes,
                     "paper_ops": PAPER_NODES[name], "build_seconds": built,
                     "memory_bytes": graph.total_memory_bytes, "ccr": ccr(graph, cluster),
                     "single_device_us": placement.single_device_time_us,
                     "single_device_peak_bytes": placement.single_device_peak_memory_bytes,
                     "celeritas_us": placement.predicted_step_time_us, "oom": placement.oom,
                     "placement_seconds": placement.placement_seconds,
                     "placers": {p: {"step_us": pl.predicted_step_time_us, "oom": pl.oom,
                                     "peak_bytes": [float(x) for x in pl.device_peak_memory_bytes],
                                     "paper_step_s": PAPER_STEP_S[name][p]}
                                 for p, pl in placements.items()}})
    return rows


PAPER_DEVICE_BYTES = 32 * 2**30


def _print_paper_table(rows: list[dict[str, object]]) -> None:
    """Every placer's simulated step (analytical V100 costs) and fullest-device peak, next to the
    paper's measured step times."""
    print("Paper's Table on 4 x 32 GiB: ours simulated with analytical V100 costs (peak of the fullest "
          "device) | the paper's measured step")
    print(f"{'model':<18}" + "".join(f"{p:>29}" for p in PAPER_PLACERS))
    for r in rows:
        cells = []
        for p in PAPER_PLACERS:
            f = r["placers"][p]
            ours = "OOM" if f["oom"] else f"{f['step_us'] / 1e6:.2f} s"
            theirs = "OOM" if f["paper_step_s"] is None else f"{f['paper_step_s']:.2f} s"
            cells.append(f"{ours:>7} {format_bytes(max(f['peak_bytes'])):>9} | {theirs:>7}")
        print(f"{r['model']:<18}" + "".join(f"{c:>29}" for c in cells))
    print()


def main(argv: list[str] | None = None) -> int:
    """Run the three parts and print their tables and PASS/MISS lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo models")
    parser.add_argument("--traced-steps", type=int, default=5, help="traced steps per measurement")
    parser.add_argument("--max-traced-steps", type=int, default=20,
                        help="most traced steps per profiled batch for the chosen estimators (default 20)")
    parser.add_argument("--steps", type=int, default=50, help="timed validation steps")
    parser.add_argument("--skip-paper-counts", action="store_true", help="skip the paper-scale graphs")
    parser.add_argument("--only-accuracy", action="store_true",
                        help="run only the estimation-accuracy section (no peak table, fidelity or "
                             "paper scale)")
    parser.add_argument("--out", default="build/bench/tf.json")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    print("TensorFlow benchmark (CPU, logical devices)", file=sys.stderr)
    _say("calibrating transfers between two logical devices")
    calibration = calibrate_comm(2)
    comm = (calibration.slope_us_per_byte, calibration.intercept_us)
    acc_rows, measured, all_fits = accuracy(models, args.traced_steps, comm, args.max_traced_steps)
    rest = not args.only_accuracy
    peak_rows = peak_estimation(models, all_fits, args.traced_steps) if rest else []
    fid_rows = fidelity(measured, args.steps) if rest else []
    paper_models = [m for m in models if m in PAPER_NODES]
    count_rows = paper_scale(paper_models) if rest and not args.skip_paper_counts else []
    from op_identity import checks as identity_checks
    from op_identity import op_identity, print_table

    identity_rows = op_identity(models, LARGE_BATCH) if rest else []  # bench/op_identity.py

    _print_accuracy(acc_rows, comm)
    for r in fid_rows:
        print(f"Simulator fidelity on {r['model']}: Spearman {r['spearman']:.3f}")
        for p in r["points"]:
            print(f"  {p['placer']:<12} simulated {p['simulated_us'] / 1e3:>9.3f} ms   measured "
                  f"{p['measured_us'] / 1e3:>9.3f} ms{'   (OOM in the model)' if p['oom'] else ''}")
    print()
    if peak_rows:
        _print_peak_table(peak_rows)
    if count_rows:
        print("Paper scale: the paper's configurations and batch sizes, analytical V100 costs, Celeritas on "
              "4 x 32 GiB")
        print(f"{'model':<18} {'batch':>6} {'ops':>8} {'paper':>8} {'memory':>10} {'CCR':>7} {'single':>11} "
              f"{'celeritas':>11} {'OOM':>4} {'place s':>8}")
        for r in count_rows:
            print(f"{r['model']:<18} {r['batch']:>6} {r['ops']:>8,} {r['paper_ops']:>8,} "
                  f"{format_bytes(r['memory_bytes']):>10} {r['ccr']:>7.2f} "
                  f"{format_us(r['single_device_us']):>11} "
                  f"{format_us(r['celeritas_us']):>11} {'yes' if r['oom'] else 'no':>4} "
                  f"{r['placement_seconds']:>8.3f}")
        print()
        _print_paper_table(count_rows)
    checks = _accuracy_checks(acc_rows)
    for r in peak_rows:
        worst = max(abs(r["error_fits"]), abs(r["error_measured_costs"]))
        checks.append(f"{'PASS' if worst <= PEAK_TARGET else 'MISS'} {r['model']} batch {r['batch']}: "
                      f"predicted one-device peak within {worst * 100:.1f}% of TensorFlow's "
                      f"(target <= {PEAK_TARGET:.0%})")
    for r in fid_rows:
        ok = np.isfinite(r["spearman"]) and r["spearman"] >= SPEARMAN_TARGET
        checks.append(f"{'PASS' if ok else 'MISS'} {r['model']}: Spearman simulated vs measured "
                      f"{r['spearman']:.3f} (target >= {SPEARMAN_TARGET})")
    for r in count_rows:
        fits = r["single_device_peak_bytes"] <= DEVICES * PAPER_DEVICE_BYTES
        checks.append(f"{'PASS' if not r['oom'] else 'MISS'} {r['model']}: Celeritas fits 4 x 32 GiB by "
                      f"replayed peak (one-device peak {format_bytes(r['single_device_peak_bytes'])}"
                      f"{'' if fits else ', more than the 4 devices hold'})")
    if identity_rows:
        print_table(identity_rows)
        checks += identity_checks(identity_rows)
    print("\n".join(checks))
    write_json_atomic(Path(args.out), {"accuracy": acc_rows, "peak_memory": peak_rows, "fidelity": fid_rows,
                                       "node_counts": count_rows, "op_identity": identity_rows,
                                       "checks": checks}, indent=1)
    print(f"\nwrote {args.out}, {CDF_FIGURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
