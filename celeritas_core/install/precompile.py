"""Compile every hot loop into the prebuilt cache, at install or image-build time.

``python -m celeritas_core.install.precompile`` (``make setup`` and the Docker images run it, as the
user that owns the installed package) runs a small workload that calls each compiled loop with
the argument types the commands use: the bundled 407-op training step read back from JSON and
from the columnar format, with and without liveness fields, through every placer of
``celeritas compare``, every dispatch order of the simulator, the sparse eigensolver that coarse
graphs of over 200 nodes take, and the exact MILP placer on a 12-op graph. Numba compiles each
loop once and :mod:`celeritas_core.compiled.jitcache` saves it to the prebuilt cache
(``celeritas_core/compiled/_jitcache/``), from which every later process loads it, whoever runs it; loops
already there load instead (the workload then takes about 5 s). ``precompiled.json`` there says
what was built, for which Numba, Python and CPU. Design: :mod:`celeritas_core.compiled.jit`.

Exit status 0 when the prebuilt cache took the compiled code, 1 when it cannot be written (the
loops then still work: compiled on first use, into the user's cache or in memory) or Numba is off.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from celeritas_core.compiled import jit
from celeritas_core.generators.families import layered_cluster, layered_dag
from celeritas_core.generators.synthetic import small_training_graph
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.pipeline.plan import PipelineRequest, place_pipelined
from celeritas_core.placers import place
from celeritas_core.placers.compare import DEFAULT_PLACERS, compare_placers
from celeritas_core.placers.partition import spectral_order, undirected_weights
from celeritas_core.readwrite.columnar import graph_from_npz, npz_bytes
from celeritas_core.readwrite.formats import graph_from_json, graph_to_json, json_bytes, parse_json
from celeritas_core.simulation.memory import one_device_peak_bytes
from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH, dispatch_spread

#: What the last build put in the prebuilt cache, and for which Numba, Python and CPU (JSON;
#: ``make setup`` rebuilds when the engine's code is newer).
BUILD_INFO = "precompiled.json"
#: Device memory of the sum-model workload (the example's ``--device-memory 600MiB``).
_DEVICE_MEMORY = 600 * 2**20


def workload() -> None:
    """Call every compiled loop with the argument types the commands use (see the module docstring)."""
    for liveness in (False, True):
        graph = _as_read(small_training_graph(0, liveness=liveness))
        memory = 0.4 * one_device_peak_bytes(graph) if liveness else _DEVICE_MEMORY
        cluster = Cluster.homogeneous(4, memory)
        comparison = compare_placers(graph, cluster, DEFAULT_PLACERS)
        dispatch_spread(graph, cluster, comparison.placements[-1].assignment, ALTERNATIVE_DISPATCH,
                        channels=False)
        if not liveness:  # the sparse eigensolver, which coarse graphs of over 200 nodes take
            spectral_order(undirected_weights(graph, graph.edge_bytes), graph.topological_order)
        else:  # the pipelined step's loops (roles, the unrolled replay)
            place_pipelined(graph, cluster, request=PipelineRequest(2))
    tiny = layered_dag(seed=0, tasks=12, ccr=1.0)
    place(tiny, layered_cluster(2, 1e12), "optimal", {"time_limit": 10})


def _as_read(graph: Graph) -> Graph:
    """``graph`` as the commands get it from a file: through JSON, then the columnar format."""
    from_json = graph_from_json(parse_json(json_bytes(graph_to_json(graph))))
    return graph_from_npz(npz_bytes(from_json))


def build(*, quiet: bool = False) -> dict[str, Any]:
    """Run :func:`workload` with Numba loaded: every loop it calls is loaded from a cache layer,
    or compiled and saved to the prebuilt cache when that is writable (else to the next layer:
    :mod:`celeritas_core.compiled.jitcache`); then note what was built in :data:`BUILD_INFO`.

    Parameters
    ----------
    quiet
        Print nothing.

    Returns
    -------
    dict
        ``loops`` (loops made compiled), ``loaded`` and ``compiled`` (signatures), ``seconds``,
        ``cache_dir`` and ``cache_writable`` (whether the prebuilt cache took the code).
    """
    started = time.perf_counter()
    writable = _writable(jit.CACHE_DIR)
    jit.load_numba()
    workload()
    stats = jit.cache_stats()
    report = {"loops": len(stats), "loaded": sum(s["loaded"] for s in stats.values()),
              "compiled": sum(s["compiled"] for s in stats.values()),
              "seconds": round(time.perf_counter() - started, 3), "cache_dir": str(jit.CACHE_DIR),
              "cache_writable": writable}
    if writable:
        _write_info(report)
    if not quiet:
        where = "" if writable else " (not writable: compiled code kept elsewhere or in memory)"
        print(f"precompile: {report['loops']} loops, {report['loaded']} signatures loaded from the cache "
              f"and {report['compiled']} compiled in {report['seconds']:.1f} s; prebuilt cache "
              f"{jit.CACHE_DIR}{where}")
    return report


def _write_info(report: dict[str, Any]) -> None:
    """Write :data:`BUILD_INFO`: the report, with the versions and CPU the cache is for."""
    # lazy: Numba is optional here (main says when it is off); build() has loaded it
    import numba

    info = {**report, "numba": numba.__version__, "python": platform.python_version(),
            "cpu_name": numba.config.CPU_NAME or "host"}
    path = jit.CACHE_DIR / BUILD_INFO
    tmp = path.with_name(f"{BUILD_INFO}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(info, indent=1) + "\n")
    os.replace(tmp, path)


def _writable(folder: Path) -> bool:
    """Whether files can be created in ``folder`` (made when missing)."""
    probe = folder / f".probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m celeritas_core.install.precompile``: fill the prebuilt cache; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m celeritas_core.install.precompile",
                                     description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    if not jit.ENABLED:
        print("precompile: Numba is off (not installed, or CELERITAS_NO_JIT): nothing to compile",
              file=sys.stderr)
        return 1
    report = build()
    return 0 if report["cache_writable"] else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
