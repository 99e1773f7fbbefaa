"""Celeritas placement engine: pure numpy/networkx/scipy algorithms over dataflow graphs.

The loops over every op and edge are compiled by Numba when it is installed (:mod:`celeritas_core.jit`).

Framework adapters (TensorFlow: ``celeritas_tf``), the pipeline and the CLI live in their own
packages above this one; nothing here imports them (``lint-imports`` checks it).

``Cluster``, ``Graph`` and ``Placement`` are imported on first access (PEP 562), not with the
package: importing any module of it (``celeritas_core.errors``, say) then costs no numpy, which
``celeritas --help`` relies on to start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from celeritas_core.errors import CeleritasInputError

if TYPE_CHECKING:
    from celeritas_core.cluster import Cluster
    from celeritas_core.graph import Graph
    from celeritas_core.placement import Placement

__all__ = ["CeleritasInputError", "Cluster", "Graph", "Placement"]
__version__ = "0.1.0"

_LAZY = {"Cluster": "celeritas_core.cluster", "Graph": "celeritas_core.graph",
         "Placement": "celeritas_core.placement"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'celeritas_core' has no attribute {name!r}")
