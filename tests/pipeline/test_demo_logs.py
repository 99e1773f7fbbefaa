"""``make demo``'s console: the pipeline's own lines and tables there, Airflow's log in a file.

``examples/run_pipeline_demo.py``'s ``main`` runs, in a subprocess (it redirects file descriptors
1 and 2), with its DAG run replaced by ``dag.test()`` of a two-task DAG whose tasks log like the
pipeline's steps (``celeritas.steps``, ``tasks.*``, the MLflow runs' links of each task) and like
Airflow (stdlib and structlog loggers, ``print``, a warning, a write to file descriptor 2). A
migrated SQLite metadata database and a real ``dag.test()``: Airflow configures its logging as in
the demo.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

# find_spec, not importorskip: importing Airflow here would fix its configuration (AIRFLOW_HOME, the
# metadata database) for every later test module in this process before they point it elsewhere
if importlib.util.find_spec("airflow") is None:
    pytest.skip("needs Airflow", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]

TINY_DAG = '''
import logging
import os
import sys
import warnings

import structlog
from airflow.sdk import dag, task


def log_run_link():
    """The pipeline's own _log_run_link, with a run_link that needs no MLflow store."""
    sys.path.insert(0, os.path.join(@ROOT@, "dags"))
    import tasks.tracking
    from celeritas_steps import _log_run_link

    tasks.tracking.run_link = lambda run_id, *, serve_hint=True: (
        f"run {run_id}" + (" (serve it with mlflow ui)" if serve_hint else ""))
    return _log_run_link


@dag(schedule=None)
def tiny():
    @task
    def step():
        logging.getLogger("celeritas.steps").info("place: done in 0.1 s\\n| placer | ms |\\n| single | 1  |")
        logging.getLogger("tasks.publish").warning("publish: keep production: no faster placement")
        logging.getLogger("airflow.task").info("NOISE stdlib")
        structlog.get_logger("airflow.sdk").info("NOISE structlog")
        print("NOISE print")
        warnings.warn("NOISE warning", stacklevel=1)
        os.write(2, b"NOISE fd2\\n")
        link = log_run_link()
        link("parent-run")
        link("child-run", "MLflow run of placer m-topo", serve_hint=False)

    @task
    def validate():  # a later task logs the same runs' links, as every step of the pipeline does
        link = log_run_link()
        link("parent-run")
        link("child-run", "MLflow run of placer m-topo", serve_hint=False)

    step() >> validate()


tiny()
'''

DRIVER = '''
import importlib.util
import subprocess
import sys
from pathlib import Path

root, work = Path(sys.argv[1]), Path(sys.argv[2])
spec = importlib.util.spec_from_file_location("demo", root / "examples" / "run_pipeline_demo.py")
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)
demo.AIRFLOW_LOG = work / "demo" / "airflow.log"
demo._environment = lambda: {}  # the test's AIRFLOW_HOME, not build/airflow


def run_tiny(conf, console):
    """The demo's _run_dag on the tiny DAG."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, stdout=subprocess.DEVNULL)
    from airflow.dag_processing.dagbag import BundleDagBag

    bag = BundleDagBag(dag_folder=str(work / "dags"), bundle_path=work / "dags")
    assert not bag.import_errors, bag.import_errors
    demo._say(console, "airflow: running dag tiny")
    run = bag.get_dag("tiny").test()
    demo._say(console, f"DAG run: {run.state}")
    return str(run.state)


assert hasattr(demo, "_run_dag"), "the demo no longer has the DAG run this test replaces"
demo._run_dag = run_tiny
sys.exit(demo.main([]))
'''


@pytest.mark.slow
def test_the_demo_console_shows_the_pipeline_lines_and_the_file_the_rest(tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "tiny.py").write_text(TINY_DAG.replace("@ROOT@", repr(str(ROOT))))
    (tmp_path / "driver.py").write_text(DRIVER)
    home = tmp_path / "airflow"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AIRFLOW_HOME": str(home),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}"}
    done = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(ROOT), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    console = done.stdout + done.stderr
    log_file = tmp_path / "demo" / "airflow.log"
    assert done.returncode == 0, console
    assert console.splitlines() == [
        f"airflow: its own log goes to {log_file}",
        "airflow: running dag tiny",
        "place: done in 0.1 s", "| placer | ms |", "| single | 1  |",
        "publish: keep production: no faster placement",
        "MLflow run: run parent-run (serve it with mlflow ui)",  # each run's link once
        "MLflow run of placer m-topo: run child-run",
        "DAG run: success",
        f"airflow log: {log_file}",
    ], console
    logged = log_file.read_text()
    for line in ("NOISE stdlib", "NOISE structlog", "NOISE print", "NOISE warning", "NOISE fd2",
                 "[DAG TEST] running task", "place: done in 0.1 s"):
        assert line in logged, line
    for link in ("MLflow run: run parent-run (serve it with mlflow ui)",
                 "MLflow run of placer m-topo: run child-run"):
        assert logged.count(link) >= 2, link  # the task logs keep every task's link
