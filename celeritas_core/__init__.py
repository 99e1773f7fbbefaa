"""Celeritas placement engine: pure numpy/networkx/scipy algorithms over dataflow graphs.

The loops over every op and edge are compiled by Numba when it is installed (:mod:`celeritas_core.jit`).

Framework adapters (TensorFlow: ``celeritas_tf``), the pipeline and the CLI live in their own
packages above this one; nothing here imports them (``lint-imports`` checks it).
"""

from celeritas_core.cluster import Cluster
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graph import Graph
from celeritas_core.placement import Placement

__all__ = ["CeleritasInputError", "Cluster", "Graph", "Placement"]
__version__ = "0.1.0"
