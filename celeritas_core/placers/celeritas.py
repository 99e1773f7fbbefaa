"""The fusion-based placers ``order-place`` and ``celeritas``: their parameters and entry points.

Both fuse the graph first (:func:`celeritas_core.placers.fusion.optimal_operation_fusion`), place the
coarse graph in its CPD-TOPO order, map clusters back to ops and move co-location group members
to their anchor's device; on graphs with liveness fields their capacity checks are liveness-aware
(:class:`~celeritas_core.simulation.live_estimate.GroupRoom`). Where the parts live:

* :mod:`celeritas_core.placers.adjusting`: the paper's Order-Place and Adjusting Placement
  (Algorithm 2);
* :mod:`celeritas_core.placers.portfolio`: the ``celeritas`` placer's candidates (``refine``), their
  work budget (:class:`~celeritas_core.placers.budget.StageBudget`), the repairs, the robust ranking and
  the critical-path search (docs/algorithms.md, "Parallel work, pipeline stages, repair and a
  robust search");
* :mod:`celeritas_core.placers.refinement`: refinements of a candidate on the ops and along a link
  topology's hierarchy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import cpath, planning_comm_us
from celeritas_core.graphs.orders import cpd_topo_order
from celeritas_core.placers.adjusting import adjusting_placement, fusion_room, order_place
from celeritas_core.placers.base import PlacerOutput, PlacerSpec, param, register_placer
from celeritas_core.placers.fusion import DEFAULT_MEMORY_FRACTION, DEFAULT_R, Fusion, optimal_operation_fusion
from celeritas_core.placers.portfolio import portfolio_placement


@dataclass(frozen=True)
class FusionParams:
    """Order-Place's parameters: those of Optimal Operation Fusion.

    Parameters
    ----------
    R : int
        Exploration range: at most ``R`` ops per fused cluster (default 200).
    memory_fraction : float
        Per-cluster memory cap M as a fraction in (0, 1] of the smallest device's memory
        (default 0.25).

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("order-place").typed_params({"R": "50"})
    FusionParams(R=50, memory_fraction=0.25)
    """

    R: int = param(DEFAULT_R, "exploration range: at most R ops per fused cluster", minimum=1,
                   maximum=2**31 - 1)
    memory_fraction: float = param(
        DEFAULT_MEMORY_FRACTION, "per-cluster memory cap M as a fraction of the smallest device memory",
        minimum=0.0, maximum=1.0, exclusive_minimum=True)


@dataclass(frozen=True)
class CeleritasParams(FusionParams):
    """The celeritas placer's parameters: fusion's, and the candidates and search beyond the paper.

    Parameters
    ----------
    R, memory_fraction
        Optimal Operation Fusion's, as in :class:`FusionParams`.
    refine : bool
        True (default): also try min-cut and multilevel partitions, pipeline-stage splits, list
        schedules and one device, repair those that overflow a device, keep the fastest replay
        and improve it by a critical-path search; False: the paper's Adjusting Placement alone.
    work_seconds : float
        With ``refine``: work budget (nominal seconds) of the optional stages, each estimated
        from the graph's size, never read off a clock, so the same input gives the same
        placement on any machine (default 1.0).
    search_seconds : float
        With ``refine``: wall-clock safety net (s) past which the optional stages and the
        critical-path search stop early (default 60).
    search_budget : int
        With ``refine``: work budget of the critical-path search in replayed ops (default
        1,200,000).
    repair_budget : int
        With ``refine``: work budget in replayed ops of the peak-memory repair, which runs when
        no candidate fits by its replayed peak (default 4,000,000).

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> params = get_placer("celeritas").typed_params({"R": 100, "refine": "false"})
    >>> params.R, params.refine, params.work_seconds
    (100, False, 1.0)
    """

    refine: bool = param(
        True, "true: also try min-cut and multilevel partitions, pipeline-stage splits, list schedules "
        "and one device, repair those that overflow a device, keep the fastest replay and improve it "
        "by a critical-path search; false: the paper's Adjusting Placement alone")
    work_seconds: float = param(
        1.0, "refine: work budget (nominal seconds) of the optional stages (more multilevel "
        "partitions and stage splits, list schedules, ranking the best candidates over several "
        "dispatch orders): each stage's cost is estimated from the graph's size, never read off a "
        "clock, so the same input gives the same placement on any machine and under any load",
        minimum=0.0, maximum=3600.0)
    search_seconds: float = param(
        60.0, "refine: wall-clock safety net (s): past it the optional stages and the critical-path "
        "search stop early (extra.stages.cut_by_clock names them); fusion, the always-run candidates "
        "and the memory repair never stop on a clock", minimum=0.0, maximum=86_400.0, safety_net=True)
    search_budget: int = param(
        1_200_000, "refine: work budget of the critical-path search in replayed ops (each trial "
        "replays every op once per dispatch order it is judged on)", minimum=0, maximum=10**12)
    repair_budget: int = param(
        4_000_000, "refine: work budget in replayed ops of the peak-memory repair, which runs when "
        "no candidate fits by its replayed peak (shared by the candidates it repairs)",
        minimum=0, maximum=10**12)


def _fused(graph: Graph, cluster: Cluster, params: FusionParams) -> tuple[Fusion, np.ndarray, dict[str, Any]]:
    """Optimal Operation Fusion of ``graph``, the CPD-TOPO order of its coarse graph, and the
    fusion's figures for ``extra``."""
    fusion = optimal_operation_fusion(graph, cluster, R=params.R, memory_fraction=params.memory_fraction)
    coarse = fusion.coarse
    comm = planning_comm_us(coarse, cluster)
    coarse_order = cpd_topo_order(coarse, comm, cpath=cpath(coarse, comm))
    return fusion, coarse_order, {"coarse_edges": coarse.num_edges, "cut_cost_us": fusion.cut_cost_us}


def celeritas_placer(graph: Graph, cluster: Cluster, params: CeleritasParams) -> PlacerOutput:
    """Celeritas: Optimal Operation Fusion and Adjusting Placement (``refine`` false: the paper), or
    (``refine``) the fastest replay among Adjusting Placement, min-cut and multilevel partitions,
    pipeline-stage splits, list schedules and one device (repaired by trades when, on a graph with
    liveness fields, none fits by its replayed peak), improved by the simulator-guided critical-path
    search on the robust step (docs/algorithms.md).

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : CeleritasParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``coarse_nodes`` the fused clusters; ``extra`` the fusion's figures
        and, with ``refine``, each candidate's replayed step (µs) and the one ``chosen``.

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> cluster = Cluster.homogeneous(2, 1e9)
    >>> placement = place(graph, cluster, "celeritas")
    >>> placement.assignment.tolist(), placement.predicted_step_time_us
    ([0, 0, 1, 1], 95.1)
    >>> placement.extra["chosen"], placement.extra["candidates"]["single/0"]
    ('etf/baechi', 120.0)
    >>> place(graph, cluster, "celeritas", {"refine": False}).assignment.tolist()   # the paper's
    [0, 0, 0, 0]
    """
    started = time.perf_counter()
    fusion, coarse_order, extra = _fused(graph, cluster, params)
    if params.refine and not cluster.is_flat and cluster.num_devices > 1:
        assignment = _aware_and_blind(graph, cluster, fusion, coarse_order, params, started, extra)
    elif params.refine:
        assignment = portfolio_placement(graph, cluster, fusion, coarse_order, params, started, extra)
    else:
        room = fusion_room(graph, cluster, fusion)
        assignment = fusion.to_fine(adjusting_placement(fusion.coarse, cluster, coarse_order, room=room))
    return PlacerOutput(assignment=assignment, coarse_nodes=fusion.num_clusters, extra=extra)


#: The share of the work budget (``work_seconds``) the blind run's optional candidates may use: none,
#: so the blind run costs its always-run candidates (on the benchmark's topologies a larger share
#: never changed the result and made the topology placement up to 2.4x the flat one's seconds).
BLIND_WORK_SHARE = 0.0


def _aware_and_blind(graph: Graph, cluster: Cluster, fusion: Fusion, coarse_order: np.ndarray,
                     params: CeleritasParams, started: float, extra: dict[str, Any]) -> np.ndarray:
    """On a link topology: the portfolio's always-run candidates placed blind (on the flat mean-link
    cluster; :data:`BLIND_WORK_SHARE` of the work budget for optional ones, no critical-path
    search), then the portfolio aware of the links with the best blind placement among the
    finalists of its robust ranking, so the search starts from it when it replays best on the true
    links. Why: candidates built for the links can lose to ones built without them, and a blind
    start searched on the true links is then kept. ``extra["blind"]`` reports the blind run."""
    flat = cluster.flat()
    flat_fusion, flat_order, blind_extra = _fused(graph, flat, params)
    blind_params = replace(params, search_budget=0, work_seconds=BLIND_WORK_SHARE * params.work_seconds)
    blind = portfolio_placement(graph, flat, flat_fusion, flat_order, blind_params, started, blind_extra)
    assignment = portfolio_placement(graph, cluster, fusion, coarse_order, params, started, extra,
                                     blind=blind)
    extra["blind"] = {"chosen": blind_extra["chosen"], "search": blind_extra["search"],
                      "stages": blind_extra["stages"]}
    return assignment


def order_place_placer(graph: Graph, cluster: Cluster, params: FusionParams) -> PlacerOutput:
    """Order-Place: Optimal Operation Fusion, then fill devices in CPD-TOPO order.

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : FusionParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``coarse_nodes`` the fused clusters; ``extra`` the coarse graph's
        edges and the fusion's cut cost (µs).

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> placement = place(graph, Cluster.homogeneous(2, 350), "order-place")   # 350 bytes each
    >>> placement.assignment.tolist(), placement.predicted_step_time_us, placement.coarse_nodes
    ([0, 0, 1, 1], 95.1, 4)
    """
    fusion, coarse_order, extra = _fused(graph, cluster, params)
    room = fusion_room(graph, cluster, fusion)
    ordered = order_place(fusion.coarse, cluster, coarse_order, room=room)
    return PlacerOutput(assignment=fusion.to_fine(ordered),
                        coarse_nodes=fusion.num_clusters, extra=extra)


register_placer(PlacerSpec(
    "celeritas", celeritas_placer,
    "Optimal Operation Fusion over CPD-TOPO and Adjusting Placement, then the fastest of min-cut, "
    "multilevel, pipeline-stage, list-schedule and one-device candidates (repaired when they overflow "
    "a device), improved by a critical-path search judged over several dispatch orders",
    CeleritasParams,
))
register_placer(PlacerSpec(
    "order-place", order_place_placer,
    "Optimal Operation Fusion, then fill devices one after another in CPD-TOPO order",
    FusionParams,
))
