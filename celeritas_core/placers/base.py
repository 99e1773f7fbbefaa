"""The one placer interface: ``(graph, cluster, params) -> Placement``, a registry and evaluation.

Every placer is a plain function ``fn(graph, cluster, params) -> PlacerOutput`` registered with
a frozen dataclass of its parameters (typed fields with defaults, descriptions and ranges, made
with :func:`param`); the :class:`ParamSpec` list the CLI, the comparison and the pipeline's form
read is derived from those fields, so all placers are treated alike. :func:`place` validates the
parameters, times the placer, checks its output and evaluates it (simulated step time, memory,
OOM, bounds).
"""

from __future__ import annotations

import math
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from celeritas_core.compiled import jit
from celeritas_core.defaults import DEFAULT_ORDER_MODE
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.placement import Placement, PlacementEvaluation
from celeritas_core.simulation.bounds import lower_bound_us, single_device_time_us
from celeritas_core.simulation.memory import (
    memory_profile,
    one_device_peak_bytes,
    peak_lower_bound,
    planning_memory_bytes,
)
from celeritas_core.simulation.simulator import DOCUMENTED_DISPATCH, recorded_order, simulate


@dataclass
class PlacerOutput:
    """What a placer function returns: the device index of every node, plus optional details."""

    assignment: np.ndarray
    coarse_nodes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


_TRUE, _FALSE = ("true", "1"), ("false", "0")


@dataclass(frozen=True)
class ParamSpec:
    """One tunable parameter of a placer, with its default and allowed range, derived from a field
    of the placer's parameter dataclass (:func:`param_specs`)."""

    name: str
    default: float | int | bool
    description: str
    kind: type = float
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    safety_net: bool = False
    """A wall-clock limit that only cuts optional work on a machine far slower than expected, not a
    budget that shapes the result (:mod:`celeritas_core.placers.budget`): summaries name it only
    when it cut something."""

    def coerce(self, value: Any, placer: str) -> float | int | bool:
        """Check ``value`` against type and range; raise CeleritasInputError naming the parameter.

        A boolean parameter takes ``true``/``false`` and, as the flags and older placement files
        spell it, ``1``/``0``."""
        where = f"placer {placer!r}: parameter {self.name!r}"
        if self.kind is bool:
            return _coerce_bool(value, where)
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise CeleritasInputError(f"{where}: expected a number, got {value!r}")
        try:
            num = float(value)
        except ValueError:
            raise CeleritasInputError(f"{where}: expected a number, got {value!r}") from None
        if not math.isfinite(num):
            raise CeleritasInputError(f"{where}: must be finite, got {value!r}")
        if self.kind is int:
            if not num.is_integer():
                raise CeleritasInputError(f"{where}: expected an integer, got {value!r}")
            num = int(num)
        if self.minimum is not None and (
            num < self.minimum or (self.exclusive_minimum and num == self.minimum)
        ):
            op = ">" if self.exclusive_minimum else ">="
            raise CeleritasInputError(f"{where}: must be {op} {self.minimum:g}, got {value!r}")
        if self.maximum is not None and num > self.maximum:
            limit = f"{int(self.maximum):,}" if self.kind is int else f"{self.maximum:g}"
            raise CeleritasInputError(f"{where}: must be <= {limit}, got {value!r}")
        return num


def _coerce_bool(value: Any, where: str) -> bool:
    """``value`` as a boolean: a bool, 0/1, or one of "true", "false", "1", "0" (any case)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str) else None
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise CeleritasInputError(f"{where}: expected true or false (or 1 or 0), got {value!r}")


def param(default: float | int | bool, description: str, *, minimum: float | None = None,
          maximum: float | None = None, exclusive_minimum: bool = False, safety_net: bool = False) -> Any:
    """A field of a placer's parameter dataclass: its default, a one-line description, its range
    and whether it is a wall-clock safety net (:attr:`ParamSpec.safety_net`), what
    :func:`param_specs` turns into a :class:`ParamSpec`."""
    return field(default=default, metadata={"description": description, "minimum": minimum,
                                            "maximum": maximum, "exclusive_minimum": exclusive_minimum,
                                            "safety_net": safety_net})


@dataclass(frozen=True)
class NoParams:
    """The parameters of a placer that has none."""


def param_specs(params_type: type) -> tuple[ParamSpec, ...]:
    """The :class:`ParamSpec` of every field of a placer's parameter dataclass, in field order
    (as scikit-learn derives a model's parameters from its constructor)."""
    hints = typing.get_type_hints(params_type)
    return tuple(ParamSpec(f.name, f.default, f.metadata["description"], hints[f.name],
                           f.metadata["minimum"], f.metadata["maximum"], f.metadata["exclusive_minimum"],
                           f.metadata["safety_net"])
                 for f in fields(params_type))


PlacerFn = Callable[[Graph, Cluster, Any], PlacerOutput]


@dataclass(frozen=True)
class PlacerSpec:
    """A registered placer: its name, function, one-line summary and its parameter dataclass
    (the function takes an instance of it)."""

    name: str
    func: PlacerFn
    summary: str
    params_type: type = NoParams

    @property
    def params(self) -> tuple[ParamSpec, ...]:
        """The placer's parameters, from the fields of :attr:`params_type`."""
        return param_specs(self.params_type)

    def resolve_params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Defaults overlaid with ``params`` (the JSON form written to a placement); unknown
        names and bad values are input errors."""
        given = dict(params or {})
        known = {p.name: p for p in self.params}
        unknown = sorted(set(given) - set(known))
        if unknown:
            allowed = ", ".join(known) or "none"
            raise CeleritasInputError(
                f"placer {self.name!r}: unknown parameter {unknown[0]!r} (allowed: {allowed})"
            )
        return {
            name: spec.coerce(given[name], self.name) if name in given else spec.default
            for name, spec in known.items()
        }

    def typed_params(self, params: Mapping[str, Any] | None) -> Any:
        """The placer's parameter dataclass built from ``params`` (checked as by
        :meth:`resolve_params`)."""
        return self.params_type(**self.resolve_params(params))


PLACERS: dict[str, PlacerSpec] = {}


def register_placer(spec: PlacerSpec) -> PlacerSpec:
    """Add ``spec`` to the registry under its name."""
    PLACERS[spec.name] = spec
    return spec


def get_placer(name: str) -> PlacerSpec:
    """Look up a placer by name, with a clear error listing the known ones.

    Parameters
    ----------
    name : str
        A registered placer's name (:data:`PLACERS`).

    Returns
    -------
    PlacerSpec
        The placer: its function, one-line summary and parameter dataclass.

    Raises
    ------
    CeleritasInputError
        When no placer has that name; the message lists the known ones.

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> spec = get_placer("m-sct")
    >>> [p.name for p in spec.params]
    ['threshold', 'fusion', 'live_memory', 'baechi_model']
    >>> spec.resolve_params(None)
    {'threshold': 0.1, 'fusion': True, 'live_memory': True, 'baechi_model': True}
    >>> spec.typed_params({"threshold": 0.3})
    SCTParams(threshold=0.3, fusion=True, live_memory=True, baechi_model=True)
    >>> get_placer("fastest")
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: unknown placer 'fastest' (known: alpa-stages, celeritas, ...)
    """
    try:
        return PLACERS[name]
    except KeyError:
        raise CeleritasInputError(
            f"unknown placer {name!r} (known: {', '.join(sorted(PLACERS))})"
        ) from None


def place(
    graph: Graph,
    cluster: Cluster,
    placer: str = "celeritas",
    params: Mapping[str, Any] | None = None,
    *,
    evaluate: bool = True,
    headroom: float = 0.0,
    order_mode: str = DEFAULT_ORDER_MODE,
) -> Placement:
    """Run placer ``placer`` on ``graph`` over ``cluster`` and return an evaluated Placement.

    The placer plans with :func:`~celeritas_core.simulation.memory.planning_memory_bytes` (liveness-aware
    when the graph has liveness fields) on devices that keep ``headroom`` (a fraction) of their
    memory free; the evaluation checks the replayed peak against the full capacity.
    ``placement_seconds`` counts the planning bytes and the placer (wall clock), not the simulation
    that fills ``predicted_step_time_us``, nor importing Numba (before the clock starts) and
    loading or compiling the compiled loops (:func:`~celeritas_core.compiled.jit.compile_clock`).

    Parameters
    ----------
    graph : Graph
        The ops to place (costs in µs and bytes).
    cluster : Cluster
        The devices and the transfer model.
    placer : str, optional
        A registered placer's name (:data:`PLACERS`; ``celeritas`` by default).
    params : mapping, optional
        The placer's parameters by name (strings are accepted as the command line gives them);
        the others keep their defaults (:meth:`PlacerSpec.resolve_params`).
    evaluate : bool, optional
        Replay the placement and attach its evaluation (default True); False returns the bare
        placement (figures NaN), for :func:`evaluate_placement` later.
    headroom : float, optional
        Fraction in [0, 1) of each device's memory the placer leaves free, for what the planning
        bytes do not see (received copies); the evaluation still checks the full capacity.
    order_mode : str, optional
        ``"enforced"`` (default): the runtime is to run each device's ops in the order the
        evaluation's replay ran them (recorded in ``device_order``); ``"free"``: in its own.

    Returns
    -------
    Placement
        The device of every op, the resolved parameters, the placer's wall-clock seconds and, with
        ``evaluate``, the simulated step time (µs), the replayed peak memory of every device
        (bytes), the devices that overflow (OOM), the reference times and each device's order.

    Raises
    ------
    CeleritasInputError
        An unknown placer, a parameter it does not take or a value out of range, or a
        ``headroom`` outside [0, 1).

    See Also
    --------
    compare_placers : several placers on one graph, side by side.
    simulate : the replay that scores a placement.

    Notes
    -----
    No placer raises when the model does not fit: the placement is then best effort and
    ``oom_devices`` names the devices whose replayed peak exceeds their memory.

    Examples
    --------
    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> cluster = Cluster.homogeneous(2, 350)   # 350 bytes each: the graph's 600 do not fit on one
    >>> placement = place(graph, cluster, "celeritas", {"R": 200})
    >>> placement.assignment.tolist(), placement.predicted_step_time_us, placement.oom
    ([0, 0, 1, 1], 95.1, False)
    >>> place(graph, cluster, "single").oom_devices
    ('gpu:0',)
    >>> place(graph, cluster, "celeritas", {"R": 0})
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: placer 'celeritas': parameter 'R': must be >= 1, got 0
    """
    spec = get_placer(placer)
    resolved = spec.resolve_params(params)
    typed = spec.params_type(**resolved)
    planning_cluster = cluster.with_headroom(headroom)
    jit.load_numba()  # start-up, not placement: the loops then run compiled, whatever the size
    with jit.compile_clock() as compiling:
        start = time.perf_counter()
        planning = graph if graph.liveness is None else graph.with_memory(planning_memory_bytes(graph))
        out = spec.func(planning, planning_cluster, typed)
        wall = time.perf_counter() - start
    seconds = max(0.0, wall - compiling.seconds)
    assignment = np.asarray(out.assignment, dtype=np.int64)
    if assignment.shape != (graph.num_nodes,) or (
        len(assignment) and (assignment.min() < 0 or assignment.max() >= cluster.num_devices)
    ):
        raise RuntimeError(f"placer {placer!r} returned an invalid assignment")
    if not colocation_respected(graph, assignment):
        raise RuntimeError(f"placer {placer!r} split a co-location group")
    placement = Placement(
        placer=placer,
        params=resolved,
        devices=cluster.device_names,
        node_names=graph.node_names,
        assignment=assignment,
        graph_name=graph.name,
        placement_seconds=seconds,
        coarse_nodes=out.coarse_nodes,
        extra=dict(out.extra, **({"headroom": float(headroom)} if headroom else {})),
        order_mode=order_mode,
    )
    return evaluate_placement(graph, cluster, placement) if evaluate else placement


def evaluate_placement(graph: Graph, cluster: Cluster, placement: Placement, *,
                       dispatch: str = DOCUMENTED_DISPATCH) -> Placement:
    """``placement`` with its :class:`~celeritas_core.graphs.placement.PlacementEvaluation` on ``cluster``:
    simulated step time, memory sums and replayed peaks, OOM, and the reference times (a new
    object; ``placement`` is unchanged). ``dispatch`` names the order that breaks ties between
    ready ops in the replay (:func:`~celeritas_core.simulation.simulator.dispatch_order`; default the
    documented ``"rank"``, the one every placer is scored with); the peaks follow that replay.
    A placement whose ``order_mode`` is ``"enforced"`` and that records a ``device_order`` (read
    from a file) is replayed with that order enforced; any other gets the order its replay ran
    recorded in ``device_order``.

    Parameters
    ----------
    graph : Graph
        The graph ``placement`` places (same node count).
    cluster : Cluster
        The devices to evaluate on (at least as many as the placement uses).
    placement : Placement
        A placement of ``graph``, evaluated or not.
    dispatch : str, optional
        ``"rank"`` (default), ``"fifo"`` or ``"random:N"``
        (:func:`~celeritas_core.simulation.simulator.check_dispatch`).

    Returns
    -------
    Placement
        A copy carrying a :class:`~celeritas_core.graphs.placement.PlacementEvaluation`; its
        ``devices`` are ``cluster``'s names.

    Raises
    ------
    CeleritasInputError
        When the placement's node count differs from the graph's, or it uses a device the
        cluster does not have.

    Examples
    --------
    >>> from celeritas_core import Cluster, Graph, evaluate_placement, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> cluster = Cluster.homogeneous(2, 1e9)
    >>> bare = place(graph, cluster, "m-topo", evaluate=False)
    >>> bare.assignment.tolist(), bare.predicted_step_time_us
    ([0, 0, 0, 1], nan)
    >>> evaluated = evaluate_placement(graph, cluster, bare)
    >>> evaluated.predicted_step_time_us, evaluated.device_memory_bytes.tolist()
    (145.1, [500.0, 100.0])
    """
    if len(placement.assignment) != graph.num_nodes:
        raise CeleritasInputError("placement does not match the graph (different node count)")
    if placement.assignment.max() >= cluster.num_devices:
        raise CeleritasInputError(
            f"placement uses device {int(placement.assignment.max())} but the cluster has "
            f"{cluster.num_devices} devices"
        )
    enforced = placement.enforced_order
    result = simulate(graph, cluster, placement.assignment, dispatch=dispatch, device_order=enforced)
    order = enforced if enforced is not None else recorded_order(result, placement.assignment,
                                                                 cluster.num_devices)
    peak = memory_profile(graph, cluster.num_devices, placement.assignment, result).peak_bytes
    over = np.flatnonzero(peak > cluster.memory_bytes)
    bound = peak_lower_bound(graph)
    evaluation = PlacementEvaluation(
        predicted_step_time_us=result.step_time_us,
        single_device_time_us=single_device_time_us(graph, cluster),
        lower_bound_us=lower_bound_us(graph, cluster),
        device_memory_bytes=device_memory(graph, cluster, placement.assignment),
        device_peak_memory_bytes=peak,
        single_device_peak_memory_bytes=one_device_peak_bytes(graph),
        device_capacity_bytes=cluster.memory_bytes,
        device_busy_us=result.device_busy_us,
        oom_devices=tuple(cluster.device_names[d] for d in over),
        oom_excess_bytes={cluster.device_names[d]: float(peak[d] - cluster.memory_bytes[d]) for d in over},
        memory_lower_bound_bytes=bound.fullest_device_bytes(cluster.num_devices),
        cannot_fit=bound.cannot_fit(cluster.memory_bytes),
        topology=cluster.topology.describe() if cluster.topology is not None else None,
    )
    return replace(placement, devices=cluster.device_names, evaluation=evaluation, device_order=order)


def device_memory(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> np.ndarray:
    """Bytes of op memory held by each device under ``assignment``."""
    return np.bincount(assignment, weights=graph.memory_bytes, minlength=cluster.num_devices)
