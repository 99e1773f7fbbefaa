"""Enforced execution order (celeritas_tf/order.py): each device runs its ops in the placement's
recorded ``device_order`` once the control edges are added, and not without them; the session
keeps every edge; bad orders are refused in one line. The smallest zoo model (mlp, its small
configuration) on 4 logical CPU devices."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.placers import place
from celeritas_core.readwrite.formats import check_device_order, placement_device_order, placement_to_json
from celeritas_core.simulation.memory import one_device_peak_bytes
from celeritas_tf.extract import graph_from_step
from celeritas_tf.models import get_model
from celeritas_tf.order import (
    OrderEdges,
    enforce_device_order,
    executed_device_order,
    free_ops,
    order_agreement,
)
from celeritas_tf.profile import place_ops
from celeritas_tf.step import TrainingStep, build_training_step
from celeritas_tf.tf import run_options, session_config, step_device, tensorflow

DEVICES = 4
BATCH = 8
NAMES = [step_device(i) for i in range(DEVICES)]


@pytest.fixture(scope="module")
def model():
    return get_model("mlp")  # its small configuration


@pytest.fixture(scope="module")
def placed(model) -> tuple[dict[str, int], tuple[tuple[str, ...], ...]]:
    """The Celeritas placement of the extracted step on 4 devices that each hold 40 % of its
    one-device peak (so it spreads), and its recorded per-device order."""
    graph = graph_from_step(build_training_step(model, BATCH))
    placement = place(graph, Cluster.homogeneous(DEVICES, one_device_peak_bytes(graph) * 0.4), "celeritas")
    doc = placement_to_json(placement)
    assignment = doc["assignment"]
    order = placement_device_order(doc)
    if order is None:  # a placement that does not record its order: a topological order per device
        order = _device_order(_preds(build_training_step(model, BATCH)), assignment, {})
    check_device_order(order, assignment)
    assert len({d for d in assignment.values()}) >= 2
    return assignment, order


def _preds(step: TrainingStep) -> dict[str, list[str]]:
    return {n.name: [i.lstrip("^").split(":")[0] for i in n.input] for n in step.step_graph_def().node}


def _device_order(preds: Mapping[str, Sequence[str]], assignment: Mapping[str, int],
                  priority: Mapping[str, float]) -> tuple[tuple[str, ...], ...]:
    """Per device, its ops in a topological order of the whole step that takes the ready op of
    lowest ``priority`` first (GraphDef order breaks ties)."""
    succs: dict[str, list[str]] = {n: [] for n in preds}
    for n, inputs in preds.items():
        for p in inputs:
            succs[p].append(n)
    index = {n: i for i, n in enumerate(preds)}
    indegree = {n: len(inputs) for n, inputs in preds.items()}
    ready = [(priority.get(n, 0.0), index[n], n) for n, k in indegree.items() if k == 0]
    heapq.heapify(ready)
    order: list[list[str]] = [[] for _ in range(DEVICES)]
    while ready:
        *_, n = heapq.heappop(ready)
        order[assignment[n]].append(n)
        for s in succs[n]:
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(ready, (priority.get(s, 0.0), index[s], s))
    assert sum(map(len, order)) == len(preds)
    return tuple(tuple(ops) for ops in order)


def _traced_orders(step: TrainingStep, steps: int = 2, *, partition_graphs: list | None = None
                   ) -> list[dict[str, list[str]]]:
    """Initialise, then run ``steps`` traced steps: each one's executed order per device."""
    tf1 = tensorflow().compat.v1
    ops = set(step.step_op_names())
    options = run_options(DEVICES, trace=True)
    options.output_partition_graphs = partition_graphs is not None
    rng = np.random.default_rng(0)
    out = []
    with tf1.Session(graph=step.graph, config=session_config(DEVICES)) as session:
        session.run(step.init_op)
        for _ in range(steps):
            metadata = tf1.RunMetadata()
            session.run([step.train_op, step.loss], step.feed_dict(rng), options=options,
                        run_metadata=metadata)
            out.append(executed_device_order(metadata.step_stats, ops=ops))
            if partition_graphs is not None:
                partition_graphs[:] = list(metadata.partition_graphs)
    return out


def _control_edges(step: TrainingStep) -> set[tuple[str, str]]:
    return {(c.name, op.name) for op in step.graph.get_operations() for c in op.control_inputs}


@pytest.mark.parametrize("when", ["before", "after"])
def test_each_device_runs_its_ops_in_the_recorded_order(model, placed, when):
    assignment, order = placed
    step = build_training_step(model, BATCH)
    before = _control_edges(step)
    if when == "after":
        place_ops(step, assignment)
    edges = enforce_device_order(step, order)
    if when == "before":
        place_ops(step, assignment)
    added = _control_edges(step) - before
    assert len(added) == edges.added > 0
    partitions: list = []
    runs = _traced_orders(step, partition_graphs=partitions)
    free = free_ops(step)
    for executed in runs:
        assert order_agreement(order, executed, NAMES, skip=free) == 1.0
        # every chained op ran on its device
        ran = {(name, device) for device, names in executed.items() for name in names}
        assert all((op, NAMES[d]) in ran for d, ops in enumerate(order) for op in ops if op not in free)
    # the session kept every edge added (no Grappler dependency optimizer, no pruning)
    kept = {(i[1:], node.name) for graph in partitions for node in graph.node for i in node.input
            if i.startswith("^")}
    assert added <= kept


def test_edges_count_every_consecutive_pair_once(model, placed):
    assignment, order = placed
    step = build_training_step(model, BATCH)
    edges = enforce_device_order(step, order)
    free = free_ops(step)
    chained_devices = sum(1 for ops in order if any(op not in free for op in ops))
    assert isinstance(edges, OrderEdges)
    assert edges.ops == len(assignment) == len(step.step_op_names())
    assert edges.free == len(free) > 0
    assert edges.added + edges.implied == edges.ops - edges.free - chained_devices
    assert edges.implied > 0 and edges.added > 0
    # applied again, every pair is already ordered
    again = enforce_device_order(step, order)
    assert (again.added, again.implied) == (0, edges.added + edges.implied)


def test_a_constant_that_ends_its_list_runs_whole_on_its_device(model):
    """TensorFlow copies a small constant without control successors to each device that consumes
    it; the control edge to a consumer keeps it whole on its own device."""
    step = build_training_step(model, BATCH)
    graph = graph_from_step(step)
    group = {name: graph.colocation[i] or name for i, name in enumerate(graph.node_names)}
    preds, free = _preds(step), free_ops(step)
    consumers = {c.name: [n for n, inputs in preds.items() if c.name in inputs]
                 for c in step.graph.get_operations()
                 if c.type == "Const" and c.name in preds and c.outputs[0].shape.num_elements() <= 16}
    const, users = next((c, users) for c, users in sorted(consumers.items())
                        if c not in free and group[c] == c and len({group[u] for u in users}) >= 2)
    assignment = {name: 0 for name in preds}
    assignment.update({name: 1 for name in preds if group[name] == group[users[-1]]})
    assignment[const] = DEVICES - 1
    ran_on = {}
    for enforce in (False, True):
        step = build_training_step(model, BATCH)
        if enforce:
            edges = enforce_device_order(step, [[], [], [], [const]])
            assert (edges.added, edges.implied, edges.pinned) == (0, 0, 1)
        place_ops(step, assignment)
        executed = _traced_orders(step, 1)[0]
        ran_on[enforce] = {device for device, names in executed.items() if const in names}
    assert ran_on == {False: {NAMES[0], NAMES[1]}, True: {NAMES[DEVICES - 1]}}


def test_without_the_edges_a_reversed_order_is_not_followed(model, placed):
    """The order TensorFlow picks, reversed wherever the dependencies allow: TensorFlow does not
    follow it on its own, and does once it is enforced."""
    assignment, _ = placed
    step = build_training_step(model, BATCH)
    place_ops(step, assignment)
    first, second = _traced_orders(step)
    position = {name: i for names in first.values() for i, name in enumerate(names)}
    reversed_order = _device_order(_preds(step), assignment, {n: -p for n, p in position.items()})
    free = free_ops(step)
    assert order_agreement(reversed_order, second, NAMES, skip=free) < 0.9
    enforced = build_training_step(model, BATCH)
    enforce_device_order(enforced, reversed_order)
    place_ops(enforced, assignment)
    for executed in _traced_orders(enforced):
        assert order_agreement(reversed_order, executed, NAMES, skip=free) == 1.0


def test_bad_orders_are_refused_in_one_line(model):
    step = build_training_step(model, BATCH)
    names = step.step_op_names()
    with pytest.raises(CeleritasInputError) as err:
        enforce_device_order(step, [[names[-1], "ghost"]], source="p.json")
    assert str(err.value) == "p.json: device_order: 'ghost' is not an op of the step"
    with pytest.raises(CeleritasInputError) as err:  # an op of the graph that the step does not run
        enforce_device_order(step, [[names[-1]], [step.init_op.name]], source="p.json")
    assert str(err.value) == f"p.json: device_order: {step.init_op.name!r} is not an op of the step"
    with pytest.raises(CeleritasInputError) as err:
        enforce_device_order(step, [[names[-1]], [names[-1]]], source="p.json")
    assert str(err.value) == f"p.json: device_order: {names[-1]!r} is listed twice"
    # the loss listed before an op it reads
    loss = step.loss.op
    producer = loss.inputs[0].op.name
    with pytest.raises(CeleritasInputError) as err:
        enforce_device_order(step, [[], [loss.name, producer]], source="p.json")
    assert str(err.value) == (f"p.json: device_order: device 1 lists {loss.name!r} before {producer!r}, "
                              f"but {loss.name!r} depends on {producer!r}")
    assert _control_edges(step) == _control_edges(build_training_step(model, BATCH))  # nothing added


def test_orders_that_make_a_cycle_together_are_refused(model):
    """Device 0 runs a before d and device 1 runs c before b, while b feeds a and d feeds c:
    neither list contradicts the step alone, together they make a cycle."""
    step = build_training_step(model, BATCH)
    preds = _preds(step)
    ancestors: dict[str, set[str]] = {}
    for name in preds:  # GraphDef order is topological here
        ancestors[name] = set(preds[name]).union(*(ancestors[p] for p in preds[name]))
    free = free_ops(step)
    data = [(p, n) for n, inputs in preds.items() for p in inputs if not {p, n} & free]
    b, a, d, c = next((b, a, d, c) for b, a in data for d, c in data
                      if len({a, b, c, d}) == 4 and d not in ancestors[a] and b not in ancestors[c]
                      and a not in ancestors[d] and c not in ancestors[b])
    with pytest.raises(CeleritasInputError) as err:
        enforce_device_order(step, [[a, d], [c, b]], source="p.json")
    assert str(err.value) in {
        f"p.json: device_order: device 0 lists {a!r} before {d!r}, which with the other devices' orders "
        "makes a cycle",
        f"p.json: device_order: device 1 lists {c!r} before {b!r}, which with the other devices' orders "
        "makes a cycle"}


def test_executed_order_sorts_by_start_and_reads_runtime_names():
    from tensorflow.core.framework.step_stats_pb2 import StepStats

    stats = StepStats()
    cpu0 = stats.dev_stats.add(device=NAMES[0])
    for name, start in [("_SOURCE", 0), ("b", 30), ("a", 10), ("_arg_x_0_0", 5), ("c", 30),
                        ("k/replicate/_1", 40), ("a/_7", 50)]:
        cpu0.node_stats.add(node_name=name, all_start_micros=start, all_start_nanos=start * 1000)
    cpu1 = stats.dev_stats.add(device=NAMES[1])
    cpu1.node_stats.add(node_name="e", all_start_micros=3)
    executed = executed_device_order(stats)
    # a tie (b, c) keeps the order the runtime recorded them in
    assert executed == {NAMES[0]: ["x", "a", "b", "c", "k"], NAMES[1]: ["e"]}
    assert executed_device_order(stats, ops={"a", "c", "e"}) == {NAMES[0]: ["a", "c"], NAMES[1]: ["e"]}
    assert order_agreement([["x", "a", "b", "c"], ["e"]], executed, NAMES) == 1.0
    # b ran before c, not after it; z never ran; e ran on another device than recorded
    recorded = [["x", "a", "c", "b", "z"], [], ["e"]]
    assert order_agreement(recorded, executed, NAMES[:3]) == pytest.approx(3 / 6)
    assert order_agreement([["a", "c", "b"]], executed, NAMES, skip={"b"}) == 1.0
    with pytest.raises(CeleritasInputError):
        order_agreement([["a"], ["e"]], executed, NAMES[:1])
