"""The UIs in a real browser (Debian's chromium driven by Playwright; no browser is downloaded):
the placement DAG's trigger form, submitted with its defaults, and the run in MLflow's UI.
Screenshots of every step go to build/ui-screenshots/."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from tests.integration.stack import Stack
from tests.integration.ui import DAG, log_in, open_trigger_form, shot

SECTIONS = ("Model", "Standard Evaluation", "Cluster", "Placement", "Validation", "Publishing", "Storage")
DEFAULT_RUN_TIMEOUT_S = 1200
TRAINING_VIEW = "workflowType=machine_learning"
EXPERIMENT = "celeritas-placement"


def test_the_trigger_form_shows_its_sections_and_submits_with_its_defaults(browser, stack: Stack) -> None:
    stack.wait_for_dag(DAG)
    before = {r["dag_run_id"] for r in stack.runs(DAG)}
    page = browser.new_page()
    log_in(page, stack, screenshot="01-airflow-login")
    dialog = open_trigger_form(page, stack)
    for section in SECTIONS:  # the form's sections, each with its fields' descriptions
        dialog.get_by_role("button", name=section, exact=True).wait_for(timeout=30_000)
    shot(page, "02-trigger-form")
    dialog.get_by_role("button", name="Model", exact=True).click()
    dialog.get_by_text("A zoo model (inception_v3, nmt, transformer, tensor_holography, mlp)").wait_for()
    shot(page, "03-trigger-form-model")
    dialog.get_by_role("button", name="Storage", exact=True).click()
    dialog.get_by_text("Optional. Where the run's artifacts go").wait_for()
    shot(page, "04-trigger-form-storage")
    dialog.get_by_role("button", name="Trigger").click()  # the defaults, untouched
    deadline = time.monotonic() + 60
    while not (new := {r["dag_run_id"] for r in stack.runs(DAG)} - before):
        assert time.monotonic() < deadline, "the form's Trigger created no run"
        time.sleep(1)
    (run_id,) = new
    shot(page, "05-triggered")
    state = stack.wait_for_run(DAG, run_id, DEFAULT_RUN_TIMEOUT_S)
    page.goto(f"{stack.airflow_url}/dags/{DAG}/runs/{run_id}")
    page.wait_for_timeout(3000)
    shot(page, "06-run-finished")
    assert state == "success", stack.log_tail("worker-gpu")
    _check_the_first_run_is_the_demos_split(stack, run_id)


def _check_the_first_run_is_the_demos_split(stack: Stack, run_id: str) -> None:
    """The form's defaults are the demo's configuration (same key, so the demo's champion would be
    the one to beat), and on its devices the promoted placement uses more than one."""
    import tempfile

    from mlflow.tracking import MlflowClient

    from tasks.prepare import configuration_for
    from tests.demo import demo_params

    client = MlflowClient(tracking_uri=stack.mlflow_url)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    (parent,) = client.search_runs([experiment.experiment_id], f"tags.`airflow.run_id` = '{run_id}'")
    assert parent.data.tags["celeritas.config_key"] == configuration_for(demo_params())["key"]
    assert parent.data.tags["celeritas.publish_decision"] == "promoted"  # the first of its configuration
    with tempfile.TemporaryDirectory() as folder:
        path = client.download_artifacts(parent.info.run_id, "published/placement.json", folder)
        with open(path) as fh:
            placement = json.load(fh)
    used = set(placement["assignment"].values())
    assert len(used) >= 2, f"the promoted {placement['placer']} placement keeps every op on one device"


def _experiment_id(stack: Stack) -> str:
    url = f"{stack.mlflow_url}/ajax-api/2.0/mlflow/experiments/get-by-name?experiment_name={EXPERIMENT}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(json.loads(response.read())["experiment"]["experiment_id"])


def test_the_mlflow_ui_shows_the_runs_the_step_time_chart_and_the_artifacts(browser, stack: Stack) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=stack.mlflow_url)
    experiment = _experiment_id(stack)
    parents = client.search_runs([experiment], "tags.`celeritas.role` = 'parent' and attributes.status = "
                                               "'FINISHED'", max_results=1)
    if not parents:
        pytest.fail("no finished placement run in MLflow: the trigger tests did not run first")
    parent = parents[0]
    children = client.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert children
    page = browser.new_page()
    page.goto(f"{stack.mlflow_url}/#/experiments/{experiment}?{TRAINING_VIEW}")
    page.get_by_text(parent.info.run_name, exact=True).first.wait_for(timeout=60_000)
    shot(page, "07-mlflow-experiment")
    validated = next(c for c in children if "validation_step_time_ms" in c.data.metrics)
    page.goto(f"{stack.mlflow_url}/#/experiments/{experiment}/runs/{validated.info.run_id}/model-metrics"
              f"?{TRAINING_VIEW}")
    page.get_by_placeholder("Search metric charts").fill("validation_step_time_ms")
    page.get_by_text("validation_step_time_ms", exact=True).first.wait_for(timeout=60_000)
    page.get_by_text("Step", exact=True).first.wait_for(timeout=30_000)  # a line over the timed steps
    shot(page, "08-mlflow-step-time-chart")
    page.goto(f"{stack.mlflow_url}/#/experiments/{experiment}/runs/{validated.info.run_id}/artifacts"
              f"?{TRAINING_VIEW}")
    for name in ("placement", "validation", "gantt.png", "memory.png"):  # the charts at the top
        page.get_by_text(name, exact=True).first.wait_for(timeout=60_000)
    shot(page, "09-mlflow-artifacts")
    page.goto(f"{stack.mlflow_url}/#/experiments/{experiment}/runs/{parent.info.run_id}?{TRAINING_VIEW}")
    page.get_by_text(parent.info.run_name).first.wait_for(timeout=60_000)
    shot(page, "10-mlflow-parent-run")
