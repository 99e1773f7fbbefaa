"""Micro-batch (GPipe-style) training steps (celeritas_tf/microbatch.py): one step of the
micro-batch build equals the single-batch step on the zoo models without batch normalisation;
with batch normalisation it equals the mean of the steps on each slice alone; every replica op is
named after an op of the single-batch step; placing the replicas by their single-batch names and
enforcing a device order works on logical CPU devices; bad arguments are refused in one line.
Small zoo configurations at batch 8."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.placers import place
from celeritas_core.readwrite.formats import placement_to_json
from celeritas_core.simulation.memory import one_device_peak_bytes
from celeritas_tf.extract import graph_from_step
from celeritas_tf.microbatch import (
    SHARED,
    MicrobatchStep,
    build_microbatch_step,
    place_microbatch_step,
    replica_scope,
)
from celeritas_tf.models import get_model
from celeritas_tf.order import executed_device_order, free_ops, order_agreement
from celeritas_tf.step import TrainingStep, build_training_step
from celeritas_tf.tf import run_options, session_config, step_device, tensorflow

BATCH = 8
#: The zoo models without batch-statistics layers (Inception-V3 and Tensor Holography have
#: BatchNormalization; the Transformer's LayerNormalization is per example).
NO_BATCH_NORM = ("mlp", "nmt", "transformer")
BATCH_NORM = "tensor_holography"
LEARNING_RATE = 1e-3  # build_training_step's default, which both builds use

Build = TrainingStep | MicrobatchStep


@contextmanager
def _floatx(dtype: str) -> Iterator[None]:
    """Keras builds its layers' weights and computations in ``dtype`` inside the block."""
    tensorflow()
    import keras

    before = keras.config.floatx()
    keras.config.set_floatx(dtype)
    try:
        yield
    finally:
        keras.config.set_floatx(before)


@pytest.fixture(scope="module")
def builds() -> Any:
    """``get(model, micro_batches=None, dtype="float32", batch=BATCH)``: the single-batch step
    (``micro_batches`` None) or the micro-batch step, built once per module (never placed)."""
    cache: dict[tuple[str, int | None, str, int], Build] = {}

    def get(name: str, micro_batches: int | None = None, dtype: str = "float32", batch: int = BATCH) -> Build:
        key = (name, micro_batches, dtype, batch)
        if key not in cache:
            with _floatx(dtype):
                model = get_model(name)  # its small configuration
                cache[key] = (build_training_step(model, batch) if micro_batches is None
                              else build_microbatch_step(model, batch, micro_batches))
        return cache[key]

    return get


def _variables(step: TrainingStep) -> dict[str, Any]:
    """Every variable of the step (weights, Adam's slots and beta powers, moving statistics) by name."""
    with step.graph.as_default():
        return {v.op.name: v for v in tensorflow().compat.v1.global_variables()}


def _applied_gradients(step: TrainingStep) -> dict[str, Any]:
    """Per variable, the gradient tensor the step's Adam update applies to it."""
    return {op.inputs[0].op.name: op.inputs[9] for op in step.graph.get_operations()
            if op.type == "ResourceApplyAdam"}  # inputs: var, m, v, beta powers, lr, betas, epsilon, grad


def _run(step: TrainingStep, feeds: Mapping[str, np.ndarray], initial: Mapping[str, np.ndarray] | None = None,
         *, train: bool = True) -> dict[str, Any]:
    """Initialise the step (its variables set to ``initial`` where given), run one step on
    ``feeds`` (placeholder name → array): the initial values, the loss, the gradients applied and
    the values after (``train=False``: the loss and gradients only, no update)."""
    tf1 = tensorflow().compat.v1
    variables = _variables(step)
    init_feeds = {variables[n].initializer.inputs[1]: value for n, value in (initial or {}).items()}
    placeholders = {tensor.op.name: tensor for tensor, _ in step.placeholders}
    with tf1.Session(graph=step.graph, config=session_config(1)) as session:
        session.run(step.init_op, init_feeds)
        before = session.run(variables)
        fetches = {"loss": step.loss, "gradients": _applied_gradients(step)}
        if train:
            fetches["train"] = step.train_op
        out = session.run(fetches, {placeholders[n]: value for n, value in feeds.items()})
        after = session.run(variables)
    return {"initial": before, "loss": float(out["loss"]), "gradients": out["gradients"], "after": after}


@pytest.fixture(scope="module")
def references(builds: Any) -> Any:
    """``get(model, dtype)``: the single-batch step's feeds and one step's run from its own
    initial weights (the micro-batch steps start from the same weights and data)."""
    cache: dict[tuple[str, str], tuple[dict[str, np.ndarray], dict[str, Any]]] = {}

    def get(name: str, dtype: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        if (name, dtype) not in cache:
            single = builds(name, None, dtype)
            feeds = {t.op.name: a for t, a in single.feed_dict(np.random.default_rng(0)).items()}
            cache[name, dtype] = (feeds, _run(single, feeds))
        return cache[name, dtype]

    return get


def _micro_run(builds: Any, references: Any, name: str, micro_batches: int, dtype: str
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """One step of the micro-batch build from the single-batch step's initial weights and data,
    and the single-batch step's run."""
    feeds, single = references(name, dtype)
    mstep = builds(name, micro_batches, dtype)
    micro = _run(mstep.step, feeds, single["initial"])
    assert micro["initial"].keys() == single["initial"].keys()  # the same variables, by name
    for n, value in single["initial"].items():
        np.testing.assert_array_equal(micro["initial"][n], value)
    return micro, single


@pytest.mark.parametrize(("name", "micro_batches"), [("mlp", 1), ("mlp", 2), ("mlp", 4), ("nmt", 2),
                                                     ("nmt", 4), ("transformer", 2), ("transformer", 4)])
def test_one_step_equals_the_single_batch_step(builds, references, name, micro_batches):
    """Loss, and every variable after the update (weights, Adam's moments and beta powers),
    within 1e-5 relative, in float64 so that the test sees the accumulation's arithmetic rather
    than float32 summation order (see the float32 test below).

    atol 1e-12: the attention key biases of the Transformer have an exactly zero gradient in
    exact arithmetic (softmax ignores a constant added to a row of logits), so both builds apply
    rounding noise (|g| ~ 1e-18) to them; Adam's first step turns it into moves of about
    lr·|g|/ε̂ ~ 1e-14 (ε̂ = 1e-8/sqrt(1 - beta2) ≈ 3e-7), on weights that start at zero."""
    micro, single = _micro_run(builds, references, name, micro_batches, "float64")
    np.testing.assert_allclose(micro["loss"], single["loss"], rtol=1e-5)
    for n, expected in single["after"].items():
        np.testing.assert_allclose(micro["after"][n], expected, rtol=1e-5, atol=1e-12, err_msg=n)
        if n in single["gradients"]:  # a trained variable: the step moved it
            assert not np.array_equal(expected, single["initial"][n]), n


@pytest.mark.parametrize("name", ["mlp", "nmt"])
def test_one_float32_step_equals_the_single_batch_step(builds, references, name):
    """The zoo's own precision, 4 micro-batches. Each gradient is a sum over the batch; the
    micro-batch step adds the same terms in another order (per slice, then across slices), which
    moves the sum by a few float32 ulps of its largest terms, not of the sum: where the terms
    nearly cancel, Adam's moments (0.1·g and 0.001·g² after one step) differ by up to 2e-2
    relative (measured on nmt). The tolerance is therefore norm-wise: atol 1e-5 × the largest
    magnitude of each variable (the differences measure below 1e-6 of it). The Transformer is
    left out: its key biases' gradients are rounding noise in both builds (see above), which
    Adam's first step amplifies to moves of up to 6e-6 on weights that are themselves that
    small; the float64 test covers it."""
    micro, single = _micro_run(builds, references, name, 4, "float32")
    np.testing.assert_allclose(micro["loss"], single["loss"], rtol=1e-5)
    for n, expected in single["after"].items():
        scale = float(np.abs(expected).max(initial=0.0))
        np.testing.assert_allclose(micro["after"][n], expected, rtol=1e-5, atol=1e-5 * scale, err_msg=n)


@pytest.mark.parametrize("name", [*NO_BATCH_NORM, BATCH_NORM])
def test_replica_ops_are_named_after_the_single_batch_ops(builds, name):
    """Every replica op's single-batch name is an op of the single-batch step (the fraction is
    reported and must be 1); each replica has a copy of every op of the single-batch step but the
    shared ones; the ops that are not replicas are the single-batch step's shared ops, the
    splits and the accumulation ops (colocated with their variable)."""
    micro_batches = 4
    mstep = builds(name, micro_batches)
    single_names = set(builds(name).step_op_names())
    replica_of, shared = mstep.replica_of, mstep.shared_op_names()
    found = sum(single in single_names for single, _ in replica_of.values())
    fraction = found / len(replica_of)
    print(f"{name}: {found} of {len(replica_of)} replica ops ({fraction:.2%}) have a single-batch name "
          f"of the single-batch step ({len(single_names)} ops)")
    assert fraction == 1.0
    inputs = {tensor.op.name for tensor, _ in mstep.step.placeholders}
    for k in range(micro_batches):
        copied = {single for single, j in replica_of.values() if j == k}
        # the variables, Adam's slots and its update are shared; the inputs and the loss are both
        # (the placeholders and the mean loss shared, each replica's slice and loss its own)
        assert copied | (shared & single_names) == single_names
        assert copied & shared == inputs | {"loss"}
    for op, (single, k) in replica_of.items():
        assert mstep.op_name(single, k) == op
        if not single.startswith("gradients/"):  # a forward op: its name under the replica's scope
            assert op == f"{replica_scope(k)}/{single}"
    assert "loss" in shared and "train_step" in shared
    new = shared - single_names
    assert all(n.startswith(("micro_batches/", "accumulate/")) for n in new), sorted(new)
    graph = mstep.step.graph
    for var in _applied_gradients(mstep.step):
        mean = graph.get_operation_by_name(f"accumulate/{var}/mean")
        assert mean.colocation_groups() == [f"loc:@{var}".encode()]
    assert len(set(mstep.step.step_op_names())) == len(replica_of) + len(shared)


@pytest.mark.parametrize("micro_batches", [2, 4])
def test_batch_norm_uses_each_micro_batchs_statistics(builds, references, micro_batches):
    """The documented behaviour on Tensor Holography (batch norm after every convolution), in
    float64: the loss and the gradients are not the full-batch step's but the mean of the losses
    and gradients that the step at ``BATCH // M`` computes on each slice alone (same weights);
    the moving statistics are updated by neither step.

    atol 1e-12 on the gradients: a convolution bias feeding batch norm has an exactly zero
    gradient in exact arithmetic (the normalisation subtracts the mean), rounding noise in both."""
    feeds, single = references(BATCH_NORM, "float64")
    micro = _micro_run(builds, references, BATCH_NORM, micro_batches, "float64")[0]
    part = builds(BATCH_NORM, None, "float64", BATCH // micro_batches)
    size = BATCH // micro_batches
    slices = [_run(part, {n: a[k * size:(k + 1) * size] for n, a in feeds.items()}, single["initial"],
                   train=False) for k in range(micro_batches)]
    mean_loss = float(np.mean([s["loss"] for s in slices]))
    np.testing.assert_allclose(micro["loss"], mean_loss, rtol=1e-10)
    difference = abs(micro["loss"] - single["loss"]) / abs(single["loss"])
    print(f"{BATCH_NORM}, M={micro_batches}: the loss differs from the full-batch loss by {difference:.2e}")
    assert difference > 1e-6  # float64 rounding is about 1e-15: the statistics differ
    assert micro["gradients"].keys() == slices[0]["gradients"].keys()
    apart = 0.0  # the largest norm-wise difference from the full-batch step's gradient
    for n, gradient in micro["gradients"].items():
        expected = np.mean([s["gradients"][n] for s in slices], axis=0)
        np.testing.assert_allclose(gradient, expected, rtol=1e-8, atol=1e-12, err_msg=n)
        full = single["gradients"][n]
        if np.abs(full).max() > 1e-10:  # not a convolution bias (rounding noise in both)
            apart = max(apart, float(np.abs(gradient - full).max() / np.abs(full).max()))
    print(f"{BATCH_NORM}, M={micro_batches}: the gradients differ from the full-batch ones by up to "
          f"{apart:.1%} of their largest element")
    assert apart > 1e-3
    moving = [n for n in single["initial"] if "moving_" in n]
    assert len(moving) == 2 * get_model(BATCH_NORM).config["layers"]
    for n in moving:
        np.testing.assert_array_equal(micro["after"][n], single["initial"][n])
        np.testing.assert_array_equal(single["after"][n], single["initial"][n])


# --------------------------------------------------------------------------------------------------
# placement and order on logical CPU devices

DEVICES = 2
NAMES = [step_device(i) for i in range(DEVICES)]


def _placed_devices(single: TrainingStep) -> dict[str, str]:
    """The Celeritas placement of the single-batch step on 2 devices that each hold 60 % of its
    one-device peak (so it spreads): op name → device name."""
    graph = graph_from_step(single)
    placement = place(graph, Cluster.homogeneous(DEVICES, one_device_peak_bytes(graph) * 0.6), "celeritas")
    return {name: NAMES[d] for name, d in placement_to_json(placement)["assignment"].items()}


def _gpipe_order(mstep: MicrobatchStep, device_index: Mapping[str, int]) -> list[list[tuple[str, int]]]:
    """Per device, the ops of the step in a topological order that runs the forward ops of
    micro-batch 0, 1, ... and then the backward ops of the last micro-batch first (GPipe's
    schedule), as ``(single-batch name, k)`` pairs (``k == -1``: shared)."""
    preds = {n.name: {i.lstrip("^").split(":")[0] for i in n.input} for n in mstep.step.step_graph_def().node}
    succs: dict[str, list[str]] = {n: [] for n in preds}
    for n, inputs in preds.items():
        for p in inputs:
            succs[p].append(n)

    def priority(name: str) -> tuple[int, int]:
        if name not in mstep.replica_of:
            return (2, 0)
        single, k = mstep.replica_of[name]
        return (1, mstep.micro_batches - k) if single.startswith("gradients/") else (0, k)

    index = {n: i for i, n in enumerate(preds)}
    indegree = {n: len(inputs) for n, inputs in preds.items()}
    ready = [(priority(n), index[n], n) for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order: list[list[tuple[str, int]]] = [[] for _ in range(DEVICES)]
    while ready:
        *_, n = heapq.heappop(ready)
        if n in device_index:
            order[device_index[n]].append(mstep.replica_of.get(n, (n, SHARED)))
        for s in succs[n]:
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(ready, (priority(s), index[s], s))
    return order


def test_placed_replicas_run_on_their_ops_devices_in_the_given_order(builds):
    """A Celeritas placement of the single-batch mlp step on 2 logical CPU devices, applied to
    the 2-micro-batch step: each replica op on its single-batch op's device, shared ops on their
    own, the additions that accumulate a gradient beside its producer and the mean with the
    variable, the splits left to TensorFlow. A GPipe-like
    order, enforced, is followed on each device in two traced steps (as
    tests/tf/test_device_order.py checks orders), every chained op ran on its device, and the
    placed step trains (finite loss)."""
    single = builds("mlp")
    device_of = _placed_devices(single)
    assert set(device_of.values()) == set(NAMES)
    mstep = build_microbatch_step(get_model("mlp"), BATCH, 2)
    graph = mstep.step.graph
    place_microbatch_step(mstep, device_of)
    device_index: dict[str, int] = {}
    beside_gradient = 0
    for op in graph.get_operations():
        if op.name in mstep.replica_of:
            expected = device_of[mstep.replica_of[op.name][0]]
        elif op.name in device_of:
            expected = device_of[op.name]
        elif op.name.startswith("accumulate/"):
            # an addition beside its gradient's producer (a replica op), the mean with its variable
            # (accumulate/loss/*: with none, TensorFlow's placer)
            anchor = op.colocation_groups()[0].decode().removeprefix("loc:@")
            single = mstep.replica_of.get(anchor)
            expected = device_of.get(single[0] if single is not None else anchor, "")
            beside_gradient += single is not None and op.name.endswith("/add_1")
        else:
            expected = None
        if expected is not None:
            assert op.device == expected, op.name
        if op.device and op.name in mstep.shared_op_names() | mstep.replica_of.keys():
            device_index[op.name] = NAMES.index(op.device)
    means = [op for op in graph.get_operations() if op.name.startswith("accumulate/")
             and op.name.endswith("/mean") and not op.name.startswith("accumulate/loss/")]
    assert beside_gradient == len(means) > 0  # one addition per weight at M = 2, beside its gradient
    splits = [op for op in graph.get_operations() if op.name.startswith("micro_batches/")]
    assert splits and all(op.device == "" for op in splits)  # no entry, nothing to follow: TensorFlow's
    order = _gpipe_order(mstep, device_index)
    assert all(order)
    before = _control_edges(mstep)
    place_microbatch_step(mstep, device_of, order)
    assert _control_edges(mstep) - before
    recorded = [[mstep.op_name(n, k) for n, k in ops] for ops in order]
    free = free_ops(mstep.step)
    tf1 = tensorflow().compat.v1
    rng = np.random.default_rng(0)
    with tf1.Session(graph=graph, config=session_config(DEVICES)) as session:
        session.run(mstep.step.init_op)
        for _ in range(2):
            metadata = tf1.RunMetadata()
            _, loss = session.run([mstep.step.train_op, mstep.step.loss], mstep.step.feed_dict(rng),
                                  options=run_options(DEVICES, trace=True), run_metadata=metadata)
            assert np.isfinite(loss)
            executed = executed_device_order(metadata.step_stats, ops=set(mstep.step.step_op_names()))
            assert order_agreement(recorded, executed, NAMES, skip=free) == 1.0
            ran = {(name, device) for device, names in executed.items() for name in names}
            assert all((op, NAMES[d]) in ran for d, ops in enumerate(recorded) for op in ops
                       if op not in free)


def test_bad_arguments_are_refused_in_one_line():
    model = get_model("mlp")
    for batch, micro_batches, message in (
            (8, 3, "micro_batches (3) must divide the batch size (8)"),
            (6, 4, "micro_batches (4) must divide the batch size (6)"),
            (8, 0, "micro_batches must be a positive integer, got 0"),
            (8, True, "micro_batches must be a positive integer, got True"),
            (0, 1, "batch size must be a positive integer, got 0")):
        with pytest.raises(CeleritasInputError) as info:
            build_microbatch_step(model, batch, micro_batches)
        assert str(info.value) == message and "\n" not in message
    mstep = build_microbatch_step(model, BATCH, 2)
    edges = _control_edges(mstep)
    for pair, message in (
            (("ghost", 0), "device_order: ('ghost', 0) is no op for micro-batch 0 of the micro-batch step"),
            (("loss", 2), "device_order: ('loss', 2) is no op for micro-batch 2 of the micro-batch step"),
            (("dense_0/kernel", 1), "device_order: ('dense_0/kernel', 1) is no op for micro-batch 1 of the "
                                    "micro-batch step"),  # a variable: shared, never a replica's
            (("micro_0/loss", SHARED), "device_order: ('micro_0/loss', -1) is no shared op of the "
                                       "micro-batch step")):
        with pytest.raises(CeleritasInputError) as info:
            place_microbatch_step(mstep, {}, [[("loss", 0), pair]])
        assert str(info.value) == message
    # the order's own refusals (order.py) come through, in the step's op names
    with pytest.raises(CeleritasInputError) as info:
        place_microbatch_step(mstep, {}, [[("loss", 0), ("mlp_2/logits_1/BiasAdd", 0)]])
    assert str(info.value) == ("device_order: device 0 lists 'micro_0/loss' before 'micro_0/mlp_2/logits_1/"
                               "BiasAdd', but 'micro_0/loss' depends on 'micro_0/mlp_2/logits_1/BiasAdd'")
    assert _control_edges(mstep) == edges  # nothing added
    assert all(op.device == "" for op in mstep.step.graph.get_operations())  # nor pinned


def _control_edges(mstep: MicrobatchStep) -> set[tuple[str, str]]:
    return {(c.name, op.name) for op in mstep.step.graph.get_operations() for c in op.control_inputs}
