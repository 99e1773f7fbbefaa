"""The consumer's side on the real deployment: the placement DAG, triggered through the REST API
with the demo's configuration (but 31MiB per device: a configuration no other test publishes, so
this run is its first and promotes, whatever ran before in the session), publishes a champion in
the MLflow server; then

* ``examples/train_with_champion.py --conf '{"device_memory": "31MiB"}'`` finds that champion in
  the server's Model Registry, trains 100 steps with it (the loss goes down), saves the weights
  and reloads them (they match), and
* the downstream DAG ``celeritas_train_on_champion``, scheduled on the published-placement Asset,
  starts on that promotion's event and trains on the gpu worker, in the gpu pool, writing the
  weights and the losses under the runs root.

:func:`run_training_example` is the body that needs no deployment: run against the SQLite store
that ``make demo`` fills (no ``--conf``), it checks the same script on the demo's own champion.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.demo import demo_params
from tests.integration.stack import ROOT, Stack

PLACEMENT_DAG = "celeritas_placement"
TRAIN_DAG = "celeritas_train_on_champion"
#: The configuration this test publishes for: the demo's, with its own device memory. Fewer
#: validation steps and placers (not part of the configuration) keep the run short.
OVERRIDE = {"device_memory": "31MiB"}
CONF = {**demo_params(), **OVERRIDE, "validation_steps": 20, "warmup_steps": 2,
        "placers": ["celeritas", "order-place", "single"]}
RUN_TIMEOUT_S = 1500
STEP_LINE = re.compile(r"^\s*step\s+(\d+)/(\d+): loss (\S+)$")


def run_training_example(env: dict[str, str], folder: Path, steps: int = 100,
                         conf: dict[str, str] | None = None) -> list[float]:
    """Run ``examples/train_with_champion.py`` in ``env`` (its tracking store holds the champion of
    the demo's configuration with ``conf`` over it); check what it says: the loss went down, the
    weights reloaded and matched, the weights file is there. Returns the printed losses."""
    weights = folder / "champion.weights.h5"
    extra = ["--conf", json.dumps(conf)] if conf else []
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "train_with_champion.py"), "--steps",
                           str(steps), "--save-weights", str(weights), *extra], env=env, capture_output=True,
                          text=True, timeout=1200, check=False)
    out = done.stdout
    assert done.returncode == 0, (out, done.stderr[-3000:])
    lines = out.strip().splitlines()
    assert re.match(r"^champion: version \d+ of celeritas-tensor_holography-b16-[0-9a-f]{16} \(placer ",
                    lines[0]), lines[0]
    assert re.match(r"^placed tensor_holography at batch 16 on 4 devices, (enforced|free) order", lines[1])
    printed = [STEP_LINE.match(line) for line in lines]
    losses = [float(m[3]) for m in printed if m]
    assert [int(m[1]) for m in printed if m] == [1, *range(steps // 10, steps + 1, steps // 10)]
    assert all(map(math.isfinite, losses)) and losses[-1] < losses[0]
    assert re.search(r"^loss \S+ -> \S+ \(mean of the first and the last 10 steps\): went down$", out, re.M)
    assert f"weights saved to {weights}; reloaded into a fresh placed step: they match the trained " \
           "ones" in out
    assert weights.stat().st_size > 0
    return losses


def _instances(stack: Stack, dag_id: str, run_id: str) -> list[dict]:
    status, answer = stack.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
    assert status == 200, answer
    return list(answer["task_instances"])


def _upstream_runs(stack: Stack, run_id: str) -> set[str]:
    """The DAG runs whose Asset events started ``run_id`` of the training DAG."""
    status, answer = stack.call("GET", f"/api/v2/dags/{TRAIN_DAG}/dagRuns/{run_id}/upstreamAssetEvents")
    assert status == 200, answer
    return {str(event.get("source_run_id")) for event in answer["asset_events"]}


def test_the_consumer_trains_with_the_champion_the_pipeline_published(stack: Stack, tmp_path: Path) -> None:
    stack.wait_for_dag(TRAIN_DAG)  # unpaused: the Asset event of a promotion starts it
    stack.wait_for_dag(PLACEMENT_DAG)
    status, run = stack.call("POST", f"/api/v2/dags/{PLACEMENT_DAG}/dagRuns",
                             {"logical_date": None, "conf": CONF})
    assert status == 200, run
    placed = run["dag_run_id"]
    state = stack.wait_for_run(PLACEMENT_DAG, placed, RUN_TIMEOUT_S)
    assert state == "success", (stack.log_tail("worker-gpu"), stack.log_tail("worker-default"))
    announced = {ti["task_id"]: ti["state"] for ti in _instances(stack, PLACEMENT_DAG, placed)}
    assert announced.get("announce") == "success", announced  # the configuration's first run promotes

    # the example, against the deployment's MLflow server
    env = {**stack.env, "MLFLOW_TRACKING_URI": stack.mlflow_url, "PYTHONPATH": str(ROOT)}
    run_training_example(env, tmp_path, conf=OVERRIDE)

    # the downstream DAG started on this promotion's Asset event and trained on the gpu worker
    deadline = time.monotonic() + 300
    while not (started := [r for r in stack.runs(TRAIN_DAG)
                           if placed in _upstream_runs(stack, r["dag_run_id"])]):
        assert time.monotonic() < deadline, \
            f"no {TRAIN_DAG} run after the promotion:\n{stack.log_tail('scheduler')}"
        time.sleep(3)
    (train_run,) = started
    assert train_run["run_type"] == "asset_triggered", train_run
    finished = stack.wait_for_run(TRAIN_DAG, train_run["dag_run_id"], 900)
    assert finished == "success", stack.log_tail("worker-gpu")
    # one mapped train task per configuration whose promotion the run consumed: earlier tests'
    # promotions of other configurations may be queued into the same run
    instances = _instances(stack, TRAIN_DAG, train_run["dag_run_id"])
    trains = [ti for ti in instances if ti["task_id"] == "train"]
    assert trains and all((ti["state"], ti["queue"], ti["pool"], ti["hostname"]) == (
        "success", "gpu", "gpu", "gpu-worker") for ti in trains), trains
    runs_root = stack.folder / "home" / "build" / "runs" / "training"
    summaries = [json.loads(p.read_text()) for p in runs_root.glob("*/v*/*/training.json")]
    mine = [d for d in summaries if d["job_id"] == train_run["dag_run_id"]]
    assert len(mine) == len(trains), list(runs_root.rglob("training.json"))
    ours = [d for d in mine if d["configuration"]["cluster"]["memory_bytes"] == 31 * 2**20]
    assert len(ours) == 1, [d["configuration"] for d in mine]
    doc = ours[0]
    assert doc["steps"] == 100 and doc["losses"][-1] < doc["losses"][0] and doc["num_devices"] == 4
    assert Path(doc["weights_uri"]).is_file()
