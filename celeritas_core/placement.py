"""The result of a placer: node → device assignment plus its simulated and bounding figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(eq=False)
class Placement:
    """An assignment of every node of a graph to a device, with evaluation figures (µs, bytes).

    ``assignment[i]`` is the device index of node ``i`` of the graph named ``graph_name``.
    ``predicted_step_time_us`` is the simulator's step time; ``lower_bound_us`` is
    max(critical path without communication, total work / total speed).
    ``device_memory_bytes`` sums the ops' memory per device; ``device_peak_memory_bytes`` is the
    replay's liveness-aware peak per device (docs/simulator.md), which decides ``oom_devices``.
    """

    placer: str
    params: dict[str, Any]
    devices: tuple[str, ...]
    node_names: tuple[str, ...]
    assignment: np.ndarray
    graph_name: str = ""
    predicted_step_time_us: float = float("nan")
    single_device_time_us: float = float("nan")
    lower_bound_us: float = float("nan")
    device_memory_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    device_peak_memory_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    single_device_peak_memory_bytes: float = float("nan")
    device_capacity_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    oom_devices: tuple[str, ...] = ()
    placement_seconds: float = 0.0
    coarse_nodes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def oom(self) -> bool:
        """True when some device holds more memory than it has."""
        return bool(self.oom_devices)

    @property
    def speedup_vs_single(self) -> float:
        """Single-device time divided by the predicted step time (>1 is faster than one device);
        1.0 when both are 0 (a graph without op times, e.g. static costs)."""
        if self.predicted_step_time_us == 0:
            return 1.0 if self.single_device_time_us == 0 else float("inf")
        return self.single_device_time_us / self.predicted_step_time_us

    @property
    def gap_to_lower_bound(self) -> float:
        """Relative distance of the predicted step time above the lower bound (0.1 = 10 %); 0 when
        both are 0."""
        if self.lower_bound_us == 0:
            return 0.0 if self.predicted_step_time_us == 0 else float("inf")
        return self.predicted_step_time_us / self.lower_bound_us - 1.0

    def device_of(self, node: str) -> int:
        """Device index of the node named ``node``."""
        return int(self.assignment[self.node_names.index(node)])

    def to_json(self) -> dict[str, Any]:
        """The ``celeritas-placement/1`` document (see docs/formats.md)."""
        doc: dict[str, Any] = {
            "format": "celeritas-placement/1",
            "graph": self.graph_name,
            "placer": self.placer,
            "params": self.params,
            "devices": list(self.devices),
            "assignment": dict(zip(self.node_names, self.assignment.tolist(), strict=True)),
            "predicted_step_time_us": _num(self.predicted_step_time_us),
            "single_device_time_us": _num(self.single_device_time_us),
            "lower_bound_us": _num(self.lower_bound_us),
            "gap_to_lower_bound": _num(self.gap_to_lower_bound),
            "device_memory_bytes": [int(x) for x in self.device_memory_bytes],
            "device_peak_memory_bytes": [int(x) for x in self.device_peak_memory_bytes],
            "single_device_peak_memory_bytes": _num(self.single_device_peak_memory_bytes),
            "device_capacity_bytes": [int(x) for x in self.device_capacity_bytes],
            "oom": self.oom,
            "oom_devices": list(self.oom_devices),
            "placement_seconds": self.placement_seconds,
        }
        if self.coarse_nodes is not None:
            doc["coarse_nodes"] = self.coarse_nodes
        if self.extra:
            doc["extra"] = self.extra
        return doc


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None
