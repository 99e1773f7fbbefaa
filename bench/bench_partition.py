"""Partition benchmark: the refinement routines of the ``celeritas`` placer on a large training graph.

Builds the transformer-shaped training step of ``--ops`` ops (CCR scaled to the paper's
transformer; 4 devices, each holding 30 % of the model's memory), runs the ``celeritas`` placer
once while recording the arguments of every call to ``spectral_order``, ``fm_refine`` and
``connectivity_refine``, then times each call again: the first call (which loads the compiled
kernels from Numba's cache, or compiles them when the cache is cold: run with
``NUMBA_CACHE_DIR=$(mktemp -d)`` to see compile times) and the median of ``--repeat`` more.
``--baseline FILE`` times another copy of ``partition.py`` (for example
``git show 5ac4dfa:celeritas_core/placers/partition.py > /tmp/partition_old.py``) on the same arguments
and compares the outputs: equal partitions, or the FM-refined cut (µs) of each spectral seed.
Timings are on one core (BLAS pinned to one thread).

Run: ``.venv/bin/python bench/bench_partition.py --ops 1000000 --baseline /tmp/partition_old.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time
from dataclasses import asdict
from types import ModuleType
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from celeritas_core.generators import synthetic as S  # noqa: E402
from celeritas_core.graphs.cluster import Cluster  # noqa: E402
from celeritas_core.graphs.graph import Graph  # noqa: E402
from celeritas_core.placers import (  # noqa: E402
    partition,
    place,
)

TIMED = ("spectral_order", "fm_refine", "connectivity_refine")


def transformer_graph(ops: int) -> tuple[Graph, Cluster]:
    """The issue's transformer-shaped training step of ``ops`` ops and its 4-device cluster."""
    shape = S._SHAPES["transformer"]
    graph = S.training_step_graph(layers=S._layers_for(shape, ops), seed=0, name="transformer",
                                  num_nodes=ops, **asdict(shape))
    graph = S._scale_to_ccr(graph, S.PAPER_MODELS["transformer"].ccr,
                            Cluster.homogeneous(4, S._DEFAULT_CLUSTER_MEMORY))
    return graph, Cluster.homogeneous(4, 0.3 * graph.total_memory_bytes)


def record_calls(graph: Graph, cluster: Cluster) -> tuple[list[tuple[str, tuple[Any, ...]]], float, Any]:
    """Run the placer once; return the timed functions' calls (name, args), its seconds and result."""
    calls: list[tuple[str, tuple[Any, ...]]] = []
    originals = {name: getattr(partition, name) for name in TIMED}

    def recorder(name: str):
        def call(*args: Any) -> Any:
            calls.append((name, args))
            return originals[name](*args)
        return call

    for name in TIMED:
        setattr(partition, name, recorder(name))
    try:
        start = time.perf_counter()
        result = place(graph, cluster, "celeritas")
        seconds = time.perf_counter() - start
    finally:
        for name, func in originals.items():
            setattr(partition, name, func)
    return calls, seconds, result


def timed(func: Any, args: tuple[Any, ...], repeat: int) -> tuple[float, float, Any]:
    """First-call seconds, median seconds of ``repeat`` more calls, and the result."""
    start = time.perf_counter()
    result = func(*args)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func(*args)
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), result


def cost(name: str, args: tuple[Any, ...], parts: np.ndarray) -> float:
    """The cost (µs) of a partition made by ``name``: cut weight or connectivity cost."""
    if name == "connectivity_refine":
        return partition.connectivity_cost(args[0], args[1], parts, len(args[3]))
    return partition.cut_weight(args[0], parts)


def load_module(path: str) -> ModuleType:
    """Import a copy of ``partition.py`` from ``path``."""
    spec = importlib.util.spec_from_file_location("partition_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", help="another partition.py to time on the same arguments")
    args = parser.parse_args()
    start = time.perf_counter()
    graph, cluster = transformer_graph(args.ops)
    print(f"graph: {graph.num_nodes} ops, {graph.num_edges} edges ({time.perf_counter() - start:.1f} s)")
    calls, seconds, result = record_calls(graph, cluster)
    step, chosen = result.predicted_step_time_us, result.extra["chosen"]
    print(f"place: {seconds:.1f} s, step {step:.6g} µs, chosen {chosen}")
    baseline = load_module(args.baseline) if args.baseline else None
    fm_args = next((a for n, a in calls if n == "fm_refine"), None)
    for name, call_args in calls:
        first, median, out = timed(getattr(partition, name), call_args, args.repeat)
        size = f"{call_args[0].shape[0]}x{call_args[0].shape[1]}, nnz {call_args[0].nnz}"
        line = f"{name:20s} {size:32s} first {first:7.3f} s  median {median:7.3f} s"
        if baseline is not None:
            _, base_median, base_out = timed(getattr(baseline, name), call_args, min(args.repeat, 1))
            line += f"  baseline {base_median:7.3f} s  " + compare(name, call_args, out, base_out, fm_args)
        print(line, flush=True)


def compare(name: str, args: tuple[Any, ...], new: Any, old: Any, fm_args: tuple[Any, ...] | None) -> str:
    """Equal partitions, or each spectral order's FM-refined cut (µs) on the coarse graph."""
    if name != "spectral_order":
        if np.array_equal(new, old):
            return f"equal partitions, cost {cost(name, args, new):.6g} µs"
        return f"DIFFERENT: cost {cost(name, args, new):.6g} µs, baseline {cost(name, args, old):.6g} µs"
    if fm_args is None:
        return ""
    w, memory, capacity = fm_args[0], fm_args[1], fm_args[2]

    def refined_cut(order: np.ndarray | None) -> str:
        if order is None:
            return "none"
        parts = partition.fm_refine(w, memory, capacity, partition.split_order(order, memory, capacity))
        return f"{partition.cut_weight(w, parts):.6g}"

    return f"refined cut: new {refined_cut(new)}, baseline {refined_cut(old)}, cpd {refined_cut(args[1])}"


if __name__ == "__main__":
    main()
