"""Engine benchmark: fusion and Adjusting Placement on the four paper-shaped synthetic graphs.

Prints, per graph: nodes, edges, CCR before/after fusion, coarse nodes, fusion seconds, placement
seconds (fusion + Adjusting Placement, the paper's placer with ``refine=0``; and the whole
``celeritas`` placer with its communication refinement), simulated step time of Celeritas, the
paper's Adjusting Placement alone and Order-Place, single-device time and lower bound; then checks
the issue's targets.
Cluster: 4 identical devices, each holding 30 % of the model's memory (the model does not fit on
one device), default transfer model. Timings are the median of ``--repeat`` runs on one core.

Run: ``make bench`` (or ``.venv/bin/python bench/bench_engine.py --help``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# one core, as the targets are stated: pin BLAS pools before numpy loads
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from celeritas_core.generators.synthetic import PAPER_MODELS, paper_shaped_graph  # noqa: E402
from celeritas_core.graphs.cluster import Cluster  # noqa: E402
from celeritas_core.graphs.levels import ccr  # noqa: E402
from celeritas_core.placers import place  # noqa: E402
from celeritas_core.placers.fusion import optimal_operation_fusion  # noqa: E402
from celeritas_core.readwrite.formats import write_json_atomic  # noqa: E402
from celeritas_core.readwrite.units import format_us  # noqa: E402

DEVICES = 4
DEVICE_SHARE = 0.30  # each device holds this fraction of the model's memory
TIME_TARGET_S = 1.0
NODE_REDUCTION_TARGET = 100.0
CCR_REDUCTION_TARGET = 5.0


def _median_time(fn, repeat: int) -> tuple[float, object]:
    times = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def run(models: list[str], repeat: int, seed: int) -> list[dict[str, object]]:
    """Benchmark each model; return one row of figures per model."""
    rows = []
    for model in models:
        graph = paper_shaped_graph(model, seed=seed)
        cluster = Cluster.homogeneous(DEVICES, DEVICE_SHARE * graph.total_memory_bytes)
        fusion_s, fusion = _median_time(lambda g=graph, c=cluster: optimal_operation_fusion(g, c), repeat)
        place_s, _ = _median_time(
            lambda g=graph, c=cluster: place(g, c, "celeritas", {"refine": 0}, evaluate=False), repeat)
        refined_s, _ = _median_time(
            lambda g=graph, c=cluster: place(g, c, "celeritas", evaluate=False), repeat)
        celeritas = place(graph, cluster, "celeritas")
        adjusting = place(graph, cluster, "celeritas", {"refine": 0})
        order = place(graph, cluster, "order-place")
        ccr_before = ccr(graph, cluster)
        ccr_after = ccr(fusion.coarse, cluster)
        rows.append({
            "model": model,
            "nodes": graph.num_nodes,
            "edges": graph.num_edges,
            "ccr_before": ccr_before,
            "ccr_after": ccr_after,
            "coarse_nodes": fusion.num_clusters,
            "node_reduction": graph.num_nodes / fusion.num_clusters,
            "ccr_reduction": ccr_before / ccr_after,
            "fusion_s": fusion_s,
            "placement_s": place_s,
            "refined_placement_s": refined_s,
            "celeritas_step_us": celeritas.predicted_step_time_us,
            "adjusting_step_us": adjusting.predicted_step_time_us,
            "celeritas_chosen": celeritas.extra.get("chosen"),
            "order_place_step_us": order.predicted_step_time_us,
            "single_device_us": celeritas.single_device_time_us,
            "lower_bound_us": celeritas.lower_bound_us,
            "celeritas_oom": celeritas.oom,
            "order_place_oom": order.oom,
        })
    return rows


def print_table(rows: list[dict[str, object]]) -> None:
    """Print the figures as two fixed-width tables."""
    head = (f"{'model':<18} {'nodes':>7} {'edges':>7} {'CCR':>8} {'CCR fused':>9} {'coarse':>6} "
            f"{'fusion s':>9} {'F+AP s':>7} {'full s':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:<18} {r['nodes']:>7,} {r['edges']:>7,} {r['ccr_before']:>8.2f} "
              f"{r['ccr_after']:>9.2f} {r['coarse_nodes']:>6} {r['fusion_s']:>9.3f} {r['placement_s']:>7.3f} "
              f"{r['refined_placement_s']:>7.3f}")
    print("(F+AP: fusion + Adjusting Placement, the paper's placer, refine=0; full: the celeritas placer "
          "with its communication refinement)")
    print()
    head = (f"{'model':<18} {'celeritas':>12} {'paper AP':>12} {'order-place':>12} {'single dev':>12} "
            f"{'lower bound':>12} {'speed-up':>8} {'OOM':>5}")
    print(head)
    print("-" * len(head))
    for r in rows:
        oom = "yes" if r["celeritas_oom"] else "no"
        print(f"{r['model']:<18} {format_us(r['celeritas_step_us']):>12} "
              f"{format_us(r['adjusting_step_us']):>12} "
              f"{format_us(r['order_place_step_us']):>12} {format_us(r['single_device_us']):>12} "
              f"{format_us(r['lower_bound_us']):>12} "
              f"{r['single_device_us'] / r['celeritas_step_us']:>7.2f}x {oom:>5}")


def check_targets(rows: list[dict[str, object]]) -> list[str]:
    """Return one line per target, PASS or MISS, with the measured figure."""
    lines = []
    for r in rows:
        if r["nodes"] >= 36000:
            ok = r["placement_s"] <= TIME_TARGET_S
            lines.append(f"{'PASS' if ok else 'MISS'} {r['model']}: fusion + Adjusting Placement "
                         f"{r['placement_s']:.3f} s (target <= {TIME_TARGET_S} s)")
            ok = r["refined_placement_s"] <= TIME_TARGET_S
            lines.append(f"{'PASS' if ok else 'MISS'} {r['model']}: whole celeritas placer with refinement "
                         f"{r['refined_placement_s']:.3f} s (target <= {TIME_TARGET_S} s)")
        ok = r["node_reduction"] >= NODE_REDUCTION_TARGET
        lines.append(f"{'PASS' if ok else 'MISS'} {r['model']}: nodes reduced {r['node_reduction']:.1f}x "
                     f"(target >= {NODE_REDUCTION_TARGET:g}x)")
        ok = r["ccr_reduction"] >= CCR_REDUCTION_TARGET
        lines.append(f"{'PASS' if ok else 'MISS'} {r['model']}: CCR reduced {r['ccr_reduction']:.1f}x "
                     f"(target >= {CCR_REDUCTION_TARGET:g}x)")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the tables and target checks, write build/bench/engine.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(PAPER_MODELS),
                        help="comma-separated models (default: all four)")
    parser.add_argument("--repeat", type=int, default=3, help="timing repetitions (median)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    parser.add_argument("--out", default="build/bench/engine.json", help="where to write the figures")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    rows = run(models, args.repeat, args.seed)
    print(f"Engine benchmark: {DEVICES} devices x {DEVICE_SHARE:.0%} of model memory, seed {args.seed}, "
          f"median of {args.repeat}\n")
    print_table(rows)
    print()
    lines = check_targets(rows)
    print("\n".join(lines))
    write_json_atomic(Path(args.out), {"rows": rows, "targets": lines}, indent=1)
    print(f"\nwrote {args.out}")
    return 1 if args.strict and any(line.startswith("MISS") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
