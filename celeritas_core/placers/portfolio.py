"""The ``celeritas`` placer's candidate portfolio under its work budget: the candidates (Adjusting
Placement, min-cut, multilevel and hierarchical partitions, pipeline-stage splits, list schedules,
one device), what each optional stage is estimated to cost (:data:`STAGE_US_PER_ITEM`), the
peak-memory repairs, the robust ranking of the finalists and the critical-path search
(:func:`portfolio_placement`). docs/algorithms.md, "Parallel work, pipeline stages, repair and a
robust search". Units: µs and bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers.adjusting import adjusting_placement, fusion_room, order_place
from celeritas_core.placers.base import get_placer
from celeritas_core.placers.budget import StageBudget
from celeritas_core.placers.fusion import Fusion
from celeritas_core.placers.local_search import (
    IMPROVEMENT_TOLERANCE,
    ROBUST_DISPATCH,
    Candidate,
    CandidatePool,
    critical_path_search,
    peak_memory_repair,
    robust_step_us,
)
from celeritas_core.placers.metis import hierarchical_partition, metis_partition, repair_memory, unit_graph
from celeritas_core.placers.partition import (
    map_to_topology,
    parts_needed,
)
from celeritas_core.placers.refinement import (
    OpNets,
    communication_refinement,
    refine_along_links,
    refine_best_on_ops,
)
from celeritas_core.placers.stages import STAGE_US_PER_SPLIT, StagePlan, stage_candidates, stage_devices
from celeritas_core.simulation.memory import peak_lower_bound
from celeritas_core.simulation.simulator import SimulationResult, simulate

if TYPE_CHECKING:  # the placer's parameters are declared with the placer, which imports this module
    from celeritas_core.placers.celeritas import CeleritasParams


#: Estimated cost of the optional stages, in µs per op plus edge of the graph: the largest of one
#: core of the 2-core build machine on the real Keras training steps of ``bench/bench_real.py``
#: (4-25k ops) and the 36k-op transformer-shaped step (HEFT's insertion search is superlinear there:
#: 51, against about 2 on the real steps; SCT's LP grows with the graph: 13-82 on the ops). The
#: placer's work budget (``work_seconds``) admits a stage when its estimate fits in what is left
#: (:class:`~celeritas_core.placers.budget.StageBudget`): a property of the graph's size, never of the
#: machine's speed or load.
STAGE_US_PER_ITEM: dict[str, float] = {
    "multilevel": 1.7, "heft": 51.0, "etf/fused": 4.6, "sct/fused": 30.0, "etf": 10.3, "sct": 82.0,
    "stages": STAGE_US_PER_SPLIT, "order-place": 0.5, "m-topo": 0.5,
}


#: The same on a cluster with a link topology (the largest measured on the real Keras steps and the
#: 36k-op step on the presets ``2x4:nvlink,ib`` and ``2x8:nvlink,ib``): the list schedules time each
#: transfer on its pair's link and ports, ETF's device scan grows with the devices (16 there), and
#: every partition and stage split is mapped onto the topology
#: (:func:`~celeritas_core.placers.partition.map_to_topology`).
TOPOLOGY_STAGE_US_PER_ITEM: dict[str, float] = {
    "multilevel": 2.6, "heft": 51.0, "etf/fused": 9.7, "sct/fused": 32.4, "etf": 19.4, "sct": 101.0,
    "stages": 5.8, "order-place": 1.8, "m-topo": 0.9,
}
#: The devices :data:`TOPOLOGY_STAGE_US_PER_ITEM` was measured with; the list schedules' estimates
#: grow in proportion above it.
TOPOLOGY_MEASURED_DEVICES = 16
_LIST_SCHEDULES = ("heft", "etf/fused", "sct/fused", "etf", "sct")


#: Estimated cost of one replay (µs per op plus edge) on that machine, for stages that replay
#: (0.07 measured on the same graphs, 0.14-0.19 for the memory repair's replays with their memory
#: profiles; a replay's setup makes small graphs dearer per item).
REPLAY_US_PER_ITEM = 0.3


def stage_estimate_us(graph: Graph, stage: str, cluster: Cluster | None = None) -> float:
    """Estimated cost (nominal µs) of the optional ``stage`` on ``graph``: :data:`STAGE_US_PER_ITEM`,
    or :data:`TOPOLOGY_STAGE_US_PER_ITEM` on a ``cluster`` with a link topology."""
    items = graph.num_nodes + graph.num_edges
    if cluster is None or cluster.is_flat:
        return STAGE_US_PER_ITEM[stage] * items
    scale = max(1.0, cluster.num_devices / TOPOLOGY_MEASURED_DEVICES) if stage in _LIST_SCHEDULES else 1.0
    return TOPOLOGY_STAGE_US_PER_ITEM[stage] * items * scale


def multilevel_candidates(graph: Graph, cluster: Cluster,
                          pool: CandidatePool) -> list[tuple[str, Callable[[], None]]]:
    """Offer a multilevel (METIS, through pymetis) memory-repaired partition of the op graph onto
    the largest ``k`` devices, for every ``k`` from the fewest that hold the graph to all.

    The coarse min-cut candidates cut only between fusion clusters; a multilevel partition of the
    ops finds cuts inside them (recurrent and attention graphs). The first (fewest devices) and
    the one onto all devices (what the ``metis`` placer returns) run now; the others are returned
    as ``(name, run)`` for the caller's work budget. Nothing without pymetis.
    """
    try:
        # lazy: pymetis is optional: without it there are no multilevel candidates
        import pymetis  # noqa: F401
    except ImportError:
        return []
    if cluster.num_devices < 2:
        return []
    units = unit_graph(graph)
    capacity = cluster.memory_bytes.astype(np.float64)
    by_capacity = np.argsort(-capacity, kind="stable")

    def offer(k: int) -> None:
        device = metis_partition(units, cluster, np.sort(by_capacity[:k]))
        repair_memory(units, device, capacity)
        pool.add(f"multilevel/{k}", map_to_topology(graph, cluster, device[units.unit_of]))

    first = max(2, parts_needed(units.memory_bytes, capacity))
    for k in dict.fromkeys((min(first, cluster.num_devices), cluster.num_devices)):
        offer(k)
    def along_links(k: int) -> None:
        device = hierarchical_partition(units, cluster, stage_devices(cluster, k))
        repair_memory(units, device, capacity)
        pool.add(f"hierarchical/{k}", map_to_topology(graph, cluster, device[units.unit_of]))

    if cluster.is_flat:
        return [(f"multilevel/{k}", partial(offer, k)) for k in range(first + 1, cluster.num_devices)]
    for k in dict.fromkeys((min(first, cluster.num_devices), cluster.num_devices)):
        along_links(k)  # the cut along the link hierarchy: the slowest links cut least
    return [entry for k in range(first + 1, cluster.num_devices)
            for entry in ((f"multilevel/{k}", partial(offer, k)),
                          (f"hierarchical/{k}", partial(along_links, k)))]


def single_device_candidate(graph: Graph, cluster: Cluster, pool: CandidatePool) -> None:
    """Offer every op on the fastest device whose memory holds the whole graph (if any).

    On one device there is never idle time, so the step is ``Σ time_us / speed`` exactly (µs).
    """
    fits = np.flatnonzero(cluster.memory_bytes >= graph.total_memory_bytes)
    if len(fits) == 0:
        return
    device = int(fits[np.argmax(cluster.speed[fits])])
    pool.add(f"single/{device}", np.full(graph.num_nodes, device, dtype=np.int64),
             step_time_us=graph.total_time_us / float(cluster.speed[device]))


#: The favourite-child threshold of Celeritas's m-SCT candidates: more favourites than Baechi's
#: default (0.1), as the m-SCT candidates had before the placer took Baechi's default (with 0.1 the
#: fused m-SCT candidate of a 1,068-op step on ``2x4:nvlink,ib`` overflowed where 0.5 fit).
SCT_THRESHOLD = 0.5


def list_schedule_candidates(graph: Graph, cluster: Cluster,
                             pool: CandidatePool) -> list[tuple[str, Callable[[], None]]]:
    """List schedules that use parallel work, as ``(name, run)`` for the caller's work budget: the
    ``heft`` placer on the ops, the ``m-etf`` and ``m-sct`` placers on Baechi's fused co-placement
    graph and both on the ops, these with every op's planning bytes held all step and the
    simulator's channels (``live_memory`` and ``baechi_model`` off: on the steps with liveness
    fields of the benchmark families that model overflowed less often, and its schedules are
    repaired or retried with headroom here anyway); then ``m-etf`` on the ops as Baechi runs it
    (``etf/baechi``: its memory and scheduler models, the placer's defaults)."""
    def offer(name: str, placer: str, params: dict[str, Any]) -> None:
        spec = get_placer(placer)
        pool.add(name, spec.func(graph, cluster, spec.typed_params(params)).assignment)

    static = {"live_memory": False, "baechi_model": False}
    sct = {**static, "threshold": SCT_THRESHOLD}
    schedules = (("heft", "heft", {}), ("etf/fused", "m-etf", static), ("sct/fused", "m-sct", sct),
                 ("etf", "m-etf", {"fusion": False, **static}), ("sct", "m-sct", {"fusion": False, **sct}),
                 ("etf/baechi", "m-etf", {"fusion": False}))
    return [(name, partial(offer, name, placer, params)) for name, placer, params in schedules]


#: The list schedules that :func:`headroom_candidates` runs again with memory kept free: each
#: plans with a memory model that cannot see everything the replay charges: every op's planning
#: bytes held all step, whose transient part is scaled to the one-device peak, misses the received
#: copies and long lifetimes of a split (such as the saved activations a weight gradient reads on
#: another device).
HEADROOM_SCHEDULES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("heft", "heft", {}), ("etf", "m-etf", {"fusion": False, "live_memory": False, "baechi_model": False}))
#: The shares of each device's memory (:meth:`~celeritas_core.graphs.cluster.Cluster.with_headroom`)
#: that :func:`headroom_candidates` keeps free, tried in this order until a schedule fits by its
#: replayed peak: a fixed ladder of equal steps, not fitted to any graph.
HEADROOM_LADDER: tuple[float, ...] = (0.15, 0.3, 0.45, 0.6)
#: Suffix of the optional stages of :func:`headroom_candidates`.
HEADROOM_STAGE = "headroom"


def headroom_candidates(graph: Graph, cluster: Cluster,
                        pool: CandidatePool) -> list[tuple[str, Callable[[], None]]]:
    """The list schedules of :data:`HEADROOM_SCHEDULES` again on devices that keep a share of their
    memory free (:data:`HEADROOM_LADDER`, the first share whose schedule fits by its replayed peak
    wins), as ``(name, run)`` for the work budget: a list schedule overlaps independent branches
    at the price of received copies and long lifetimes its memory model does not see, so on a
    tight graph with liveness fields it overflows while the placements that fit are slower.
    Each runs only when :func:`headroom_worth` (its plain schedule overflows and replays faster than
    every candidate that fits)."""
    def run(name: str, placer: str, params: dict[str, Any]) -> None:
        spec = get_placer(placer)
        for share in HEADROOM_LADDER:
            roomy = cluster.with_headroom(share)
            assignment = spec.func(graph, roomy, spec.typed_params(params)).assignment
            if pool.add(f"{name}/{HEADROOM_STAGE}{round(share * 100)}", assignment).fits:
                return

    if graph.liveness is None or cluster.num_devices < 2:
        return []
    return [(f"{name}/{HEADROOM_STAGE}", partial(run, name, placer, params))
            for name, placer, params in HEADROOM_SCHEDULES]


def headroom_worth(pool: CandidatePool, stage: str) -> bool:
    """Whether the plain schedule of headroom ``stage`` (``NAME/headroom``) is in the pool, overflows,
    and replays faster than every candidate that fits."""
    plain = stage.rsplit("/", 1)[0]
    fastest_fitting = min((c.step_time_us for c in pool.candidates if c.fits), default=math.inf)
    return any(c.name == plain and not c.fits and c.step_time_us < fastest_fitting for c in pool.candidates)


def simple_candidates(graph: Graph, cluster: Cluster, fusion: Fusion, coarse_order: np.ndarray,
                      pool: CandidatePool) -> list[tuple[str, Callable[[], None]]]:
    """The cheap baselines a user would try first, as ``(name, run)`` for the caller's work budget:
    Order-Place on the fused graph and Baechi's ``m-topo`` (each linear in ops, plus a replay)."""
    def ordered() -> None:
        room = fusion_room(graph, cluster, fusion)
        pool.add("order-place", fusion.to_fine(order_place(fusion.coarse, cluster, coarse_order, room=room)))

    def topo() -> None:
        spec = get_placer("m-topo")
        pool.add("m-topo", spec.func(graph, cluster, spec.typed_params({})).assignment)

    return [("order-place", ordered), ("m-topo", topo)]


def memory_repair(graph: Graph, cluster: Cluster, pool: CandidatePool, budget: int,
                  unit_rank: np.ndarray | None = None) -> dict[str, Any]:
    """Offer ``pool`` its candidates that do not fit, repaired by :func:`peak_memory_repair`.

    Starts go least excess first (then the faster replay), each with at most a quarter of
    ``budget`` (replayed ops, shared); a start no faster than the best placement that fits so far
    is skipped (a repair rarely speeds a placement up), so every candidate that could still win is
    repaired, not only the best. ``unit_rank`` is the order along which the repair moves runs
    of units. Returns the pool best's total excess (bytes, against ``cluster``, i.e. the planning
    capacity) before and after, the moves kept, the starts repaired, the trial replays and why
    the last repair stopped. No clock is read: the same input gives the same repair.
    """
    before = pool.best.excess_bytes
    report: dict[str, Any] = {"moves": 0, "starts": 0, "replays": 0, "stopped": "fits"}
    starts = {c.assignment.tobytes(): c for c in sorted(pool.candidates, key=lambda c: c.key)}
    for start in starts.values():
        fitting = [c.step_time_us for c in pool.candidates if c.fits]
        left = budget - report["replays"] * graph.num_nodes
        if left < graph.num_nodes:
            break
        if start.fits or (fitting and start.step_time_us >= min(fitting)):
            continue
        stats: dict[str, Any] = {}
        repaired = peak_memory_repair(graph, cluster, start, budget=min(left, budget // 4),
                                      unit_rank=unit_rank, stats=stats)
        if repaired is not start:
            pool.add_candidate(repaired)
        report.update(moves=report["moves"] + stats["moves"], starts=report["starts"] + 1,
                      replays=report["replays"] + stats["replays"], stopped=stats["stopped"])
    return {"excess_before_bytes": before, "excess_after_bytes": pool.best.excess_bytes, **report}


def portfolio_placement(graph: Graph, cluster: Cluster, fusion: Fusion, coarse_order: np.ndarray,
                        params: CeleritasParams, started: float, extra: dict[str, Any], *,
                        blind: np.ndarray | None = None) -> np.ndarray:
    """The fastest replay among Adjusting Placement and the other candidates, repaired when none
    fits and improved by the critical-path search, within the placer's work budgets. ``blind``: on
    a link topology, the placement made for the flat mean-link cluster, a candidate (``blind``)
    that is always among the finalists of the robust ranking."""
    budget = StageBudget(work_us=params.work_seconds * 1e6, deadline=started + params.search_seconds)
    robust = budget.reserve("robust ranking", ROBUST_FINALISTS * len(ROBUST_DISPATCH) * REPLAY_US_PER_ITEM
                            * (graph.num_nodes + graph.num_edges))
    pool = CandidatePool(graph, cluster)
    plans = _candidates(graph, cluster, fusion, coarse_order, pool, budget, params, extra)
    if graph.liveness is not None and not pool.best.fits:
        if peak_lower_bound(graph).cannot_fit(cluster.memory_bytes):
            extra["memory_repair"] = {"skipped": "no placement fits these devices (memory lower bound)"}
        else:
            unit_rank = plans[0].seq.position if plans else None
            extra["memory_repair"] = memory_repair(graph, cluster, pool, params.repair_budget, unit_rank)
    always: tuple[Candidate, ...] = ()
    if blind is not None:
        always = (pool.add(BLIND, blind),)
    starts = (robust_ranking(graph, cluster, pool, always) if robust or always
              else [((pool.best.excess_bytes, pool.best.step_time_us), pool.best, pool.best_replay())])
    search: dict[str, Any] = {}
    max_replays = -(-params.search_budget // graph.num_nodes)
    best = _searched(graph, cluster, pool, starts, budget, max_replays, search)
    if search["stopped"] == "clock":
        budget.cut.append("critical-path search")
    extra.update(chosen=best.name, candidates=pool.summary(), search=search, stages=budget.report())
    return best.assignment


#: A further search start is tried only when its robust step is within this factor of the best
#: search result so far (µs/µs): the restarts go to starts that can plausibly end below it.
RESTART_WITHIN = 1.10


def _searched(graph: Graph, cluster: Cluster, pool: CandidatePool, starts: list[RankedStart],
              budget: StageBudget, max_replays: int, search: dict[str, Any]) -> Candidate:
    """The critical-path search from the first of ``starts``; while a search ends at a local optimum
    with replays of its budget left, again from the next start within :data:`RESTART_WITHIN` of the
    result so far with what is left, keeping the result of least (excess, robust step). Why: hill
    climbing ends where its start leads, and a start that replays faster can lead to a worse
    optimum than the runner-up's. ``search`` gets the moves, replays, restarts and why the last
    search stopped."""
    search.update(moves=0, replays=0, restarts=0, stopped="budget")

    def run(start: Candidate, replay: SimulationResult | None) -> Candidate:
        stats: dict[str, Any] = {}
        found = critical_path_search(graph, cluster, start, deadline=budget.deadline,
                                     replay_seconds=pool.replay_seconds,
                                     max_replays=max_replays - search["replays"], start_replay=replay,
                                     stats=stats)
        search.update(moves=search["moves"] + stats["moves"], replays=search["replays"] + stats["replays"],
                      stopped=stats["stopped"])
        return found

    def key(found: Candidate) -> tuple[float, float]:
        result = simulate(graph, cluster, found.assignment)
        return found.excess_bytes, robust_step_us(graph, cluster, found.assignment, result)

    best = run(starts[0][1], starts[0][2])
    best_key: tuple[float, float] | None = None
    for (start_excess, start_robust), start, replay in starts[1:]:
        if search["stopped"] != "local optimum" or max_replays - search["replays"] < 2 * len(ROBUST_DISPATCH):
            break
        best_key = key(best) if best_key is None else best_key
        if start_excess > best_key[0] or start_robust > RESTART_WITHIN * best_key[1]:
            continue  # a start this far behind the result so far rarely climbs past it
        found = run(start, replay)
        search["restarts"] += 1
        found_key = key(found)
        if found_key[0] < best_key[0] or (found_key[0] == best_key[0] and
                                          found_key[1] < best_key[1] * (1 - IMPROVEMENT_TOLERANCE)):
            best, best_key = found, found_key
    return best


#: On a cluster with a link topology, the share of the work budget (``work_seconds``) that the
#: optional repair of candidates that overflow but replay faster than the best one that fits may
#: use, in trial replays of :data:`REPLAY_US_PER_ITEM` each (never more than ``repair_budget``).
FITTING_REPAIR_SHARE = 0.25

#: An optional stage: its name, its estimated cost (nominal µs) and what runs it.
OptionalStage = tuple[str, float, Callable[[], None]]


def _candidates(graph: Graph, cluster: Cluster, fusion: Fusion, coarse_order: np.ndarray,
                pool: CandidatePool, budget: StageBudget, params: CeleritasParams,
                extra: dict[str, Any]) -> list[StagePlan]:
    """Fill ``pool``: the candidates that always run, then the optional ones in order of what they
    usually add, each when the work ``budget`` admits it; refine the best on the ops. Returns the
    pipeline orders' stage plans (the paired one first, when the graph has it)."""
    room = fusion_room(graph, cluster, fusion)
    adjusting = adjusting_placement(fusion.coarse, cluster, coarse_order, room=room)
    pool.add("adjusting", fusion.to_fine(adjusting))
    op_nets = OpNets.build(graph, fusion.anchor, cluster) if cluster.num_devices > 1 else None
    communication_refinement(graph, fusion, cluster, coarse_order, pool, op_nets)
    single_device_candidate(graph, cluster, pool)
    more_multilevel = multilevel_candidates(graph, cluster, pool)
    plans, first_split, more_splits = [], [], []
    if graph.liveness is not None or stage_estimate_us(graph, "stages", cluster) <= budget.work_us:
        plans, first_split, more_splits = stage_candidates(graph, cluster, pool,
                                                           first_always=graph.liveness is not None,
                                                           nearest_first=not cluster.is_flat)
    else:  # not even one split fits the work budget: do not build the orders either
        budget.skipped.append("stages")

    def estimated(entries: list[tuple[str, Callable[[], Any]]]) -> list[OptionalStage]:
        return [(name, stage_estimate_us(graph, _stage_kind(name), cluster), run) for name, run in entries]

    simple = estimated(simple_candidates(graph, cluster, fusion, coarse_order, pool))
    schedules = estimated(list_schedule_candidates(graph, cluster, pool))
    replay_us = REPLAY_US_PER_ITEM * (graph.num_nodes + graph.num_edges)
    headroom = [(name, len(HEADROOM_LADDER) * (estimate_us + replay_us), run)
                for name, estimate_us, run in estimated(headroom_candidates(graph, cluster, pool))]
    if cluster.is_flat:
        optional = (simple + estimated(first_split) + schedules + headroom + estimated(more_multilevel)
                    + estimated(more_splits))
    else:  # a repair of fast candidates that overflow, the cheap partitions, list schedules cheapest first
        unit_rank = plans[0].seq.position if plans else None
        optional = (simple + estimated(first_split)
                    + _fitting_repair(graph, cluster, pool, params, unit_rank, extra)
                    + estimated(more_multilevel) + sorted(schedules, key=lambda entry: entry[1]) + headroom
                    + estimated(more_splits))
    for name, estimate_us, run in optional:
        if name == FITTING_REPAIR and not _worth_repairing(pool):
            continue
        if name.endswith(f"/{HEADROOM_STAGE}") and not headroom_worth(pool, name):
            continue
        if budget.allow(name, estimate_us):
            run()
    refine_best_on_ops(graph, fusion.anchor, cluster, pool, op_nets)
    if op_nets is not None:
        refine_along_links(graph, cluster, pool, op_nets)
    return plans


def _stage_kind(name: str) -> str:
    """The key of an optional stage's estimate: ``multilevel/K``, ``hierarchical/K`` (a multilevel
    partition per level) and ``stages/ORDER/K`` by their kind, the others by name."""
    kind = name.split("/")[0]
    if name.endswith(f"/{HEADROOM_STAGE}") or name == "etf/baechi":
        return kind
    if kind in ("multilevel", "hierarchical"):
        return "multilevel"
    return kind if kind == "stages" else name


#: The optional stage that repairs, within a share of the work budget, the candidates that
#: overflow a device but replay faster than the best that fits (:func:`_fitting_repair`).
FITTING_REPAIR = "memory repair"


def _fitting_repair(graph: Graph, cluster: Cluster, pool: CandidatePool, params: CeleritasParams,
                    unit_rank: np.ndarray | None, extra: dict[str, Any]) -> list[OptionalStage]:
    """The optional repair stage: :func:`memory_repair` with :data:`FITTING_REPAIR_SHARE` of the
    work budget in trial replays, run when :func:`_worth_repairing` (else it is not listed); none
    without liveness fields or when the share pays for no replay."""
    if graph.liveness is None:
        return []
    estimate_us = FITTING_REPAIR_SHARE * params.work_seconds * 1e6
    per_replay_us = REPLAY_US_PER_ITEM * (graph.num_nodes + graph.num_edges)
    replayed_ops = min(params.repair_budget, int(estimate_us // per_replay_us) * graph.num_nodes)
    if replayed_ops < graph.num_nodes:  # not one replay
        return []

    def run() -> None:
        extra["memory_repair"] = memory_repair(graph, cluster, pool, replayed_ops, unit_rank)

    return [(FITTING_REPAIR, estimate_us, run)]


def _worth_repairing(pool: CandidatePool) -> bool:
    """Whether a candidate fits and another, which overflows, replays faster than every one that fits."""
    fastest_fitting = min((c.step_time_us for c in pool.candidates if c.fits), default=None)
    return fastest_fitting is not None and any(not c.fits and c.step_time_us < fastest_fitting
                                               for c in pool.candidates)


#: How many of the pool's best candidates are ranked again by their robust step over the dispatch
#: orders (:data:`~celeritas_core.placers.local_search.ROBUST_DISPATCH`) before the search starts.
ROBUST_FINALISTS = 3


#: The candidate name of the placement made for the flat mean-link cluster, on a link topology.
BLIND = "blind"


#: A search start: its (excess bytes, robust step µs) key, the candidate and its documented replay.
RankedStart = tuple[tuple[float, float], Candidate, SimulationResult | None]


def robust_ranking(graph: Graph, cluster: Cluster, pool: CandidatePool,
                   always: tuple[Candidate, ...] = ()) -> list[RankedStart]:
    """The search's starts, best first: of the pool's :data:`ROBUST_FINALISTS` best (fitting first,
    least excess, then fastest), its one-device candidates and ``always``, by least excess then
    shortest robust step (:func:`~celeritas_core.placers.local_search.robust_step_us` over
    :data:`~celeritas_core.placers.local_search.ROBUST_DISPATCH`), each with its documented replay. A
    one-device candidate's robust step is its documented step, so the first is never slower than
    it; nor, by its robust step, than a candidate of ``always`` that fits as the best does. With
    fewer than two finalists: the pool's best alone, unranked."""
    ranked = sorted({c.assignment.tobytes(): c for c in pool.candidates}.values(), key=lambda c: c.key)
    one_device = [c for c in ranked[ROBUST_FINALISTS:] if np.all(c.assignment == c.assignment[0])]
    top = ranked[:ROBUST_FINALISTS]
    extra = [c for c in always if not any(c.assignment.tobytes() == t.assignment.tobytes() for t in top)]
    finalists = [c for c in top + one_device + extra if c.fits == ranked[0].fits]
    if len(finalists) < 2:
        return [((pool.best.excess_bytes, pool.best.step_time_us), pool.best, pool.best_replay())]
    scored: list[RankedStart] = []
    for candidate in finalists:
        result = simulate(graph, cluster, candidate.assignment)
        robust = robust_step_us(graph, cluster, candidate.assignment, result)
        scored.append(((candidate.excess_bytes, robust), candidate, result))
    return sorted(scored, key=lambda s: s[0])
