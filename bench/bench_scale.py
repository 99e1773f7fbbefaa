"""Scaling benchmark: Celeritas and Metis on training-shaped graphs from 10k to 1M ops.

For each size, ``celeritas generate MODEL --ops N`` builds a training step (the paper model's
layer shape and CCR, more layers) once, as JSON (``--format npz``: the columnar file); then,
for each placer, ``celeritas place`` runs in a fresh process pinned to one core, exactly as a
user runs it: read the graph file, place it on 4 identical devices that each hold 30 % of the
model's memory, replay it in the simulator and write the placement file. Per run it prints

* **place s**: the placer alone (``placement_seconds`` of the placement file: planning memory
  and the placer, not the replay that fills the step time);
* **wall s**: the whole command (start-up, read, place, replay, write), wall clock;
* **peak RSS**: the command's maximum resident set (``wait4``);
* **step**: the simulated step time of the placement (and whether it is OOM);

then the Celeritas/Metis ratios and the issue's targets: at 1M ops placement <= 15 s,
read + place + write <= 60 s, peak RSS <= 8 GiB; Celeritas's placement seconds within 3x of
Metis's at every size and its step time no worse than Metis's. Numba compiles the hot loops
once per machine (cached on disk); a warm-up placement of a small graph fills that cache
before anything is timed, and its seconds are reported. Figures: ``build/bench/scale.json``.

Run: ``make bench`` (or ``.venv/bin/python bench/bench_scale.py --help``; ``--sizes 10000,30000``
for a quick look).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celeritas_core.readwrite.formats import load_graph, write_json_atomic
from celeritas_core.readwrite.units import format_us

PLACERS = ("celeritas", "metis")
DEVICES = 4
DEVICE_SHARE = 0.30
SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000)
TARGET_OPS = 1_000_000
TARGET_PLACE_S = 15.0
TARGET_WALL_S = 60.0
TARGET_RSS_BYTES = 8 * 2**30
TARGET_RATIO = 3.0
ROOT = Path(__file__).resolve().parents[1]


def _one_core() -> None:
    """Child set-up: one core and single-threaded BLAS, as the targets are stated."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def run_cli(argv: list[str]) -> tuple[float, int, str]:
    """Run ``celeritas ARGV`` on one core; return (wall seconds, peak RSS bytes, stdout)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "celeritas_cli", *argv], stdout=out, stderr=err,
                                env=env, preexec_fn=_one_core)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage: its peak RSS
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"celeritas {' '.join(argv)} failed ({proc.returncode}): {err.read().strip()}")
        return wall, usage.ru_maxrss * 1024, out.read()  # ru_maxrss is in KiB on Linux


def place_run(graph_file: Path, placer: str, memory_bytes: int, out: Path) -> dict[str, object]:
    """``celeritas place`` one graph with one placer; the figures of the run."""
    argv = ["place", str(graph_file), "--placer", placer, "--devices", str(DEVICES),
            "--device-memory", f"{memory_bytes}B", "--out", str(out)]
    wall, peak, _ = run_cli(argv)
    doc = json.loads(out.read_text())
    return {"placer": placer, "placement_seconds": doc["placement_seconds"], "wall_seconds": wall,
            "peak_rss_bytes": peak, "step_time_us": doc["predicted_step_time_us"], "oom": doc["oom"]}


def run(model: str, sizes: list[int], workdir: Path, seed: int, fmt: str) -> list[dict[str, object]]:
    """Generate each size, place it with each placer; one row per (size, placer)."""
    rows = []
    for ops in sizes:
        graph_file = workdir / f"{model}-{ops}.{fmt}"
        gen_wall, _, _ = run_cli(["generate", model, "--ops", str(ops), "--seed", str(seed),
                                  "--out", str(graph_file)])
        graph = load_graph(graph_file)
        memory = int(DEVICE_SHARE * graph.total_memory_bytes)
        print(f"  {model} {ops:,} ops, {graph.num_edges:,} edges (generated in {gen_wall:.1f} s) ...",
              file=sys.stderr, flush=True)
        for placer in PLACERS:
            row = place_run(graph_file, placer, memory, workdir / f"{placer}-{ops}.placement.json")
            rows.append({"model": model, "ops": ops, "edges": graph.num_edges,
                         "graph_file_bytes": graph_file.stat().st_size, **row})
            print(f"    {placer}: place {row['placement_seconds']:.2f} s, wall {row['wall_seconds']:.1f} s",
                  file=sys.stderr, flush=True)
        graph_file.unlink()
    return rows


def print_table(rows: list[dict[str, object]]) -> None:
    """One line per (size, placer), then the Celeritas/Metis ratio per size."""
    head = (f"{'ops':>10} {'edges':>10} {'placer':<10} {'place s':>8} {'wall s':>7} {'peak RSS':>9} "
            f"{'step':>10} {'OOM':>4}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['ops']:>10,} {r['edges']:>10,} {r['placer']:<10} {r['placement_seconds']:>8.2f} "
              f"{r['wall_seconds']:>7.1f} {r['peak_rss_bytes'] / 2**30:>7.2f} G "
              f"{format_us(r['step_time_us']):>10} {'yes' if r['oom'] else 'no':>4}")
    print()
    for ops, c, m in _pairs(rows):
        ratio = c["placement_seconds"] / m["placement_seconds"]
        print(f"{ops:>10,} ops: Celeritas/Metis placement seconds {ratio:.2f}x, "
              f"step {_step_delta(c, m):+.2%} vs Metis")


def _pairs(rows: list[dict[str, object]]) -> list[tuple[int, dict[str, object], dict[str, object]]]:
    by = {(r["ops"], r["placer"]): r for r in rows}
    return [(ops, by[ops, "celeritas"], by[ops, "metis"]) for ops in sorted({r["ops"] for r in rows})
            if (ops, "celeritas") in by and (ops, "metis") in by]


def _step_delta(c: dict[str, object], m: dict[str, object]) -> float:
    """Relative step time of Celeritas against Metis (negative: Celeritas faster)."""
    return c["step_time_us"] / m["step_time_us"] - 1.0


def check_targets(rows: list[dict[str, object]]) -> list[str]:
    """One PASS/MISS line per target, with the measured figure."""
    lines = []
    for r in rows:
        if r["placer"] == "celeritas" and r["ops"] == TARGET_OPS:
            for ok, text in (
                (r["placement_seconds"] <= TARGET_PLACE_S,
                 f"placement {r['placement_seconds']:.2f} s (target <= {TARGET_PLACE_S:g} s)"),
                (r["wall_seconds"] <= TARGET_WALL_S,
                 f"read + place + replay + write {r['wall_seconds']:.1f} s (target <= {TARGET_WALL_S:g} s)"),
                (r["peak_rss_bytes"] <= TARGET_RSS_BYTES,
                 f"peak RSS {r['peak_rss_bytes'] / 2**30:.2f} GiB (target <= 8 GiB)"),
            ):
                lines.append(f"{'PASS' if ok else 'MISS'} {TARGET_OPS:,} ops: {text}")
    for ops, c, m in _pairs(rows):
        ratio = c["placement_seconds"] / m["placement_seconds"]
        lines.append(f"{'PASS' if ratio <= TARGET_RATIO else 'MISS'} {ops:,} ops: Celeritas placement "
                     f"{ratio:.2f}x Metis's (target <= {TARGET_RATIO:g}x)")
        delta = _step_delta(c, m)
        ok = delta <= 1e-9 and not (c["oom"] and not m["oom"])
        lines.append(f"{'PASS' if ok else 'MISS'} {ops:,} ops: Celeritas step {delta:+.2%} vs Metis "
                     f"(target: no worse)")
    return lines


def warm_up(workdir: Path) -> float:
    """Place a small graph once so that Numba's compiled loops are cached; its wall seconds."""
    graph_file = workdir / "warm-up.json"
    run_cli(["generate", "transformer", "--ops", "3000", "--out", str(graph_file)])
    wall = 0.0
    for placer in PLACERS:
        wall += run_cli(["place", str(graph_file), "--placer", placer, "--devices", str(DEVICES),
                         "--device-memory", "1GiB", "--out", str(workdir / "warm-up.placement.json")])[0]
    return wall


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and target checks, write build/bench/scale.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES),
                        help="comma-separated op counts (default: %(default)s)")
    parser.add_argument("--model", default="transformer",
                        help="paper model whose layer shape and CCR the graphs take (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")
    parser.add_argument("--format", choices=("json", "npz"), default="json",
                        help="graph file format the placements read (default: %(default)s)")
    parser.add_argument("--out", default="build/bench/scale.json", help="where to write the figures")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    with tempfile.TemporaryDirectory(prefix="celeritas-scale-") as tmp:
        warm = warm_up(Path(tmp))
        rows = run(args.model, sizes, Path(tmp), args.seed, args.format)
    print(f"Scaling benchmark: {args.model}-shaped training steps read from {args.format} files, "
          f"{DEVICES} devices x "
          f"{DEVICE_SHARE:.0%} of model memory, one core per run, seed {args.seed} "
          f"(warm-up, compiling and caching the hot loops: {warm:.1f} s)\n")
    print_table(rows)
    print()
    lines = check_targets(rows)
    print("\n".join(lines))
    write_json_atomic(Path(args.out), {"model": args.model, "format": args.format, "rows": rows,
                                       "targets": lines, "warm_up_seconds": warm}, indent=1)
    print(f"\nwrote {args.out}")
    return 1 if args.strict and any(line.startswith("MISS") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
