"""Determinism benchmark: the celeritas placer gives the same placement on an idle machine and on
one whose every core is busy.

The placer's optional stages are admitted by a work budget estimated from the graph's size, its
search and repair count replays, and the wall clock is only a safety net (``search_seconds``), so
the assignment must not depend on how fast the machine runs. This places a set of graphs twice,
first as the machine is, then with one busy-looping process per core (``os.cpu_count()``), and
compares the assignments bit for bit (SHA-256 of the int64 array), with the stages that ran and
the search's replays. Graphs: family a's training steps with liveness fields on 2, 4 and 8 devices
(``celeritas_core.generators.families``), the 36k-op transformer-shaped step of ``bench_engine.py`` at 30 %
of its memory on 4 devices, and the real Keras graphs ``bench_real.py`` cached under
``build/bench/real/`` (skipped with a note when that cache is empty) at 45 % of their one-device
peak on 4 devices, and the same memory on eight devices in two nodes (``2x4:nvlink,ib``). Prints
each instance's placement seconds idle and busy and whether they match, then a PASS/MISS line.
Exit 0 either way; figures in ``build/bench/determinism.json``.

Run: ``make bench`` (or ``.venv/bin/python bench/bench_determinism.py --help``).
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from celeritas_core.generators.families import benchmark_instances  # noqa: E402
from celeritas_core.generators.synthetic import paper_shaped_graph  # noqa: E402
from celeritas_core.graphs.cluster import Cluster  # noqa: E402
from celeritas_core.graphs.graph import Graph  # noqa: E402
from celeritas_core.graphs.topology import parse_preset  # noqa: E402
from celeritas_core.placers import place  # noqa: E402
from celeritas_core.readwrite.formats import load_graph, write_json_atomic  # noqa: E402
from celeritas_core.simulation.memory import one_device_peak_bytes  # noqa: E402

REAL_CACHE = Path("build/bench/real")
REAL_FRACTION = 0.45
REAL_DEVICES = 4
TOPOLOGY_PRESET = "2x4:nvlink,ib"


def instances(quick: bool) -> Iterator[tuple[str, Graph, Cluster]]:
    """(name, graph, cluster) of every instance placed (see the module docstring)."""
    for inst in benchmark_instances("a", quick=quick):
        if inst.name.endswith("/live"):
            yield inst.name, inst.graph, inst.cluster
    if not quick:
        graph = paper_shaped_graph("transformer")
        yield "transformer-36k/4x30%", graph, Cluster.homogeneous(4, 0.3 * graph.total_memory_bytes)
    for path in sorted(REAL_CACHE.glob("*.npz"))[: 2 if quick else None]:
        graph = load_graph(path)
        cluster = Cluster.homogeneous(REAL_DEVICES, REAL_FRACTION * one_device_peak_bytes(graph))
        yield f"{path.stem.split('-b')[0]}/{REAL_DEVICES}x{REAL_FRACTION:.0%}", graph, cluster
        if not quick:  # the same memory over two nodes of four (NVLink inside, a network between)
            eight = Cluster.homogeneous(8, REAL_FRACTION * one_device_peak_bytes(graph) / 2)
            topology = parse_preset(TOPOLOGY_PRESET).topology(eight.device_names)
            yield (f"{path.stem.split('-b')[0]}/{TOPOLOGY_PRESET}", graph, eight.with_topology(topology))


def placement_key(graph: Graph, cluster: Cluster) -> dict[str, Any]:
    """The celeritas placement's fingerprint: assignment hash, stages run, search stats, seconds."""
    p = place(graph, cluster, "celeritas")
    return {"sha256": hashlib.sha256(p.assignment.astype("<i8").tobytes()).hexdigest(),
            "stages": p.extra.get("stages"), "search": p.extra.get("search"),
            "step_time_us": float(p.predicted_step_time_us), "seconds": float(p.placement_seconds)}


def _spin(stop: Any) -> None:
    """Keep one core busy until ``stop`` is set."""
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def busy_cores() -> tuple[Any, list[multiprocessing.Process]]:
    """Start one busy-looping process per core; returns (stop event, processes)."""
    stop = multiprocessing.Event()
    procs = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
             for _ in range(os.cpu_count() or 1)]
    for proc in procs:
        proc.start()
    return stop, procs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few instances (for tests)")
    parser.add_argument("--out", default="build/bench/determinism.json", help="figures JSON")
    args = parser.parse_args(argv)
    cases = list(instances(args.quick))
    if not any(REAL_CACHE.glob("*.npz")):
        print(f"note: no real-model graphs in {REAL_CACHE} (run bench/bench_real.py first): skipped")
    idle = {name: placement_key(graph, cluster) for name, graph, cluster in cases}
    stop, procs = busy_cores()
    try:
        busy = {name: placement_key(graph, cluster) for name, graph, cluster in cases}
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=10)
    print(f"{'instance':<44}{'ops':>8}{'idle s':>8}{'busy s':>8}  same assignment")
    rows = []
    for name, graph, _ in cases:
        a, b = idle[name], busy[name]
        same = a["sha256"] == b["sha256"] and a["stages"] == b["stages"] and a["search"] == b["search"]
        rows.append({"instance": name, "ops": graph.num_nodes, "idle": a, "busy": b, "same": same})
        print(f"{name[:43]:<44}{graph.num_nodes:>8,}{a['seconds']:>8.2f}{b['seconds']:>8.2f}  "
              f"{'yes' if same else 'NO'}")
    different = [r["instance"] for r in rows if not r["same"]]
    print(f"{'PASS' if not different else 'MISS'} the same assignment, bit for bit, idle and with all "
          f"{os.cpu_count()} cores busy ({len(rows)} instances"
          + (f"; different: {', '.join(different)})" if different else ")"), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out, {"cores": os.cpu_count(), "instances": rows})
    return 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    sys.exit(code)
