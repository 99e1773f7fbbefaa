"""Training with a placement (celeritas_tf/training.py): a real placement made by ``celeritas place``
on the extracted graph, the loss falling over the steps in the enforced and the free order, the
caller's batches, NumPy arrays, datasets and iterables, the weights in Keras's format round trip,
and every refusal's one-line message. Real TensorFlow, small models on logical CPU devices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

pytest.importorskip("tensorflow")

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.formats import check_device_order
from celeritas_tf.identity import step_digest
from celeritas_tf.models import get_model
from celeritas_tf.step import build_training_step
from celeritas_tf.tf import tensorflow
from celeritas_tf.training import PlacedTraining, TrainingConfig, train_with_placement

BATCH = 16


@pytest.fixture(scope="module")
def placement_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``celeritas graph`` then ``celeritas place`` of the mlp's step at batch 16 on 2 devices whose
    memory forces a split: a real placement with its structure digest and device order."""
    folder = tmp_path_factory.mktemp("placement")
    graph, placement = folder / "mlp.json", folder / "mlp.placement.json"
    assert main(["graph", "--model", "mlp", "--batch", str(BATCH), "--costs", "analytical:v100",
                 "--out", str(graph)]) == 0
    assert main(["place", str(graph), "--devices", "2", "--device-memory", "40KB",
                 "--out", str(placement)]) == 0
    return placement


@pytest.fixture(scope="module")
def placement(placement_file: Path) -> dict[str, Any]:
    doc = json.loads(placement_file.read_text())
    assert set(doc["assignment"].values()) == {0, 1}  # really split
    assert doc["order_mode"] == "enforced" and len(doc["device_order"]) == 2 and doc["op_keys_digest"]
    return doc


def _refused(message: str, *args: Any, **kwargs: Any) -> None:
    """``train_with_placement(*args, **kwargs)`` raises exactly ``message`` (one line)."""
    with pytest.raises(CeleritasInputError) as info:
        train_with_placement(*args, **kwargs).close()
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_the_loss_falls_with_a_real_placement_in_its_enforced_order(placement_file: Path) -> None:
    with train_with_placement("mlp", placement_file, batch_size=BATCH, learning_rate=0.01,
                              seed=3) as training:
        assert (training.num_devices, training.order_mode, training.placer) == (2, "enforced", "celeritas")
        assert training.order_edges is not None and training.order_edges.added > 0
        devices = {op.device.rsplit(":", 1)[-1] for op in training.step_graph.graph.get_operations()}
        assert devices == {"0", "1"}
        seen: list[tuple[int, float]] = []
        losses = training.fit(training.synthetic_data(), steps=60,
                              progress=lambda i, loss: seen.append((i, loss)))
        assert training.steps_run == 60 and seen == list(enumerate(losses, start=1))
    assert len(losses) == 60 and all(np.isfinite(losses))
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10]), losses


def test_the_free_order_computes_the_same_steps(placement: dict[str, Any]) -> None:
    """The order only says when each op runs: with the same seed and batches, the enforced and
    the free order give the same losses (and the free order adds no edge)."""
    runs = {}
    for order in ("enforced", "free"):
        with train_with_placement(get_model("mlp"), placement, batch_size=BATCH, order=order,
                                  seed=5) as training:
            runs[order] = training.fit(training.synthetic_data(batches=2), steps=8)
            assert (training.order_edges is None) == (order == "free")
    np.testing.assert_allclose(runs["enforced"], runs["free"], rtol=1e-5)


def test_a_step_takes_the_callers_batches(placement: dict[str, Any]) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, 16))  # float64: cast to the model's float32
    y = rng.integers(0, 10, BATCH)        # int64: cast to int32
    with train_with_placement("mlp", placement, batch_size=BATCH, learning_rate=0.05, seed=1) as training:
        first = training.step(x, y)
        assert training.step({"features": x}, y) < first  # a mapping by input name works too
        for _ in range(20):
            last = training.step([x][0], list(y))
        assert last < first / 2
        for bad, message in (
                ((x[:8], y), "inputs 'features': expected shape (16, 16) (a batch of 16), got (8, 16)"),
                ((x, y.astype(float)), "labels 'labels': expected int32 values, got float64"),
                (({"feature": x}, y), "inputs: expected the model's inputs ['features'], got ['feature']")):
            with pytest.raises(CeleritasInputError) as info:
                training.step(*bad)
            assert str(info.value) == message
        assert training.steps_run == 22  # the refused batches ran nothing


def test_fit_takes_arrays_datasets_and_iterables(placement: dict[str, Any]) -> None:
    tf = tensorflow()
    x, y = np.random.default_rng(1).standard_normal((40, 16)).astype("float32"), np.arange(40) % 10
    with train_with_placement("mlp", placement, batch_size=BATCH) as training:
        assert len(training.fit((x, y))) == 2  # one pass: the whole batches, the last 8 examples left out
        assert len(training.fit((x, y), steps=5)) == 5  # from the start again when they run out
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True)
        assert len(training.fit(dataset)) == 2 and len(training.fit(dataset.repeat(), steps=3)) == 3
        named = tf.data.Dataset.from_tensor_slices({"features": x, "labels": y})
        named = named.batch(BATCH, drop_remainder=True)
        assert len(training.fit(named)) == 2
        batches = [(x[:16], y[:16]), (x[16:32], y[16:32])]
        assert len(training.fit(iter(batches), steps=5)) == 2  # an iterable that ends first ends the fit
        assert training.steps_run == 2 + 5 + 2 + 3 + 2 + 2
        for data, message in (
                ((x[:10], y[:10]), "data: 10 examples, fewer than one batch of 16"),
                ((x, y[:30]), "data: the inputs and labels hold different numbers of examples [40, 30]"),
                ("x.npz", "data: expected (inputs, labels) arrays, a tf.data.Dataset or an iterable of "
                          "(inputs, labels) batches, got str"),
                ([x], "data: each batch must be a pair (inputs, labels), got ndarray")):
            with pytest.raises(CeleritasInputError) as info:
                training.fit(data, steps=1)
            assert str(info.value) == message
        with pytest.raises(CeleritasInputError, match=r"^steps: must be an integer from 1 to 100,000, "
                                                      r"got 0$"):
            training.fit((x, y), steps=0)


def test_saved_weights_are_the_trained_ones_and_load_back(placement: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "mlp.weights.h5"
    with train_with_placement("mlp", placement, batch_size=BATCH, learning_rate=0.01, seed=7) as training:
        x, y = training.synthetic_data(batches=1)
        initial = training.weights()
        training.fit((x, y), steps=15)
        assert training.save_weights(path) == path
        trained = training.weights()
        assert not all(np.array_equal(a, b) for a, b in zip(initial, trained, strict=True))
        next_loss = training.step(x, y)
    with train_with_placement("mlp", placement, batch_size=BATCH, seed=8) as fresh:
        assert not all(np.array_equal(a, b) for a, b in zip(fresh.weights(), trained, strict=True))
        fresh.load_weights(path)
        for a, b in zip(fresh.weights(), trained, strict=True):
            np.testing.assert_array_equal(a, b)
        assert fresh.step(x, y) == pytest.approx(next_loss, rel=1e-6)  # the same model: the same loss
    # the file is Keras's own format: plain Keras reads the same values
    keras = pytest.importorskip("keras")
    with tensorflow().__internal__.eager_context.eager_mode():
        keras.backend.clear_session()
        net = get_model("mlp").make_model()
        net.load_weights(str(path))
        for a, b in zip(net.weights, trained, strict=True):
            np.testing.assert_array_equal(a.numpy(), b)


def test_weights_of_another_model_are_refused_and_change_nothing(placement: dict[str, Any],
                                                                  tmp_path: Path) -> None:
    other = tmp_path / "wide.weights.h5"
    wide = get_model("mlp", hidden=48)
    ops = build_training_step(wide, BATCH).step_op_names()
    one_device = {"format": "celeritas-placement/1", "devices": ["gpu:0"],
                  "assignment": dict.fromkeys(ops, 0)}
    with train_with_placement(wide, one_device, batch_size=BATCH) as training:
        training.save_weights(other)
    with train_with_placement("mlp", placement, batch_size=BATCH) as training:
        before = training.weights()
        with pytest.raises(CeleritasInputError) as info:
            training.load_weights(other)
        message = str(info.value)
        assert message.startswith(f"{other}: cannot load these weights into 'mlp' (") and "\n" not in message
        for a, b in zip(before, training.weights(), strict=True):
            np.testing.assert_array_equal(a, b)
        absent = tmp_path / "none.weights.h5"
        longer = tmp_path / "longer.weights.h5"  # this model's weights and one more: Keras takes them
        longer.write_bytes(path_of_mlp_weights(training, tmp_path).read_bytes())
        with h5py.File(longer, "a") as handle:
            handle.create_dataset("layers/extra/vars/0", data=np.zeros(3))
        with pytest.raises(CeleritasInputError) as info:
            training.load_weights(longer)
        assert str(info.value) == f"{longer}: the file holds 7 weights, the model 'mlp' 6"
        for bad, expected in ((tmp_path / "w.h5", f"{tmp_path / 'w.h5'}: a weights file's name must end in "
                                                  ".weights.h5 (Keras's format)"),
                              (absent, f"{absent}: file not found")):
            with pytest.raises(CeleritasInputError) as info:
                training.load_weights(bad)
            assert str(info.value) == expected
        with pytest.raises(CeleritasInputError, match=r"a weights file's name must end in \.weights\.h5"):
            training.save_weights(tmp_path / "w.keras")
        assert not (tmp_path / "w.keras").exists()
    with pytest.raises(CeleritasInputError, match=r"^this PlacedTraining is closed$"):
        training.step(*training.synthetic_data(batches=1))


def path_of_mlp_weights(training: PlacedTraining, folder: Path) -> Path:
    """``training``'s weights saved under ``folder``."""
    return training.save_weights(folder / "own.weights.h5")


def test_a_placement_for_another_model_or_structure_is_refused(placement: dict[str, Any]) -> None:
    recorded = placement["op_keys_digest"]
    holography = get_model("tensor_holography", layers=2, filters=4, image_size=8)
    theirs = step_digest(build_training_step(holography, BATCH))
    _refused(f"p.json: the placement was made for model 'mlp', not 'tensor_holography' (op keys digest "
             f"{recorded}, this step {theirs})", holography, placement, batch_size=BATCH, source="p.json")
    wide = get_model("mlp", hidden=48)
    mine = step_digest(build_training_step(wide, BATCH))
    _refused(f"p.json: the placement was made for another structure of 'mlp': op keys digest {recorded}, the "
             f"step at batch {BATCH} has {mine} (another configuration of the model, another batch size's "
             "structure or another TensorFlow)", wide, placement, batch_size=BATCH, source="p.json")
    # an older placement without a digest: the op names decide
    undigested = {k: v for k, v in placement.items() if k != "op_keys_digest"}
    ops = build_training_step(holography, BATCH).step_op_names()
    missing = sorted(set(ops) - set(placement["assignment"]))
    _refused(f"p.json: placement does not match the model's step: op {missing[0]!r} is not placed "
             f"({len(missing)} ops missing)", holography, undigested, batch_size=BATCH, source="p.json")


def test_a_placement_for_another_batchs_structure_is_refused() -> None:
    """nmt's step builds its zero initial states as a Const up to 1,000 elements and as a Fill
    above: its placement at batch 16 does not fit its step at batch 64."""
    nmt = get_model("nmt", layers=1, units=32, seq_len=2, vocab=20)
    small, large = build_training_step(nmt, 16), build_training_step(nmt, 64)
    doc = {"format": "celeritas-placement/1", "graph": "nmt", "devices": ["gpu:0"],
           "assignment": dict.fromkeys(small.step_op_names(), 0), "op_keys_digest": step_digest(small)}
    with train_with_placement(nmt, doc, batch_size=16) as training:  # its own batch: fine
        assert training.fit(training.synthetic_data(batches=1), steps=1)
    _refused(f"nmt.json: the placement was made for another structure of 'nmt': op keys digest "
             f"{step_digest(small)}, the step at batch 64 has {step_digest(large)} (another configuration of "
             "the model, another batch size's structure or another TensorFlow)", nmt, doc, batch_size=64,
             source="nmt.json")


def test_a_placement_made_for_another_batch_is_refused(placement: dict[str, Any]) -> None:
    """mlp's structure is the same at every batch (the digest cannot tell), but the placement
    records the batch its costs and memory are measured at."""
    assert placement["batch_size"] == BATCH
    _refused(f"p.json: the placement was made for batch size {BATCH}, not {2 * BATCH}: its op costs and "
             f"memory are batch {BATCH}'s (train at batch {BATCH}, or place the model at batch {2 * BATCH})",
             "mlp", placement, batch_size=2 * BATCH, source="p.json")
    _refused("p.json: field 'batch_size' must be an integer from 1 to 1,000,000, got '16'",
             "mlp", {**placement, "batch_size": "16"}, batch_size=BATCH, source="p.json")


def test_a_placement_for_more_devices_than_this_machine_runs_is_refused(placement: dict[str, Any]) -> None:
    many = {**placement, "devices": [f"gpu:{i}" for i in range(65)], "device_order": None}
    _refused("p.json: the placement has 65 devices, more than this machine runs (65 logical CPU devices "
             "requested, at most 64)", "mlp", many, batch_size=BATCH, source="p.json")


def test_a_bad_order_is_refused(placement: dict[str, Any]) -> None:
    order = [list(ops) for ops in placement["device_order"]]
    op = order[0][-1]
    moved = [order[0][:-1], [*order[1], op]]
    with pytest.raises(CeleritasInputError) as core:  # the format's own check and sentence
        check_device_order(moved, placement["assignment"], "p.json")
    assert op in str(core.value) and "device 1" in str(core.value)
    _refused(str(core.value), "mlp", {**placement, "device_order": moved}, batch_size=BATCH, source="p.json")
    # the recorded order is checked even when the free order is asked for: the file is bad
    _refused(str(core.value), "mlp", {**placement, "device_order": moved}, batch_size=BATCH, order="free",
             source="p.json")
    # device 0's ops listed backwards: a consumer before the op it reads, the edges would make a cycle
    backwards = [order[0][::-1], order[1]]
    with pytest.raises(CeleritasInputError) as info:
        train_with_placement("mlp", {**placement, "device_order": backwards}, batch_size=BATCH,
                             source="p.json")
    assert str(info.value).startswith("p.json: device_order: device 0 lists ") and "\n" not in str(info.value)
    unordered = {k: v for k, v in placement.items() if k not in ("device_order", "order_mode")}
    _refused("p.json: the placement records no device_order, so its order cannot be enforced (order 'free' "
             "runs it in TensorFlow's own order)", "mlp", unordered, batch_size=BATCH, order="enforced",
             source="p.json")
    with train_with_placement("mlp", unordered, batch_size=BATCH) as training:  # its mode: free
        assert training.order_mode == "free" and training.order_edges is None


def test_bad_settings_and_documents_are_refused(placement: dict[str, Any]) -> None:
    for kwargs, message in (
            ({"batch_size": 0}, "batch_size: must be an integer from 1 to 1,000,000, got 0"),
            ({"batch_size": 16, "order": "sorted"}, "order: must be one of enforced, free, got 'sorted'"),
            ({"batch_size": 16, "learning_rate": float("nan")},
             "learning_rate: must be a finite number above 0 and at most 10, got nan"),
            ({"batch_size": 16, "seed": -1}, "seed: must be an integer from 0 to 4,294,967,295, got -1")):
        with pytest.raises(CeleritasInputError) as info:
            TrainingConfig(**kwargs)
        assert str(info.value) == message
    _refused("p.json: not a celeritas-placement/1 document (field 'format')", "mlp", {"format": "x"},
             batch_size=BATCH, source="p.json")
    _refused("p.json: field 'assignment': op 'dense_0/MatMul' has device 2, expected an index 0..1 of the "
             "placement's devices", "mlp", {**placement, "assignment": {"dense_0/MatMul": 2}},
             batch_size=BATCH, source="p.json")
    _refused("p.json: field 'order_mode' must be one of enforced, free, got 'sorted'", "mlp",
             {**placement, "order_mode": "sorted"}, batch_size=BATCH, order="free", source="p.json")
    with pytest.raises(CeleritasInputError, match=r"^config: expected a TrainingConfig, got dict$"):
        PlacedTraining("mlp", placement, {"batch_size": 16})  # type: ignore[arg-type]
