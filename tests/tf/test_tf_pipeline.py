"""The TensorFlow adapter end to end on CPU: extraction, profiling, regression, re-measurement,
applying a placement and 50-step validation, and the CLI's errors. Real TensorFlow, small models."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.placers import place
from celeritas_core.readwrite.formats import load_graph, save_placement
from celeritas_core.statistics.regression import fit_costs
from celeritas_tf.evaluation import (
    PlacementOrder,
    ProfilePlan,
    check_assignment,
    measured_costs,
    placement_order,
    profile_small_batches,
    remeasure,
    sequential_placement,
    validate,
    validate_interleaved,
)
from celeritas_tf.extract import graph_from_step
from celeritas_tf.models import get_model
from celeritas_tf.profile import StepTrace, trace_step
from celeritas_tf.step import build_training_step

MLP = {"features": 32, "hidden": 64, "layers": 2, "classes": 10}


@pytest.fixture(scope="module")
def model():
    return get_model("mlp", **MLP)


@pytest.fixture(scope="module")
def step(model):
    return build_training_step(model, 16)


@pytest.fixture(scope="module")
def graph(step):
    return graph_from_step(step)


def test_extraction_matches_the_graphdef(step, graph):
    graph_def = step.step_graph_def()
    assert list(graph.node_names) == [n.name for n in graph_def.node]
    assert list(graph.ops) == [n.op for n in graph_def.node]
    assert graph.num_edges == sum(len(n.input) for n in graph_def.node)
    ix = graph.index
    # the first layer's MatMul reads the fed features: batch 16 × 32 float32
    matmul = next(n for n in graph.node_names if n.endswith("dense_0_1/MatMul") or
                  (graph.ops[ix[n]] == "MatMul" and "dense_0" in n and "grad" not in n))
    into = [k for k in range(graph.num_edges) if graph.edge_dst[k] == ix[matmul]
            and graph.node_names[graph.edge_src[k]] == "features"]
    assert into and graph.edge_bytes[into[0]] == 16 * 32 * 4
    assert graph.meta["batch_size"] == 16 and graph.meta["source"] == "tensorflow"


def test_colocation_groups_keep_variables_with_their_reads_and_updates(graph):
    groups: dict[str, set[str]] = {}
    for name, group in zip(graph.node_names, graph.colocation, strict=True):
        if group:
            groups.setdefault(group, set()).add(graph.ops[graph.index[name]])
    kernel = next(g for g in groups if g.endswith("dense_0/kernel"))
    assert {"VarHandleOp", "ReadVariableOp", "ResourceApplyAdam"} <= groups[kernel]


def test_variable_memory_is_its_size(graph):
    ix = graph.index
    kernel = next(n for n in graph.node_names
                  if n.endswith("dense_0/kernel") and graph.ops[ix[n]] == "VarHandleOp")
    assert graph.memory_bytes[ix[kernel]] == 32 * 64 * 4


def test_names_are_stable_across_batch_sizes(model, step):
    assert build_training_step(model, 4).step_op_names() == step.step_op_names()


def test_bad_batch_size(model):
    with pytest.raises(CeleritasInputError, match="batch size must be a positive integer"):
        build_training_step(model, 0)


def test_regression_predicts_memory_of_a_larger_batch(model):
    traces = profile_small_batches(model, [4, 8, 16], traced_steps=2)
    fits = fit_costs([(t.batch_size, t.time_us, t.memory_bytes) for t in traces])
    predicted = fits.predict_costs(64)
    actual = trace_step(build_training_step(model, 64), traced_steps=2)
    ops = [n for n in actual.memory_bytes if n in predicted and actual.memory_bytes[n] > 0]
    assert len(ops) > 20
    dev = [abs(predicted[n][1] - actual.memory_bytes[n]) / actual.memory_bytes[n] for n in ops]
    assert float(np.mean(dev)) < 0.02  # output sizes are linear in the batch


def test_noisy_profiles_trace_more_steps_and_a_batch_spans_towards_the_target(model):
    never_quiet = ProfilePlan(traced_steps=2, max_traced_steps=4, noise_target=1e-9, span_target=64,
                              device_bytes=1e12)
    traces = profile_small_batches(model, [4, 8], plan=never_quiet)
    assert [t.batch_size for t in traces] == [4, 8, 32]  # 16 and 32 fit; 32 is half of 64
    rule = never_quiet.more_steps()
    assert rule is not None
    for t in traces:
        n = len(t.step_seconds)
        assert {len(v) for v in t.time_samples.values()} == {n} and 2 <= n <= 4
        # after each traced step the rule is asked again: more while it asks for more (times are
        # whole µs, so a small op's spread can be exactly 0, and then it asks for none)
        prefix = [{op: v[:k] for op, v in t.time_samples.items()} for k in range(n + 1)]
        assert all(rule(prefix[k]) > k for k in range(2, n))
        assert n == 4 or rule(prefix[n]) <= n
        assert t.time_us == {op: float(np.median(v)) for op, v in t.time_samples.items()}
    assert max(len(t.step_seconds) for t in traces) > 2  # two steps' µs times never all agree
    quiet = ProfilePlan(traced_steps=2, max_traced_steps=4, noise_target=1e9, span_target=64,
                        device_bytes=1.0)
    traces = profile_small_batches(model, [4, 8], plan=quiet)
    assert [t.batch_size for t in traces] == [4, 8]  # no batch fits one byte
    assert [len(t.step_seconds) for t in traces] == [2, 2]


def test_applied_placement_runs_ops_on_the_named_devices(model, graph):
    cluster = Cluster.homogeneous(2, graph.total_memory_bytes * 0.6)
    assignment = sequential_placement(graph, cluster, "dfs")
    assert set(assignment.tolist()) == {0, 1}
    by_name = dict(zip(graph.node_names, assignment.tolist(), strict=True))
    trace = trace_step(build_training_step(model, 16), num_devices=2, assignment=by_name, traced_steps=1)
    checked = 0
    for name, device in trace.devices.items():
        if name in graph.index:
            assert device.endswith(f"CPU:{assignment[graph.index[name]]}"), name
            checked += 1
    assert checked > 0.8 * graph.num_nodes


def test_remeasure_gives_a_measured_graph_and_accuracy(model):
    traces = profile_small_batches(model, [4, 8], traced_steps=1)
    fits = fit_costs([(t.batch_size, t.time_us, t.memory_bytes) for t in traces])
    estimated_total = float(fits.predict(32)[1].sum())
    cluster = Cluster.homogeneous(2, estimated_total * 0.6)
    result = remeasure(model, 32, fits, cluster, traced_steps=1)
    assert result.measured.node_names == result.estimated.node_names
    assert result.measured.total_time_us > 0 and result.measured.meta["costs"] == "measured"
    assert set(result.assignment.tolist()) == {0, 1}  # the model does not fit on one device
    memory, timing = result.accuracy()
    assert len(memory.names) > 20 and memory.mean < 0.05
    assert len(timing.names) > 0 and np.isfinite(timing.mean)


def test_validation_times_fifty_steps_after_warmup(model, graph, tmp_path):
    placement = place(graph, Cluster.homogeneous(2, graph.total_memory_bytes), "m-topo")
    assignment = dict(zip(graph.node_names, placement.assignment.tolist(), strict=True))
    result = validate(model, 16, assignment, 2, warmup_steps=5, steps=50)
    assert len(result.step_seconds) == 50 and all(s > 0 for s in result.step_seconds)
    assert result.median_s <= result.p90_s
    doc = result.to_json()
    assert doc["format"] == "celeritas-validation/1" and doc["steps"] == 50 and doc["warmup_steps"] == 5


def topological_device_order(step, assignment, devices):
    """Per device, its ops in a topological order of the step (GraphDef order): an order a
    placement could record (``device_order``) that respects every dependency."""
    names = step.step_op_names()
    return tuple(tuple(n for n in names if assignment[n] == d) for d in range(devices))


def test_interleaved_validation_times_each_order_mode_as_its_own_arm(model, step, graph):
    placement = place(graph, Cluster.homogeneous(2, graph.total_memory_bytes * 0.6), "m-topo")
    assignment = dict(zip(graph.node_names, placement.assignment.tolist(), strict=True))
    assert set(assignment.values()) == {0, 1}
    order = topological_device_order(step, assignment, 2)
    said = []
    runs = validate_interleaved(
        model, 16, {"ordered": assignment, "free-mode": assignment, "plain": assignment}, 2, warmup_steps=1,
        steps=4, blocks=2, progress=said.append,
        orders={"ordered": PlacementOrder(order, "enforced"), "free-mode": PlacementOrder(order, "free")})
    ordered, free_mode, plain = runs["ordered"], runs["free-mode"], runs["plain"]
    # a placement that records an order is timed in both modes; its figures are its own mode's
    assert set(ordered.modes) == {"enforced", "free"} and ordered.order_mode == "enforced"
    assert tuple(ordered.step_seconds) == ordered.modes["enforced"].step_seconds
    assert set(free_mode.modes) == {"enforced", "free"} and free_mode.order_mode == "free"
    assert tuple(free_mode.step_seconds) == free_mode.modes["free"].step_seconds
    # one without an order: the free order only
    assert set(plain.modes) == {"free"} and plain.order_mode == "free"
    for run in runs.values():
        assert all(len(t.step_seconds) == 4 and min(t.step_seconds) > 0 for t in run.modes.values())
        assert run.devices_used and run.measured_peak_bytes
    # every arm ran in both blocks: five arms, each named with its mode when it has two
    assert len(said) == 2 * 5 and "block 2: ordered (enforced order) 4/4 timed steps" in said
    assert "block 1: plain 2/4 timed steps" in said
    doc = ordered.to_json({"placer": "m-topo"}, predicted_us=1234.0)
    assert doc["order_mode"] == "enforced" and doc["predicted_step_time_us"] == 1234.0
    assert doc["median_s"] == doc["modes"]["enforced"]["median_s"]
    for mode, figures in doc["modes"].items():
        times = ordered.modes[mode]
        assert figures["step_seconds"] == list(times.step_seconds) and figures["steps"] == 4
        assert figures["measured_over_predicted"] == pytest.approx(times.median_s * 1e6 / 1234.0)
        assert figures["median_s"] == pytest.approx(float(np.median(times.step_seconds)))
    assert plain.to_json()["modes"]["free"]["measured_over_predicted"] is None  # no prediction
    # a traced step of each arm with an order says how much of it the devices followed
    for run in (ordered, free_mode):
        assert run.modes["enforced"].order_agreement == 1.0
        assert 0.0 <= run.modes["free"].order_agreement <= 1.0
        assert doc["modes"]["enforced"]["order_agreement"] == 1.0
    assert plain.modes["free"].order_agreement is None
    json.dumps(doc, allow_nan=False)


def test_an_order_that_cannot_run_is_refused_in_one_line(model, step, graph):
    placement = place(graph, Cluster.homogeneous(2, graph.total_memory_bytes * 0.6), "m-topo")
    assignment = dict(zip(graph.node_names, placement.assignment.tolist(), strict=True))
    order = topological_device_order(step, assignment, 2)
    with pytest.raises(CeleritasInputError, match="does not record"):
        validate_interleaved(model, 16, {"plain": assignment}, 2, steps=1, modes={"plain": ("enforced",)})
    device = 0 if len(order[0]) > 1 else 1
    backwards = tuple(tuple(reversed(ops)) if d == device else ops for d, ops in enumerate(order))
    with pytest.raises(CeleritasInputError, match=r"^p\.json: device_order: .* before ") as err:
        validate_interleaved(model, 16, {"x": assignment}, 2, steps=1, sources={"x": "p.json"},
                             orders={"x": PlacementOrder(backwards, "enforced")})
    assert "\n" not in str(err.value)
    moved = (order[0][1:], (order[0][0], *order[1]))  # device 0's first op listed on device 1
    with pytest.raises(CeleritasInputError, match=r"listed on device 1\b.* assigned to (device )?0"):
        validate_interleaved(model, 16, {"x": assignment}, 2, steps=1,
                             orders={"x": PlacementOrder(moved, "enforced")})
    with pytest.raises(CeleritasInputError, match="'order_mode' is 'enforced' but"):
        placement_order({"order_mode": "enforced", "assignment": assignment}, "p.json")
    assert placement_order({"device_order": [list(o) for o in order], "devices": ["a", "b"]}).order_mode == \
        "enforced"


def test_a_placement_for_another_graph_is_refused(step):
    names = step.step_op_names()
    with pytest.raises(CeleritasInputError, match="is not placed"):
        check_assignment(names, {n: 0 for n in names[1:]}, 2)
    with pytest.raises(CeleritasInputError, match="is not an op of the step"):
        check_assignment(names, {**{n: 0 for n in names}, "ghost": 0}, 2)
    with pytest.raises(CeleritasInputError, match="uses device 3"):
        check_assignment(names, {n: 3 for n in names}, 2)


def _cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_profile_fit_remeasure_place_validate(tmp_path, capsys):
    knobs = ["--model", "mlp", "--set", "hidden=32"]
    prof, fits, measured = tmp_path / "p.json", tmp_path / "f.json", tmp_path / "m.json"
    code, _, err = _cli(["profile", *knobs, "--batch-sizes", "4,8", "--steps", "1", "--out", str(prof)],
                        capsys)
    assert code == 0, err
    code, out, _ = _cli(["fit", str(prof), "--batch", "32", "--out", str(fits)], capsys)
    assert code == 0 and "predicted at batch 32" in out
    code, out, err = _cli(["remeasure", *knobs, "--batch", "32", "--fits", str(fits), "--devices", "2",
                           "--device-memory", "1MB", "--steps", "1", "--out", str(measured),
                           "--accuracy-out", str(tmp_path / "a.json"),
                           "--cdf-out", str(tmp_path / "cdf.png")], capsys)
    assert code == 0, err
    assert "mean memory deviation" in out
    assert json.loads((tmp_path / "a.json").read_text())["format"] == "celeritas-accuracy/1"
    assert (tmp_path / "cdf.png").read_bytes()[:4] == b"\x89PNG"
    graph = load_graph(measured)
    placement = place(graph, Cluster.homogeneous(2, 1e6), "celeritas")
    save_placement(placement, tmp_path / "pl.json")
    code, out, err = _cli(["validate", *knobs, str(tmp_path / "pl.json"), "--batch", "32", "--steps", "3",
                           "--warmup", "1", "--out", str(tmp_path / "v.json")], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "v.json").read_text())["steps"] == 3


def test_cli_fit_chooses_a_time_model_per_op_and_remeasure_reads_it(tmp_path, capsys):
    knobs = ["--model", "mlp", "--set", "hidden=32"]
    prof, fits = tmp_path / "p.json", tmp_path / "f.json"
    code, out, err = _cli(["profile", *knobs, "--batch-sizes", "2,4,8", "--steps", "1", "--max-steps", "3",
                           "--out", str(prof)], capsys)
    assert code == 0 and "traced steps [" in out, err
    doc = json.loads(prof.read_text())
    assert all(1 <= p["traced_steps"] <= 3 and p["time_median_error"] >= 0 for p in doc["profiles"])
    code, out, err = _cli(["fit", str(prof), "--time-model", "choose", "--out", str(fits)], capsys)
    assert code == 0 and "time models chosen by leave-one-out error: linear" in out, err
    written = json.loads(fits.read_text())
    assert written["format"] == "celeritas-fits/2"
    assert {f["time_model"]["kind"] for f in written["ops"].values()} <= {"linear", "floor", "power"}
    code, out, err = _cli(["remeasure", *knobs, "--batch", "16", "--fits", str(fits), "--devices", "2",
                           "--device-memory", "1MB", "--steps", "1", "--out", str(tmp_path / "m.json")],
                          capsys)
    assert code == 0 and "mean time deviation" in out, err
    assert isinstance(load_graph(tmp_path / "m.json").meta["estimated_ops"], int)


def test_the_remeasured_graph_keeps_an_estimate_only_where_nothing_was_measured():
    trace = StepTrace(32, time_us={"a": 5.0}, memory_bytes={"a": 10.0, "c": 7.0})
    costs, kept = measured_costs(trace, {"a": (1.0, 1.0), "b": (2.0, 3.0)})
    assert costs == {"a": (5.0, 10.0), "b": (2.0, 3.0), "c": (0.0, 7.0)} and kept == 1


@pytest.mark.parametrize(("argv", "message"), [
    (["graph", "--model", "nope", "--batch", "4", "--out", "{out}"], "unknown model 'nope'"),
    (["graph", "--model", "mlp", "--batch", "0", "--out", "{out}"], "--batch: must be a positive integer"),
    (["graph", "--model", "mlp", "--batch", "4", "--costs", "magic", "--out", "{out}"], "--costs"),
    (["graph", "--model", "mlp", "--set", "hidden", "--batch", "4", "--out", "{out}"], "--set: expected"),
    (["profile", "--model", "mlp", "--batch-sizes", "4", "--out", "{out}"], "at least two positive"),
    (["profile", "--model", "mlp", "--batch-sizes", "2,4", "--span-target", "32", "--out", "{out}"],
     "--span-target needs --device-memory"),
    (["profile", "--model", "mlp", "--batch-sizes", "2,4", "--steps", "3", "--max-steps", "2",
      "--out", "{out}"], "--max-steps: must be an integer from 3"),
    (["profile", "--model", "mlp", "--batch-sizes", "2,4", "--noise-target", "0.1", "--out", "{out}"],
     "--noise-target needs --max-steps"),
    (["profile", "--model", "mlp", "--batch-sizes", "2,4", "--max-steps", "5", "--noise-target", "-1",
      "--out", "{out}"], "--noise-target: must be a finite number"),
    (["profile", "--model", "mlp", "--batch-sizes", "2,4", "--device-memory", "1GiB", "--out", "{out}"],
     "--device-memory is used only with --span-target"),
    (["fit", "{missing}", "--out", "{out}"], "file not found"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, argv, message):
    out_file = tmp_path / "out.json"
    argv = [a.format(out=out_file, missing=tmp_path / "missing.json") for a in argv]
    code, _, err = _cli(argv, capsys)
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not out_file.exists()


def test_cli_validate_refuses_too_many_devices_and_foreign_placements(tmp_path, capsys, graph):
    placement = place(graph, Cluster.homogeneous(2, graph.total_memory_bytes), "single")
    path = tmp_path / "pl.json"
    save_placement(placement, path)
    base = ["validate", "--model", "mlp", "--set", "features=32", "--set", "hidden=64", str(path),
            "--batch", "16", "--steps", "1", "--warmup", "0", "--out", str(tmp_path / "v.json")]
    code, _, err = _cli([*base, "--devices", "100"], capsys)
    assert code == 2 and "at most 64" in err
    code, _, err = _cli(["validate", "--model", "mlp", "--set", "layers=3", str(path), "--batch", "16",
                         "--out", str(tmp_path / "v.json")], capsys)  # one more layer: other ops
    assert code == 2 and "does not match the model's step" in err and err.count("\n") == 1
    assert not (tmp_path / "v.json").exists()


def test_cli_validate_times_both_orders_against_the_prediction(tmp_path, capsys, step, graph):
    placement = place(graph, Cluster.homogeneous(2, graph.total_memory_bytes * 0.6), "m-topo")
    path, plain = tmp_path / "pl.json", tmp_path / "plain.json"
    save_placement(placement, path)
    doc = json.loads(path.read_text())
    doc.pop("device_order", None)
    doc.pop("order_mode", None)
    plain.write_text(json.dumps(doc))
    doc["device_order"] = [list(ops) for ops in topological_device_order(step, doc["assignment"], 2)]
    doc["order_mode"] = "enforced"
    path.write_text(json.dumps(doc))
    base = ["validate", "--model", "mlp", *[f"--set={k}={v}" for k, v in MLP.items()], "--batch", "16",
            "--steps", "4", "--warmup", "1", "--blocks", "2"]
    out_file = tmp_path / "v.json"
    code, out, err = _cli([*base, str(path), "--out", str(out_file)], capsys)
    assert code == 0, err
    result = json.loads(out_file.read_text())
    predicted = doc["predicted_step_time_us"]
    assert result["order_mode"] == "enforced" and set(result["modes"]) == {"enforced", "free"}
    assert result["predicted_step_time_us"] == predicted and result["blocks"] == 2
    assert result["median_s"] == result["modes"]["enforced"]["median_s"]
    for mode, figures in result["modes"].items():
        assert figures["steps"] == 4 and len(figures["step_seconds"]) == 4
        assert figures["measured_over_predicted"] == pytest.approx(figures["median_s"] * 1e6 / predicted)
        line = next(s for s in out.splitlines() if s.strip().startswith(f"{mode} order"))
        assert f"median {figures['median_s'] * 1e3:.3f} ms" in line
        assert f"p90 {figures['p90_s'] * 1e3:.3f} ms" in line
        assert f"measured/predicted {figures['measured_over_predicted']:.2f}" in line
        assert f"{figures['order_agreement'] * 100:.1f} % of ops ran in the recorded order" in line
    assert "100.0 % of ops ran in the recorded order" in next(
        s for s in out.splitlines() if s.strip().startswith("enforced order"))
    assert f"predicted step (the placement's simulated step) {predicted / 1e3:.3f} ms" in out
    # one mode asked for: only it is timed
    code, _, err = _cli([*base, str(path), "--order", "free", "--out", str(out_file)], capsys)
    assert code == 0, err
    only = json.loads(out_file.read_text())
    assert set(only["modes"]) == {"free"} and only["order_mode"] == "free"
    assert only["placement_order_mode"] == "enforced"
    # a placement without an order: free only by default; the enforced order refused in one line
    code, _, err = _cli([*base, str(plain), "--out", str(out_file)], capsys)
    assert code == 0, err
    assert set(json.loads(out_file.read_text())["modes"]) == {"free"}
    out_file.unlink()
    for choice in ("enforced", "both"):
        code, _, err = _cli([*base, str(plain), "--order", choice, "--out", str(out_file)], capsys)
        assert code == 2 and f"--order {choice}: the placement records no device_order" in err, err
        assert err.count("\n") == 1 and "Traceback" not in err and not out_file.exists()


def test_user_model_from_module_function(tmp_path, monkeypatch):
    module = tmp_path / "my_models.py"
    module.write_text(
        "import keras\n"
        "def tiny():\n"
        "    inputs = keras.Input((5,))\n"
        "    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))\n"
        "    return model, 'mse', [(None, 5)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = get_model("my_models:tiny")
    assert spec.inputs[0].shape == (5,) and spec.labels.shape == (3,)
    step = build_training_step(spec, 4)
    assert any(n.endswith("ResourceApplyAdam") or "Adam" in n for n in step.step_op_names())
    with pytest.raises(CeleritasInputError, match="has no function 'nope'"):
        get_model("my_models:nope")
    with pytest.raises(CeleritasInputError, match="cannot import module"):
        get_model("no_such_module_xyz:f")


def test_graph_command_with_profiled_costs(tmp_path, capsys):
    out = tmp_path / "g.json"
    code, text, err = _cli(["graph", "--model", "mlp", "--batch", "8", "--costs", "profile", "--steps", "1",
                            "--out", str(out)], capsys)
    assert code == 0, err
    graph = load_graph(out)
    assert graph.total_time_us > 0 and graph.meta["costs"] == "profile"
    assert Path(out).stat().st_size > 1000 and "co-location groups" in text


def test_graph_command_with_analytical_costs_and_models_listing(tmp_path, capsys):
    out = tmp_path / "g.json"
    code, _, err = _cli(["graph", "--model", "mlp", "--batch", "64", "--costs", "analytical:v100",
                         "--out", str(out)], capsys)
    assert code == 0, err
    graph = load_graph(out)
    assert graph.meta["costs"] == "analytical:v100" and graph.total_time_us > 0
    code, _, err = _cli(["graph", "--model", "mlp", "--batch", "64", "--costs", "analytical:tpu",
                         "--out", str(out)], capsys)
    assert code == 2 and "tpu" in err and err.count("\n") == 1
    code, text, _ = _cli(["models"], capsys)
    assert code == 0
    for name in ("inception_v3", "nmt", "transformer", "tensor_holography"):
        assert name in text
    assert "batch 512" in text and "MODULE:FUNCTION" in text


def test_user_model_from_a_keras_file(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "tiny.keras"
    script = ("import keras\n"
              "inputs = keras.Input((6,))\n"
              "model = keras.Model(inputs, keras.layers.Dense(4)(inputs))\n"
              "model.compile(loss='sparse_categorical_crossentropy')\n"
              f"model.save({str(path)!r})\n")
    # saved the usual way, in an eager process of its own (this process runs TF in graph mode)
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    spec = get_model(str(path))
    assert spec.inputs[0].shape == (6,)
    assert spec.labels.dtype == "int32" and spec.labels.shape == () and spec.labels.high == 4
    step = build_training_step(spec, 4)
    assert "train_step" in step.step_op_names()
    with pytest.raises(CeleritasInputError, match="file not found"):
        get_model(str(tmp_path / "missing.keras"))
    broken = tmp_path / "broken.keras"
    broken.write_text("not a zip")
    with pytest.raises(CeleritasInputError, match="cannot load Keras model"):
        get_model(str(broken))
