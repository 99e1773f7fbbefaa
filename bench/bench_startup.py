"""Start-up benchmark: how long the ``celeritas`` command takes before it does any work, and the
first placement of a user who can write neither the install nor a home.

Why: every command used to import Numba (and through it SciPy) before parsing its arguments,
and every new user compiled the hot loops on their first placement (about 30 s, counted as
placement time); as ``nobody`` over a read-only install every command failed. Now heavy modules
load where they are used, small graphs run the loops as Python, and the loops are compiled once
at install time into a cache every user reads (celeritas_core/compiled/jit.py).

What, each the median of ``--repeat`` fresh processes (wall clock of the whole command):

- ``celeritas --help`` and ``celeritas info examples/graphs/training_step_small.json``, as this
  user over this checkout;
- ``celeritas place`` of that graph (4 devices of 600 MiB) as a *fresh, non-root* user over a
  *read-only* copy of the packages precompiled as ``make setup`` does
  (bench/readonly_install.py): ``nobody`` with an unwritable home when this runs as root, else
  this user (who cannot write the copy or that home either), with the placement seconds the
  command reports.

Targets (this 2-core machine, shared): ``--help`` <= 0.3 s, ``info`` <= 0.8 s, the first
placement under 2 s. Prints the figures and PASS/MISS lines, writes ``build/bench/startup.json``.

Run: ``make bench``, or ``.venv/bin/python bench/bench_startup.py [--repeat 5]`` (about 30 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import readonly_install

from celeritas_core.readwrite.formats import write_json_atomic

GRAPH = "examples/graphs/training_step_small.json"
CLUSTER = ["--devices", "4", "--device-memory", "600MiB"]
TARGETS_S = {"help": 0.3, "info": 0.8, "first_place": 2.0}


def _timed(argv: list[str], *, env: dict[str, str], cwd: Path,
           run: Any = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Wall seconds of one command (``run(argv)`` when given, else a plain subprocess)."""
    start = time.perf_counter()
    done = run(argv) if run is not None else subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds, done


def checkout_commands(repeat: int) -> dict[str, list[float]]:
    """``--help`` and ``info`` as this user over this checkout, ``repeat`` times each."""
    env = {**os.environ, "PYTHONPATH": str(readonly_install.REPO)}
    commands = {"help": ["--help"], "info": ["info", GRAPH]}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeat):  # interleaved, so a busy spell hits both alike
        for name, args in commands.items():
            times[name].append(_timed([sys.executable, "-m", "celeritas_cli", *args], env=env,
                                      cwd=readonly_install.REPO)[0])
    return times


def first_placements(repeat: int) -> dict[str, Any]:
    """``place`` as a fresh non-root user over a read-only precompiled install, ``repeat`` times."""
    install = readonly_install.make_install(seed_cache=True)
    try:
        walls, placed = [], []
        for i in range(repeat):
            out = install.out / f"p{i}.json"
            wall, _ = _timed(["-m", "celeritas_cli", "place", GRAPH, *CLUSTER, "--out", str(out)],
                             env={}, cwd=install.root, run=install.run)
            walls.append(wall)
            placed.append(json.loads(out.read_text())["placement_seconds"])
        uid = os.getuid() if install.user is None else install.user[0]
        return {"wall_s": walls, "placement_s": placed, "uid": uid, "python": install.python,
                "read_only_install": True}
    finally:
        readonly_install.remove(install)


def targets(figures: dict[str, Any]) -> list[str]:
    """One PASS/MISS line per target."""
    lines = []
    for name, label in (("help", "celeritas --help"), ("info", f"celeritas info {GRAPH}")):
        value = figures[f"{name}_s"]
        lines.append(f"{'PASS' if value <= TARGETS_S[name] else 'MISS'} {label}: {value:.2f} s "
                     f"(target <= {TARGETS_S[name]:g} s)")
    first = figures.get("first_place")
    if first is None:
        lines.append(f"MISS first placement: not measured ({figures['first_place_error']})")
        return lines
    value, non_root = first["median_wall_s"], first["uid"] != 0
    ok = value < TARGETS_S["first_place"] and non_root
    lines.append(f"{'PASS' if ok else 'MISS'} first placement under {TARGETS_S['first_place']:g} s as a "
                 f"non-root user over a read-only install: {value:.2f} s (uid {first['uid']}, placement "
                 f"{first['median_placement_s']:.2f} s)")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the figures and target checks, write build/bench/startup.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per figure (median)")
    parser.add_argument("--out", default="build/bench/startup.json", help="where to write the figures")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    times = checkout_commands(args.repeat)
    figures: dict[str, Any] = {"repeat": args.repeat, "runs": times,
                               **{f"{name}_s": statistics.median(t) for name, t in times.items()}}
    print(f"celeritas --help          {figures['help_s']:6.2f} s   (runs: {_list(times['help'])})")
    print(f"celeritas info (407 ops)  {figures['info_s']:6.2f} s   (runs: {_list(times['info'])})")
    try:
        first = first_placements(max(3, args.repeat // 2))
    except (readonly_install.Unavailable, RuntimeError) as exc:
        figures["first_place_error"] = str(exc)
        print(f"first placement: not measured: {exc}")
    else:
        first["median_wall_s"] = statistics.median(first["wall_s"])
        first["median_placement_s"] = statistics.median(first["placement_s"])
        figures["first_place"] = first
        print(f"first place, uid {first['uid']}, read-only install  {first['median_wall_s']:6.2f} s   "
              f"(runs: {_list(first['wall_s'])}; placement {_list(first['placement_s'])})")
    lines = targets(figures)
    print("\n".join(lines))
    write_json_atomic(Path(args.out), {**figures, "targets": lines}, indent=1)
    print(f"wrote {args.out}")
    return 1 if args.strict and any(line.startswith("MISS") for line in lines) else 0


def _list(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
