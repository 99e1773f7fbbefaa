"""Run several placers on one graph and cluster, evaluate each with the same simulator, rank them.

The comparison answers "which placement should I run, and what does it cost me to find it?":
per placer the simulated step time (µs), speed-up over one device, gap to the lower bound,
placement seconds, peak device memory (bytes and fraction of capacity) and OOM, and the step under
the other dispatch orders (:data:`~celeritas_core.simulation.simulator.ALTERNATIVE_DISPATCH`: the median's
ratio to the predicted step says how much of the prediction rests on the simulator's tie-breaks,
which the runtime does not follow). The *best* placement is the fastest one that fits in memory
(the fastest overall when none fits).
Formats written: ``celeritas-compare/1`` JSON (:meth:`Comparison.to_json`) and a CSV with the same
rows (docs/formats.md).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeritas_core.defaults import DEFAULT_ORDER_MODE
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.placement import Placement
from celeritas_core.placers import get_placer, place
from celeritas_core.readwrite.formats import CompareRow, compare_document
from celeritas_core.readwrite.units import format_bytes, format_change, format_us
from celeritas_core.simulation.bounds import lower_bound_us, single_device_time_us
from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH, DispatchSpread, dispatch_spread

#: Placers run by ``celeritas compare`` when none are named: every baseline and Celeritas.
DEFAULT_PLACERS = ("single", "metis", "m-topo", "m-etf", "m-sct", "heft", "order-place", "celeritas")

#: Called before each placer runs: ``(index, total, placer_name)``; and once more at the end
#: with ``index == total`` and an empty name.
ProgressFn = Callable[[int, int, str], None]

CSV_COLUMNS = (
    "placer", "step_time_us", "speedup_vs_single", "gap_to_lower_bound", "placement_seconds",
    "peak_memory_bytes", "peak_memory_fraction", "oom", "oom_devices", "coarse_nodes", "best",
    "other_orders_median_us", "other_orders_min_us", "other_orders_max_us", "other_orders_ratio",
    "micro_batches", "schedule", "pipelined_step_time_us", "pipelined_peak_memory_bytes", "pipelined_oom",
)

#: What :func:`compare_placers` calls to place a graph with one placer: :func:`place`'s
#: signature (``celeritas_core.pipeline.plan.place_pipelined`` with a request bound fits it too).
PlaceFn = Callable[..., Placement]


def effective_step(placement: Placement) -> tuple[float, bool]:
    """The step (µs) a placement runs and whether it overflows a device: its pipelined step when
    it is pipelined, else its single-batch step."""
    plan = placement.pipeline
    if plan is not None:
        return plan.predicted_step_time_us, plan.oom
    return placement.predicted_step_time_us, placement.oom


@dataclass(eq=False)
class Comparison:
    """Evaluated placements of one graph on one cluster, in the order the placers ran.

    ``other_orders[i]`` is ``placements[i]``'s step (µs) replayed under each other dispatch order
    (:func:`~celeritas_core.simulation.simulator.dispatch_spread`).
    """

    graph: Graph
    cluster: Cluster
    placements: list[Placement]
    other_orders: tuple[DispatchSpread, ...]

    def __post_init__(self) -> None:
        self.other_orders = tuple(self.other_orders)
        if len(self.other_orders) != len(self.placements):
            raise ValueError(f"{len(self.other_orders)} dispatch spreads for "
                             f"{len(self.placements)} placements")

    @property
    def other_order_names(self) -> tuple[str, ...]:
        """The dispatch orders each placement was replayed under besides the documented one."""
        return tuple(name for name, _ in self.other_orders[0].steps_us) if self.other_orders else ()

    @property
    def single_device_time_us(self) -> float:
        """Step time (µs) with every op on device 0."""
        return single_device_time_us(self.graph, self.cluster)

    @property
    def lower_bound_us(self) -> float:
        """Lower bound (µs) on any placement's step time."""
        return lower_bound_us(self.graph, self.cluster)

    @property
    def best_index(self) -> int:
        """Index of the fastest placement without OOM (the fastest of all when every one is OOM);
        a pipelined placement by its pipelined step and peak (:func:`effective_step`)."""
        steps = [effective_step(p) for p in self.placements]
        fits = [i for i, (_, oom) in enumerate(steps) if not oom]
        pool = fits or list(range(len(self.placements)))
        return min(pool, key=lambda i: (steps[i][0], i))

    @property
    def best(self) -> Placement:
        """The placement to run: see :attr:`best_index`."""
        return self.placements[self.best_index]

    def by_placer(self, name: str) -> Placement:
        """The placement made by placer ``name``."""
        for p in self.placements:
            if p.placer == name:
                return p
        raise KeyError(name)

    def rows(self) -> list[dict[str, Any]]:
        """One flat row per placer (the CSV columns), in run order."""
        best = self.best_index
        out = []
        for i, (p, spread) in enumerate(zip(self.placements, self.other_orders, strict=True)):
            peaks = p.device_peak_memory_bytes
            peak = int(np.argmax(peaks / p.device_capacity_bytes))
            out.append({
                "placer": p.placer,
                "step_time_us": float(p.predicted_step_time_us),
                "speedup_vs_single": float(p.speedup_vs_single),
                "gap_to_lower_bound": float(p.gap_to_lower_bound),
                "placement_seconds": float(p.placement_seconds),
                "peak_memory_bytes": int(peaks.max()),
                "peak_memory_fraction": float(peaks[peak] / p.device_capacity_bytes[peak]),
                "oom": p.oom,
                "oom_devices": " ".join(p.oom_devices),
                "coarse_nodes": p.coarse_nodes,
                "best": i == best,
                "other_orders_median_us": spread.median_us,
                "other_orders_min_us": spread.min_us,
                "other_orders_max_us": spread.max_us,
                "other_orders_ratio": spread.ratio,
                **_pipeline_columns(p),
            })
        return out

    def to_csv(self) -> str:
        """The rows as CSV text (header :data:`CSV_COLUMNS`; empty cells for missing values)."""
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in self.rows():
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        return buf.getvalue()

    def to_json(self) -> dict[str, Any]:
        """The ``celeritas-compare/1`` document (docs/formats.md): the rows, each with its
        placement's parameters, per-device memory and step under each other dispatch order
        (:func:`~celeritas_core.readwrite.formats.compare_document` lays it out)."""
        rows = [CompareRow(row, p.params, p.device_memory_bytes, p.device_peak_memory_bytes, p.oom_devices,
                           spread.steps_us)
                for row, p, spread in zip(self.rows(), self.placements, self.other_orders, strict=True)]
        return compare_document(self.graph, self.cluster, rows, best=self.best.placer,
                                other_orders=self.other_order_names,
                                single_device_time_us=self.single_device_time_us,
                                lower_bound_us=self.lower_bound_us)

    def table(self) -> str:
        """A one-screen text table of the rows, best placement marked with ``*``; ``other orders``
        is the median step under the other dispatch orders relative to the step time; when any
        placement is pipelined, ``pipelined`` gives its pipelined step, M and schedule (an OOM
        of the pipelined step marked ``OOM``)."""
        rows = self.rows()
        piped = any(row["micro_batches"] is not None for row in rows)
        head = (f"{'placer':<13} {'step time':>12} {'other orders':>13} {'vs single':>10} {'vs bound':>10} "
                f"{'placed in':>10} {'peak memory':>12} {'peak %':>7}  OOM")
        if piped:
            head += f"  {'pipelined':>12} {'M, schedule':<14}"
        lines = [head, "-" * len(head)]
        for row in rows:
            mark = "*" if row["best"] else " "
            oom = row["oom_devices"] if row["oom"] else "no"
            line = (f"{row['placer']:<12}{mark} {format_us(row['step_time_us']):>12} "
                    f"{format_change(row['other_orders_ratio']):>13} "
                    f"{row['speedup_vs_single']:>9.2f}x {row['gap_to_lower_bound'] * 100:>+9.1f}% "
                    f"{row['placement_seconds']:>9.3f}s {format_bytes(row['peak_memory_bytes']):>12} "
                    f"{row['peak_memory_fraction'] * 100:>6.1f}%  {oom}")
            if piped and row["micro_batches"] is not None:
                flag = " OOM" if row["pipelined_oom"] else ""
                line += (f"  {format_us(row['pipelined_step_time_us']):>12} "
                         f"{row['micro_batches']}, {row['schedule']}{flag}")
            elif piped:
                line += f"  {'one batch':>12}"
            lines.append(line)
        return "\n".join(lines)


def _pipeline_columns(placement: Placement) -> dict[str, Any]:
    """A row's pipelined columns (None for a single-batch placement)."""
    plan = placement.pipeline
    if plan is None:
        return {"micro_batches": None, "schedule": None, "pipelined_step_time_us": None,
                "pipelined_peak_memory_bytes": None, "pipelined_oom": None}
    return {"micro_batches": plan.micro_batches, "schedule": plan.schedule,
            "pipelined_step_time_us": float(plan.predicted_step_time_us),
            "pipelined_peak_memory_bytes": int(plan.device_peak_memory_bytes.max()),
            "pipelined_oom": plan.oom}


def parse_placer_list(text: str) -> list[str]:
    """Split ``"a,b,c"`` into known placer names; unknown or repeated names are input errors."""
    names = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise CeleritasInputError(f"--placers: expected comma-separated placer names, got {text!r}")
    seen: set[str] = set()
    for name in names:
        get_placer(name)
        if name in seen:
            raise CeleritasInputError(f"--placers: placer {name!r} is listed twice")
        seen.add(name)
    return names


def params_for(placer: str, shared: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of ``shared`` parameter values that placer ``placer`` accepts."""
    accepted = {p.name for p in get_placer(placer).params}
    return {k: v for k, v in shared.items() if k in accepted}


def check_shared_params(placers: Sequence[str], shared: Mapping[str, Any]) -> None:
    """Reject a parameter that none of ``placers`` accepts (a typo would otherwise be ignored)."""
    accepted = {p.name for name in placers for p in get_placer(name).params}
    unknown = sorted(set(shared) - accepted)
    if unknown:
        raise CeleritasInputError(
            f"parameter {unknown[0]!r} is not accepted by any of the placers "
            f"{', '.join(placers)} (accepted: {', '.join(sorted(accepted)) or 'none'})")


def compare_placers(
    graph: Graph,
    cluster: Cluster,
    placers: Sequence[str] = DEFAULT_PLACERS,
    params: Mapping[str, Any] | None = None,
    *,
    progress: ProgressFn | None = None,
    headroom: float = 0.0,
    order_mode: str = DEFAULT_ORDER_MODE,
    place_fn: PlaceFn | None = None,
) -> Comparison:
    """Run each placer in ``placers`` and evaluate it with the simulator; every placer keeps
    ``headroom`` (a fraction) of each device's memory free.

    Each placement is also replayed under every order of
    :data:`~celeritas_core.simulation.simulator.ALTERNATIVE_DISPATCH` (five replays: 2–3 s per placer at a
    million ops), since the runtime does not follow the simulator's tie-breaks between ready ops:
    :attr:`Comparison.other_orders`.

    ``params`` maps parameter names to values; each placer receives the ones it accepts
    (``R`` goes to the fusion placers, ``threshold`` to m-SCT, …). Parameter values are checked
    for every placer before any runs, so a bad value fails fast.

    Parameters
    ----------
    graph : Graph
        The ops to place.
    cluster : Cluster
        The devices and the transfer model.
    placers : sequence of str, optional
        Registered placer names, run in this order; default :data:`DEFAULT_PLACERS` (the
        baselines and Celeritas; not ``stages`` or the exact ``optimal``).
    params : mapping, optional
        Parameter values by name, each given to the placers that take it.
    progress : callable, optional
        Called as ``progress(index, total, name)`` before each placer, and once at the end with
        ``index == total`` and an empty name.
    headroom : float, optional
        Fraction in [0, 1) of each device's memory every placer leaves free (:func:`place`).
    order_mode : str, optional
        The execution order every placement records (:func:`place`): ``"enforced"`` (default)
        or ``"free"``. The other dispatch orders are replayed free either way: they show what a
        runtime left to its own order would run.
    place_fn : callable, optional
        What places the graph with each placer, called as ``place_fn(graph, cluster, name,
        params, headroom=...)`` (default :func:`place`, with ``order_mode``);
        ``functools.partial(place_pipelined, request=...)`` compares pipelined placements,
        ranked by their pipelined step (:func:`effective_step`).

    Returns
    -------
    Comparison
        The evaluated placements in run order, each one's steps under the other dispatch orders,
        the best (the fastest that fits), a table and CSV and JSON forms.

    Raises
    ------
    CeleritasInputError
        No placers, an unknown placer, a parameter that none of them takes, or a bad value.

    See Also
    --------
    place : one placer.

    Examples
    --------
    >>> from celeritas_core import Cluster, Graph, compare_placers
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> comparison = compare_placers(graph, Cluster.homogeneous(2, 350), ["celeritas", "m-topo", "single"],
    ...                              {"R": 100})
    >>> [(p.placer, p.predicted_step_time_us, p.oom) for p in comparison.placements]
    [('celeritas', 95.1, False), ('m-topo', 95.1, False), ('single', 120.0, True)]
    >>> comparison.best.placer, comparison.by_placer("celeritas").params["R"]
    ('celeritas', 100)
    >>> compare_placers(graph, Cluster.homogeneous(2, 350), ["m-topo"], {"R": 100})
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: parameter 'R' is not accepted by any of the placers m-topo ...
    """
    if not placers:
        raise CeleritasInputError("no placers to compare")
    shared = dict(params or {})
    check_shared_params(placers, shared)
    for name in placers:
        get_placer(name).resolve_params(params_for(name, shared))
    placements = []
    spreads = []
    for i, name in enumerate(placers):
        if progress is not None:
            progress(i, len(placers), name)
        if place_fn is None:
            placement = place(graph, cluster, name, params_for(name, shared), headroom=headroom,
                              order_mode=order_mode)
        else:
            placement = place_fn(graph, cluster, name, params_for(name, shared), headroom=headroom)
        placements.append(placement)
        spreads.append(dispatch_spread(graph, cluster, placement.assignment, ALTERNATIVE_DISPATCH,
                                       documented_us=placement.predicted_step_time_us))
    if progress is not None:
        progress(len(placers), len(placers), "")
    return Comparison(graph, cluster, placements, tuple(spreads))
