"""Simulator benchmark: one replay of a transformer-shaped training step at 100k and 1M ops.

Builds the paper's transformer shape at the requested sizes (CCR scaled as the paper's model),
on 4 identical devices holding 30 % of the model's memory each, and times ``simulate`` for a
contiguous split and a random assignment, plus ``critical_chain`` on the contiguous replay. The
first call of each (graph caches) is reported apart from the median of ``--repeat`` further
calls. Before that, the first replay and critical chain of a 2-op graph measure Numba's compile
time (or, with a warm on-disk cache, its load time; ``--fresh-cache`` compiles into an empty
cache directory). Seconds, on one core.

Run: ``.venv/bin/python bench/bench_simulator.py [--nodes 100000 1000000] [--repeat 3] [--fresh-cache]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
if "--fresh-cache" in sys.argv:  # before Numba is imported
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="celeritas-numba-")

import numpy as np  # noqa: E402

from celeritas_core.generators import synthetic as S  # noqa: E402
from celeritas_core.graphs.cluster import Cluster  # noqa: E402
from celeritas_core.graphs.graph import Graph  # noqa: E402
from celeritas_core.placers.local_search import critical_chain  # noqa: E402
from celeritas_core.simulation.simulator import simulate  # noqa: E402

DEVICES = 4


def transformer_graph(n: int) -> tuple[Graph, Cluster]:
    """The transformer-shaped training step with about ``n`` ops and its 4-device cluster."""
    shape = S._SHAPES["transformer"]
    g = S.training_step_graph(layers=S._layers_for(shape, n), seed=0, name="t", num_nodes=n, **asdict(shape))
    g = S._scale_to_ccr(g, S.PAPER_MODELS["transformer"].ccr,
                        Cluster.homogeneous(DEVICES, S._DEFAULT_CLUSTER_MEMORY))
    return g, Cluster.homogeneous(DEVICES, 0.3 * g.total_memory_bytes)


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(seconds of the first call, median seconds of ``repeat`` further calls)."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def compile_seconds() -> tuple[float, float]:
    """Seconds of the first replay and critical chain of a 2-op graph: Numba's compile (or cache load)."""
    g = Graph.from_arrays(name="two", node_names=["a", "b"], time_us=[1.0, 2.0], memory_bytes=[1.0, 1.0],
                          edge_src=[0], edge_dst=[1], edge_bytes=[8.0])
    assign = np.array([0, 1])
    start = time.perf_counter()
    result = simulate(g, Cluster.homogeneous(2, 1e9), assign)
    middle = time.perf_counter()
    critical_chain(g, assign, result)
    return middle - start, time.perf_counter() - middle


def bench_size(n: int, repeat: int) -> None:
    """Print the timings of one graph size."""
    start = time.perf_counter()
    g, cl = transformer_graph(n)
    print(f"{g.num_nodes:,} ops, {g.num_edges:,} edges: built in {time.perf_counter() - start:.1f} s")
    n = g.num_nodes
    contiguous = np.arange(n) * DEVICES // n
    scattered = np.random.default_rng(0).integers(0, DEVICES, n)
    for label, assign in (("contiguous", contiguous), ("random", scattered)):
        first, median = timed(lambda a=assign: simulate(g, cl, a), repeat)
        result = simulate(g, cl, assign)
        print(f"  simulate {label:10s}: first {first:.3f} s, median {median:.3f} s "
              f"(step {result.step_time_us:.6g} µs, {result.num_transfers:,} transfers)")
    result = simulate(g, cl, contiguous)
    first, median = timed(lambda: critical_chain(g, contiguous, result), repeat)
    print(f"  critical_chain       : first {first:.3f} s, median {median:.3f} s")


def main() -> None:
    """Print the compile time, then one line per (size, case): first call and median seconds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fresh-cache", action="store_true", help="compile into an empty Numba cache")
    args = parser.parse_args()
    replay_s, chain_s = compile_seconds()
    print(f"first call on a 2-op graph (compile or cache load): simulate {replay_s:.2f} s, "
          f"critical_chain {chain_s:.2f} s")
    for n in args.nodes:
        bench_size(n, args.repeat)


if __name__ == "__main__":
    main()
