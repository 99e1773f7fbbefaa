"""The example downstream training DAG ``celeritas_train_on_champion``: parsed with the other DAGs,
thin, scheduled on the published-placement Asset, training on the gpu queue and pool; a whole run
through ``dag.test()`` on a champion published in a SQLite MLflow store; the Asset event's extra
turned into what to train, and trained (``tasks/training.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# the Airflow home, its environment and fixture of the placement DAG's tests: Airflow reads its
# configuration once per process, so every DAG test of a session shares them
from tests.pipeline.test_pipeline_dag import ROOT, airflow_home  # noqa: F401

pytest.importorskip("mlflow")

from celeritas_core.errors import CeleritasInputError
from tests.cli.test_train_cli import PARAMS, publish_champion

DAG_ID = "celeritas_train_on_champion"


@pytest.fixture(scope="module")
def train_dag(airflow_home):  # noqa: F811 (the imported fixture)
    from airflow.dag_processing.dagbag import BundleDagBag

    bag = BundleDagBag(dag_folder=str(ROOT / "dags"), bundle_path=ROOT / "dags")
    assert bag.import_errors == {}
    return bag.get_dag(DAG_ID)


@pytest.fixture
def champion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A champion for the test configuration in a fresh SQLite store; runs root under tmp_path."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}")
    monkeypatch.setenv("CELERITAS_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.delenv("CELERITAS_CLUSTER_NAME", raising=False)
    return publish_champion(tmp_path / "published", PARAMS)


def test_the_training_dag_file_imports_no_heavy_module() -> None:
    code = ("import sys, runpy; runpy.run_path(sys.argv[1]); "
            "print(sorted(m for m in ('tensorflow', 'mlflow', 'boto3', 'numpy', 'keras') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "dags" / f"{DAG_ID}.py")],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'dags'}"})
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_it_runs_on_each_published_placement_and_trains_on_the_gpu_workers(train_dag) -> None:
    condition = train_dag.timetable.asset_condition  # data-aware: each event of the Asset starts a run
    assert [asset.name for asset in condition.objects] == ["celeritas_published_placement"]
    assert set(train_dag.task_ids) == {"published_placements", "train"}
    train = train_dag.get_task("train")
    assert (train.queue, train.pool) == ("gpu", "gpu") and train.execution_timeout is not None
    listing = train_dag.get_task("published_placements")
    assert listing.queue != "gpu" and listing.pool != "gpu" and listing.downstream_task_ids == {"train"}
    assert train.map_index_template == "{{ config_key }}"
    assert train_dag.params["steps"] == 100 and train_dag.catchup is False
    assert f"{DAG_ID}.py" not in (ROOT / "dags" / ".airflowignore").read_text()  # a DAG, not tasks


def test_a_run_by_hand_trains_the_champion_of_the_registered_model(train_dag, champion, tmp_path) -> None:
    dag_run = train_dag.test(run_conf={"registered_model": champion["registered_model"], "steps": 4})
    assert str(dag_run.state).endswith("success")
    folder = tmp_path / "runs" / "training" / champion["registered_model"] / "v1"
    (summary,) = folder.glob("*/training.json")
    doc = json.loads(summary.read_text())
    assert (doc["registered_model"], doc["version"], doc["steps"], len(doc["losses"])) == (
        champion["registered_model"], "1", 4, 4)
    assert doc["order_mode"] == "enforced" and doc["num_devices"] == 2 and doc["batch_size"] == 16
    weights = Path(doc["weights_uri"])
    assert weights == summary.parent / "model.weights.h5" and weights.is_file()
    assert doc["configuration"]["key"] == champion["key"]


def test_a_run_with_nothing_to_train_fails(train_dag, champion) -> None:
    dag_run = train_dag.test(run_conf={"steps": 2, "registered_model": None})  # no event, no champion named
    assert str(dag_run.state).endswith("failed")


def test_an_asset_events_extra_says_what_to_train_and_it_trains(champion, tmp_path) -> None:
    from tasks import tracking
    from tasks.training import TrainingRun, train_item, training_items

    found = tracking.champion(champion["registered_model"])
    assert found is not None
    # what ``announce`` (dags/celeritas_steps.py) puts in the event's extra; two events of one
    # configuration arrived together: the latest is trained
    extra = {"model": "mlp", "config_key": champion["key"], "version": found.version,
             "placement_uri": found.placement_uri, "step_time_s": 0.01, "placer": "celeritas"}
    older = {**extra, "version": "0", "placement_uri": "mlflow-artifacts:/gone/published/placement.json"}
    (item,) = training_items([older, extra])
    assert (item.version, item.placement_uri, item.config_key) == ("1", found.placement_uri, champion["key"])
    run = train_item(item, job_id="manual__2026", steps=3, order="free")
    assert isinstance(run, TrainingRun) and run.steps == 3 and run.order_mode == "free"
    assert run.weights_uri == str(tmp_path / "runs" / "training" / champion["registered_model"] / "v1"
                                  / "manual__2026" / "model.weights.h5")
    assert Path(run.weights_uri).is_file() and Path(str(run.summary_uri)).is_file()
    with pytest.raises(CeleritasInputError, match="nothing to train: no published-placement event"):
        training_items([])
    with pytest.raises(CeleritasInputError, match="a published-placement event without a placement URI"):
        training_items([{"model": "mlp"}])
