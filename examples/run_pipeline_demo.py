"""Run the Airflow placement DAG end to end, in-process, on a small model (``make demo``).

Uses a project-local ``AIRFLOW_HOME`` (``build/airflow``, SQLite metadata database), the local
MLflow store (``build/mlflow``, SQLite) and 4 logical CPU devices. It migrates the metadata
database, creates the ``gpu`` pool, runs ``dag.test()`` with a small configuration, then prints
where the results are and how to browse them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def main(argv: list[str] | None = None) -> int:
    """Migrate, run the DAG once with the demo parameters, print where everything is."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conf", help="JSON object of DAG parameters overriding the demo's")
    args = parser.parse_args(argv)
    conf = {**DEMO_PARAMS, **(json.loads(args.conf) if args.conf else {})}
    _environment()
    start = time.perf_counter()
    airflow = [sys.executable, "-m", "airflow"]
    print("airflow: migrating the metadata database (SQLite) ...", flush=True)
    subprocess.run([*airflow, "db", "migrate"], check=True, env=os.environ, stdout=subprocess.DEVNULL)
    subprocess.run([*airflow, "pools", "set", "gpu", "1", "GPU workers: one placement job per GPU node"],
                   check=True, env=os.environ, stdout=subprocess.DEVNULL)
    sys.path.insert(0, str(ROOT))
    from airflow.dag_processing.dagbag import BundleDagBag

    bag = BundleDagBag(dag_folder=str(ROOT / "dags"), bundle_path=ROOT / "dags")
    if bag.import_errors:
        for path, error in bag.import_errors.items():
            print(f"{path}: {error}", file=sys.stderr)
        return 1
    dag = bag.get_dag("celeritas_placement")
    print(f"airflow: running dag {dag.dag_id} with {json.dumps(conf)}", flush=True)
    dag_run = dag.test(run_conf=conf)
    state = str(getattr(dag_run, "state", "unknown"))
    from tasks import tracking

    print()
    print(f"DAG run {dag_run.run_id}: {state} in {time.perf_counter() - start:.0f} s")
    published = sorted((ROOT / "build" / "runs").glob("*/*/publish.json"), key=lambda p: p.stat().st_mtime)
    if published:
        decision = json.loads(published[-1].read_text())
        print(f"best placer: {decision['placer']}, {decision['step_time_s'] * 1e3:.3f} ms per step "
              f"measured (median); {decision['decision']}: {decision['reason']}")
        print(f"champion:    version {decision['champion_version']} of configuration "
              f"{decision['config_key']}")
    print(f"artifacts:   {ROOT / 'build' / 'runs'}")
    print(f"MLflow:      {tracking.tracking_uri()}")
    print("browse:      make ui   (the Airflow UI with the celeritas_placement and celeritas_fleet DAGs,")
    print("             and the MLflow UI, on 127.0.0.1; it prints both URLs; Ctrl-C stops both)")
    print("compare runs: .venv/bin/celeritas runs compare --model tensor_holography")
    print("production:   .venv/bin/celeritas production show --model tensor_holography")
    print("decisions:    .venv/bin/celeritas production history --model tensor_holography")
    return 0 if state.endswith("success") else 1


if __name__ == "__main__":
    sys.exit(main())
