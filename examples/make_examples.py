"""Regenerate the bundled example graphs under examples/graphs/ (seeded, so the output is stable).

Run: ``.venv/bin/python examples/make_examples.py``. Writes ``training_step_small.json``, the
407-op synthetic training step that ``make demo`` places on 4 devices of 600 MiB.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from celeritas_core.generators.synthetic import small_training_graph
from celeritas_core.readwrite.formats import save_graph

GRAPHS_DIR = Path(__file__).resolve().parent / "graphs"


def main(argv: list[str] | None = None) -> int:
    """Write the example graphs atomically; print one line per file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=GRAPHS_DIR,
                        help="where to write the graphs (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default: %(default)s)")
    args = parser.parse_args(argv)
    graph = small_training_graph(seed=args.seed)
    path = save_graph(graph, args.out_dir / f"{graph.name}.json")
    print(f"wrote {path}: {graph.num_nodes} ops, {graph.num_edges} edges, "
          f"{path.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
