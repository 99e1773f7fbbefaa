"""The training consumer with a pipelined placement: the micro-batch step, placed and ordered as
the plan says, computes the same steps as the single-batch step of the same assignment."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from celeritas_cli.main import main
from celeritas_tf.training import train_with_placement

BATCH = 16


@pytest.fixture(scope="module")
def placements(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """The mlp's step at batch 16 placed on 2 devices as a 1F1B pipeline of 4 micro-batches, and
    the same assignment as a single-batch placement (its ``pipeline`` object removed)."""
    folder = tmp_path_factory.mktemp("pipelined-training")
    graph, placement = folder / "mlp.json", folder / "mlp.placement.json"
    assert main(["graph", "--model", "mlp", "--batch", str(BATCH), "--costs", "analytical:v100",
                 "--out", str(graph)]) == 0
    assert main(["place", str(graph), "--devices", "2", "--device-memory", "40KB", "--micro-batches", "4",
                 "--schedule", "1f1b", "--out", str(placement)]) == 0
    piped = json.loads(Path(placement).read_text())
    assert piped["pipeline"]["micro_batches"] == 4 and set(piped["assignment"].values()) == {0, 1}
    single = {k: v for k, v in piped.items() if k != "pipeline"}
    return piped, single


def test_pipelined_training_takes_the_same_steps_as_one_batch(placements: tuple[dict, dict]) -> None:
    piped, single = placements
    losses = {}
    for name, doc in (("pipelined", piped), ("single", single)):
        with train_with_placement("mlp", doc, batch_size=BATCH, learning_rate=0.01, seed=11) as training:
            assert training.micro_batches == (4 if name == "pipelined" else 1)
            devices = {op.device.rsplit(":", 1)[-1] for op in training.step_graph.graph.get_operations()
                       if op.device}
            assert devices == {"0", "1"}
            losses[name] = training.fit(training.synthetic_data(batches=2), steps=6)
    # float32: the micro-batches' gradients are summed in another order (tests/tf/test_microbatch.py)
    np.testing.assert_allclose(losses["pipelined"], losses["single"], rtol=1e-4)
    assert losses["pipelined"][-1] < losses["pipelined"][0]
