"""TensorFlow benchmark: Standard Evaluation accuracy, simulator fidelity and paper-scale node counts.

1. **Estimation accuracy** (the paper's "Estimation Accuracy"), per zoo model at CPU scale (its
   small configuration): profile the training step at small batch sizes on one device, fit per-op
   lines, predict a larger batch, re-measure it placed sequentially (CPD-TOPO) on 4 logical CPU
   devices that each hold 30 % of the predicted memory, and report the mean per-op relative
   deviation of memory and of time. Targets: memory <= 2 %, time <= 8 %.
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
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from celeritas_core.cluster import Cluster  # noqa: E402
from celeritas_core.compare import params_for  # noqa: E402
from celeritas_core.formats import write_json_atomic  # noqa: E402
from celeritas_core.levels import ccr  # noqa: E402
from celeritas_core.memory import one_device_peak_bytes  # noqa: E402
from celeritas_core.placers import place  # noqa: E402
from celeritas_core.plots import deviation_cdf_chart  # noqa: E402
from celeritas_core.regression import relative_deviation  # noqa: E402
from celeritas_core.units import format_bytes, format_us  # noqa: E402
from celeritas_tf.analytical import analytical_costs, parse_cost_source  # noqa: E402
from celeritas_tf.calibrate import calibrate_comm  # noqa: E402
from celeritas_tf.evaluation import (  # noqa: E402
    fits_from_profile,
    profile_document,
    profile_small_batches,
    remeasure,
    validate,
)
from celeritas_tf.extract import graph_from_step, view_aliases  # noqa: E402
from celeritas_tf.models import ZOO, get_model  # noqa: E402
from celeritas_tf.profile import trace_costs, trace_step  # noqa: E402
from celeritas_tf.step import build_training_step  # noqa: E402

PAPER_NODES = {"inception_v3": 6332, "nmt": 25463, "transformer": 36352, "tensor_holography": 3810}
MODELS = ("mlp", "tensor_holography", "inception_v3", "nmt", "transformer")
SMALL_BATCHES = (2, 4, 8)
LARGE_BATCH = 32
DEVICES = 4
DEVICE_SHARE = 0.30
FIDELITY_MODELS = ("tensor_holography", "nmt")
FIDELITY_PLACERS = ("single", "metis", "m-topo", "m-etf", "m-sct", "order-place", "celeritas")
MEMORY_TARGET, TIME_TARGET, SPEARMAN_TARGET = 0.02, 0.08, 0.8
CDF_FIGURE = Path("build/bench/estimation_cdf.png")


def _say(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def accuracy(models: list[str], traced: int, comm: tuple[float, float]) -> tuple[list[dict[str, object]],
                                                                                   dict[str, object]]:
    """Estimation accuracy per model; also returns each model's measured graph and cluster.

    Next to the paper's per-op mean it reports the time-weighted deviation (Σ|e − a| / Σa) and the
    *noise floor*: the per-op deviation between two traces of the same re-measured placement,
    which no estimate can beat.
    """
    rows, measured, curves, all_fits = [], {}, [], {}
    for name in models:
        model = get_model(name)
        start = time.perf_counter()
        traces = profile_small_batches(model, SMALL_BATCHES, traced_steps=traced, progress=_say)
        fits = fits_from_profile(profile_document(model, traces))  # as `celeritas fit` and the pipeline
        all_fits[name] = fits
        predicted_memory = float(fits.predict(LARGE_BATCH)[1].sum())
        cluster = Cluster.homogeneous(DEVICES, DEVICE_SHARE * predicted_memory,
                                      slope_us_per_byte=comm[0], intercept_us=comm[1])
        result = remeasure(model, LARGE_BATCH, fits, cluster, traced_steps=traced, progress=_say)
        mem, tim = result.accuracy()
        again = trace_step(build_training_step(model, LARGE_BATCH), num_devices=DEVICES, traced_steps=traced,
                           assignment=dict(zip(result.measured.node_names, result.assignment.tolist(),
                                               strict=True)))
        first = dict(zip(result.measured.node_names, result.measured.time_us.tolist(), strict=True))
        noise = relative_deviation("time", again.time_us, first)
        est = dict(zip(result.estimated.node_names, result.estimated.time_us.tolist(), strict=True))
        common = list(tim.names)
        weighted = (sum(abs(est[n] - first[n]) for n in common) / sum(first[n] for n in common)
                    if common else float("nan"))
        curves.append((name, mem, tim))
        rows.append({"model": name, "ops": result.measured.num_nodes, "memory_dev": mem.mean,
                     "memory_ops": len(mem.names), "time_dev": tim.mean, "time_ops": len(tim.names),
                     "time_dev_weighted": weighted, "time_noise_floor": noise.mean,
                     "memory_cdf": mem.cdf(), "time_cdf": tim.cdf(),
                     "seconds": time.perf_counter() - start})
        measured[name] = (model, result.measured, cluster)
    deviation_cdf_chart(curves, CDF_FIGURE, title=f"Standard Evaluation: batch {list(SMALL_BATCHES)} -> "
                        f"{LARGE_BATCH}, re-measured on {DEVICES} logical CPU devices")
    return rows, measured, all_fits


PEAK_BATCHES = (8, 16, 32)
PEAK_TARGET = 0.10


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
    parser.add_argument("--steps", type=int, default=50, help="timed validation steps")
    parser.add_argument("--skip-paper-counts", action="store_true", help="skip the paper-scale graphs")
    parser.add_argument("--out", default="build/bench/tf.json")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    print("TensorFlow benchmark (CPU, logical devices)", file=sys.stderr)
    _say("calibrating transfers between two logical devices")
    calibration = calibrate_comm(2)
    comm = (calibration.slope_us_per_byte, calibration.intercept_us)
    acc_rows, measured, all_fits = accuracy(models, args.traced_steps, comm)
    peak_rows = peak_estimation(models, all_fits, args.traced_steps)
    fid_rows = fidelity(measured, args.steps)
    count_rows = [] if args.skip_paper_counts else paper_scale([m for m in models if m in PAPER_NODES])
    from op_identity import checks as identity_checks
    from op_identity import op_identity, print_table

    identity_rows = op_identity(models, LARGE_BATCH)  # bench/op_identity.py

    print(f"Estimation accuracy: small batches {list(SMALL_BATCHES)} -> batch {LARGE_BATCH}, re-measured on "
          f"{DEVICES} logical CPU devices\n")
    print(f"transfer model (calibrated): {comm[0]:.3g} µs/B + {comm[1]:.3g} µs\n")
    print(f"{'model':<18} {'ops':>6} {'mem dev':>8} {'ops':>6} {'time dev':>9} {'ops':>6} {'weighted':>9} "
          f"{'noise':>7} {'mem<=5%':>8} {'time<=30%':>10}")
    for r in acc_rows:
        print(f"{r['model']:<18} {r['ops']:>6} {r['memory_dev'] * 100:>7.2f}% {r['memory_ops']:>6} "
              f"{r['time_dev'] * 100:>8.2f}% {r['time_ops']:>6} {r['time_dev_weighted'] * 100:>8.2f}% "
              f"{r['time_noise_floor'] * 100:>6.1f}% {r['memory_cdf'][0.05] * 100:>7.1f}% "
              f"{r['time_cdf'][0.3] * 100:>9.1f}%")
    print("(time dev: the paper's per-op mean; weighted: Σ|e−a|/Σa; noise: per-op deviation between two "
          "traces of the same placement)\n")
    for r in fid_rows:
        print(f"Simulator fidelity on {r['model']}: Spearman {r['spearman']:.3f}")
        for p in r["points"]:
            print(f"  {p['placer']:<12} simulated {p['simulated_us'] / 1e3:>9.3f} ms   measured "
                  f"{p['measured_us'] / 1e3:>9.3f} ms{'   (OOM in the model)' if p['oom'] else ''}")
    print()
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
    checks = []
    for r in acc_rows:
        checks.append(f"{'PASS' if r['memory_dev'] <= MEMORY_TARGET else 'MISS'} {r['model']}: mean memory "
                      f"deviation {r['memory_dev'] * 100:.2f}% (target <= {MEMORY_TARGET:.0%})")
        checks.append(f"{'PASS' if r['time_dev'] <= TIME_TARGET else 'MISS'} {r['model']}: mean time "
                      f"deviation {r['time_dev'] * 100:.2f}% (target <= {TIME_TARGET:.0%})")
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
