"""Placers: every one is ``(graph, cluster, params) -> Placement`` through :func:`place`."""

from celeritas_core.placers.base import (
    PLACERS,
    NoParams,
    ParamSpec,
    PlacerOutput,
    PlacerSpec,
    evaluate_placement,
    get_placer,
    param,
    param_specs,
    place,
    register_placer,
)

__all__ = [
    "PLACERS",
    "NoParams",
    "ParamSpec",
    "PlacerOutput",
    "PlacerSpec",
    "evaluate_placement",
    "get_placer",
    "param",
    "param_specs",
    "place",
    "register_placer",
]

# Importing the modules registers their placers (pymetis is imported only when metis runs).
from celeritas_core.placers import celeritas as _celeritas  # noqa: F401
from celeritas_core.placers import etf as _etf  # noqa: F401
from celeritas_core.placers import heft as _heft  # noqa: F401
from celeritas_core.placers import metis as _metis  # noqa: F401
from celeritas_core.placers import optimal as _optimal  # noqa: F401
from celeritas_core.placers import pipeline_stages as _pipeline_stages  # noqa: F401
from celeritas_core.placers import simple as _simple  # noqa: F401
from celeritas_core.placers import stages as _stages  # noqa: F401
