"""Placers: every one is ``(graph, cluster, params) -> Placement`` through :func:`place`."""

from celeritas_core.placers.base import (
    PLACERS,
    ParamSpec,
    PlacerOutput,
    PlacerSpec,
    evaluate_placement,
    get_placer,
    place,
    register_placer,
)

__all__ = [
    "PLACERS",
    "ParamSpec",
    "PlacerOutput",
    "PlacerSpec",
    "evaluate_placement",
    "get_placer",
    "place",
    "register_placer",
]

# Importing the modules registers their placers.
from celeritas_core.placers import celeritas as _celeritas  # noqa: F401
