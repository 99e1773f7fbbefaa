"""The paper's four zoo models: small configurations build, keep stable op names and train one step."""

from __future__ import annotations

import math
from typing import Any

import pytest

pytest.importorskip("tensorflow")

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_tf.models import ZOO, get_model
from celeritas_tf.step import TrainingStep, build_training_step
from celeritas_tf.tf import session_config, tensorflow

PAPER_MODELS = ("inception_v3", "nmt", "transformer", "tensor_holography")
PAPER_CONFIGS = {
    "inception_v3": ({"image_size": 299, "classes": 1000}, 512),
    "nmt": ({"layers": 4, "units": 2048, "seq_len": 50, "vocab": 32000}, 512),
    "transformer": ({"layers": 12, "heads": 16, "hidden": 2048, "ff": 8192, "seq_len": 50, "vocab": 32000},
                    256),
    "tensor_holography": ({"layers": 30, "filters": 24, "image_size": 384}, 32),
}

_CACHE: dict[tuple[str, int], TrainingStep] = {}


def _step(name: str, batch_size: int) -> TrainingStep:
    """Each small model is built once per batch size for the whole module."""
    key = (name, batch_size)
    if key not in _CACHE:
        _CACHE[key] = build_training_step(get_model(name), batch_size=batch_size)
    return _CACHE[key]


def _op_types(step: TrainingStep) -> list[str]:
    return [node.op for node in step.step_graph_def().node]


@pytest.fixture(scope="module", params=PAPER_MODELS)
def step2(request: pytest.FixtureRequest) -> TrainingStep:
    return _step(request.param, 2)


def test_small_model_builds_with_adam_updates(step2: TrainingStep) -> None:
    ops = _op_types(step2)
    assert step2.batch_size == 2
    assert any(op in ("ApplyAdam", "ResourceApplyAdam") for op in ops)
    assert len(ops) > 50


def test_op_names_stable_across_batch_sizes(step2: TrainingStep) -> None:
    step3 = _step(step2.model.name, 3)
    assert step3.step_op_names() == step2.step_op_names()


def test_one_training_step_runs_with_finite_loss(step2: TrainingStep) -> None:
    tf = tensorflow()
    with tf.compat.v1.Session(graph=step2.graph, config=session_config(1)) as sess:
        sess.run(step2.init_op)
        _, loss = sess.run([step2.train_op, step2.loss], step2.feed_dict(np.random.default_rng(0)))
    assert math.isfinite(float(loss))


@pytest.mark.parametrize("name", ["nmt", "transformer"])
def test_sequence_models_are_static_graphs(name: str) -> None:
    ops = set(_op_types(_step(name, 2)))
    assert not ops & {"While", "StatelessWhile"}


@pytest.mark.parametrize("name", PAPER_MODELS)
def test_paper_configuration(name: str) -> None:
    config, batch_size = PAPER_CONFIGS[name]
    assert dict(get_model(name, paper=True).config) == config
    assert dict(ZOO[name].paper_config) == config
    assert ZOO[name].paper_batch_size == batch_size
    assert dict(get_model(name).config) == dict(ZOO[name].small_config)


def test_knobs_override_the_configuration() -> None:
    spec = get_model("tensor_holography", layers=3)
    assert spec.config["layers"] == 3
    assert spec.config["filters"] == ZOO["tensor_holography"].small_config["filters"]
    ops = _op_types(build_training_step(spec, batch_size=2))
    assert ops.count("Conv2D") == 3
    assert get_model("nmt", paper=True, seq_len=7).config == {**PAPER_CONFIGS["nmt"][0], "seq_len": 7}


def test_inputs_and_labels_match_the_models() -> None:
    nmt = get_model("nmt")
    assert [s.name for s in nmt.inputs] == ["source", "target"]
    assert all(s.shape == (6,) and s.dtype == "int32" and s.high == 50 for s in (*nmt.inputs, nmt.labels))
    holo = get_model("tensor_holography")
    assert holo.inputs[0].shape == (16, 16, 4)
    assert holo.labels.shape == (16, 16, 6) and holo.labels.dtype == "float32"
    inception = get_model("inception_v3")
    assert inception.inputs[0].shape == (75, 75, 3)
    assert inception.labels.dtype == "int32" and inception.labels.high == 10


@pytest.mark.parametrize(("name", "knobs"), [
    ("inception_v3", {"image_size": 32}),
    ("transformer", {"hidden": 15, "heads": 2}),
    ("tensor_holography", {"layers": 0}),
    ("nmt", {"units": 1.5}),
    ("nmt", {"depth": 3}),
])
def test_bad_knobs_are_input_errors(name: str, knobs: dict) -> None:
    with pytest.raises(CeleritasInputError):
        get_model(name, **knobs)


def test_extracted_graphs_carry_liveness_fields(step2: TrainingStep) -> None:
    from celeritas_core.simulation.memory import one_device_peak_bytes
    from celeritas_tf.extract import graph_from_step, variable_bytes

    graph = graph_from_step(step2)
    live = graph.liveness
    assert live is not None and live.modelled.all()
    for i, node in enumerate(step2.step_graph_def().node):
        op = step2.graph.get_operation_by_name(node.name)
        assert len(live.outputs(i)) == len(op.outputs)
        if op.type in ("VarHandleOp", "VariableV2"):
            assert live.persistent_bytes[i] == variable_bytes(op) == graph.memory_bytes[i]
    # with op times the replay frees activations after their last use: below the sum
    timed = _with_unit_times(graph)
    assert one_device_peak_bytes(timed) < timed.total_memory_bytes


def _with_unit_times(graph: Any) -> Any:
    """The graph with every op taking 1 µs, so the replay has a real order."""
    from dataclasses import replace

    return replace(graph, time_us=np.ones(graph.num_nodes))
