"""Enforced execution order benchmark: what the control edges of a placement's ``device_order`` cost
and whether TensorFlow follows them.

For every zoo model at its small configuration (``--models``) on 4 logical CPU devices:

1. **Placement**: trace the step once on one device for per-op costs, extract the graph and place
   it with Celeritas on 4 devices that each hold 40 % of its one-device peak (so that it spreads;
   the default transfer model). The recorded order is the placement's ``device_order``
   (every placer records it).
2. **Build time**: ``build_training_step`` + ``place_ops``, without and with
   :func:`celeritas_tf.order.enforce_device_order`, interleaved (the arm that builds first
   alternates; a garbage collection before each), median of ``--build-repeats``; the time of
   ``enforce_device_order`` alone; the edges added, the pairs a path already ordered, and the
   free ops (placeholders, variable handles) that no order holds. Target: with edges <= 1.2x
   without, checked on each enforced build against itself (its time over its time without
   ``enforce_device_order``, median), because builds of one model vary by 10-30 % from one to
   the next on a shared machine, more than the edges cost; the two arms' medians are printed
   beside it.
3. **Order agreement**: ``--traced-steps`` fully traced steps with the edges, and as many without;
   the share of the chained ops that ran on their device after their recorded predecessor
   (:func:`celeritas_tf.order.order_agreement`, the lowest of the traced steps). Target: 100 %
   with the edges on every model.
4. **Step time**: the placement free and enforced, timed as ``celeritas validate`` times it
   (:func:`celeritas_tf.evaluation.validate_interleaved`: interleaved blocks, a fresh session per arm,
   ``--warmup`` untimed steps, then its share of ``--steps``), medians and a two-sided
   Mann-Whitney test. Logical CPU devices share this machine's cores, so this says whether the
   edges cost anything measurable here, not what they do on GPUs; no target.

Run: ``make bench`` (or ``.venv/bin/python bench/bench_order.py --help``). Figures go to
``build/bench/order.json``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from scipy.stats import mannwhitneyu  # noqa: E402

from celeritas_core.defaults import ENFORCED_ORDER, FREE_ORDER  # noqa: E402
from celeritas_core.graphs.cluster import Cluster  # noqa: E402
from celeritas_core.graphs.graph import Graph  # noqa: E402
from celeritas_core.placers import place  # noqa: E402
from celeritas_core.readwrite.formats import (  # noqa: E402
    check_device_order,
    placement_device_order,
    placement_to_json,
    write_json_atomic,
)
from celeritas_core.simulation.memory import one_device_peak_bytes  # noqa: E402
from celeritas_tf.evaluation import PlacementOrder, validate_interleaved  # noqa: E402
from celeritas_tf.extract import graph_from_step  # noqa: E402
from celeritas_tf.models import ZOO, get_model  # noqa: E402
from celeritas_tf.order import (  # noqa: E402
    OrderEdges,
    enforce_device_order,
    executed_device_order,
    free_ops,
    order_agreement,
)
from celeritas_tf.profile import place_ops, trace_costs, trace_step  # noqa: E402
from celeritas_tf.spec import ModelSpec  # noqa: E402
from celeritas_tf.step import TrainingStep, build_training_step  # noqa: E402
from celeritas_tf.tf import run_options, session_config, step_device, tensorflow  # noqa: E402

DEVICES = 4
DEVICE_SHARE = 0.40
AGREEMENT_TARGET = 1.0
BUILD_RATIO_TARGET = 1.2
ARMS = (FREE_ORDER, ENFORCED_ORDER)


def _say(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def recorded_order(graph: Graph, cluster: Cluster) -> tuple[dict[str, int], tuple[tuple[str, ...], ...]]:
    """The Celeritas placement's assignment and its recorded per-device order (``device_order``)."""
    doc = placement_to_json(place(graph, cluster, "celeritas"))
    assignment = {str(k): int(v) for k, v in doc["assignment"].items()}
    order = placement_device_order(doc)
    if order is None:
        raise RuntimeError("the Celeritas placement records no device_order")
    check_device_order(order, assignment)
    return assignment, order


def _build(model: ModelSpec, batch: int, assignment: dict[str, int],
           order: Sequence[Sequence[str]] | None) -> tuple[TrainingStep, OrderEdges | None, float, float]:
    """A placed step (with the order's edges when ``order``), its build time and the enforcing's (s)."""
    start = time.perf_counter()
    step = build_training_step(model, batch)
    place_ops(step, assignment)
    edges, enforce_s = None, 0.0
    if order is not None:
        mark = time.perf_counter()
        edges = enforce_device_order(step, order)
        enforce_s = time.perf_counter() - mark
    return step, edges, time.perf_counter() - start, enforce_s


def _agreements(step: TrainingStep, order: Sequence[Sequence[str]], traced: int) -> list[float]:
    """Order agreement of each of ``traced`` fully traced steps (after one warm-up step)."""
    tf1 = tensorflow().compat.v1
    ops, free = set(step.step_op_names()), free_ops(step)
    names = [step_device(i) for i in range(DEVICES)]
    rng = np.random.default_rng(1)
    out = []
    with tf1.Session(graph=step.graph, config=session_config(DEVICES)) as session:
        session.run(step.init_op)
        session.run([step.train_op, step.loss], step.feed_dict(rng), options=run_options(DEVICES))
        for _ in range(traced):
            metadata = tf1.RunMetadata()
            session.run([step.train_op, step.loss], step.feed_dict(rng),
                        options=run_options(DEVICES, trace=True), run_metadata=metadata)
            executed = executed_device_order(metadata.step_stats, ops=ops)
            out.append(order_agreement(order, executed, names, skip=free))
    return out


def _interleaved(model: ModelSpec, batch: int, assignment: dict[str, int], order: Sequence[Sequence[str]],
                 args: argparse.Namespace) -> dict[str, list[float]]:
    """Step times (s) of the placement free and with its order enforced, each mode an arm of
    :func:`celeritas_tf.evaluation.validate_interleaved` (interleaved blocks, fresh sessions)."""
    recorded = PlacementOrder(tuple(map(tuple, order)), ENFORCED_ORDER)
    runs = validate_interleaved(model, batch, {"celeritas": assignment}, DEVICES, warmup_steps=args.warmup,
                                steps=args.steps, blocks=args.blocks, orders={"celeritas": recorded},
                                modes={"celeritas": ARMS})
    return {arm: list(runs["celeritas"].modes[arm].step_seconds) for arm in ARMS}


def bench_model(name: str, batch: int, args: argparse.Namespace,
                say: Callable[[str], None]) -> dict[str, Any]:
    """Every figure of one zoo model (small configuration)."""
    model = get_model(name)
    say(f"{name}: tracing one device for costs, placing with Celeritas")
    probe = build_training_step(model, batch)
    trace = trace_step(probe, traced_steps=2)
    graph = graph_from_step(probe, trace_costs(trace), aliases=trace.aliases)
    cluster = Cluster.homogeneous(DEVICES, one_device_peak_bytes(graph) * DEVICE_SHARE)
    assignment, order = recorded_order(graph, cluster)
    say(f"{name}: timing builds ({args.build_repeats} of each)")
    builds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    enforce_s: list[float] = []
    built: dict[str, TrainingStep] = {}
    edges: OrderEdges | None = None
    for repeat in range(args.build_repeats):
        for arm in ARMS[repeat % 2:] + ARMS[:repeat % 2]:  # alternate which arm builds first
            built.pop(arm, None)
            gc.collect()  # each build starts from a heap without the last one's garbage
            wanted = order if arm == "enforced" else None
            step, got, seconds, enforcing = _build(model, batch, assignment, wanted)
            builds[arm].append(seconds)
            built[arm] = step
            if got is not None:
                edges = got
                enforce_s.append(enforcing)
    assert edges is not None
    say(f"{name}: {args.traced_steps} traced steps per arm")
    agreement = {arm: _agreements(built[arm], order, args.traced_steps) for arm in ARMS}
    say(f"{name}: {args.steps} timed steps per arm in {args.blocks} interleaved blocks")
    seconds = _interleaved(model, batch, assignment, order, args)
    p_value = float(mannwhitneyu(seconds["enforced"], seconds["free"], alternative="two-sided").pvalue)
    build_free, build_enforced = float(np.median(builds["free"])), float(np.median(builds["enforced"]))
    return {
        "model": name, "batch": batch, "ops": graph.num_nodes, "order_from": "device_order",
        "devices_used": len(set(assignment.values())), "free_ops": edges.free,
        "edges_added": edges.added, "pairs_implied": edges.implied,
        "build_s": {"free": build_free, "enforced": build_enforced},
        "build_samples_s": builds, "enforce_samples_s": enforce_s, "enforce_s": float(np.median(enforce_s)),
        "build_ratio": build_enforced / build_free,
        # each enforced build against itself without its last part: no build-to-build noise
        "build_cost": float(np.median([t / (t - e) for t, e in zip(builds["enforced"], enforce_s,
                                                                   strict=True)])),
        "agreement": {arm: min(v) for arm, v in agreement.items()}, "agreement_samples": agreement,
        "step_median_s": {arm: float(np.median(v)) for arm, v in seconds.items()},
        "step_seconds": seconds,
        "step_ratio": float(np.median(seconds["enforced"]) / np.median(seconds["free"])),
        "step_p_value": p_value,
    }


def _print(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"Enforced execution order: Celeritas placements on {DEVICES} logical CPU devices "
          f"({DEVICE_SHARE:.0%} of the one-device peak each), zoo models at their small configuration")
    print(f"{'model':<18} {'batch':>5} {'ops':>6} {'free':>5} {'added':>6} {'implied':>8} {'build':>8} "
          f"{'+edges':>8} {'ratio':>6} {'enforce':>8} {'cost':>6} {'order':>7} {'free':>6} {'step':>9} "
          f"{'+edges':>9} {'ratio':>6} {'p':>5}")
    for r in rows:
        print(f"{r['model']:<18} {r['batch']:>5} {r['ops']:>6} {r['free_ops']:>5} {r['edges_added']:>6} "
              f"{r['pairs_implied']:>8} {r['build_s']['free']:>7.2f}s {r['build_s']['enforced']:>7.2f}s "
              f"{r['build_ratio']:>5.2f}x {r['enforce_s'] * 1e3:>6.0f}ms {r['build_cost']:>5.2f}x "
              f"{r['agreement']['enforced'] * 100:>6.1f}% {r['agreement']['free'] * 100:>5.1f}% "
              f"{r['step_median_s']['free'] * 1e3:>7.1f}ms {r['step_median_s']['enforced'] * 1e3:>7.1f}ms "
              f"{r['step_ratio']:>5.2f}x {r['step_p_value']:>5.2f}")
    print(f"(build: build_training_step + place_ops, median of {args.build_repeats}; +edges: and "
          "enforce_device_order, whose own time is 'enforce'; ratio: +edges / build; cost: each "
          "enforced build's time over the same build without enforce_device_order, median; order: share "
          "of the chained ops that ran "
          f"in the recorded order with the edges, lowest of {args.traced_steps} traced steps; free: the same "
          f"without them; step: median of {args.steps} timed steps without / with the edges, interleaved "
          f"in {args.blocks} blocks; p: two-sided Mann-Whitney)")
    print()


def checks(rows: list[dict[str, Any]]) -> list[str]:
    """One PASS/MISS line per target and model, and what the step times say."""
    lines = []
    for r in rows:
        ok = r["agreement"]["enforced"] >= AGREEMENT_TARGET
        lines.append(f"{'PASS' if ok else 'MISS'} {r['model']}: {r['agreement']['enforced'] * 100:.1f}% of "
                     f"the chained ops ran in the recorded order with the edges (target "
                     f"{AGREEMENT_TARGET:.0%}; "
                     f"{r['agreement']['free'] * 100:.1f}% without)")
        ok = r["build_cost"] <= BUILD_RATIO_TARGET
        lines.append(f"{'PASS' if ok else 'MISS'} {r['model']}: build with edges {r['build_cost']:.2f}x "
                     f"without, each build against itself (target <= {BUILD_RATIO_TARGET}x; the two arms' "
                     f"medians: {r['build_ratio']:.2f}x)")
    for r in rows:
        verdict = ("no measurable difference (noise-bound)" if r["step_p_value"] >= 0.05
                   else "differ beyond the noise")
        lines.append(f"note {r['model']}: step with edges {r['step_ratio']:.2f}x without, p = "
                     f"{r['step_p_value']:.2f}: {verdict} on this CPU")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run every model and print the table and PASS/MISS lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo models (default: all)")
    parser.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    parser.add_argument("--build-repeats", type=int, default=3, help="builds timed per arm (default 3)")
    parser.add_argument("--traced-steps", type=int, default=3, help="traced steps per arm (default 3)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per arm (default 30)")
    parser.add_argument("--blocks", type=int, default=5, help="interleaved blocks (default 5)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per block and arm (default 3)")
    parser.add_argument("--out", default="build/bench/order.json")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in ZOO]
    if unknown:
        parser.error(f"unknown zoo model {unknown[0]!r} (known: {', '.join(ZOO)})")
    print("Enforced execution order benchmark (CPU, logical devices)", file=sys.stderr)
    rows = [bench_model(name, args.batch, args, _say) for name in models]
    _print(rows, args)
    lines = checks(rows)
    print("\n".join(lines))
    write_json_atomic(Path(args.out), {"devices": DEVICES, "device_share": DEVICE_SHARE, "models": rows,
                                       "checks": lines}, indent=1)
    print(f"\nwrote {args.out}")
    return 1 if args.strict and any(line.startswith("MISS") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
