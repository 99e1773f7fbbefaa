"""m-ETF's live memory model (Baechi's: outputs held until their last consumer has run) and
Celeritas's list schedules with memory kept free (``headroom_candidates``)."""

from __future__ import annotations

import numpy as np
import pytest

from celeritas_core.generators.families import benchmark_instances
from celeritas_core.generators.layers import layer_training_graph
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.graphs.graph import Graph, Liveness
from celeritas_core.placers import place
from celeritas_core.placers.etf import list_schedule
from celeritas_core.placers.local_search import CandidatePool
from celeritas_core.placers.portfolio import HEADROOM_STAGE, headroom_candidates, headroom_worth


def _chain(outputs: list[float], *, liveness: bool = True) -> Graph:
    """a -> b -> c whose outputs have the given bytes; expensive transfers (1 ms) keep it together."""
    n = len(outputs)
    live = Liveness.from_lists(persistent=[0.0] * n, scratch=[0.0] * n, outputs=[[b] for b in outputs]) \
        if liveness else None
    return Graph.from_arrays(name="chain", node_names=[f"op{i}" for i in range(n)], time_us=[10.0] * n,
                             memory_bytes=outputs, edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
                             edge_bytes=outputs[:-1], liveness=live)


def test_live_memory_frees_an_output_after_its_last_consumer():
    g = _chain([60.0, 60.0, 60.0])
    cluster = Cluster.homogeneous(2, 130.0, slope_us_per_byte=0.0, intercept_us=1000.0)
    # static: 60 + 60 held all step leave 10 bytes, so op2 must go to device 1 (1 ms transfer)
    assert list_schedule(g, cluster).assignment.tolist() == [0, 0, 1]
    # live: op0's output is freed once op1 has run, so op2 fits beside op1
    live = list_schedule(g, cluster, live_memory=True)
    assert live.assignment.tolist() == [0, 0, 0]
    assert live.best_effort_ops == 0


def test_live_memory_is_the_static_model_without_liveness_fields():
    g = _chain([60.0, 60.0, 60.0], liveness=False)
    cluster = Cluster.homogeneous(2, 130.0, slope_us_per_byte=0.0, intercept_us=1000.0)
    static = list_schedule(g, cluster)
    live = list_schedule(g, cluster, live_memory=True)
    assert live.assignment.tolist() == static.assignment.tolist() == [0, 0, 1]


def test_live_memory_waits_for_memory_then_places_best_effort_when_nothing_can_run():
    # one device of 100 bytes: op1 needs 60 while op0's 60 are live -> nothing fits anywhere,
    # the scheduler must not stall: op1 is placed best effort and counted
    g = _chain([60.0, 60.0, 10.0])
    cluster = Cluster.homogeneous(1, 100.0)
    res = list_schedule(g, cluster, live_memory=True)
    assert res.assignment.tolist() == [0, 0, 0]
    assert res.best_effort_ops == 1


def test_live_memory_keeps_groups_whole_on_a_layer_training_step():
    g = layer_training_graph("inception", size=2, liveness=True)
    cluster = Cluster.homogeneous(4, 0.5 * g.total_memory_bytes)
    for fusion in (False, True):
        placement = place(g, cluster, "m-etf", {"fusion": fusion})
        assert colocation_respected(g, placement.assignment)
        assert placement.assignment.max() < 4


def test_headroom_candidates_run_only_for_graphs_with_liveness_fields():
    g = layer_training_graph("resnet", size=1)
    cluster = Cluster.homogeneous(4, g.total_memory_bytes)
    assert headroom_candidates(g, cluster, CandidatePool(g, cluster)) == []


def test_headroom_schedule_fits_where_the_plain_schedule_overflows():
    instance = next(i for i in benchmark_instances("e", quick=True) if i.graph.liveness is not None
                    and i.cluster.num_devices == 6)
    graph, cluster = instance.graph, instance.cluster
    pool = CandidatePool(graph, cluster)
    plain = pool.add("heft", place(graph, cluster, "heft").assignment)
    assert not plain.fits  # the premise: HEFT's memory model misses what the replay charges
    entries = dict(headroom_candidates(graph, cluster, pool))
    assert headroom_worth(pool, f"heft/{HEADROOM_STAGE}")
    entries[f"heft/{HEADROOM_STAGE}"]()
    roomy = [c for c in pool.candidates if c.name.startswith(f"heft/{HEADROOM_STAGE}")]
    assert roomy and roomy[-1].fits and not any(c.fits for c in roomy[:-1])
    celeritas = place(graph, cluster, "celeritas")
    assert not celeritas.oom
    assert celeritas.predicted_step_time_us <= 1.01 * roomy[-1].step_time_us


@pytest.mark.parametrize("shape", ["inception", "resnet"])
def test_layer_training_graph_ties_each_layers_forward_to_its_gradients(shape):
    g = layer_training_graph(shape, size=1, liveness=True)
    groups: dict[str, list[str]] = {}
    for name, group in zip(g.node_names, g.colocation, strict=True):
        groups.setdefault(group, []).append(name.rsplit("/", 1)[1])
    kinds = {tuple(sorted(v)) for v in groups.values()}
    assert ("fwd", "grad_input", "grad_weights") in kinds  # conv / dense layers
    assert ("fwd", "grad_input") in kinds  # batch-norm, ReLU, joins
    assert all("fwd" in v for v in groups.values())
    # every gradient runs after its own forward: an edge path fwd -> ... -> grad exists
    order = np.argsort(g.topological_order)
    index = g.index
    for group, members in groups.items():
        fwd = index[f"{group}/fwd"]
        assert all(order[index[f"{group}/{m}"]] >= order[fwd] for m in members)
