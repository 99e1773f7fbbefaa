"""Peak memory with real TensorFlow on CPU: scratch and aliases from the profile, the measured peak
from TensorFlow's allocation records, and the predicted one-device peak against it."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.readwrite.formats import fits_from_json, fits_to_json, graph_from_json, graph_to_json
from celeritas_core.simulation.memory import one_device_peak_bytes
from celeritas_tf.evaluation import (
    fits_from_profile,
    peak_metrics,
    profile_document,
    profile_small_batches,
    sequential_placement,
    validate,
)
from celeritas_tf.extract import graph_from_step, view_aliases
from celeritas_tf.models import get_model
from celeritas_tf.profile import measured_peak_bytes, trace_costs, trace_step
from celeritas_tf.step import build_training_step

#: A small convolutional model: its filter gradients use large scratch buffers on CPU.
CONV = {"layers": 3, "filters": 8, "image_size": 32}
MLP = {"features": 32, "hidden": 64, "layers": 2, "classes": 10}


@pytest.fixture(scope="module")
def conv_step():
    return build_training_step(get_model("tensor_holography", **CONV), 8)


@pytest.fixture(scope="module")
def conv_trace(conv_step):
    return trace_step(conv_step, traced_steps=2)


def test_the_profile_records_scratch_and_output_aliases(conv_step, conv_trace):
    ops = {op.name: op for op in conv_step.graph.get_operations()}
    assert conv_trace.scratch_bytes, "no op recorded scratch memory"
    assert any(ops[n].type == "Conv2DBackpropFilter" for n in conv_trace.scratch_bytes)
    inputs = {n: {(t.op.name, t.value_index) for t in op.inputs} for n, op in ops.items()}
    pairs = [(n, e) for n, entries in conv_trace.aliases.items() for e in entries if isinstance(e, tuple)]
    assert pairs, "no output shares an input buffer"
    assert all(e in inputs[n] for n, e in pairs)  # an alias always names an input of its op
    held = [n for n, entries in conv_trace.aliases.items() if "external" in entries]
    assert any(ops[n].type == "ReadVariableOp" for n in held)  # variable reads do not copy
    assert all(ops[n].type in ("ReadVariableOp", "VarHandleOp", "Const") for n in held)


def test_predicted_one_device_peak_is_within_ten_percent_of_the_measured(conv_step, conv_trace):
    measured = max(conv_trace.peak_bytes.values())
    graph = graph_from_step(conv_step, trace_costs(conv_trace), aliases=conv_trace.aliases)
    predicted = one_device_peak_bytes(graph)
    assert abs(predicted / measured - 1.0) <= 0.10, (predicted, measured)
    # without scratch and aliases the same graph is far off: the fields carry the accuracy
    plain = graph_from_step(conv_step, {n: (t, 0.0) for n, (t, _) in trace_costs(conv_trace).items()})
    assert abs(one_device_peak_bytes(plain) / measured - 1.0) > 0.10


def test_the_measured_peak_is_resident_bytes_plus_the_largest_running_sum():
    from tensorflow.core.framework.step_stats_pb2 import StepStats

    stats = StepStats()
    dev = stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:1")
    for when, size in ((10, 100), (20, 50), (30, -100), (40, 80), (50, -130)):
        node = dev.node_stats.add(node_name=f"op{when}")
        node.memory.add(allocator_name="cpu").allocation_records.add(alloc_micros=when, alloc_bytes=size)
    resident = {"/device:CPU:1": 7.0, "/job:localhost/replica:0/task:0/device:CPU:0": 3.0}
    peaks = measured_peak_bytes(stats, resident)
    assert peaks == {"/job:localhost/replica:0/task:0/device:CPU:1": 157.0,
                     "/job:localhost/replica:0/task:0/device:CPU:0": 3.0}


def test_fits_carry_the_profiled_aliases_to_the_predicted_graph(tmp_path):
    model = get_model("mlp", **MLP)
    traces = profile_small_batches(model, [4, 8], traced_steps=1)
    doc = json.loads(json.dumps(profile_document(model, traces)))
    fits = fits_from_profile(doc)
    assert fits.output_aliases and fits.output_aliases == fits_from_json(fits_to_json(fits)).output_aliases
    step = build_training_step(model, 32)
    graph = graph_from_step(step, fits.predict_costs(32), aliases=fits.output_aliases)
    assert graph.liveness is not None and graph.liveness.alias_node is not None
    back = graph_from_json(json.loads(json.dumps(graph_to_json(graph))))
    assert one_device_peak_bytes(back) == pytest.approx(one_device_peak_bytes(graph))
    measured = max(trace_step(step, traced_steps=2).peak_bytes.values())
    assert abs(one_device_peak_bytes(graph) / measured - 1.0) <= 0.10


def test_view_aliases_come_from_op_types(conv_step):
    aliases = view_aliases(conv_step)
    ops = {op.name: op.type for op in conv_step.graph.get_operations()}
    assert aliases and all(ops[n] in ("Identity", "Reshape", "Squeeze", "ExpandDims", "StopGradient",
                                      "Snapshot", "PreventGradient", "EnsureShape", "ReadVariableOp")
                           for n in aliases)
    graph = graph_from_step(conv_step, aliases=aliases)  # static costs
    assert graph.liveness is not None and graph.liveness.alias_node is not None


def test_validation_measures_the_peak_of_every_device_used():
    model = get_model("mlp", **MLP)
    graph = graph_from_step(build_training_step(model, 16))
    devices = sequential_placement(graph, Cluster.homogeneous(2, 0.6 * graph.total_memory_bytes))
    assert set(devices.tolist()) == {0, 1}
    assignment = dict(zip(graph.node_names, devices.tolist(), strict=True))
    run = validate(model, 16, assignment, 2, warmup_steps=1, steps=2)
    assert len(run.measured_peak_bytes) == 2 and all(v > 0 for v in run.measured_peak_bytes.values())
    metrics = peak_metrics(run.measured_peak_bytes, [1000.0, 2.0 * max(run.measured_peak_bytes.values())])
    assert metrics["peak_memory_relative_error"] == pytest.approx(1.0)
    assert set(metrics) >= {"measured_peak_memory_bytes_dev0", "measured_peak_memory_bytes_dev1",
                            "predicted_peak_memory_bytes_dev1"}
    assert np.isfinite(run.to_json()["measured_peak_bytes"][next(iter(run.measured_peak_bytes))])


def test_tensorflow_imported_first_with_onednn_on_is_warned_about() -> None:
    """oneDNN's fused kernels allocate differently: profiles taken with them on are not comparable."""
    import os
    import subprocess
    import sys

    code = ("import warnings, tensorflow; from celeritas_tf.tf import tensorflow as tf\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always'); tf()\n"
            "print(any('TF_ENABLE_ONEDNN_OPTS' in str(w.message) for w in seen))")
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    for setting, expected in ((None, "True"), ("0", "False")):
        run_env = env if setting is None else {**env, "TF_ENABLE_ONEDNN_OPTS": setting}
        out = subprocess.run([sys.executable, "-c", code], env={**run_env, "TF_CPP_MIN_LOG_LEVEL": "3"},
                             capture_output=True, text=True, timeout=120, check=True)
        assert out.stdout.strip().splitlines()[-1] == expected, (setting, out.stderr[-500:])
