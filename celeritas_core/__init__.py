"""Celeritas placement engine: pure numpy/networkx/scipy algorithms over dataflow graphs.

The loops over every op and edge are compiled by Numba when it is installed
(:mod:`celeritas_core.compiled.jit`).

Framework adapters (TensorFlow: ``celeritas_tf``), the pipeline and the CLI live in their own
packages above this one; nothing here imports them (``lint-imports`` checks it).

The user-facing API is importable from here (``from celeritas_core import Graph, Cluster, place``;
:data:`__all__` lists it). Every name is imported on first access (PEP 562), not with the
package: importing any module of it (``celeritas_core.errors``, say) then costs no numpy, which
``celeritas --help`` relies on to start fast (tests/cli/test_startup.py). The subpackages load the
same way, on first access: ``celeritas_core.placers.celeritas.CeleritasParams`` after
``import celeritas_core`` alone.

Examples
--------
>>> from celeritas_core import Cluster, Graph, place
>>> graph = Graph.from_arrays(name="chain", node_names=["a", "b", "c"], time_us=[10.0, 20.0, 30.0],
...                           memory_bytes=[100, 200, 300], edge_src=[0, 1], edge_dst=[1, 2],
...                           edge_bytes=[1000, 2000])
>>> placement = place(graph, Cluster.homogeneous(2, 1e9), "m-topo")
>>> placement.predicted_step_time_us
60.0
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from typing import TYPE_CHECKING, Any

from celeritas_core.errors import CeleritasInputError

if TYPE_CHECKING:
    from celeritas_core.generators.families import (
        benchmark_instances,
        inception_graph,
        layered_dag,
        towers_graph,
    )
    from celeritas_core.generators.synthetic import (
        paper_shaped_graph,
        small_training_graph,
        training_step_graph,
    )
    from celeritas_core.graphs.cluster import Cluster
    from celeritas_core.graphs.graph import Graph, Liveness
    from celeritas_core.graphs.levels import blevel, ccr, cpath, critical_path_length_us, tlevel
    from celeritas_core.graphs.orders import cpd_topo_order, dfs_topo_order, is_topological, m_topo_order
    from celeritas_core.graphs.placement import Placement
    from celeritas_core.placers import PLACERS, evaluate_placement, get_placer, place
    from celeritas_core.placers.compare import compare_placers
    from celeritas_core.readwrite.formats import (
        load_cluster,
        load_graph,
        load_placement,
        save_cluster,
        save_graph,
        save_placement,
    )
    from celeritas_core.readwrite.units import (
        format_bytes,
        format_change,
        format_us,
        parse_device_memory,
        parse_size,
    )
    from celeritas_core.simulation.bounds import lower_bound_us, single_device_time_us
    from celeritas_core.simulation.memory import memory_profile, one_device_peak_bytes, peak_lower_bound
    from celeritas_core.simulation.simulator import simulate
    from celeritas_core.statistics.regression import fit_costs, relative_deviation

#: The module that defines each public name, imported on first access (module docstring).
_LAZY: dict[str, str] = {
    # the model: graphs, clusters, placements
    "Graph": "celeritas_core.graphs.graph",
    "Cluster": "celeritas_core.graphs.cluster",
    "Placement": "celeritas_core.graphs.placement",
    "Liveness": "celeritas_core.graphs.graph",
    # placing, replaying, comparing
    "PLACERS": "celeritas_core.placers",
    "place": "celeritas_core.placers",
    "get_placer": "celeritas_core.placers",
    "evaluate_placement": "celeritas_core.placers",
    "simulate": "celeritas_core.simulation.simulator",
    "compare_placers": "celeritas_core.placers.compare",
    # memory over a replay
    "memory_profile": "celeritas_core.simulation.memory",
    "one_device_peak_bytes": "celeritas_core.simulation.memory",
    "peak_lower_bound": "celeritas_core.simulation.memory",
    # files
    "load_graph": "celeritas_core.readwrite.formats",
    "save_graph": "celeritas_core.readwrite.formats",
    "load_cluster": "celeritas_core.readwrite.formats",
    "save_cluster": "celeritas_core.readwrite.formats",
    "load_placement": "celeritas_core.readwrite.formats",
    "save_placement": "celeritas_core.readwrite.formats",
    # orders, levels, critical path, bounds
    "m_topo_order": "celeritas_core.graphs.orders",
    "dfs_topo_order": "celeritas_core.graphs.orders",
    "cpd_topo_order": "celeritas_core.graphs.orders",
    "is_topological": "celeritas_core.graphs.orders",
    "tlevel": "celeritas_core.graphs.levels",
    "blevel": "celeritas_core.graphs.levels",
    "cpath": "celeritas_core.graphs.levels",
    "critical_path_length_us": "celeritas_core.graphs.levels",
    "ccr": "celeritas_core.graphs.levels",
    "lower_bound_us": "celeritas_core.simulation.bounds",
    "single_device_time_us": "celeritas_core.simulation.bounds",
    # costs from profiles (Standard Evaluation)
    "fit_costs": "celeritas_core.statistics.regression",
    "relative_deviation": "celeritas_core.statistics.regression",
    # graph generators
    "training_step_graph": "celeritas_core.generators.synthetic",
    "paper_shaped_graph": "celeritas_core.generators.synthetic",
    "small_training_graph": "celeritas_core.generators.synthetic",
    "benchmark_instances": "celeritas_core.generators.families",
    "inception_graph": "celeritas_core.generators.families",
    "towers_graph": "celeritas_core.generators.families",
    "layered_dag": "celeritas_core.generators.families",
    # sizes and durations
    "parse_size": "celeritas_core.readwrite.units",
    "parse_device_memory": "celeritas_core.readwrite.units",
    "format_bytes": "celeritas_core.readwrite.units",
    "format_us": "celeritas_core.readwrite.units",
    "format_change": "celeritas_core.readwrite.units",
}

#: The public API, sorted (grouped by topic in :data:`_LAZY`).
__all__ = [
    "PLACERS", "CeleritasInputError", "Cluster", "Graph", "Liveness", "Placement", "benchmark_instances",
    "blevel", "ccr", "compare_placers", "cpath", "cpd_topo_order", "critical_path_length_us",
    "dfs_topo_order", "evaluate_placement", "fit_costs", "format_bytes", "format_change", "format_us",
    "get_placer", "inception_graph", "is_topological", "layered_dag", "load_cluster", "load_graph",
    "load_placement", "lower_bound_us", "m_topo_order", "memory_profile", "one_device_peak_bytes",
    "paper_shaped_graph", "parse_device_memory", "parse_size", "peak_lower_bound", "place",
    "relative_deviation", "save_cluster", "save_graph", "save_placement", "simulate",
    "single_device_time_us", "small_training_graph", "tlevel", "towers_graph", "training_step_graph",
]


#: The subpackages (``graphs``, ``placers``, ...): the package's folders with an ``__init__.py``, so a
#: new one needs no entry. ``celeritas_core.placers`` works after ``import celeritas_core`` alone,
#: imported on first access like the names of :data:`_LAZY` (a directory listing, not
#: ``pkgutil.iter_modules``, which imports ``inspect``: no subpackage loads with the package).
_SUBPACKAGES = frozenset(entry.name for folder in __path__ for entry in os.scandir(folder)
                         if entry.is_dir() and os.path.isfile(os.path.join(entry.path, "__init__.py")))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")  # the import binds it here too
    if name == "__version__":  # declared once, in pyproject.toml: the installed distribution's
        return importlib.metadata.version("celeritas")
    raise AttributeError(f"module 'celeritas_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBPACKAGES})
