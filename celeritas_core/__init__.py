"""Celeritas placement engine: pure numpy/networkx/scipy algorithms over dataflow graphs.

Framework adapters (TensorFlow) live in their own subpackages and are imported lazily.
"""

from celeritas_core.cluster import Cluster
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graph import Graph
from celeritas_core.placement import Placement

__all__ = ["CeleritasInputError", "Cluster", "Graph", "Placement"]
__version__ = "0.1.0"
