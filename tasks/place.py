"""Pipeline step (light): Celeritas and the chosen baselines on the measured graph; one child run each."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.pipeline.plan import PipelineRequest, place_pipelined
from celeritas_core.placers.compare import PlaceFn, compare_placers, effective_step
from celeritas_core.placers.partition import traffic_by_link
from celeritas_core.plots import gantt_chart, memory_chart
from celeritas_core.readwrite.formats import save_placement
from tasks import storage, tracking
from tasks.common import artifact, chart_uri, load_graph_uri, log_documents, placement_uri, run_cluster
from tasks.contracts import CalibrationResult, Job, PlaceResult, RemeasureResult


def place(job: Job, measured: RemeasureResult, calibration: CalibrationResult) -> PlaceResult:
    """Run every placer in ``job.params.placers`` on the measured graph, replay each in the simulator,
    write each placement with its Gantt and memory charts, ``compare.json``/``.csv`` and the memory
    chart of all placers, and log one MLflow child run per placer (its placement under
    ``placement/``, its ``gantt.png`` and ``memory.png`` at the top of its artifacts, where MLflow's
    compare view matches files). ``publish`` attaches the chosen placement's charts to the parent
    run. Fails (not retried) when no placement fits in memory."""
    params, run_dir, parent_run_id = job.params, job.run_dir, job.parent_run_id
    graph = load_graph_uri(measured.measured_graph_uri)
    cluster = run_cluster(calibration)
    shared = {"R": params.R, "memory_fraction": float(params.memory_fraction)}
    place_fn = _pipelined(params.micro_batches, params.schedule, params.batch_size)
    comparison = compare_placers(graph, cluster, list(params.placers), shared, order_mode=params.order_mode,
                                 place_fn=place_fn)
    steps = {p.placer: effective_step(p) for p in comparison.placements}
    if all(oom for _, oom in steps.values()):
        worst = comparison.best
        raise CeleritasInputError(
            f"model {params.model!r} does not fit on {cluster.num_devices} devices of "
            f"{params.device_memory} even with best effort (fastest placement, {worst.placer}, overfills "
            f"{', '.join(worst.oom_devices)})")
    best_baseline = min((step for name, (step, oom) in steps.items() if name != "celeritas" and not oom),
                        default=float("nan"))
    placements: dict[str, str] = {}
    children: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for p in comparison.placements:
            local = save_placement(p, Path(tmp) / f"{p.placer}.json", graph=graph)
            placements[p.placer] = storage.upload_file(str(local), placement_uri(run_dir, p.placer))
            metrics = {
                "placement_time_s": p.placement_seconds,
                "simulated_step_time_ms": steps[p.placer][0] * 1e-3,
                "speedup_vs_single": p.single_device_time_us / steps[p.placer][0],
                "simulated_speedup_vs_best_baseline": best_baseline / steps[p.placer][0],
                "oom": float(steps[p.placer][1]),
                "micro_batches": float(p.pipeline.micro_batches if p.pipeline is not None else 1),
                **{f"peak_memory_bytes_{name.replace(':', '_')}": float(m)
                   for name, m in zip(p.devices, p.device_peak_memory_bytes, strict=True)},
                **{f"sum_memory_bytes_{name.replace(':', '_')}": float(m)
                   for name, m in zip(p.devices, p.device_memory_bytes, strict=True)},
            }
            if p.coarse_nodes is not None:
                metrics["coarse_nodes"] = float(p.coarse_nodes)
            metrics.update(_traffic_metrics(graph, cluster, p.assignment))
            charts = Path(tmp) / "charts" / p.placer
            charts.mkdir(parents=True)
            gantt_chart(graph, cluster, p, charts / "gantt.png")
            memory_chart(comparison.placements, cluster, charts / "memory.png", graph=graph, best=p,
                         title=f"{graph.name}: memory of the {p.placer} placement")
            for name in ("gantt.png", "memory.png"):
                storage.upload_file(str(charts / name), chart_uri(run_dir, p.placer, name))
            children[p.placer] = tracking.child_run(
                parent_run_id, p.placer, params={**p.params, "placer": p.placer},
                metrics={k: v for k, v in metrics.items() if v == v and abs(v) != float("inf")},
                artifacts={"placement": str(local), "": str(charts)})  # charts at the top: compare view
        everyone = memory_chart(comparison.placements, cluster, Path(tmp) / "memory_all_placers.png",
                                title=f"{graph.name}: peak memory per device")
        storage.upload_file(str(everyone), artifact(run_dir, "memory_all_placers"))
        tracking.log_artifact(parent_run_id, str(everyone))
    compare_doc = comparison.to_json()
    compare_uri = storage.write_json(artifact(run_dir, "compare"), compare_doc)
    storage.write_text(artifact(run_dir, "compare_csv"), comparison.to_csv())
    log_documents(parent_run_id, {"compare.json": compare_doc}, "placement")
    tracking.log_metrics(parent_run_id, {
        "best_simulated_step_time_ms": steps[comparison.best.placer][0] * 1e-3,
        "single_device_step_time_ms": comparison.single_device_time_us * 1e-3})
    tracking.set_tags(parent_run_id, {"celeritas.best_simulated_placer": comparison.best.placer})
    return PlaceResult(placements=placements, child_runs=children, compare_uri=compare_uri,
                       best_simulated=comparison.best.placer,
                       simulated_step_time_us={name: step for name, (step, _) in steps.items()},
                       oom={name: oom for name, (_, oom) in steps.items()})


def _pipelined(micro_batches: str, schedule: str, batch_size: int) -> PlaceFn | None:
    """What places each placer: as a pipelined step when ``micro_batches`` is not 1
    (docs/pipelining.md), else None (one batch per step, :func:`~celeritas_core.placers.place`)."""
    if micro_batches.strip() == "1":
        return None
    request = PipelineRequest.parse(micro_batches, schedule, batch_size=batch_size)
    return functools.partial(place_pipelined, request=request)


def _traffic_metrics(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> dict[str, float]:
    """The replay's ``transfers`` and ``transfer_bytes``, and on a link topology each per kind of
    link (``transfers_ib-ndr``, ``transfer_bytes_nvlink4``, ...), for MLflow's compare view."""
    rows = traffic_by_link(graph, cluster, assignment)
    metrics = {"transfers": float(sum(r[1] for r in rows)), "transfer_bytes": float(sum(r[2] for r in rows))}
    if cluster.topology is not None:
        for name, count, nbytes in rows:
            metrics[f"transfers_{name}"] = float(count)
            metrics[f"transfer_bytes_{name}"] = nbytes
    return metrics
