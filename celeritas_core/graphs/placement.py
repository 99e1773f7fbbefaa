"""The result of a placer: a frozen node → device assignment, and its evaluation kept apart.

A :class:`Placement` is what a placer decided (and how long it took); a
:class:`PlacementEvaluation` is what the simulator and the memory replay say of it (µs, bytes).
:func:`celeritas_core.placers.evaluate_placement` returns a new placement carrying its evaluation;
neither object changes after it is built. The ``celeritas-placement/1`` document is written by
:func:`celeritas_core.readwrite.formats.placement_to_json`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from celeritas_core.defaults import DEFAULT_ORDER_MODE, ENFORCED_ORDER, ORDER_MODES
from celeritas_core.errors import CeleritasInputError


def _frozen_array(values: Any, dtype: Any = np.float64) -> np.ndarray:
    """A read-only copy of ``values`` (a frozen dataclass must not be changed through its arrays)."""
    out = np.array(values, dtype=dtype)
    out.flags.writeable = False
    return out


@dataclass(frozen=True, eq=False)
class PlacementEvaluation:
    """What the simulator and the memory replay say of one placement on one cluster (µs, bytes).

    ``predicted_step_time_us`` is the simulator's step time; ``lower_bound_us`` is
    max(critical path without communication, total work / total speed).
    ``device_memory_bytes`` sums the ops' memory per device; ``device_peak_memory_bytes`` is the
    replay's liveness-aware peak per device (docs/simulator.md), which decides ``oom_devices``
    (and ``oom_excess_bytes``, the peak above capacity of each). ``device_busy_us`` is each
    device's compute time in the replay. ``memory_lower_bound_bytes`` bounds the fullest device's
    peak of *every* placement on these devices from below, and ``cannot_fit`` says that no
    placement fits them (:func:`~celeritas_core.simulation.memory.peak_lower_bound`). ``topology`` is the
    cluster's link topology in one line (:meth:`~celeritas_core.graphs.topology.Topology.describe`), None
    on a flat cluster.
    """

    predicted_step_time_us: float
    single_device_time_us: float
    lower_bound_us: float
    device_memory_bytes: np.ndarray
    device_peak_memory_bytes: np.ndarray
    single_device_peak_memory_bytes: float
    device_capacity_bytes: np.ndarray
    device_busy_us: np.ndarray
    oom_devices: tuple[str, ...] = ()
    oom_excess_bytes: Mapping[str, float] = field(default_factory=dict)
    memory_lower_bound_bytes: float = math.nan
    cannot_fit: bool = False
    topology: str | None = None

    def __post_init__(self) -> None:
        for name in ("device_memory_bytes", "device_peak_memory_bytes", "device_capacity_bytes",
                     "device_busy_us"):
            object.__setattr__(self, name, _frozen_array(getattr(self, name)))
        object.__setattr__(self, "oom_devices", tuple(self.oom_devices))
        object.__setattr__(self, "oom_excess_bytes", dict(self.oom_excess_bytes))

    @property
    def oom(self) -> bool:
        """True when some device's replayed peak exceeds its memory."""
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

    def extra_json(self) -> dict[str, Any]:
        """The evaluation's entries of a placement document's ``extra`` (docs/formats.md)."""
        out: dict[str, Any] = {}
        if self.oom_excess_bytes:
            out["oom_excess_bytes"] = dict(self.oom_excess_bytes)
        out["device_busy_us"] = [float(x) for x in self.device_busy_us]
        if math.isfinite(self.memory_lower_bound_bytes):
            out["memory_lower_bound_bytes"] = float(self.memory_lower_bound_bytes)
            out["cannot_fit"] = bool(self.cannot_fit)
        if self.topology is not None:
            out["topology"] = self.topology
        return out


_NOT_EVALUATED = PlacementEvaluation(
    predicted_step_time_us=math.nan, single_device_time_us=math.nan, lower_bound_us=math.nan,
    device_memory_bytes=np.zeros(0), device_peak_memory_bytes=np.zeros(0),
    single_device_peak_memory_bytes=math.nan, device_capacity_bytes=np.zeros(0),
    device_busy_us=np.zeros(0))


@dataclass(frozen=True, eq=False)
class PipelinePlan:
    """How a placement runs as a pipelined step of ``micro_batches`` micro-batches (µs, bytes).

    ``schedule`` is ``gpipe`` or ``1f1b`` (:mod:`celeritas_core.pipeline.schedules`);
    ``predicted_step_time_us`` and ``device_peak_memory_bytes`` are the pipelined step's replay
    (every micro-batch's activations in flight counted), ``oom_devices`` the devices whose peak
    exceeds their memory, ``warmup`` each device's warm-up in micro-batches (the most in flight
    on it). ``device_order[d]`` lists device ``d``'s runs in order as rows ``(op, micro_batch,
    accumulated_output)``: the op's index in the placement, its micro-batch (-1: run once per
    step), and for the addition that accumulates a gradient, the op's output it sums (-1 for
    the op itself). ``single_batch_step_time_us`` is the best single-batch placement's step that
    the search started from; ``cost_source`` says where the micro-batch costs came from (``fits``
    or ``scaled``, with ``op_floor_us`` the floor of the scaling).
    """

    micro_batches: int
    schedule: str
    predicted_step_time_us: float
    device_peak_memory_bytes: np.ndarray
    warmup: np.ndarray
    device_order: tuple[np.ndarray, ...]
    batch_size: int | None = None
    oom_devices: tuple[str, ...] = ()
    single_batch_step_time_us: float = math.nan
    cost_source: str = "scaled"
    op_floor_us: float = math.nan

    def __post_init__(self) -> None:
        object.__setattr__(self, "device_peak_memory_bytes", _frozen_array(self.device_peak_memory_bytes))
        object.__setattr__(self, "warmup", _frozen_array(self.warmup, np.int64))
        rows = tuple(_frozen_array(np.asarray(r).reshape(-1, 3), np.int64) for r in self.device_order)
        object.__setattr__(self, "device_order", rows)
        object.__setattr__(self, "oom_devices", tuple(self.oom_devices))

    @property
    def oom(self) -> bool:
        """True when some device's pipelined peak exceeds its memory."""
        return bool(self.oom_devices)


@dataclass(frozen=True, eq=False)
class Placement:
    """An assignment of every node of a graph to a device, as a placer made it.

    ``assignment[i]`` is the device index of node ``i`` of the graph named ``graph_name``
    (read-only); ``placement_seconds`` is the placer's wall clock; ``extra`` holds the placer's own
    details. ``evaluation`` is None until :func:`~celeritas_core.placers.evaluate_placement`
    returns a copy that carries one; the evaluation's figures are also readable on the placement
    itself (``predicted_step_time_us``, ``oom``, …: NaN or empty before evaluation).

    ``device_order`` (None until evaluated or read from a file that records it) lists, per
    device, its node indices in the order the replay ran them; ``order_mode`` says whether the
    runtime is to follow it (``"enforced"``: the predicted step is the replay with that order
    enforced) or to dispatch ready ops its own way (``"free"``; docs/simulator.md, "Enforced
    order").

    Made by :func:`~celeritas_core.placers.place`; read from a file with
    :func:`~celeritas_core.readwrite.formats.load_placement`.

    Examples
    --------
    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> placement = place(graph, Cluster.homogeneous(2, 1e9), "celeritas")
    >>> placement.assignment.tolist(), placement.devices, placement.device_of("c")
    ([0, 0, 1, 1], ('gpu:0', 'gpu:1'), 1)
    >>> placement.predicted_step_time_us, placement.single_device_time_us, placement.lower_bound_us
    (95.1, 120.0, 70.0)
    >>> round(placement.speedup_vs_single, 2), placement.oom
    (1.26, False)
    >>> placement.order_mode, [order.tolist() for order in placement.device_order]
    ('enforced', [[0, 1], [2, 3]])
    """

    placer: str
    params: dict[str, Any]
    devices: tuple[str, ...]
    node_names: tuple[str, ...]
    assignment: np.ndarray
    graph_name: str = ""
    placement_seconds: float = 0.0
    coarse_nodes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    evaluation: PlacementEvaluation | None = None
    device_order: tuple[np.ndarray, ...] | None = None
    order_mode: str = DEFAULT_ORDER_MODE
    pipeline: PipelinePlan | None = None
    """How it runs pipelined over micro-batches; None: one batch per step."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "assignment", _frozen_array(self.assignment, np.int64))
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "node_names", tuple(self.node_names))
        if self.order_mode not in ORDER_MODES:
            raise CeleritasInputError(f"order mode must be one of {', '.join(ORDER_MODES)}, "
                                      f"got {self.order_mode!r}")
        if self.device_order is not None:
            object.__setattr__(self, "device_order",
                               tuple(_frozen_array(order, np.int64) for order in self.device_order))

    @property
    def enforced_order(self) -> tuple[np.ndarray, ...] | None:
        """The order the runtime is to follow: ``device_order`` when ``order_mode`` is
        ``"enforced"``, else None (free dispatch)."""
        return self.device_order if self.order_mode == ENFORCED_ORDER else None

    @property
    def evaluated(self) -> PlacementEvaluation:
        """The evaluation, or one of NaN and empty figures when there is none yet."""
        return self.evaluation if self.evaluation is not None else _NOT_EVALUATED

    # the evaluation's figures, read through the placement (callers mostly hold placements)
    @property
    def predicted_step_time_us(self) -> float:
        """Simulated step time (µs)."""
        return self.evaluated.predicted_step_time_us

    @property
    def single_device_time_us(self) -> float:
        """Step time of the whole graph on the fastest device (µs)."""
        return self.evaluated.single_device_time_us

    @property
    def lower_bound_us(self) -> float:
        """Step-time lower bound (µs)."""
        return self.evaluated.lower_bound_us

    @property
    def device_memory_bytes(self) -> np.ndarray:
        """Summed op memory per device (bytes)."""
        return self.evaluated.device_memory_bytes

    @property
    def device_peak_memory_bytes(self) -> np.ndarray:
        """Replayed peak memory per device (bytes)."""
        return self.evaluated.device_peak_memory_bytes

    @property
    def single_device_peak_memory_bytes(self) -> float:
        """Replayed peak of the whole graph on one device (bytes)."""
        return self.evaluated.single_device_peak_memory_bytes

    @property
    def device_capacity_bytes(self) -> np.ndarray:
        """Memory of each device (bytes)."""
        return self.evaluated.device_capacity_bytes

    @property
    def device_busy_us(self) -> np.ndarray:
        """Compute time of each device in the replay (µs)."""
        return self.evaluated.device_busy_us

    @property
    def oom_devices(self) -> tuple[str, ...]:
        """Devices whose replayed peak exceeds their memory."""
        return self.evaluated.oom_devices

    @property
    def oom(self) -> bool:
        """True when some device's replayed peak exceeds its memory."""
        return self.evaluated.oom

    @property
    def memory_lower_bound_bytes(self) -> float:
        """What the fullest device holds at least, whatever the placement (bytes)."""
        return self.evaluated.memory_lower_bound_bytes

    @property
    def cannot_fit(self) -> bool:
        """True when no placement on these devices fits
        (:func:`~celeritas_core.simulation.memory.peak_lower_bound`)."""
        return self.evaluated.cannot_fit

    @property
    def speedup_vs_single(self) -> float:
        """Single-device time / predicted step time (>1: faster than one device)."""
        return self.evaluated.speedup_vs_single

    @property
    def gap_to_lower_bound(self) -> float:
        """Predicted step time above the lower bound (0.1 = 10 %)."""
        return self.evaluated.gap_to_lower_bound

    def device_of(self, node: str) -> int:
        """Device index of the node named ``node``."""
        return int(self.assignment[self.node_names.index(node)])
