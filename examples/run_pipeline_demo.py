"""Run the Airflow placement DAG end to end, in-process, on a small model (``make demo``).

Uses a project-local ``AIRFLOW_HOME`` (``build/airflow``, SQLite metadata database), the local
MLflow store (``build/mlflow``, SQLite) and 4 logical CPU devices. It migrates the metadata
database, creates the ``gpu`` pool, runs ``dag.test()`` with a small configuration, then prints
where the results are and how to browse them.

The console shows the pipeline's own lines: each step's start, its summary table and the MLflow
runs' links (the ``celeritas`` and ``tasks`` loggers), each run's link once (every task logs its
parent run's link, and ``validate`` its placer's, for its own task log; here one process runs them
all: :class:`tasks.tracking.FirstRunLinks`). Everything else written while the DAG runs
(Airflow's structured log lines, warnings, TensorFlow's and METIS's own output) goes to
``build/demo/airflow.log``, named at the start and at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[1]
#: Where everything but the pipeline's own lines goes while the DAG runs.
AIRFLOW_LOG = ROOT / "build" / "demo" / "airflow.log"
#: The loggers of the pipeline's own lines (dags/celeritas_steps.py: "celeritas.steps"; tasks/).
PIPELINE_LOGGERS = ("celeritas", "tasks")
DEMO_PARAMS = {
    "model": "tensor_holography",
    "model_knobs": {"layers": 6, "filters": 8, "image_size": 24},
    "batch_size": 16,
    "profile_batch_sizes": [2, 4, 8],
    "num_devices": 4,
    "device_memory": "30MiB",
    "validation_steps": 50,
    "warmup_steps": 5,
}


def _environment() -> dict[str, str]:
    home = ROOT / "build" / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "CELERITAS_HOME": str(ROOT),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    os.environ.update({k: v for k, v in env.items() if k not in os.environ or k.startswith("AIRFLOW")})
    return env


@contextmanager
def route_logs(log_file: Path) -> Iterator[TextIO]:
    """Within the block, the records of :data:`PIPELINE_LOGGERS` (INFO and up, message only; a link
    to an MLflow run only the first time, :class:`tasks.tracking.FirstRunLinks`) go to the console
    and everything else written to file descriptors 1 and 2 to ``log_file`` (every record too).

    Parameters
    ----------
    log_file : pathlib.Path
        The file (replaced) that receives Airflow's log lines, warnings and whatever C libraries
        print; subprocesses started in the block write there too.

    Yields
    ------
    TextIO
        The console, for the caller's own lines.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    console = open(saved[0], "w", encoding="utf-8", buffering=1, closefd=False)  # noqa: SIM115
    # lazy: the project's modules are importable once the demo runs (an editable install or ROOT)
    from tasks.tracking import FirstRunLinks

    handler = logging.StreamHandler(console)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(FirstRunLinks())
    loggers = [logging.getLogger(name) for name in PIPELINE_LOGGERS]
    levels = [lg.level for lg in loggers]
    with open(log_file, "w", encoding="utf-8") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        for lg in loggers:
            lg.addHandler(handler)
            lg.setLevel(logging.INFO)
        try:
            yield console
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for lg, level in zip(loggers, levels, strict=True):
                lg.removeHandler(handler)
                lg.setLevel(level)
            console.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _say(console: TextIO, line: str = "") -> None:
    print(line, file=console, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Migrate, run the DAG once with the demo parameters, print where everything is."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conf", help="JSON object of DAG parameters overriding the demo's")
    args = parser.parse_args(argv)
    conf = {**DEMO_PARAMS, **(json.loads(args.conf) if args.conf else {})}
    _environment()
    print(f"airflow: its own log goes to {AIRFLOW_LOG}", flush=True)
    with route_logs(AIRFLOW_LOG) as console:
        state = _run_dag(conf, console)
    print(f"airflow log: {AIRFLOW_LOG}")
    return 0 if state.endswith("success") else 1


def _run_dag(conf: dict[str, object], console: TextIO) -> str:
    """Migrate the metadata database, create the gpu pool, run the DAG, print where the results
    are (on ``console``); returns the DAG run's state."""
    start = time.perf_counter()
    airflow = [sys.executable, "-m", "airflow"]
    _say(console, "airflow: migrating the metadata database (SQLite) ...")
    subprocess.run([*airflow, "db", "migrate"], check=True, env=os.environ, stdout=subprocess.DEVNULL)
    subprocess.run([*airflow, "pools", "set", "gpu", "1", "GPU workers: one placement job per GPU node"],
                   check=True, env=os.environ, stdout=subprocess.DEVNULL)
    sys.path.insert(0, str(ROOT))
    from airflow.dag_processing.dagbag import BundleDagBag

    bag = BundleDagBag(dag_folder=str(ROOT / "dags"), bundle_path=ROOT / "dags")
    if bag.import_errors:
        for path, error in bag.import_errors.items():
            _say(console, f"{path}: {error}")
        return "import errors"
    dag = bag.get_dag("celeritas_placement")
    _say(console, f"airflow: running dag {dag.dag_id} with {json.dumps(conf)}")
    dag_run = dag.test(run_conf=conf)
    state = str(getattr(dag_run, "state", "unknown"))
    _say(console)
    _say(console, f"DAG run {dag_run.run_id}: {state} in {time.perf_counter() - start:.0f} s")
    _summary(console)
    return state


def _summary(console: TextIO) -> None:
    """The published decision, where the artifacts and runs are, and how to browse them."""
    from tasks import tracking

    published = sorted((ROOT / "build" / "runs").glob("*/*/publish.json"), key=lambda p: p.stat().st_mtime)
    if published:
        decision = json.loads(published[-1].read_text())
        _say(console, f"best placer: {decision['placer']}, {decision['step_time_s'] * 1e3:.3f} ms per step "
                      f"measured (median); {decision['decision']}: {decision['reason']}")
        _say(console, f"champion:    version {decision['champion_version']} of configuration "
                      f"{decision['config_key']}")
    for line in (f"artifacts:   {ROOT / 'build' / 'runs'}",
                 f"MLflow:      {tracking.tracking_uri()}",
                 "browse:      make ui   (the Airflow UI with the celeritas_placement and celeritas_fleet "
                 "DAGs,",
                 "             and the MLflow UI, on 127.0.0.1; it prints both URLs; Ctrl-C stops both)",
                 "compare runs: .venv/bin/celeritas runs compare --model tensor_holography",
                 "production:   .venv/bin/celeritas production show --model tensor_holography",
                 "decisions:    .venv/bin/celeritas production history --model tensor_holography"):
        _say(console, line)


if __name__ == "__main__":
    sys.exit(main())
