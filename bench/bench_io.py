"""Graph file benchmark: write and read a million-op graph as celeritas-graph/1 JSON and as the
columnar celeritas-graph-columns/1 (.npz).

Builds the transformer-shaped training step of ``--nodes`` ops (celeritas_core/generators/synthetic.py), then
per format: ``save_graph`` and ``load_graph`` seconds (median of ``--repeat``), the file size, and
the wall seconds and peak resident memory of ``celeritas info FILE`` in a fresh process (the whole
command: start, read, validate, statistics). Targets: the columnar file written and read back in
at most 5 s together, and every ``info`` run within 8 GiB.

Run: ``.venv/bin/python bench/bench_io.py`` (``--nodes 100000`` for a quick run).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from celeritas_core.generators import synthetic
from celeritas_core.graphs.graph import Graph
from celeritas_core.readwrite.formats import load_graph, save_graph, write_json_atomic

COLUMNS_TARGET_S = 5.0
RSS_TARGET_BYTES = 8 * 2**30


def transformer_graph(nodes: int, seed: int = 0) -> Graph:
    """The transformer-shaped training step of ``nodes`` ops."""
    shape = synthetic._SHAPES["transformer"]
    return synthetic.training_step_graph(layers=synthetic._layers_for(shape, nodes), seed=seed, name="t",
                                         num_nodes=nodes, **asdict(shape))


def _median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _info_run(path: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of ``celeritas info PATH`` in a child process."""
    script = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
              "subprocess.run([sys.executable, '-m', 'celeritas_cli', 'info', sys.argv[1]], check=True, "
              "stdout=subprocess.DEVNULL); "
              "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    root = str(Path(__file__).resolve().parents[1])  # the checkout's celeritas_cli, not an installed one
    out = subprocess.run([sys.executable, "-c", script, str(path)], check=True, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": root})
    seconds, kib = out.stdout.split()
    return float(seconds), int(kib) * 1024


def run(nodes: int, repeat: int, folder: Path) -> list[dict[str, object]]:
    """Time each format on the same graph; one row of figures per format."""
    graph = transformer_graph(nodes)
    rows = []
    for fmt in ("json", "npz"):
        path = folder / f"t.{fmt}"
        save_s = _median(lambda p=path: save_graph(graph, p), repeat)
        load_s = _median(lambda p=path: load_graph(p), repeat)
        info_s, info_rss = _info_run(path)
        rows.append({"format": fmt, "nodes": graph.num_nodes, "edges": graph.num_edges, "save_s": save_s,
                     "load_s": load_s, "file_bytes": path.stat().st_size, "info_s": info_s,
                     "info_peak_rss_bytes": info_rss})
        print(f"{fmt:<5} {graph.num_nodes:>10,} ops {graph.num_edges:>10,} edges  save {save_s:6.2f} s  "
              f"load {load_s:6.2f} s  file {path.stat().st_size / 1e6:8.1f} MB  info {info_s:6.2f} s, "
              f"peak RSS {info_rss / 2**30:5.2f} GiB", flush=True)
    return rows


def targets(rows: list[dict[str, object]]) -> list[str]:
    """One line per target, PASS or MISS, with the measured figure."""
    lines = []
    for r in rows:
        if r["format"] == "npz":
            total = float(r["save_s"]) + float(r["load_s"])  # type: ignore[arg-type]
            ok = total <= COLUMNS_TARGET_S
            lines.append(f"{'PASS' if ok else 'MISS'} npz: save + load {total:.2f} s (target <= "
                         f"{COLUMNS_TARGET_S:g} s)")
        rss = int(r["info_peak_rss_bytes"])  # type: ignore[call-overload]
        lines.append(f"{'PASS' if rss <= RSS_TARGET_BYTES else 'MISS'} {r['format']}: celeritas info peak "
                     f"RSS {rss / 2**30:.2f} GiB (target <= 8 GiB)")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the figures and target checks, write build/bench/io.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000, help="ops in the graph (default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per figure (median)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--out", default="build/bench/io.json", help="where to write the figures")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="celeritas-io-") as folder:
        rows = run(args.nodes, args.repeat, Path(folder))
    lines = targets(rows)
    print("\n".join(lines))
    write_json_atomic(Path(args.out), {"rows": rows, "targets": lines}, indent=1)
    print(f"wrote {args.out}; this process's peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    return 1 if args.strict and any(line.startswith("MISS") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
