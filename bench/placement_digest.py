"""Digest of every placer's placements on flat clusters: a check that a change leaves them as they were.

Runs every registered placer (``optimal`` only on graphs it admits) on the quick instances of every
family (``celeritas_core.generators.families``) and on the example graphs
(``examples/graphs/*.json``, on 2 and 4 devices of 60 % and 150 % of the model), all on *flat*
clusters, and prints one line per (instance, placer): a SHA-256 prefix of the assignment's bytes
and the simulated step time (µs, as ``repr``, so every bit shows). ``--out FILE`` writes them as
JSON; ``--against FILE`` compares with a file written before a change and exits 1 when any digest
or step differs.

Usage (the tree first on the path)::

    PYTHONPATH=/path/to/old/tree python bench/placement_digest.py --out before.json
    PYTHONPATH=$PWD python bench/placement_digest.py --against before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from celeritas_core.errors import CeleritasInputError  # noqa: E402
from celeritas_core.generators.families import FAMILIES, benchmark_instances  # noqa: E402
from celeritas_core.graphs.cluster import Cluster  # noqa: E402
from celeritas_core.graphs.graph import Graph  # noqa: E402
from celeritas_core.placers import PLACERS, place  # noqa: E402
from celeritas_core.readwrite.formats import load_graph  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_SETUPS = ((2, 0.6), (4, 0.6), (4, 1.5))


def instances() -> list[tuple[str, Graph, Cluster]]:
    """The quick family instances and the example graphs on flat clusters."""
    out = [(i.name, i.graph, i.cluster) for f in FAMILIES for i in benchmark_instances(f, quick=True)]
    for path in sorted((ROOT / "examples" / "graphs").glob("*.json")):
        graph = load_graph(path)
        for devices, share in EXAMPLE_SETUPS:
            cluster = Cluster.homogeneous(devices, share * graph.total_memory_bytes)
            out.append((f"{path.stem}/{devices}x{share:.0%}", graph, cluster))
    return out


def digests() -> dict[str, dict[str, Any]]:
    """``{instance/placer: {"assignment": sha256 prefix, "step_us": repr}}`` (or the error)."""
    out: dict[str, dict[str, Any]] = {}
    for name, graph, cluster in instances():
        for placer in sorted(PLACERS):
            params: dict[str, Any] = {}
            if placer == "optimal":
                if graph.num_nodes > 30 or cluster.num_devices > 4:
                    continue
                params = {"time_limit": 30, "max_ops": max(graph.num_nodes, 1)}
            key = f"{name}/{placer}"
            try:
                p = place(graph, cluster, placer, params)
            except CeleritasInputError as exc:
                out[key] = {"error": exc.message}
                continue
            digest = hashlib.sha256(p.assignment.astype("<i8").tobytes()).hexdigest()[:16]
            out[key] = {"assignment": digest, "step_us": repr(float(p.predicted_step_time_us))}
            print(f"{key:70s} {digest} {out[key]['step_us']}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the digests to this JSON file")
    parser.add_argument("--against", type=Path,
                        help="compare with digests written before; exit 1 on a difference")
    args = parser.parse_args(argv)
    found = digests()
    if args.out:
        args.out.write_text(json.dumps(found, indent=1, sort_keys=True))
    if args.against:
        before = json.loads(args.against.read_text())
        differ = sorted(k for k in set(before) | set(found) if before.get(k) != found.get(k))
        for key in differ:
            print(f"DIFFERS {key}: before {before.get(key)} now {found.get(key)}")
        print(f"{len(found)} placements, {len(differ)} differ from {args.against}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
