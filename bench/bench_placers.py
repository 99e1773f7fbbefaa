"""Placer benchmark: the paper's Table "average single-step training time" on the synthetic graphs.

Runs Metis, m-TOPO, m-ETF, m-SCT, Order-Place and Celeritas on the four paper-shaped graphs
(``celeritas_core.generators.synthetic``) over 4 identical devices that each hold 30 % of the model's memory
(the model does not fit on one device, as in the paper), and prints

* the simulated step time of each placer (``OOM`` marks a placement that exceeds a device's
  memory, as the paper's table does; its best-effort time is in the JSON), the single-device
  time and lower bound, and Celeritas's speed-up over the second best placer without OOM;
* the placement-generation time of each placer (seconds, wall clock, one core);

then checks the issue's targets: Celeritas fastest on every graph, and at least 20x faster to
place than m-SCT on every graph of >= 6,000 nodes. Figures go to ``build/bench/placers.json``.

Run: ``make bench`` (or ``.venv/bin/python bench/bench_placers.py --help``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# one core, as the targets are stated: pin BLAS pools before numpy loads
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from bench_quality import ENFORCED  # noqa: E402
from machine import measured_on  # noqa: E402

from celeritas_core.generators.synthetic import PAPER_MODELS, paper_shaped_graph  # noqa: E402
from celeritas_core.graphs.cluster import Cluster  # noqa: E402
from celeritas_core.placers.compare import compare_placers  # noqa: E402
from celeritas_core.readwrite.formats import write_json_atomic  # noqa: E402
from celeritas_core.readwrite.units import format_us  # noqa: E402

PLACERS = ("metis", "m-topo", "m-etf", "m-sct", "order-place", "celeritas")
DEVICES = 4
DEVICE_SHARE = 0.30
SCT_RATIO_TARGET = 20.0
SCT_RATIO_MIN_NODES = 6000


def run(models: list[str], seed: int, placers: tuple[str, ...]) -> list[dict[str, object]]:
    """Compare the placers on each model; print progress on stderr; return one row per model."""
    rows = []
    for model in models:
        graph = paper_shaped_graph(model, seed=seed)
        cluster = Cluster.homogeneous(DEVICES, DEVICE_SHARE * graph.total_memory_bytes)
        print(f"  {model}: {graph.num_nodes:,} nodes ...", file=sys.stderr, flush=True)
        comparison = compare_placers(graph, cluster, placers)
        for placement in comparison.placements:
            ENFORCED.check(graph, cluster, placement, f"{model} {placement.placer}")
        rows.append({
            "model": model,
            "nodes": graph.num_nodes,
            "single_device_time_us": comparison.single_device_time_us,
            "lower_bound_us": comparison.lower_bound_us,
            "placers": {p.placer: {"step_time_us": p.predicted_step_time_us, "oom": p.oom,
                                   "oom_devices": list(p.oom_devices),
                                   "placement_seconds": p.placement_seconds,
                                   "coarse_nodes": p.coarse_nodes}
                        for p in comparison.placements},
        })
    return rows


def _speedup_vs_second_best(row: dict[str, object]) -> tuple[float | None, str]:
    """Celeritas's step-time gain over the fastest other placer without OOM (0.078 = 7.8 %)."""
    figures = row["placers"]
    others = {name: f["step_time_us"] for name, f in figures.items() if name != "celeritas" and not f["oom"]}
    if not others or figures["celeritas"]["oom"]:
        return None, ""
    second = min(others, key=others.get)
    return others[second] / figures["celeritas"]["step_time_us"] - 1.0, second


def report(rows: list[dict[str, object]], placers: tuple[str, ...]) -> list[str]:
    """Print both tables; return the target lines (PASS/MISS)."""
    width = 13
    head = f"{'model':<18}" + "".join(f"{p:>{width}}" for p in placers) + f"{'speed-up':>10}  vs"
    print(f"Average single-step time (simulated), {DEVICES} devices x {DEVICE_SHARE:.0%} of model memory")
    print()
    print(head)
    print("-" * len(head))
    for row in rows:
        cells = "".join(f"{_cell_from(row, p):>{width}}" for p in placers)
        gain, second = _speedup_vs_second_best(row)
        gain_text = f"{gain * 100:+.1f}%" if gain is not None else "-"
        print(f"{row['model']:<18}{cells}{gain_text:>10}  {second}")
    print()
    print(f"{'model':<18}{'single dev':>13}{'lower bound':>13}")
    for row in rows:
        print(f"{row['model']:<18}{format_us(row['single_device_time_us']):>13}"
              f"{format_us(row['lower_bound_us']):>13}")
    print()
    print("Placement time (seconds)")
    print()
    head = f"{'model':<18}" + "".join(f"{p:>{width}}" for p in placers)
    print(head)
    print("-" * len(head))
    for row in rows:
        print(f"{row['model']:<18}" + "".join(
            f"{row['placers'][p]['placement_seconds']:>{width}.3f}" for p in placers))
    print()
    checks = []
    for row in rows:
        gain, second = _speedup_vs_second_best(row)
        ok = gain is not None and gain > 0
        detail = f"{gain * 100:+.1f}% vs {second}" if gain is not None else "Celeritas OOM or no rival fits"
        checks.append(f"{'PASS' if ok else 'MISS'} {row['model']}: Celeritas fastest ({detail})")
    for row in rows:
        if row["nodes"] < SCT_RATIO_MIN_NODES or "m-sct" not in row["placers"]:
            continue
        figures = row["placers"]
        ratio = figures["m-sct"]["placement_seconds"] / figures["celeritas"]["placement_seconds"]
        checks.append(f"{'PASS' if ratio >= SCT_RATIO_TARGET else 'MISS'} {row['model']}: placement "
                      f"{ratio:.1f}x faster than m-SCT (target >= {SCT_RATIO_TARGET:g}x)")
    return checks


def _cell_from(row: dict[str, object], placer: str) -> str:
    f = row["placers"][placer]
    return "OOM" if f["oom"] else format_us(f["step_time_us"])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its tables; exit 0 (targets are reported, not enforced)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(PAPER_MODELS),
                        help="comma-separated models (default: all four)")
    parser.add_argument("--placers", default=",".join(PLACERS), help="comma-separated placers")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default: %(default)s)")
    parser.add_argument("--out", default="build/bench/placers.json", help="figures JSON")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in PAPER_MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r} (known: {', '.join(PAPER_MODELS)})")
    placers = tuple(p.strip() for p in args.placers.split(",") if p.strip())
    if "celeritas" not in placers:
        parser.error("--placers must include celeritas")
    print(f"Placer benchmark, seed {args.seed}", file=sys.stderr)
    where = measured_on()
    rows = run(models, args.seed, placers)
    checks = [*report(rows, placers), ENFORCED.line()]
    for line in checks:
        print(line)
    write_json_atomic(Path(args.out), {"measured_on": where, "devices": DEVICES, "device_share": DEVICE_SHARE,
                                       "seed": args.seed, "rows": rows, "checks": checks}, indent=1)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
