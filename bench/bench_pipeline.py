"""Pipelined micro-batch training benchmark: pipelined Celeritas against the best single-batch
placement and against the stage-level planners, on real models and paper-shaped training steps.

Graphs: the real-model family of ``bench/bench_real.py`` (Keras training steps at batch 32,
analytical V100 costs, extracted by ``celeritas graph`` in a subprocess and cached under
``build/bench/real/``) and the four paper-shaped training steps (``celeritas generate``'s
``tensor_holography``, ``inception_v3``, ``nmt``, ``transformer``). Instances: each graph on 4 and
8 identical devices holding 30 %, 45 % and 60 % of its one-device liveness peak (a split is
needed on every one). Per instance:

* **best single-batch**: the fastest fitting placement (replayed peak within every device) of the
  placers of ``bench/bench_quality.py`` (Celeritas and the baselines; the fastest overall when
  none fits);
* **pipelined Celeritas**: ``place --micro-batches auto --schedule auto``
  (:func:`celeritas_core.pipeline.plan.place_pipelined`): the step, ``M`` and schedule chosen,
  peak per device, placement seconds;
* **stage planners**: ``gpipe-even``, ``alpa-stages`` and ``pipedream``, each with
  ``--micro-batches auto`` (their own split at each ``M``, both schedules).

Targets (reported, not enforced; exit 0):

* (a) on the real-model family at 4 devices, pipelined Celeritas's step / the best single-batch
  step is <= 0.6 in geometric mean, and <= 1 on every instance;
* (b) pipelined Celeritas never more than 1 % slower than the fastest fitting stage planner;
* (c) every pipelined placement reported as fitting fits by its replayed peak (in-flight
  activations counted), and how many instances where no single-batch placement fits become
  feasible;
* (d) the 36,352-op paper-shaped transformer step places with ``--micro-batches auto`` in at most
  3 x the single-batch Celeritas placement's seconds (4 devices at 45 % of its one-device peak).

Figures go to ``build/bench/pipeline.json``. Run: ``make bench`` (or ``.venv/bin/python
bench/bench_pipeline.py --help``; ``--quick``: two real models and two paper-shaped steps on 4
devices at 45 %).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402  (after the BLAS pools are pinned)
from bench_quality import PLACER_NAMES, placer_of  # noqa: E402
from bench_real import DEFAULT_BATCH, extract  # noqa: E402
from real_models import MODELS  # noqa: E402

from celeritas_core import Cluster, Graph, place  # noqa: E402
from celeritas_core.generators.synthetic import paper_shaped_graph  # noqa: E402
from celeritas_core.graphs.placement import Placement  # noqa: E402
from celeritas_core.pipeline.microbatch import op_floor_us  # noqa: E402
from celeritas_core.pipeline.plan import (  # noqa: E402
    STAGE_PLANNERS,
    PipelineRequest,
    candidate_micro_batches,
    place_pipelined,
)
from celeritas_core.pipeline.roles import op_roles  # noqa: E402
from celeritas_core.placers import PLACERS  # noqa: E402
from celeritas_core.readwrite.formats import load_graph, write_json_atomic  # noqa: E402
from celeritas_core.readwrite.units import format_us  # noqa: E402
from celeritas_core.simulation.memory import one_device_peak_bytes  # noqa: E402

PAPER_MODELS = ("tensor_holography", "inception_v3", "nmt", "transformer")
DEVICES = (4, 8)
FRACTIONS = (0.30, 0.45, 0.60)
QUICK_REAL = ("vgg16", "transformer_encoder")
QUICK_PAPER = ("inception_v3", "transformer")
GEOMEAN_TARGET = 0.6
STAGE_TARGET = 1.01
SECONDS_TARGET = 3.0
Row = dict[str, Any]


def single_batch(graph: Graph, cluster: Cluster) -> tuple[Row, dict[str, Row]]:
    """Every single-batch placer's step and fit; the best (fastest fitting, else fastest)."""
    figures: dict[str, Row] = {}
    for label in PLACER_NAMES:
        name, params = placer_of(label)
        if name not in PLACERS:
            continue
        p = place(graph, cluster, name, params)
        figures[label] = {"step_us": float(p.predicted_step_time_us), "fits": not p.oom,
                          "seconds": float(p.placement_seconds), "cannot_fit": bool(p.cannot_fit)}
    fitting = {k: v for k, v in figures.items() if v["fits"]}
    pool = fitting or figures
    best = min(pool, key=lambda k: pool[k]["step_us"])
    return {"placer": best, **pool[best], "any_fits": bool(fitting)}, figures


def pipelined(graph: Graph, cluster: Cluster, placer: str) -> Row:
    """``placer`` pipelined with ``--micro-batches auto --schedule auto``: step, M, schedule, fit."""
    p = place_pipelined(graph, cluster, placer, request=PipelineRequest())
    return _pipelined_row(p, cluster)


def _pipelined_row(p: Placement, cluster: Cluster) -> Row:
    plan = p.pipeline
    if plan is None:  # one batch per step was fastest
        return {"step_us": float(p.predicted_step_time_us), "fits": not p.oom, "micro_batches": 1,
                "schedule": None, "seconds": float(p.placement_seconds),
                "peak_fraction": [float(x) for x in p.device_peak_memory_bytes / cluster.memory_bytes]}
    return {"step_us": float(plan.predicted_step_time_us), "fits": not plan.oom,
            "micro_batches": plan.micro_batches, "schedule": plan.schedule,
            "seconds": float(p.placement_seconds),
            "peak_fraction": [float(x) for x in plan.device_peak_memory_bytes / cluster.memory_bytes],
            "chosen": p.extra.get("pipeline_search", {}).get("chosen")}


def ideal_step_us(graph: Graph, devices: int) -> float:
    """A bound no pipelined placement of ``graph`` on ``devices`` identical devices beats under the
    micro-batch scaling (docs/pipelining.md): for each ``M`` of ``auto``, the work of the step at
    ``M`` micro-batches (the per-op floor paid ``M`` times) spread evenly over the devices, times
    1F1B's ``(M + S − 1) / M`` fill and drain of ``S`` balanced stages (no transfers, no memory
    limit); the least, ``M = 1`` (the whole step in turn) included. A pipeline of balanced stages
    does no better; a single-batch placement that runs ops in parallel can."""
    roles = op_roles(graph)
    per = roles.per_micro_batch
    t = graph.time_us
    floor = np.minimum(t, op_floor_us(graph))
    best = float(t.sum())  # one batch through S balanced stages: (1 + S - 1) / 1 x work / S
    for m in candidate_micro_batches(int(graph.meta.get("batch_size", 32)), devices, None):
        work = float(t[~per].sum() + (floor[per] * m + (t[per] - floor[per])).sum())
        best = min(best, (m + devices - 1) / m * work / devices)
    return best


def run_instance(graph: Graph, family: str, devices: int, fraction: float) -> Row:
    """Single-batch placers, pipelined Celeritas and the stage planners on one instance."""
    cluster = Cluster.homogeneous(devices, fraction * one_device_peak_bytes(graph))
    best, singles = single_batch(graph, cluster)
    piped = pipelined(graph, cluster, "celeritas")
    stages = {name: pipelined(graph, cluster, name) for name in STAGE_PLANNERS if name in PLACERS}
    fitting_stages = {k: v for k, v in stages.items() if v["fits"]}
    best_stage = min(fitting_stages, key=lambda k: fitting_stages[k]["step_us"]) if fitting_stages else None
    return {"graph": graph.name, "family": family, "ops": graph.num_nodes, "devices": devices,
            "fraction": fraction, "best_single": best, "single": singles, "pipelined": piped,
            "stages": stages, "best_stage": best_stage,
            "ratio_vs_single": piped["step_us"] / best["step_us"] if piped["fits"] and best["fits"] else None,
            "ideal_step_us": ideal_step_us(graph, devices),
            "ratio_vs_stage": (piped["step_us"] / fitting_stages[best_stage]["step_us"]
                               if best_stage and piped["fits"] else None)}


def _name(r: Row) -> str:
    return f"{r['graph']} {r['devices']}×{r['fraction']:.0%}"


HEADER = (f"{'instance':<34}{'ops':>7}{'best single':>24}{'pipelined':>12}{'M, sched':>12}{'vs single':>10}"
          f"{'best stage':>24}{'vs stage':>9}{'piped s':>8}")


def format_row(r: Row) -> str:
    """One instance's line (:data:`HEADER`)."""
    b, p = r["best_single"], r["pipelined"]
    single = f"{format_us(b['step_us'])} {b['placer']}{'' if b['fits'] else ' OOM'}"
    piped = format_us(p["step_us"]) + ("" if p["fits"] else " OOM")
    how = f"{p['micro_batches']}, {p['schedule'] or 'one'}"
    stage = "-"
    if r["best_stage"]:
        stage = f"{format_us(r['stages'][r['best_stage']]['step_us'])} {r['best_stage']}"
    vs_single = "-" if r["ratio_vs_single"] is None else f"{r['ratio_vs_single']:.3f}"
    vs_stage = "-" if r["ratio_vs_stage"] is None else f"{r['ratio_vs_stage']:.3f}"
    return (f"{_name(r)[:33]:<34}{r['ops']:>7,}{single:>24}{piped:>12}{how:>12}{vs_single:>10}{stage:>24}"
            f"{vs_stage:>9}{p['seconds']:>8.2f}")


def targets(rows: Sequence[Row], seconds: Row | None) -> list[str]:
    """PASS/MISS lines for targets (a)–(d)."""
    lines = []
    real4 = [r for r in rows
             if r["family"] == "real" and r["devices"] == 4 and r["ratio_vs_single"] is not None]
    if real4:
        geo = math.exp(sum(math.log(r["ratio_vs_single"]) for r in real4) / len(real4))
        worst = max(real4, key=lambda r: r["ratio_vs_single"])
        ok = geo <= GEOMEAN_TARGET and worst["ratio_vs_single"] <= 1.0
        ideal = math.exp(sum(math.log(min(1.0, r["ideal_step_us"] / r["best_single"]["step_us"]))
                             for r in real4) / len(real4))
        lines.append(f"{'PASS' if ok else 'MISS'} (a) real models at 4 devices: pipelined / best "
                     f"single-batch geomean {geo:.3f} (target <= {GEOMEAN_TARGET}), worst "
                     f"{worst['ratio_vs_single']:.3f} on {_name(worst)} (target <= 1), {len(real4)} "
                     f"instances where both fit; the ideal pipeline's bound (ideal_step_us) over the same: "
                     f"geomean {ideal:.3f}")
    else:
        lines.append("SKIP (a) no real-model instance at 4 devices where both fit")
    rated = [r for r in rows if r["ratio_vs_stage"] is not None]
    if rated:
        worst = max(rated, key=lambda r: r["ratio_vs_stage"])
        over = [r for r in rated if r["ratio_vs_stage"] > STAGE_TARGET]
        lines.append(f"{'PASS' if not over else 'MISS'} (b) never more than {STAGE_TARGET - 1:.0%} slower "
                     f"than the fastest fitting stage planner: worst {worst['ratio_vs_stage']:.3f} on "
                     f"{_name(worst)} vs {worst['best_stage']} ({len(rated)} rated, {len(over)} over)")
    unfit = [r for r in rows if not r["best_single"]["any_fits"]]
    rescued = [r for r in unfit if r["pipelined"]["fits"]]
    bad = [r for r in rows if r["pipelined"]["fits"] and max(r["pipelined"]["peak_fraction"]) > 1.0]
    lines.append(f"{'PASS' if not bad else 'MISS'} (c) every pipelined placement reported as fitting fits by "
                 f"its replayed peak ({len(bad)} do not); no single-batch placement fits {len(unfit)} "
                 f"instances, pipelined Celeritas fits {len(rescued)} of them")
    if seconds is not None:
        ratio = seconds["pipelined_s"] / seconds["single_s"]
        lines.append(f"{'PASS' if ratio <= SECONDS_TARGET else 'MISS'} (d) {seconds['graph']} "
                     f"({seconds['ops']:,} ops) on 4 devices: --micro-batches auto placed in "
                     f"{seconds['pipelined_s']:.2f} s, {ratio:.2f}x the single-batch "
                     f"{seconds['single_s']:.2f} s (target <= {SECONDS_TARGET}x)")
    return lines


def seconds_36k(fraction: float = 0.45) -> Row:
    """Target (d): the paper-shaped transformer step (36,352 ops) on 4 devices, single batch and
    ``auto``."""
    graph = paper_shaped_graph("transformer", liveness=True)
    cluster = Cluster.homogeneous(4, fraction * one_device_peak_bytes(graph))
    single = place(graph, cluster)
    piped = place_pipelined(graph, cluster, request=PipelineRequest())
    return {"graph": graph.name, "ops": graph.num_nodes, "single_s": float(single.placement_seconds),
            "pipelined_s": float(piped.placement_seconds), "pipelined": _pipelined_row(piped, cluster)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (``--help``)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--real", help=f"comma-separated real models (default: all of {', '.join(MODELS)}; "
                                       "'none' for none)")
    parser.add_argument("--paper", help="comma-separated paper-shaped steps (default: "
                                        f"{', '.join(PAPER_MODELS)}; 'none' for none)")
    parser.add_argument("--devices", default=",".join(map(str, DEVICES)), help="device counts (default 4,8)")
    parser.add_argument("--fractions", default=",".join(map(str, FRACTIONS)),
                        help="device memory as fractions of the one-device peak (default 0.3,0.45,0.6)")
    parser.add_argument("--quick", action="store_true",
                        help="two real models and two paper-shaped steps on 4 devices at 45 %% (flags "
                             "given still win)")
    parser.add_argument("--no-seconds", action="store_true", help="skip target (d) (the 36k-op timing)")
    parser.add_argument("--cache-dir", default="build/bench/real", help="extracted real-model graphs")
    parser.add_argument("--out", default="build/bench/pipeline.json", help="figures JSON")
    args = parser.parse_args(argv)

    def names(text: str | None, default: Sequence[str], known: Sequence[str], flag: str) -> list[str]:
        if text is None:
            return list(default)
        if text == "none":
            return []
        out = [t.strip() for t in text.split(",") if t.strip()]
        for t in out:
            if t not in known:
                parser.error(f"{flag}: unknown {t!r} (known: {', '.join(known)})")
        return out

    args.real = names(args.real, QUICK_REAL if args.quick else MODELS, MODELS, "--real")
    args.paper = names(args.paper, QUICK_PAPER if args.quick else PAPER_MODELS, PAPER_MODELS, "--paper")
    try:
        args.devices = [int(x) for x in ("4" if args.quick else args.devices).split(",")]
        args.fractions = [float(x) for x in ("0.45" if args.quick else args.fractions).split(",")]
    except ValueError:
        parser.error("--devices and --fractions take comma-separated numbers")
    return args


def main(argv: list[str] | None = None) -> int:
    """Place every instance, print the table and targets, write the JSON; exit 0."""
    args = parse_args(argv)
    graphs: list[tuple[str, Graph]] = []
    for model in args.real:
        print(f"  extracting {model} ...", file=sys.stderr, flush=True)
        graphs.append(("real", load_graph(extract(model, DEFAULT_BATCH, Path(args.cache_dir)).path)))
    graphs += [("paper", paper_shaped_graph(m, liveness=True)) for m in args.paper]
    rows = []
    start = time.perf_counter()
    for family, graph in graphs:
        for devices in args.devices:
            for fraction in args.fractions:
                print(f"  {graph.name} {devices}×{fraction:.0%} ({time.perf_counter() - start:.0f} s)",
                      file=sys.stderr, flush=True)
                rows.append(run_instance(graph, family, devices, fraction))
    seconds = None if args.no_seconds else seconds_36k()
    print(f"Pipelined micro-batch benchmark: {len(rows)} instances in {time.perf_counter() - start:.0f} s\n")
    print(HEADER)
    for r in rows:
        print(format_row(r))
    print()
    checks = targets(rows, seconds)
    for line in checks:
        print(line)
    write_json_atomic(args.out, {"rows": rows, "seconds_36k": seconds, "targets": checks}, indent=1)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
