"""Pipeline step (light): Optimal Operation Fusion of the measured graph, for the record."""

from __future__ import annotations

from celeritas_core.formats import FUSION_FORMAT, graph_to_json
from celeritas_core.fusion import optimal_operation_fusion
from celeritas_core.levels import ccr
from tasks import storage, tracking
from tasks.common import artifact, load_graph_uri, run_cluster
from tasks.contracts import CalibrationResult, FuseResult, Job, RemeasureResult


def fuse(job: Job, measured: RemeasureResult, calibration: CalibrationResult) -> FuseResult:
    """Fuse the measured graph (CPD-TOPO, R, M) and write the coarse graph and the fusion figures:
    nodes and CCR before and after. The placers fuse again themselves; this step records it."""
    params, run_dir = job.params, job.run_dir
    graph = load_graph_uri(measured.measured_graph_uri)
    cluster = run_cluster(calibration)
    fusion = optimal_operation_fusion(graph, cluster, R=params.R,
                                      memory_fraction=float(params.memory_fraction))
    figures = {"nodes": graph.num_nodes, "coarse_nodes": fusion.num_clusters,
               "ccr_before": ccr(graph, cluster), "ccr_after": ccr(fusion.coarse, cluster),
               "cut_cost_us": fusion.cut_cost_us}
    coarse_uri = storage.write_json(artifact(run_dir, "coarse_graph"), graph_to_json(fusion.coarse))
    uri = storage.write_json(artifact(run_dir, "fusion"), {"format": FUSION_FORMAT, **figures,
                                                            "R": params.R,
                                                            "memory_fraction": params.memory_fraction})
    finite = {k: float(v) for k, v in figures.items() if v == v and v != float("inf")}
    tracking.log_metrics(job.parent_run_id, finite)
    return FuseResult(fusion_uri=uri, coarse_graph_uri=coarse_uri, **figures)
