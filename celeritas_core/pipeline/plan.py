"""Place a training step as a pipelined step: the assignment, ``M`` and the schedule.

:func:`place_pipelined` runs a placer on the step as one batch, then, for every ``M`` asked for
(``auto``: :func:`candidate_micro_batches`) and every schedule asked for (``auto``: GPipe and
1F1B), replays candidate assignments as pipelined steps at the micro-batch's costs
(:mod:`~celeritas_core.pipeline.schedules`) and keeps the fastest whose replayed peak fits every
device (none fits: the least overflow, then the fastest). The candidates:

* the placer's own single-batch assignment;
* for a placer that takes ``micro_batches`` (a stage planner,
  :mod:`~celeritas_core.placers.pipeline_stages`), instead its split at each ``M``, as the planner
  makes it (its own cost and memory model): the baselines are run as their papers describe them;
* for ``celeritas`` (pipelined Celeritas), the single-batch Celeritas assignment and every stage
  planner's split (``gpipe-even``, ``alpa-stages``, ``pipedream``) at each ``M``; a split whose
  replayed peak overflows a device is planned again with the devices' memory shrunk by the
  overflow (:data:`MEMORY_RETRIES` times at most), and the stage boundaries of a few splits
  (the :data:`REFINED_CANDIDATES` best, and the fastest even if it overflows) are then moved
  while the replay improves, to cheap cuts (:func:`_refine`). Pipelined Celeritas thus never
  loses to a stage planner at the ``M`` and schedule it chose; what it adds is judged by the
  replay, which counts what the planners' models do not (a transfer per micro-batch, channel
  contention, the warm-up, the liveness peak with activations and accumulated gradients in
  flight).

With ``auto``, one batch per step (``M = 1``, the single-batch placement itself) competes too:
the result is never slower than it; and an ``M`` whose :func:`work_bound_us` is no faster than the
best step that fits is not replayed (nothing there can win). Everything counted is work (replays of
fixed candidates, a fixed number of re-plans, of refined splits and of boundary moves), never wall
clock: the same input gives the same placement.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from celeritas_core.defaults import AUTO_SCHEDULE, ONE_F_ONE_B, SCHEDULES
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.placement import PipelinePlan, Placement
from celeritas_core.pipeline.microbatch import BatchFits, microbatch_graph, op_floor_us
from celeritas_core.pipeline.roles import OpRoles, op_roles
from celeritas_core.pipeline.schedules import PipelineReplay, check_schedule, replay_pipeline
from celeritas_core.pipeline.unroll import accumulated_gradients, accumulation_time_us, gradient_edges, unroll
from celeritas_core.placers.base import PLACERS, evaluate_placement, get_placer, place
from celeritas_core.placers.pipeline_stages import pipeline_layers
from celeritas_core.placers.stages import UnitSequence, boundary_traffic, link_cut_us
from celeritas_core.simulation.simulator import simulate

#: The stage planners pipelined Celeritas also starts from.
STAGE_PLANNERS = ("gpipe-even", "alpa-stages", "pipedream")
#: ``auto`` tries every divisor of the batch up to this many micro-batches per device: GPipe's
#: bubble overhead is negligible once M >= 4 x the stages (Huang et al., 2019, section 2.3).
AUTO_MICRO_BATCHES_PER_DEVICE = 4
#: A stage planner's split whose replayed peak overflows a device is planned again, at most this
#: many times, with the devices' usable memory shrunk by the overflow ratio (a work budget: the
#: same input gives the same placement), but never below 1 - :data:`MAX_RETRY_HEADROOM` of it.
MEMORY_RETRIES = 3
MAX_RETRY_HEADROOM = 0.9
#: Replays per stage that the boundary refinement of a split may spend at least (a work budget),
#: and how many of the best splits (fits first, then the step) are refined, besides the fastest of
#: all (it may overflow: moving its boundaries may make it fit).
REFINE_REPLAYS = 4
REFINED_CANDIDATES = 1
#: The refinement may also replay up to this many nodes of the unrolled step in all, when that
#: allows more than :data:`REFINE_REPLAYS` per stage: a work budget in the replay's own unit, so a
#: step of a few thousand ops is refined further for at most about 0.5 s (the replay runs about
#: 1,000,000 nodes a second on the 2-core build machine), while a large step (the 36,352-op
#: transformer at M = 2: 55,338 nodes) keeps the floor.
REFINE_REPLAYED_NODES = 500_000
#: ``auto`` stops trying larger ``M`` after this many in a row that bring nothing better (the step
#: falls, then rises with ``M`` as the per-op floor adds up); with ``--schedule auto`` candidates are
#: screened under 1F1B and the best few are replayed under GPipe too.
PATIENCE = 2
OTHER_SCHEDULE_CANDIDATES = 4


@dataclass(frozen=True)
class PipelineRequest:
    """What to pipeline: ``micro_batches`` (None: ``auto``), ``schedule`` (``gpipe``, ``1f1b`` or
    ``auto``), the batch (None: the graph's ``meta["batch_size"]``) and the per-op floor (µs;
    None: :func:`~celeritas_core.pipeline.microbatch.op_floor_us`)."""

    micro_batches: int | None = None
    schedule: str = AUTO_SCHEDULE
    batch_size: int | None = None
    op_floor_us: float | None = None

    def __post_init__(self) -> None:
        check_schedule(self.schedule, auto=True)
        if self.micro_batches is not None and self.micro_batches < 1:
            raise CeleritasInputError(f"micro-batches must be >= 1 or auto, got {self.micro_batches}")
        if self.batch_size is not None and self.batch_size < 1:
            raise CeleritasInputError(f"batch size must be >= 1, got {self.batch_size}")

    @classmethod
    def parse(cls, micro_batches: str | int | None, schedule: str = AUTO_SCHEDULE,
              **rest: Any) -> PipelineRequest:
        """From the command line's spelling: ``micro_batches`` an integer or ``auto``."""
        if micro_batches is None or str(micro_batches).strip().lower() == "auto":
            return cls(None, schedule, **rest)
        text = str(micro_batches).strip()
        if not text.isdigit():
            raise CeleritasInputError(f"micro-batches must be a whole number or auto, got {micro_batches!r}")
        return cls(int(text), schedule, **rest)

    @property
    def schedules(self) -> tuple[str, ...]:
        """The schedules to try."""
        return SCHEDULES if self.schedule == AUTO_SCHEDULE else (self.schedule,)


def candidate_micro_batches(batch_size: int | None, num_devices: int, micro_batches: int | None) -> list[int]:
    """The ``M`` to try: ``micro_batches`` when given (it must divide the batch, when known), else
    every divisor of the batch from 2 to ``AUTO_MICRO_BATCHES_PER_DEVICE`` x the devices.

    Examples
    --------
    >>> candidate_micro_batches(32, 4, None)
    [2, 4, 8, 16]
    >>> candidate_micro_batches(32, 4, 3)
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: micro-batches 3 does not divide the batch of 32
    """
    if micro_batches is not None:
        if batch_size is not None and batch_size % micro_batches:
            raise CeleritasInputError(f"micro-batches {micro_batches} does not divide the batch of "
                                      f"{batch_size}")
        return [micro_batches]
    if batch_size is None:
        raise CeleritasInputError("micro-batches auto needs the batch size: the graph records none "
                                  "(meta batch_size); give it (--batch-size)")
    most = min(batch_size, AUTO_MICRO_BATCHES_PER_DEVICE * num_devices)
    return [m for m in range(2, most + 1) if batch_size % m == 0]


@dataclass(frozen=True, eq=False)
class _Tried:
    """One candidate replayed: where its assignment came from, and the replay."""

    source: str
    assignment: np.ndarray
    replay: PipelineReplay
    split: tuple[np.ndarray, np.ndarray] | None = None
    """A stage planner's split: the stage devices in order and the unit positions between stages."""

    def key(self, capacity: np.ndarray) -> tuple[float, float, int]:
        """Fits first, then least overflow, then fastest, then fewer micro-batches."""
        over = self.replay.overflow_bytes(capacity)
        return (over, self.replay.step_time_us, self.replay.micro_batches)


def place_pipelined(graph: Graph, cluster: Cluster, placer: str = "celeritas",
                    params: Mapping[str, Any] | None = None, *, request: PipelineRequest | None = None,
                    fits: BatchFits | None = None, headroom: float = 0.0) -> Placement:
    """Place ``graph`` (a training step) on ``cluster`` as a pipelined step (module docstring).

    Parameters
    ----------
    graph : Graph
        A training step with batch inputs (:func:`~celeritas_core.pipeline.roles.op_roles`).
    cluster : Cluster
        The devices.
    placer : str, optional
        The single-batch placer to start from (default ``celeritas``: pipelined Celeritas).
    params : mapping, optional
        Its parameters.
    request : PipelineRequest, optional
        M, the schedule, the batch and the floor (default: all ``auto``).
    fits : BatchFits, optional
        Per-op fits for the micro-batch costs (``celeritas-fits``); else the scaling.
    headroom : float, optional
        As for :func:`~celeritas_core.placers.place`.

    Returns
    -------
    Placement
        The chosen assignment, evaluated as one batch (the top-level figures, as every placement),
        with its :class:`~celeritas_core.graphs.placement.PipelinePlan` (None when one batch per
        step was fastest under ``auto``); ``placement_seconds`` counts the whole search.

    Examples
    --------
    >>> from celeritas_core import Cluster
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> from celeritas_core.simulation.memory import one_device_peak_bytes
    >>> g = small_training_graph(0, liveness=True)
    >>> cluster = Cluster.homogeneous(4, 0.45 * one_device_peak_bytes(g))
    >>> p = place_pipelined(g, cluster, request=PipelineRequest(4, "1f1b"))
    >>> p.pipeline.micro_batches, p.pipeline.schedule, p.pipeline.oom
    (4, '1f1b', False)
    >>> bool(p.pipeline.predicted_step_time_us < p.pipeline.single_batch_step_time_us)
    True
    """
    request = request or PipelineRequest()
    roles = op_roles(graph)
    batch = request.batch_size or _graph_batch(graph)
    ms = candidate_micro_batches(batch, cluster.num_devices, request.micro_batches)
    floor = op_floor_us(graph, request.op_floor_us)
    base = place(graph, cluster, placer, params, headroom=headroom)
    if not ms:  # auto, and no divisor of the batch to split it by
        chosen = f"one batch per step (the batch of {batch} has no divisor to split it into micro-batches)"
        summary = {"micro_batches_tried": [], "schedules_tried": [], "candidates": 0, "chosen": chosen}
        return replace(base, extra=dict(base.extra, pipeline_search=summary))
    started = time.perf_counter()
    capacity = cluster.memory_bytes
    base_over = float(np.maximum(base.device_peak_memory_bytes - capacity, 0).sum())
    search = _Search(graph, cluster, roles, base, base_over, placer, floor, fits, batch, headroom)
    best, searched = search.run(ms, request)
    seconds = base.placement_seconds + time.perf_counter() - started
    summary = {"micro_batches_tried": searched, "micro_batches_ruled_out": search.ruled_out,
               "schedules_tried": list(request.schedules), "candidates": search.count}
    if best is None or (request.micro_batches is None
                        and (base_over, base.predicted_step_time_us) <= best.key(capacity)[:2]):
        extra = dict(base.extra, pipeline_search={**summary, "chosen": "one batch per step"})
        return replace(base, placement_seconds=seconds, extra=extra)
    chosen = base if np.array_equal(best.assignment, base.assignment) else evaluate_placement(
        graph, cluster, replace(base, assignment=best.assignment, device_order=None))
    plan = _plan(best, cluster, batch, base, floor, fits is not None)
    extra = dict(base.extra, pipeline_search={**summary, "chosen": best.source})
    return replace(chosen, placement_seconds=seconds, pipeline=plan, extra=extra)


@dataclass(eq=False)
class _Search:
    """The candidates of one :func:`place_pipelined` call, replayed (module docstring)."""

    graph: Graph
    cluster: Cluster
    roles: OpRoles
    base: Placement
    base_overflow: float
    """Bytes the single-batch placement needs above the devices' capacity (0: it fits)."""
    placer: str
    floor: float
    fits: BatchFits | None
    batch: int | None
    headroom: float
    count: int = 0
    ruled_out: list[int] = field(default_factory=list)
    """The ``M`` not replayed: their :func:`work_bound_us` was no faster than the best that fits."""

    def run(self, ms: Sequence[int], request: PipelineRequest) -> tuple[_Tried | None, list[int]]:
        """The best candidate over ``ms`` (ascending; stopped after :data:`PATIENCE` that bring
        nothing better; None when ``auto`` ruled every ``M`` out) and the ``M`` replayed."""
        capacity = self.cluster.memory_bytes
        sequence = _layer_sequence(self.graph) if any(n in PLACERS for n in _planners(self.placer)) else None
        screen = request.schedules if request.schedule != AUTO_SCHEDULE else (ONE_F_ONE_B,)
        tried: list[_Tried] = []
        searched: list[int] = []
        best_key, misses = (self.base_overflow, self.base.predicted_step_time_us, 1), 0
        for m in ms:
            micro = microbatch_graph(self.graph, self.roles, m, floor_us=self.floor, fits=self.fits,
                                     batch_size=self.batch)
            if (request.micro_batches is None and best_key[0] == 0  # an M asked for is replayed
                    and work_bound_us(micro, self.roles, m, self.cluster) >= best_key[1]):
                self.ruled_out.append(m)  # nothing at this M can beat the best that fits
                key = best_key
            else:
                found = _replays(micro, self.cluster, self.roles, m, screen, self.base, self.placer,
                                 self.headroom, sequence)
                tried += found
                searched.append(m)
                key = min(t.key(capacity) for t in found)
            best_key, misses = (key, 0) if key < best_key else (best_key, misses + 1)
            if misses >= PATIENCE:
                break
        rank = self.graph.topological_rank
        others = [s for s in request.schedules if s not in screen]
        ranked = _ranked(tried, capacity, OTHER_SCHEDULE_CANDIDATES) if others else []
        for other in others:  # the best few, under the other schedule
            tried += [replace(t, replay=replay_pipeline(t.replay.unrolled, self.cluster, t.assignment, other,
                                                        rank)) for t in ranked]
        self.count = len(tried)
        if not tried:  # every M ruled out (auto): one batch per step
            return None, searched
        best = _best(tried, capacity)
        splits = [t for t in tried if t.split is not None]
        if splits and self.placer == "celeritas":
            assert sequence is not None
            ranked_splits = _ranked(splits, capacity, REFINED_CANDIDATES)
            fastest = min(splits, key=lambda t: t.replay.step_time_us)
            picked = list(dict.fromkeys([*ranked_splits, fastest]))
            traffic = boundary_traffic(self.graph, sequence[0])
            best = _best([best, *(_refine(t, self.cluster, sequence[0], traffic, rank=rank) for t in picked)],
                         capacity)
        return best, searched


def _better(candidate: _Tried, incumbent: _Tried, capacity: np.ndarray) -> bool:
    """``candidate.key(capacity) < incumbent.key(capacity)``, without the candidate's peak (a
    liveness replay) when the incumbent fits and the candidate is no faster: whatever its peak, it
    cannot be better then."""
    if (incumbent.replay.overflow_bytes(capacity) == 0
            and (candidate.replay.step_time_us, candidate.replay.micro_batches)
            >= (incumbent.replay.step_time_us, incumbent.replay.micro_batches)):
        return False
    return candidate.key(capacity) < incumbent.key(capacity)


def _best(candidates: Sequence[_Tried], capacity: np.ndarray) -> _Tried:
    """The first candidate of least key (as ``min`` by :meth:`_Tried.key`), peaks made only where
    needed (:func:`_better`)."""
    best = candidates[0]
    for candidate in candidates[1:]:
        if _better(candidate, best, capacity):
            best = candidate
    return best


def _ranked(candidates: Sequence[_Tried], capacity: np.ndarray, count: int) -> list[_Tried]:
    """The ``count`` first candidates by key (a stable sort's head), peaks made only where needed."""
    rest, out = list(candidates), []
    while rest and len(out) < count:
        out.append(_best(rest, capacity))
        rest.remove(out[-1])
    return out


def _graph_batch(graph: Graph) -> int | None:
    """The graph's recorded batch size, if any."""
    value = graph.meta.get("batch_size")
    return int(value) if isinstance(value, int | float) and value >= 1 else None


def _replays(micro: Graph, cluster: Cluster, roles: OpRoles, m: int, schedules: tuple[str, ...],
             base: Placement, placer: str, headroom: float,
             sequence: tuple[UnitSequence, np.ndarray] | None) -> list[_Tried]:
    """Every candidate assignment at ``m`` micro-batches (``micro``: the step at the
    micro-batch's costs) under each of ``schedules``."""
    unrolled = unroll(micro, roles, m)
    rank = micro.topological_rank

    def replays(source: str, assignment: np.ndarray,
                split: tuple[np.ndarray, np.ndarray] | None = None) -> list[_Tried]:
        return [_Tried(f"{source}, M={m}", assignment,
                       replay_pipeline(unrolled, cluster, assignment, schedule, rank), split)
                for schedule in schedules]

    tried: list[_Tried] = []
    if not _takes_micro_batches(placer):
        tried += replays(placer, base.assignment)
    # pipelined Celeritas also asks the DP planners for a stage on every device: their cost models
    # may prefer fewer stages that the replay does not
    counts = (0, cluster.num_devices) if placer == "celeritas" and cluster.num_devices > 1 else (0,)
    for name in _planners(placer):
        if name not in PLACERS or sequence is None:
            continue
        for stages in counts if name != "gpipe-even" else (0,):
            room = headroom
            for _ in range(MEMORY_RETRIES + 1 if placer == "celeritas" else 1):
                params = {"micro_batches": m, "stages": stages}
                out = place(micro, cluster, name, params, evaluate=False, headroom=room)
                if any(np.array_equal(out.assignment, t.assignment) for t in tried):
                    break
                tried += replays(name, out.assignment, _split(out.extra, sequence))
                latest = tried[-len(schedules):]
                worst = min(float((t.replay.device_peak_bytes / cluster.memory_bytes).max()) for t in latest)
                if worst <= 1.0:
                    break
                room = min(MAX_RETRY_HEADROOM, 1.0 - (1.0 - room) / worst)
    return tried


def work_bound_us(micro: Graph, roles: OpRoles, micro_batches: int, cluster: Cluster) -> float:
    """A lower bound on the pipelined step (µs) of every assignment of ``micro`` (the step at the
    micro-batch's costs) with ``micro_batches`` micro-batches: all its work spread perfectly over
    the devices. The work: the ops run once counted once, the others ``micro_batches`` times, and
    ``micro_batches - 1`` accumulations per gradient (:mod:`~celeritas_core.pipeline.unroll`).
    Every device runs one op at a time, each for ``time_us / speed`` (docs/simulator.md), so no
    replay is faster. The per-op floor makes the bound grow with ``M``; once it reaches the best
    step that fits, nothing at that ``M`` can win, and the search does not replay it.

    Examples
    --------
    >>> from celeritas_core import Cluster
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> from celeritas_core.pipeline.roles import op_roles
    >>> from celeritas_core.pipeline.microbatch import microbatch_graph
    >>> g = small_training_graph(0)
    >>> roles, cluster = op_roles(g), Cluster.homogeneous(4, 2**40)
    >>> bounds = [work_bound_us(microbatch_graph(g, roles, m), roles, m, cluster) for m in (2, 8)]
    >>> bool(bounds[0] < bounds[1])
    True
    """
    once = float(micro.time_us[~roles.per_micro_batch].sum())
    each = float(micro.time_us[roles.per_micro_batch].sum())
    gradients = accumulated_gradients(micro, gradient_edges(micro, roles))[2]
    added = float(accumulation_time_us(micro, gradients).sum())
    return (once + micro_batches * each + (micro_batches - 1) * added) / float(cluster.speed.sum())


def _split(extra: Mapping[str, Any],
           sequence: tuple[UnitSequence, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A stage planner's split (its ``extra``: stage devices and layers per stage) as stage
    devices and the unit positions between stages, along ``sequence`` (units, first unit of
    each layer)."""
    layer_cuts = np.cumsum(extra["stage_layers"])[:-1].astype(np.int64)
    return np.asarray(extra["stage_devices"], dtype=np.int64), sequence[1][layer_cuts]


def _planners(placer: str) -> tuple[str, ...]:
    """The stage planners whose splits are candidates when pipelining ``placer``."""
    if _takes_micro_batches(placer):
        return (placer,)
    return STAGE_PLANNERS if placer == "celeritas" else ()


def _layer_sequence(graph: Graph) -> tuple[UnitSequence, np.ndarray]:
    """The units in the stage planners' order and the first unit of each layer (structure only:
    the same at every micro-batch size)."""
    layers = pipeline_layers(graph)
    return layers.seq, layers.start


def _refine(best: _Tried, cluster: Cluster, seq: UnitSequence, traffic: tuple[np.ndarray, np.ndarray], *,
            rank: np.ndarray) -> _Tried:
    """Move the chosen split's stage boundaries, judged by the pipelined replay itself (fits first,
    then the step): the stage planners' cost models miss transfers per micro-batch, channel
    contention, the warm-up and the liveness peak, which the replay counts.

    Boundaries move by a quarter of a stage's units, then by halves of that, down to one unit (a
    unit: an op, or ops that must share a device); each move is replayed and kept when it is
    better. While the split fits, a move of ``d`` units lands on the cheapest cut between ``d / 2``
    and ``d`` units away (``traffic``: per cut position the bytes and tensors spanning it, from
    :func:`~celeritas_core.placers.stages.boundary_traffic`, priced on the link between the two
    stages' devices): a stage boundary inside a block of layers sends far more per micro-batch than
    one between blocks, so the replayed step is rugged in the unit count and a plain move mostly
    lands on a dear cut. A split that overflows moves by exactly ``d`` (memory first). The work
    budget: :data:`REFINE_REPLAYS` replays per stage, or :data:`REFINE_REPLAYED_NODES` replayed
    nodes when that is more."""
    if best.split is None:
        return best
    devices, cuts = best.split
    capacity = cluster.memory_bytes
    nodes = max(1, best.replay.unrolled.graph.num_nodes)
    budget = max(REFINE_REPLAYS * len(devices), REFINE_REPLAYED_NODES // nodes)
    step = max(1, seq.num_units // (4 * len(devices)))
    price = link_cut_us(cluster, devices, *traffic)[1:]  # boundary k: between stages k and k + 1
    current = best
    while step >= 1 and budget > 0:
        improved = False
        for k in range(len(cuts)):
            low = cuts[k - 1] + 1 if k else 1
            high = cuts[k + 1] - 1 if k + 1 < len(cuts) else seq.num_units - 1
            fits = current.replay.overflow_bytes(capacity) == 0
            for delta in (step, -step):
                position = _moved(int(cuts[k]), delta, low, high, price[k] if fits else None)
                if budget <= 0 or position is None:
                    continue
                budget -= 1
                trial = cuts.copy()
                trial[k] = position
                assignment = seq.assignment(trial, devices)
                replay = replay_pipeline(current.replay.unrolled, cluster, assignment,
                                         current.replay.schedule, rank)
                candidate = replace(current, source=f"{best.source}, refined", assignment=assignment,
                                    replay=replay, split=(devices, trial))
                if _better(candidate, current, capacity):
                    current, cuts, improved = candidate, trial, True
                    break
        if not improved:
            step //= 2
    return current


def _moved(position: int, delta: int, low: int, high: int, price: np.ndarray | None) -> int | None:
    """Where a boundary at ``position`` moved by ``delta`` units goes: exactly ``delta`` without
    ``price`` (or for a move of one unit), else the cheapest cut ``delta / 2`` to ``delta`` away
    (ties: the farthest); None when that leaves ``[low, high]``.

    Examples
    --------
    >>> _moved(10, 4, 1, 20, None), _moved(10, 40, 1, 20, None)
    (14, None)
    >>> _moved(10, 4, 1, 20, np.array([9.0] * 12 + [1.0] + [9.0] * 9))
    12
    """
    if price is None or abs(delta) < 2:
        moved = position + delta
        return moved if low <= moved <= high else None
    first, last = sorted((position + delta // 2, position + delta))
    first, last = max(first, low), min(last, high)
    if first > last:
        return None
    window = np.arange(first, last + 1)
    return int(window[np.lexsort((np.abs(window - (position + delta)), price[window]))[0]])


def _takes_micro_batches(placer: str) -> bool:
    """True for a placer with a ``micro_batches`` parameter (a stage planner)."""
    return any(p.name == "micro_batches" for p in get_placer(placer).params)


def _plan(best: _Tried, cluster: Cluster, batch: int | None, base: Placement, floor: float,
          from_fits: bool) -> PipelinePlan:
    """The :class:`PipelinePlan` of the chosen replay."""
    replay = best.replay
    unrolled = replay.unrolled
    rows = tuple(np.stack([unrolled.op[o], unrolled.micro_batch[o], unrolled.accumulated_output[o]], axis=1)
                 for o in replay.orders)
    over = np.flatnonzero(replay.device_peak_bytes > cluster.memory_bytes)
    return PipelinePlan(
        micro_batches=replay.micro_batches, schedule=replay.schedule,
        predicted_step_time_us=replay.step_time_us, device_peak_memory_bytes=replay.device_peak_bytes,
        warmup=replay.warmup, device_order=rows, batch_size=batch,
        oom_devices=tuple(cluster.device_names[d] for d in over),
        single_batch_step_time_us=base.predicted_step_time_us,
        cost_source="fits" if from_fits else "scaled", op_floor_us=floor)


def replay_plan(graph: Graph, cluster: Cluster, placement: Placement, *,
                fits: BatchFits | None = None) -> PipelineReplay:
    """Replay ``placement``'s recorded pipelined step (its ``pipeline``) with each device's
    recorded order enforced, at the micro-batch costs it was planned with (the scaling with its
    floor; ``fits`` for a plan made from fits).

    Raises
    ------
    CeleritasInputError
        When the placement has no pipeline, or its recorded order names a run the step does not
        have, misses one, or deadlocks.
    """
    plan = placement.pipeline
    if plan is None:
        raise CeleritasInputError("the placement is not pipelined (no pipeline object)")
    roles = op_roles(graph)
    floor = plan.op_floor_us if math.isfinite(plan.op_floor_us) else None
    micro = microbatch_graph(graph, roles, plan.micro_batches, floor_us=floor, fits=fits,
                             batch_size=plan.batch_size)
    unrolled = unroll(micro, roles, plan.micro_batches)
    orders = []
    for d, rows in enumerate(plan.device_order):
        nodes = unrolled.nodes_of(rows)
        if (nodes < 0).any():
            op, k, _ = (int(x) for x in rows[int(np.flatnonzero(nodes < 0)[0])])
            raise CeleritasInputError(f"pipeline.device_order[{d}]: {graph.node_names[op]!r} micro-batch {k} "
                                      "is not a run of this pipelined step")
        orders.append(nodes)
    node_dev = unrolled.expand(placement.assignment)
    result = simulate(unrolled.graph, cluster, node_dev, device_order=orders)
    return PipelineReplay(plan.schedule, plan.micro_batches, result.step_time_us, plan.warmup,
                          tuple(orders), result, unrolled, node_dev, cluster.num_devices)


def with_replayed_plan(graph: Graph, cluster: Cluster, placement: Placement) -> Placement:
    """``placement`` with its pipeline's figures replaced by a replay on ``cluster``
    (:func:`replay_plan`): what ``celeritas simulate`` reports. A placement without a pipeline is
    returned as it is."""
    plan = placement.pipeline
    if plan is None:
        return placement
    replay = replay_plan(graph, cluster, placement)
    over = np.flatnonzero(replay.device_peak_bytes > cluster.memory_bytes)
    replayed = replace(plan, predicted_step_time_us=replay.step_time_us,
                       device_peak_memory_bytes=replay.device_peak_bytes,
                       oom_devices=tuple(cluster.device_names[d] for d in over))
    return replace(placement, pipeline=replayed)
