"""Real-model benchmark: Celeritas against every other placer on training steps of Keras models.

The graphs are the training steps (forward, backward, Adam) of real Keras applications with
random weights, VGG16, Xception, InceptionV3, ResNet101, NASNetMobile, ConvNeXtTiny and
MobileNetV3Large, and of a 6-block transformer encoder with a language-model head, at batch 32
(``--batch``), with analytical V100 costs (``bench/real_models.py``). Each is extracted as a
user would, ``celeritas graph --model real_models:FUNCTION --batch B --costs analytical:v100
--out FILE.npz`` in a subprocess (TensorFlow stays out of this process), and cached under
``build/bench/real/``; the file name holds a SHA-256 of the model code, the batch, the cost
source, the TensorFlow and Keras versions and the ``celeritas_tf`` sources, so changing any of
them rebuilds the graph (``--rebuild`` forces it).

Instances: every graph on 2, 4 and 8 identical devices (default transfer model), each holding 30 %,
45 % and 60 % of the graph's one-device liveness peak. Each instance runs, through
``celeritas_core.placers.place``, celeritas and the placers of ``bench/bench_quality.py``
(single, metis, m-topo, m-etf, m-etf/ops, m-sct, m-sct/ops, heft, order-place, stages); a placer
that is not registered is skipped with a note. None is skipped
for its run time: the slowest, m-SCT on the ops (its LP over every op), took at most about 6 s
per instance on the largest graph (NASNetMobile, about 25,000 ops, one core).

One row per instance: graph, ops, devices × fraction, whether Celeritas fits (replayed liveness
peak within every device), how many other placers fit and the fastest of them, Celeritas's
simulated step (µs), the best other fitting step and Celeritas / that, Celeritas's placement
seconds, the memory lower bound when the placement reports one (``n/a`` otherwise), and the
median over ``simulator.ALTERNATIVE_DISPATCH`` of Celeritas's step replayed under that dispatch
order / the predicted step. Then every placer's placement seconds (mean, max) and PASS/MISS lines
for the targets:

* (a) Celeritas fits on every instance where any placer fits;
* (b) Celeritas's step never more than 1 % slower than the fastest fitting other placer;
* (c) the median alternative-order step within 3 % of the predicted step, every Celeritas placement;

and the largest Celeritas placement time. Targets are reported, not enforced (exit 0). Figures
go to ``build/bench/real.json``.

Run: ``make bench`` (or ``.venv/bin/python bench/bench_real.py --help``; ``--quick`` for two
models on 4 devices at 45 %).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# one core per process, as in the other benchmarks: pin BLAS pools before numpy loads
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from bench_quality import ENFORCED, PLACER_NAMES, VARIANTS, placer_of  # noqa: E402
from machine import measured_on  # noqa: E402
from real_models import MODELS, TEST_MODELS  # noqa: E402

from celeritas_core.errors import CeleritasInputError  # noqa: E402
from celeritas_core.graphs.cluster import Cluster  # noqa: E402
from celeritas_core.graphs.graph import Graph  # noqa: E402
from celeritas_core.graphs.placement import Placement  # noqa: E402
from celeritas_core.placers import PLACERS, place  # noqa: E402
from celeritas_core.readwrite.formats import load_graph, write_json_atomic  # noqa: E402
from celeritas_core.readwrite.units import format_bytes, format_us  # noqa: E402
from celeritas_core.simulation.memory import one_device_peak_bytes  # noqa: E402
from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH, simulate  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
MODEL_MODULE = "real_models"
MODEL_FILE = BENCH_DIR / f"{MODEL_MODULE}.py"
COSTS = "analytical:v100"
DEFAULT_BATCH = 32
DEVICES = (2, 4, 8)
FRACTIONS = (0.30, 0.45, 0.60)
QUICK_MODELS = ("vgg16", "transformer_encoder")
QUICK_DEVICES = (4,)
QUICK_FRACTIONS = (0.45,)
WORST_TARGET = 1.01  # Celeritas / fastest fitting other placer, every instance
DISPATCH_TARGET = 0.03  # |median alternative-order step / predicted step - 1|, every Celeritas placement
EXTRACT_TIMEOUT_S = 1800

Row = dict[str, Any]


# ---------------------------------------------------------------------------- extraction and cache
@dataclass(frozen=True)
class Extracted:
    """One model's cached graph file, whether this run built it, and the seconds its build took."""

    model: str
    path: Path
    built: bool
    extract_seconds: float


def cache_key(model: str, batch: int) -> str:
    """SHA-256 (hex) of what the extracted graph depends on: the model module's bytes
    (:data:`MODEL_FILE`), ``model``, ``batch``, the cost source, the TensorFlow and Keras versions,
    and every ``celeritas_tf`` source with the CLI's TensorFlow commands (the extraction's code)."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"model": model, "batch": batch, "costs": COSTS, **package_versions()},
                             sort_keys=True).encode())
    sources = {MODEL_FILE.name: MODEL_FILE}
    for path in [ROOT / "celeritas_cli" / "tf_commands.py", *sorted((ROOT / "celeritas_tf").rglob("*.py"))]:
        sources[str(path.relative_to(ROOT))] = path
    for label, path in sources.items():
        digest.update(label.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def package_versions() -> dict[str, str]:
    """The installed distributions (name: version) that provide the ``tensorflow`` and ``keras``
    packages (``tensorflow-cpu`` here), read from their metadata without importing them."""
    providers = importlib.metadata.packages_distributions()
    dists = sorted({d for pkg in ("tensorflow", "keras") for d in providers.get(pkg, [])})
    return {d: importlib.metadata.version(d) for d in dists}


def extract(model: str, batch: int, cache_dir: Path, *, rebuild: bool = False) -> Extracted:
    """The cached graph of ``model`` at ``batch``; extracted first (``celeritas graph`` in a
    subprocess) when missing, stale or ``rebuild``. Stale files of the same model and batch go."""
    stem = f"{model}-b{batch}"
    path = cache_dir / f"{stem}-{cache_key(model, batch)[:16]}.npz"
    sidecar = path.with_suffix(".json")
    if path.is_file() and sidecar.is_file() and not rebuild:
        return Extracted(model, path, False, float(json.loads(sidecar.read_text())["extract_seconds"]))
    cache_dir.mkdir(parents=True, exist_ok=True)
    for old in cache_dir.glob(f"{stem}-*"):
        old.unlink()
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "celeritas_cli", "graph", "--model", f"{MODEL_MODULE}:{model}",
           "--batch", str(batch), "--costs", COSTS, "--out", str(path)]
    proc = subprocess.run(cmd, env=_extraction_env(), capture_output=True, text=True, check=False,
                          timeout=EXTRACT_TIMEOUT_S)
    seconds = time.perf_counter() - start
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"celeritas graph failed for {model} (exit {proc.returncode}): {tail}")
    write_json_atomic(sidecar, {"model": model, "batch": batch, "costs": COSTS, "command": cmd[1:],
                                "extract_seconds": seconds, "stdout": proc.stdout.strip()}, indent=1)
    return Extracted(model, path, True, seconds)


def _extraction_env() -> dict[str, str]:
    """The environment of ``celeritas graph``: this checkout and ``bench/`` importable, the model
    module allowed (``CELERITAS_MODEL_MODULES``), oneDNN rewrites and TensorFlow's log noise off."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), str(BENCH_DIR), env.get("PYTHONPATH")) if p)
    allowed = [p for p in (env.get("CELERITAS_MODEL_MODULES") or "").split(",") if p.strip()]
    env["CELERITAS_MODEL_MODULES"] = ",".join([*allowed, MODEL_MODULE])
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


# ---------------------------------------------------------------------------- placing
def placer_labels() -> tuple[list[str], list[str]]:
    """The table labels of the placers to run (celeritas first), and notes on those skipped."""
    wanted = list(PLACER_NAMES)
    labels = [p for p in wanted if placer_of(p)[0] in PLACERS]
    notes = [f"placer {p!r} is not registered: skipped" for p in wanted if placer_of(p)[0] not in PLACERS]
    return labels, notes


def run_placer(graph: Graph, cluster: Cluster, label: str) -> tuple[Row, Placement | None]:
    """One placer on one instance: its figures (step µs, OOM, fits, placement seconds, largest
    replayed device peak in bytes) or the error it raised, and the placement."""
    name, params = placer_of(label)
    try:
        p = place(graph, cluster, name, params)
    except Exception as exc:  # a placer's failure is a result to report, not a reason to stop
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}, None
    ENFORCED.check(graph, cluster, p, f"{graph.name} {label}")
    peak = p.evaluation.device_peak_memory_bytes if p.evaluation is not None else []
    row: Row = {"step_time_us": float(p.predicted_step_time_us), "oom": bool(p.oom), "fits": not p.oom,
                "placement_seconds": float(p.placement_seconds),
                "max_device_peak_bytes": float(max(peak)) if len(peak) else None}
    return row, p


def memory_bound(p: Placement) -> Row:
    """What every placement needs on the fullest device (bytes) and whether no placement fits, as
    the evaluation reports them (:func:`celeritas_core.simulation.memory.peak_lower_bound`)."""
    return {"memory_lower_bound_bytes": float(p.memory_lower_bound_bytes), "cannot_fit": bool(p.cannot_fit)}


def dispatch_figures(graph: Graph, cluster: Cluster, p: Placement) -> Row:
    """Celeritas's step (µs) replayed under each alternative dispatch order, and their median /
    the predicted step (None when the predicted step is 0)."""
    steps = {d: float(simulate(graph, cluster, p.assignment, dispatch=d).step_time_us)
             for d in ALTERNATIVE_DISPATCH}
    predicted = float(p.predicted_step_time_us)
    median = statistics.median(steps.values())
    return {"dispatch_steps_us": steps, "dispatch_median_us": median,
            "dispatch_median_ratio": median / predicted if predicted > 0 else None}


def run_instance(graph: Graph, model: str, devices: int, fraction: float, labels: Sequence[str]) -> Row:
    """Every placer on ``graph`` over ``devices`` devices of ``fraction`` × its one-device peak each."""
    peak = one_device_peak_bytes(graph)
    cluster = Cluster.homogeneous(devices, fraction * peak)
    figures: dict[str, Row] = {}
    celeritas: Placement | None = None
    for label in labels:
        figures[label], p = run_placer(graph, cluster, label)
        if label == "celeritas":
            celeritas = p
    row: Row = {"model": model, "ops": graph.num_nodes, "edges": graph.num_edges, "devices": devices,
                "fraction": fraction, "one_device_peak_bytes": peak,
                "device_memory_bytes": float(cluster.memory_bytes[0]), "placers": figures}
    row.update(memory_bound(celeritas) if celeritas is not None else
               {"memory_lower_bound_bytes": None, "cannot_fit": None})
    row.update(dispatch_figures(graph, cluster, celeritas) if celeritas is not None else
               {"dispatch_steps_us": {}, "dispatch_median_us": None, "dispatch_median_ratio": None})
    row.update(comparison(figures))
    return row


def comparison(figures: dict[str, Row]) -> Row:
    """Celeritas against the other placers that fit: which fit, the fastest, the ratio of steps."""
    cel = figures.get("celeritas", {})
    cel_fits = "error" not in cel and bool(cel.get("fits"))
    others = {n: f["step_time_us"] for n, f in figures.items() if n != "celeritas" and f.get("fits")}
    best = min(others, key=others.__getitem__) if others else None
    return {
        "celeritas_fits": cel_fits,
        "celeritas_step_us": cel.get("step_time_us"),
        "celeritas_placement_seconds": cel.get("placement_seconds"),
        "others_fitting": sorted(others),
        "best_other": best,
        "best_other_step_us": others[best] if best else None,
        "ratio_vs_best_other": cel["step_time_us"] / others[best] if best and cel_fits else None,
    }


# ---------------------------------------------------------------------------- printing
def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


HEADER = (f"{'graph':<25}{'ops':>7}{'dev×mem':>10}{'cel fits':>9}{'others fit':>11}{'best other':>13}"
          f"{'cel step':>11}{'other step':>11}{'ratio':>7}{'cel s':>7}{'mem LB':>12}{'can fit':>8}"
          f"{'alt/pred':>9}")


def format_row(r: Row) -> str:
    """One instance's table line (see :data:`HEADER`)."""
    cel = r["placers"].get("celeritas", {})
    cel_fit = "error" if "error" in cel else ("yes" if r["celeritas_fits"] else "OOM")
    others = len(r["placers"]) - 1
    step = r["celeritas_step_us"]
    lb = r["memory_lower_bound_bytes"]
    return (f"{r['model'][:24]:<25}{r['ops']:>7,}{r['devices']:>4}×{r['fraction']:<5.0%}{cel_fit:>9}"
            f"{len(r['others_fitting']):>5}/{others:<5}{r['best_other'] or '-':>13}"
            f"{format_us(step) if step is not None else '-':>11}"
            f"{format_us(r['best_other_step_us']) if r['best_other_step_us'] is not None else '-':>11}"
            f"{_fmt(r['ratio_vs_best_other']):>7}{_fmt(r['celeritas_placement_seconds'], '.2f'):>7}"
            f"{format_bytes(lb) if lb is not None else 'n/a':>12}"
            f"{'-' if r['cannot_fit'] is None else ('no' if r['cannot_fit'] else 'maybe'):>8}"
            f"{_fmt(r['dispatch_median_ratio']):>9}")


def error_lines(rows: Sequence[Row]) -> list[str]:
    """One line per instance and error message: the placers that raised it ("every placer" when
    all did, e.g. a co-location group larger than a device)."""
    lines = []
    for r in rows:
        by_message: dict[str, list[str]] = {}
        for label, fig in r["placers"].items():
            if "error" in fig:
                by_message.setdefault(fig["error"], []).append(label)
        for message, labels in by_message.items():
            who = "every placer" if len(labels) == len(r["placers"]) else ", ".join(labels)
            lines.append(f"  error on {_name(r)}: {who}: {message}")
    return lines


def seconds_lines(rows: Sequence[Row], labels: Sequence[str]) -> list[str]:
    """Every placer's placement seconds over the instances it placed: mean and max (and where)."""
    lines = [f"{'placement seconds':<18}{'mean':>9}{'max':>9}  at"]
    for label in labels:
        runs = [(r["placers"][label]["placement_seconds"], r) for r in rows
                if "placement_seconds" in r["placers"].get(label, {})]
        if runs:
            top, where = max(runs, key=lambda x: x[0])
            mean = sum(x for x, _ in runs) / len(runs)
            lines.append(f"  {label:<16}{mean:>9.3f}{top:>9.3f}  {_name(where)}")
    return lines


# ---------------------------------------------------------------------------- targets
def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _name(r: Row) -> str:
    return f"{r['model']} {r['devices']}×{r['fraction']:.0%}"


def targets(rows: Sequence[Row]) -> list[str]:
    """PASS/MISS (SKIP when nothing to judge) lines for targets (a)–(c), and the largest Celeritas
    placement time."""
    return [_fit_target(rows), _speed_target(rows), _dispatch_target(rows), _bound_line(rows),
            _seconds_line(rows), ENFORCED.line()]


def _fit_target(rows: Sequence[Row]) -> str:
    """(a) Celeritas fits on every instance where another placer fits."""
    judged = [r for r in rows if r["best_other"] is not None]
    oom = [_name(r) for r in judged if not r["celeritas_fits"]]
    detail = f"; Celeritas OOM on {', '.join(oom)}" if oom else ""
    return (f"{_verdict(not oom) if judged else 'SKIP'} (a) Celeritas fits wherever another placer fits "
            f"({len(judged)} such instances{detail})")


def _speed_target(rows: Sequence[Row]) -> str:
    """(b) Celeritas's step at most :data:`WORST_TARGET` × the fastest fitting other placer's."""
    what = f"(b) Celeritas never more than {WORST_TARGET - 1:.0%} slower than the fastest fitting other"
    rated = [r for r in rows if r["ratio_vs_best_other"] is not None]
    if not rated:
        return f"SKIP {what}: none rated"
    worst = max(rated, key=lambda r: r["ratio_vs_best_other"])
    over = [r for r in rated if r["ratio_vs_best_other"] > WORST_TARGET]
    return (f"{_verdict(not over)} {what} ({len(rated)} instances rated; worst "
            f"{worst['ratio_vs_best_other']:.3f} on {_name(worst)} vs {worst['best_other']}"
            + (f"; {len(over)} over)" if over else ")"))


def _dispatch_target(rows: Sequence[Row]) -> str:
    """(c) Every Celeritas placement's median step under the alternative dispatch orders within
    :data:`DISPATCH_TARGET` of its predicted step."""
    what = (f"(c) median step under the alternative dispatch orders within {DISPATCH_TARGET:.0%} of the "
            "predicted")
    alt = [r for r in rows if r["dispatch_median_ratio"] is not None]
    if not alt:
        return f"SKIP {what} step: no Celeritas placement"
    far = max(alt, key=lambda r: abs(r["dispatch_median_ratio"] - 1))
    off = [r for r in alt if abs(r["dispatch_median_ratio"] - 1) > DISPATCH_TARGET]
    detail = f"; {len(off)} outside, {sum(r['celeritas_fits'] for r in off)} of them fitting" if off else ""
    return (f"{_verdict(not off)} {what} step ({len(alt)} Celeritas placements; farthest "
            f"{far['dispatch_median_ratio']:.3f} on {_name(far)}{detail})")


def _bound_line(rows: Sequence[Row]) -> str:
    """How many instances nothing fits, and how many of those the memory lower bound proves
    impossible (the rest may fit a placement no placer found)."""
    unfit = [r for r in rows if r.get("cannot_fit") is not None and not r["celeritas_fits"]
             and r["best_other"] is None]
    proven = [r for r in unfit if r["cannot_fit"]]
    return (f"no placer fits {len(unfit)} instances; the memory lower bound proves {len(proven)} of them "
            f"impossible" + (f" (open: {', '.join(_name(r) for r in unfit if not r['cannot_fit'])})"
                             if len(proven) < len(unfit) else ""))


def _seconds_line(rows: Sequence[Row]) -> str:
    """The largest Celeritas placement time (s), where and on how many ops."""
    timed = [r for r in rows if r["celeritas_placement_seconds"] is not None]
    if not timed:
        return "max Celeritas placement seconds: -"
    slow = max(timed, key=lambda r: r["celeritas_placement_seconds"])
    return (f"max Celeritas placement seconds: {slow['celeritas_placement_seconds']:.2f} s on {_name(slow)} "
            f"({slow['ops']:,} ops)")


# ---------------------------------------------------------------------------- main
def _choices(text: str | None, default: Sequence[Any], kind: type, flag: str,
             allowed: Sequence[Any] | None = None) -> list[Any]:
    """A comma-separated flag value as a list of ``kind`` (``default`` when not given)."""
    if text is None:
        return list(default)
    try:
        values = [kind(p.strip()) for p in text.split(",") if p.strip()]
    except ValueError:
        raise CeleritasInputError(f"{flag}: cannot read {text!r}") from None
    bad = [v for v in values if allowed is not None and v not in allowed]
    if not values or bad:
        raise CeleritasInputError(f"{flag}: {'unknown ' + repr(bad[0]) if bad else 'empty'}"
                                  + (f" (known: {', '.join(map(str, allowed))})" if allowed else ""))
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: models, devices, fractions, batch, cache, output (``--help``)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated models (default: all of {', '.join(MODELS)}; "
                                         f"also {', '.join(TEST_MODELS)})")
    parser.add_argument("--devices", help="comma-separated device counts (default: 2,4,8)")
    parser.add_argument("--fractions", help="comma-separated device memory as fractions of the one-device "
                                            "peak (default: 0.3,0.45,0.6)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{' and '.join(QUICK_MODELS)} on 4 devices at 45 %% (flags given still win)")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="batch size (default: 32)")
    parser.add_argument("--rebuild", action="store_true", help="extract the graphs again even when cached")
    parser.add_argument("--cache-dir", default="build/bench/real", help="extracted graphs (.npz)")
    parser.add_argument("--out", default="build/bench/real.json", help="figures JSON")
    args = parser.parse_args(argv)
    try:
        args.models = _choices(args.models, QUICK_MODELS if args.quick else MODELS, str, "--models",
                               [*MODELS, *TEST_MODELS])
        args.devices = _choices(args.devices, QUICK_DEVICES if args.quick else DEVICES, int, "--devices")
        args.fractions = _choices(args.fractions, QUICK_FRACTIONS if args.quick else FRACTIONS, float,
                                  "--fractions")
        if args.batch <= 0 or min(args.devices) <= 0 or not all(0 < f <= 1 for f in args.fractions):
            raise CeleritasInputError("--batch and --devices must be positive, --fractions in (0, 1]")
    except CeleritasInputError as exc:
        parser.error(str(exc))
    return args


def extract_all(args: argparse.Namespace, notes: list[str]) -> list[Extracted]:
    """Every model's graph (cached or extracted now); a model that fails to extract is a note."""
    done = []
    for model in args.models:
        print(f"  extracting {model} at batch {args.batch} ...", file=sys.stderr, flush=True)
        try:
            done.append(extract(model, args.batch, Path(args.cache_dir), rebuild=args.rebuild))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            notes.append(f"{model}: skipped: {exc}")
    return done


def place_all(graphs: Sequence[Extracted], args: argparse.Namespace, labels: Sequence[str]) -> list[Row]:
    """Every instance of every graph: one row each."""
    rows = []
    start = time.perf_counter()
    for ex in graphs:
        graph = load_graph(ex.path)
        for devices in args.devices:
            for fraction in args.fractions:
                print(f"  {ex.model} {devices}×{fraction:.0%}: {graph.num_nodes:,} ops "
                      f"({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)
                rows.append(run_instance(graph, ex.model, devices, fraction, labels))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Extract (or reuse) the graphs, place every instance, print the table and targets, write the
    JSON; exit 0."""
    args = parse_args(argv)
    labels, notes = placer_labels()
    where = measured_on()
    start = time.perf_counter()
    graphs = extract_all(args, notes)
    extract_wall = time.perf_counter() - start
    rows = place_all(graphs, args, labels)
    place_wall = time.perf_counter() - start - extract_wall
    print(f"Real-model benchmark: batch {args.batch}, costs {COSTS}, placers {', '.join(labels)}")
    for note in notes:
        print(note)
    built = [g for g in graphs if g.built]
    cached = [g for g in graphs if not g.built]
    now, earlier = (sum(g.extract_seconds for g in part) for part in (built, cached))
    print(f"graphs: {len(built)} extracted now ({now:.1f} s), {len(cached)} from the cache (extracted "
          f"earlier in {earlier:.1f} s); placing: {place_wall:.1f} s\n")
    print(HEADER)
    for r in rows:
        print(format_row(r))
    for line in error_lines(rows):
        print(line)
    print()
    for line in seconds_lines(rows, labels):
        print(line)
    print()
    checks = targets(rows)
    for line in checks:
        print(line)
    doc = {"format": "celeritas-bench-real/1", "measured_on": where, "batch": args.batch, "costs": COSTS,
           "placers": labels,
           "variants": {k: list(v) for k, v in VARIANTS.items()}, "notes": notes,
           "dispatch_orders": list(ALTERNATIVE_DISPATCH),
           "graphs": [{"model": g.model, "path": str(g.path), "extracted_now": g.built,
                       "extract_seconds": g.extract_seconds} for g in graphs],
           "extract_wall_seconds": extract_wall, "place_wall_seconds": place_wall,
           "instances": rows, "checks": checks}
    write_json_atomic(Path(args.out), doc, indent=1)
    print(f"\nwrote {args.out} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
