"""Pipelined micro-batch steps (celeritas_core.pipeline): roles, micro-batch costs, the unrolled
step, the GPipe and 1F1B orders, the search and the placement file's ``pipeline`` object."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from celeritas_core import Cluster, Graph, place
from celeritas_core.errors import CeleritasInputError
from celeritas_core.generators.synthetic import small_training_graph, training_step_graph
from celeritas_core.pipeline.microbatch import batch_tensors, microbatch_graph
from celeritas_core.pipeline.plan import (
    PipelineRequest,
    candidate_micro_batches,
    place_pipelined,
    replay_plan,
    work_bound_us,
)
from celeritas_core.pipeline.roles import AFTER, BACKWARD, BEFORE, FORWARD, op_roles
from celeritas_core.pipeline.schedules import replay_pipeline
from celeritas_core.pipeline.unroll import unroll
from celeritas_core.readwrite.formats import placement_from_json, placement_to_json
from celeritas_core.simulation.memory import one_device_peak_bytes
from celeritas_core.simulation.simulator import simulate


@pytest.fixture(scope="module")
def step() -> Graph:
    return small_training_graph(0, liveness=True)


def test_roles_split_forward_backward_and_the_ops_run_once(step: Graph) -> None:
    roles = op_roles(step)
    role = roles.role
    src, dst = step.edge_src, step.edge_dst
    # no edge runs against the step's order: before -> forward -> backward -> after
    assert (role[src] <= role[dst]).all()
    assert role[step.index["input"]] == FORWARD and role[step.index["Adam/update"]] == AFTER
    assert all(role[i] == BEFORE for i, op in enumerate(step.ops) if op == "VariableV2")
    assert (role == BACKWARD).sum() > 0


def test_a_graph_without_batch_inputs_is_refused() -> None:
    g = Graph.from_arrays(name="plain", node_names=["a", "b"], time_us=[1, 1], memory_bytes=[0, 0],
                          edge_src=[0], edge_dst=[1], edge_bytes=[8])
    with pytest.raises(CeleritasInputError, match="graph 'plain' has no batch input"):
        op_roles(g)


def test_microbatch_costs_scale_above_the_floor_and_keep_weights(step: Graph) -> None:
    roles = op_roles(step)
    mb = microbatch_graph(step, roles, 4, floor_us=5.0)
    per = roles.per_micro_batch
    t = step.time_us
    expected = np.minimum(t, 5.0) + np.maximum(t - 5.0, 0) / 4
    np.testing.assert_allclose(mb.time_us[per], expected[per])
    np.testing.assert_array_equal(mb.time_us[~per], t[~per])
    scales = batch_tensors(step, roles)
    tensors = step.tensors
    # a weight's gradient into its update keeps the weight's size
    into_update = tensors.edge_tensor[roles.role[step.edge_dst] == AFTER]
    assert not scales[into_update].any()
    edge_scaled = scales[tensors.edge_tensor]
    np.testing.assert_allclose(mb.edge_bytes[edge_scaled], step.edge_bytes[edge_scaled] / 4)
    np.testing.assert_array_equal(mb.edge_bytes[~edge_scaled], step.edge_bytes[~edge_scaled])
    assert microbatch_graph(step, roles, 1) is step


def test_the_unrolled_step_has_m_copies_and_one_accumulation_chain_per_gradient(step: Graph) -> None:
    roles = op_roles(step)
    m = 3
    u = unroll(microbatch_graph(step, roles, m), roles, m)
    per = roles.per_micro_batch
    gradients = {(int(s), int(o)) for s, o, d in zip(step.edge_src, step.edge_src_output, step.edge_dst,
                                                    strict=True) if per[s] and roles.role[d] == AFTER}
    assert u.graph.num_nodes == (~per).sum() + m * per.sum() + (m - 1) * len(gradients)
    for k in range(m):
        assert (u.op[u.micro_batch == k][~u.accumulation[u.micro_batch == k]] == np.flatnonzero(per)).all()
    # every update reads the last sum, and the step is acyclic
    u.graph.topological_order  # noqa: B018
    update = u.graph.index["Adam/update_layer_0/branch_0/kernel/ApplyAdam"]
    inputs = u.graph.edge_src[u.graph.edge_dst == update]
    assert any(u.accumulation[i] and u.micro_batch[i] == m - 1 for i in inputs)
    # one micro-batch: the same step as the graph itself
    one = unroll(step, roles, 1)
    assign = np.arange(step.num_nodes) % 2
    cluster = Cluster.homogeneous(2, 2**40)
    assert simulate(one.graph, cluster, one.expand(assign)).device_busy_us.sum() == pytest.approx(
        simulate(step, cluster, assign).device_busy_us.sum())


def test_gradients_are_summed_beside_their_producer_and_cross_once(step: Graph) -> None:
    """The additions run on the gradient's producer's device, so a gradient whose update is on
    another device crosses once per step (its last sum), not once per micro-batch."""
    roles = op_roles(step)
    m = 4
    u = unroll(microbatch_graph(step, roles, m), roles, m)
    acc = u.accumulation
    assert acc.any() and (u.device_op[acc] == u.op[acc]).all()
    assign = np.where(roles.role == AFTER, 1, 0)  # the updates alone on device 1
    per = roles.per_micro_batch
    gradients = {(int(s), int(o)) for s, o, d in zip(step.edge_src, step.edge_src_output, step.edge_dst,
                                                    strict=True) if per[s] and roles.role[d] == AFTER}
    replay = replay_pipeline(u, Cluster.homogeneous(2, 2**40), assign, "1f1b", step.topological_rank)
    sent = replay.result.transfers.src_node
    from_batches = sent[u.micro_batch[sent] >= 0]
    assert len(from_batches) == len(gradients)
    assert (u.micro_batch[from_batches] == m - 1).all()  # only the last sum of each


def test_1f1b_bounds_activations_in_flight_and_gpipe_does_not(step: Graph) -> None:
    roles = op_roles(step)
    one = np.zeros(step.num_nodes, dtype=np.int64)
    cluster = Cluster.homogeneous(1, 2**40)
    peaks = {}
    for m in (2, 4, 8):
        u = unroll(microbatch_graph(step, roles, m), roles, m)
        gpipe = replay_pipeline(u, cluster, one, "gpipe", step.topological_rank)
        f1b = replay_pipeline(u, cluster, one, "1f1b", step.topological_rank)
        assert f1b.warmup.tolist() == [1] and gpipe.warmup.tolist() == [m]
        assert f1b.device_peak_bytes[0] < gpipe.device_peak_bytes[0]
        peaks[m] = f1b.device_peak_bytes[0]
    assert peaks[8] < peaks[4] < peaks[2]  # smaller micro-batches, fewer bytes in flight


def test_orders_follow_the_schedule_and_never_deadlock(step: Graph) -> None:
    roles = op_roles(step)
    m = 4
    u = unroll(microbatch_graph(step, roles, m), roles, m)
    rng = np.random.default_rng(0)
    for _ in range(5):  # arbitrary assignments: forward ops go back and forth between devices
        assign = place(step, Cluster.homogeneous(3, 2**40), "m-topo", evaluate=False).assignment
        assign = np.where(rng.random(step.num_nodes) < 0.2, rng.integers(0, 3, step.num_nodes), assign)
        for schedule in ("gpipe", "1f1b"):
            try:
                replay = replay_pipeline(u, Cluster.homogeneous(3, 2**40), _colocated(step, assign), schedule,
                                         step.topological_rank)
            except CeleritasInputError as exc:  # pragma: no cover - the fallback must prevent this
                pytest.fail(f"{schedule} deadlocked: {exc}")
            ran = np.concatenate(replay.orders)
            assert sorted(ran.tolist()) == list(range(u.graph.num_nodes))


def test_the_updates_reads_run_after_the_first_forward_block(step: Graph) -> None:
    """A read that only the updates take (here the Adam power scalars' reads) runs just after its
    device's ``F_0``, not at the head of the step, where its transfer would hold the channels the
    first micro-batch's activations need; sources (variables, slots) keep their place first."""
    roles = op_roles(step)
    m = 4
    u = unroll(microbatch_graph(step, roles, m), roles, m)
    reads = np.flatnonzero(u.update_reads)
    assert len(reads) > 0
    g = u.graph
    assert (u.role[reads] == BEFORE).all()
    for r in reads:  # inputs of their own, and only updates read them
        assert (g.edge_dst == r).any() and (u.role[g.edge_dst[g.edge_src == r]] == AFTER).all()
    sources = np.setdiff1d(np.arange(g.num_nodes), g.edge_dst)
    assert not u.update_reads[sources].any()
    assign = np.where(roles.role == AFTER, 1, 0)  # the reads' consumers on another device
    assign[u.op[reads]] = 0
    for schedule in ("gpipe", "1f1b"):
        replay = replay_pipeline(u, Cluster.homogeneous(2, 2**40), assign, schedule, step.topological_rank)
        order = replay.orders[0].tolist()
        at = {node: i for i, node in enumerate(order)}
        f0 = [at[n] for n in order if u.micro_batch[n] == 0 and u.role[n] == FORWARD]
        later = [at[n] for n in order if u.micro_batch[n] >= 0 and not (u.micro_batch[n] == 0 and
                                                                         u.role[n] == FORWARD)]
        once = [at[n] for n in order if u.role[n] == BEFORE and not u.update_reads[n]]
        for r in reads:
            assert max(f0) < at[r] < min(later)
            assert at[r] > max(once)
        sent = replay.result.transfers  # they still cross to the updates' device, once each
        assert np.isin(reads, sent.src_node).all()


def _colocated(graph: Graph, assign: np.ndarray) -> np.ndarray:
    """``assign`` with each co-location group on its first member's device."""
    out = assign.copy()
    ids = graph.colocation_ids
    for g in np.unique(ids[ids >= 0]):
        members = np.flatnonzero(ids == g)
        out[members] = out[members[0]]
    return out


def test_the_search_is_never_slower_than_one_batch_and_fits(step: Graph) -> None:
    cluster = Cluster.homogeneous(4, 0.45 * one_device_peak_bytes(step))
    single = place(step, cluster)
    auto = place_pipelined(step, cluster)
    plan = auto.pipeline
    assert plan is not None and not plan.oom
    assert plan.predicted_step_time_us <= single.predicted_step_time_us
    assert plan.single_batch_step_time_us == single.predicted_step_time_us
    assert plan.micro_batches in candidate_micro_batches(32, 4, None)
    assert (plan.device_peak_memory_bytes <= cluster.memory_bytes).all()


def test_the_plan_round_trips_through_the_file_and_replays_the_same(step: Graph) -> None:
    cluster = Cluster.homogeneous(4, 0.45 * one_device_peak_bytes(step))
    placed = place_pipelined(step, cluster, request=PipelineRequest(4, "1f1b"))
    doc = json.loads(json.dumps(placement_to_json(placed)))
    assert doc["pipeline"]["micro_batches"] == 4 and doc["pipeline"]["schedule"] == "1f1b"
    back = placement_from_json(doc, step, cluster)
    replay = replay_plan(step, cluster, back)
    assert replay.step_time_us == placed.pipeline.predicted_step_time_us
    np.testing.assert_array_equal(replay.device_peak_bytes, placed.pipeline.device_peak_memory_bytes)
    # an old reader sees a single-batch placement: every other field as before
    del doc["pipeline"]
    assert placement_from_json(doc, step, cluster).pipeline is None
    # a swapped pair in a device's order that contradicts the dependencies is refused
    rows = doc_rows = json.loads(json.dumps(placement_to_json(placed)))
    order = rows["pipeline"]["device_order"]
    d = max(range(len(order)), key=lambda i: len(order[i]))
    forward = [j for j, e in enumerate(order[d]) if e[1] == 0]
    order[d][forward[0]], order[d][forward[-1]] = order[d][forward[-1]], order[d][forward[0]]
    with pytest.raises(CeleritasInputError, match="contradicts the graph's dependencies"):
        replay_plan(step, cluster, placement_from_json(doc_rows, step, cluster))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("micro_batches", 0, "pipeline.micro_batches"),
    ("schedule", "interleaved", "pipeline.schedule"),
    ("device_order", [[["no such op", 0]]] * 4, "is not an op of the placement"),
    ("warmup", [1], "pipeline.warmup"),
])
def test_a_bad_pipeline_object_is_one_line(step: Graph, field: str, value: object, message: str) -> None:
    cluster = Cluster.homogeneous(4, 0.45 * one_device_peak_bytes(step))
    doc = placement_to_json(place_pipelined(step, cluster, request=PipelineRequest(2, "gpipe")))
    doc["pipeline"][field] = value
    with pytest.raises(CeleritasInputError, match=message) as info:
        placement_from_json(doc, step, cluster)
    assert "\n" not in str(info.value)


def test_requests_are_checked() -> None:
    with pytest.raises(CeleritasInputError, match="does not divide the batch of 32"):
        candidate_micro_batches(32, 4, 5)
    with pytest.raises(CeleritasInputError, match="needs the batch size"):
        candidate_micro_batches(None, 4, None)
    with pytest.raises(CeleritasInputError, match="unknown schedule"):
        PipelineRequest(2, "zigzag")
    with pytest.raises(CeleritasInputError, match="whole number or auto"):
        PipelineRequest.parse("two")
    assert PipelineRequest.parse("auto").micro_batches is None
    assert candidate_micro_batches(24, 2, None) == [2, 3, 4, 6, 8]


def test_pipelining_fits_where_one_batch_cannot() -> None:
    """GPipe's first motivation: a micro-batch's activations are smaller, so where activations
    dominate (convolutions over many positions) a 1F1B pipeline fits devices on which no
    single-batch placement does (the memory bound says so)."""
    g = training_step_graph(layers=8, width=32, kernel="Conv2D", positions=4096, batch_size=64, seed=1,
                            liveness=True)
    cluster = Cluster.homogeneous(4, 0.2 * one_device_peak_bytes(g))
    single = place(g, cluster)
    assert single.cannot_fit and single.oom
    piped = place_pipelined(g, cluster, request=PipelineRequest(16, "1f1b"))
    assert not piped.pipeline.oom
    assert (piped.pipeline.device_peak_memory_bytes <= cluster.memory_bytes).all()


def test_a_batch_without_divisors_runs_one_batch_per_step() -> None:
    g = small_training_graph(0, liveness=True)
    one = dataclasses.replace(g, meta={**g.meta, "batch_size": 1})
    cluster = Cluster.homogeneous(4, 0.45 * one_device_peak_bytes(g))
    placed = place_pipelined(one, cluster)
    assert placed.pipeline is None
    assert "has no divisor" in placed.extra["pipeline_search"]["chosen"]
    assert placed.predicted_step_time_us == place(one, cluster).predicted_step_time_us


def test_the_refinement_keeps_the_best_and_ends_where_no_one_unit_move_helps(step: Graph) -> None:
    """The boundary refinement never returns a worse split than it was given, and once it has
    spent its work it stands on a split no single one-unit move improves (the small step's
    budget, :data:`~celeritas_core.pipeline.plan.REFINE_REPLAYED_NODES`, reaches that)."""
    from celeritas_core.pipeline import plan
    from celeritas_core.placers.stages import boundary_traffic

    roles = op_roles(step)
    m = 4
    cluster = Cluster.homogeneous(3, 0.6 * one_device_peak_bytes(step))
    micro = microbatch_graph(step, roles, m)
    u = unroll(micro, roles, m)
    seq, start = plan._layer_sequence(step)
    out = place(micro, cluster, "gpipe-even", {"micro_batches": m}, evaluate=False)
    split = plan._split(out.extra, (seq, start))
    rank = step.topological_rank
    given = plan._Tried("gpipe-even", out.assignment,
                        replay_pipeline(u, cluster, out.assignment, "1f1b", rank), split)
    refined = plan._refine(given, cluster, seq, boundary_traffic(step, seq), rank=rank)
    capacity = cluster.memory_bytes
    assert refined.key(capacity) <= given.key(capacity)
    devices, cuts = refined.split
    for k in range(len(cuts)):
        for delta in (1, -1):
            trial = cuts.copy()
            trial[k] += delta
            low = trial[k - 1] if k else 0
            high = trial[k + 1] if k + 1 < len(cuts) else seq.num_units
            if not low < trial[k] < high:
                continue
            moved = replay_pipeline(u, cluster, seq.assignment(trial, devices), "1f1b", rank)
            assert (moved.overflow_bytes(capacity), moved.step_time_us) >= \
                (refined.replay.overflow_bytes(capacity), refined.replay.step_time_us)


@pytest.mark.parametrize("m", [2, 4, 8, 16])
def test_the_work_bound_is_below_every_replay(step: Graph, m: int) -> None:
    """No assignment's pipelined step beats the work spread perfectly over the devices, on
    devices of different speeds too; and the bound counts the unrolled step's work exactly."""
    roles = op_roles(step)
    micro = microbatch_graph(step, roles, m)
    u = unroll(micro, roles, m)
    rng = np.random.default_rng(m)
    for speeds in ([1.0, 1.0, 1.0], [1.0, 0.5, 2.0]):
        cluster = Cluster.build(["a", "b", "c"], [2**40] * 3, speed=speeds)
        bound = work_bound_us(micro, roles, m, cluster)
        assert bound == pytest.approx(u.graph.time_us.sum() / sum(speeds))
        assignments = [np.zeros(step.num_nodes, dtype=np.int64), rng.integers(0, 3, step.num_nodes),
                       place(micro, cluster, "gpipe-even", {"micro_batches": m}, evaluate=False).assignment]
        for assignment in assignments:
            for schedule in ("gpipe", "1f1b"):
                replay = replay_pipeline(u, cluster, assignment, schedule, step.topological_rank)
                assert replay.step_time_us >= bound * (1 - 1e-12)


def test_an_m_that_cannot_beat_the_best_fitting_step_is_not_replayed(step: Graph) -> None:
    """With a floor that makes every extra micro-batch dear, the large ``M`` are ruled out by their
    work bound, and the result is the one the full search finds (the explicit ``M`` replayed
    one by one)."""
    cluster = Cluster.homogeneous(4, 0.45 * one_device_peak_bytes(step))
    request = PipelineRequest(op_floor_us=100.0)
    placed = place_pipelined(step, cluster, request=request)
    search = placed.extra["pipeline_search"]
    assert search["micro_batches_ruled_out"], search
    assert not set(search["micro_batches_ruled_out"]) & set(search["micro_batches_tried"])
    best = placed.pipeline.predicted_step_time_us if placed.pipeline else placed.predicted_step_time_us
    roles = op_roles(step)
    for m in search["micro_batches_ruled_out"]:
        micro = microbatch_graph(step, roles, m, floor_us=100.0)
        assert work_bound_us(micro, roles, m, cluster) >= best
        alone = place_pipelined(step, cluster, request=PipelineRequest(m, "auto", op_floor_us=100.0))
        assert alone.pipeline.predicted_step_time_us >= best


def test_a_slower_candidate_needs_no_peak_and_the_best_is_the_least_key(step: Graph) -> None:
    """The search compares candidates by (overflow, step, M) but makes a replay's liveness peak
    only when that can change the answer: never for one no faster than a best that fits."""
    from celeritas_core.pipeline import plan

    roles = op_roles(step)
    cluster = Cluster.homogeneous(4, 0.45 * one_device_peak_bytes(step))
    micro = microbatch_graph(step, roles, 2)
    u = unroll(micro, roles, 2)
    rank = step.topological_rank
    rng = np.random.default_rng(0)
    assignments = [place(micro, cluster, name, {"micro_batches": 2}, evaluate=False).assignment
                   for name in ("gpipe-even", "alpa-stages", "pipedream")]
    assignments += [rng.integers(0, 4, step.num_nodes) for _ in range(4)]

    def candidates() -> list:
        return [plan._Tried(str(i), a, replay_pipeline(u, cluster, a, "1f1b", rank))
                for i, a in enumerate(assignments)]

    capacity = cluster.memory_bytes
    lazy = candidates()
    best = plan._best(lazy, capacity)
    eager = candidates()
    assert best.source == min(eager, key=lambda t: t.key(capacity)).source
    assert [t.source for t in plan._ranked(candidates(), capacity, 3)] == \
        [t.source for t in sorted(eager, key=lambda t: t.key(capacity))[:3]]
    assert best.replay.overflow_bytes(capacity) == 0
    fresh = candidates()  # the best first: every slower one after it is judged without its peak
    first = next(t for t in fresh if t.source == best.source)
    assert plan._best([first, *(t for t in fresh if t is not first)], capacity) is first
    slower = [t for t in fresh if t.replay.step_time_us > first.replay.step_time_us]
    assert slower and all("device_peak_bytes" not in t.replay.__dict__ for t in slower)
