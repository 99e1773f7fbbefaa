"""Start the Airflow UI and the MLflow UI on this machine for the project (``make ui``); Ctrl-C stops both.

Airflow runs as ``airflow standalone`` with the project-local ``AIRFLOW_HOME`` that ``make demo``
uses (``build/airflow``, SQLite), the DAGs folder ``dags/``, examples off, the venv's tools on
``PATH`` (standalone starts its scheduler, DAG processor, API server and triggerer as ``airflow``
subcommands) and the ``gpu`` pool created, its API server on 127.0.0.1. Its scheduler and
triggerer run without their log servers: Airflow 3.3 binds those to every interface and has no
setting for their host (only ``[logging] worker_log_server_port`` and ``trigger_log_server_port``),
and on one machine the API server reads task logs from the log folder. MLflow's UI serves the
tracking store the pipeline logs to (``MLFLOW_TRACKING_URI``, default ``build/mlflow``), on
127.0.0.1 too. Each runs in its own process group; on Ctrl-C (or SIGTERM) both groups get SIGTERM,
then SIGKILL after a grace period, so nothing is left running.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
GRACE_S = 20.0


def environment(airflow_port: int, mlflow_port: int = 5000) -> dict[str, str]:
    """The environment of both UIs: project-local Airflow, the venv first on PATH, and the MLflow
    UI's address for the run links the tasks log."""
    home = ROOT / "build" / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    return {**os.environ,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(airflow_port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{airflow_port}",
            "CELERITAS_HOME": os.environ.get("CELERITAS_HOME", str(ROOT)), "TF_CPP_MIN_LOG_LEVEL": "2",
            "CELERITAS_MLFLOW_UI_URL": f"http://127.0.0.1:{mlflow_port}"}


#: ``airflow standalone`` starts its components as ``airflow SUBCOMMAND`` from ``PATH``; this
#: ``airflow`` (first on its ``PATH``) adds ``--skip-serve-logs`` to the scheduler and the triggerer,
#: whose log servers would listen on every interface (``airflow.utils.serve_logs`` binds ``""``).
_AIRFLOW_WRAPPER = """#!/bin/sh
# Written by examples/run_ui.py: `airflow standalone` without log servers on every interface.
case "$1" in
  scheduler|triggerer) exec {airflow} "$@" --skip-serve-logs ;;
esac
exec {airflow} "$@"
"""


def loopback_only_airflow(folder: Path, env: dict[str, str]) -> dict[str, str]:
    """Write the ``airflow`` of :data:`_AIRFLOW_WRAPPER` into ``folder``.

    Parameters
    ----------
    folder : pathlib.Path
        Where the wrapper goes (created if missing).
    env : dict of str to str
        The environment ``airflow standalone`` would run in.

    Returns
    -------
    dict of str to str
        ``env`` with ``folder`` first on ``PATH``, before the venv's ``airflow``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "airflow"
    wrapper.write_text(_AIRFLOW_WRAPPER.format(airflow=shlex.quote(str(VENV_BIN / "airflow"))))
    wrapper.chmod(0o755)
    return {**env, "PATH": f"{folder}{os.pathsep}{env.get('PATH', '')}"}


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status < 500
    except (urllib.error.URLError, OSError):
        return False


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every child's process group; SIGKILL what is still there after the grace period."""
    for proc in procs:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for proc in procs:
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    for proc in procs:  # the group may hold workers whose leader has exited
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def _prepare_airflow(env: dict[str, str]) -> None:
    """Migrate the metadata database and create the ``gpu`` pool (tasks on it wait forever without)."""
    airflow = [str(VENV_BIN / "airflow")]
    subprocess.run([*airflow, "db", "migrate"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run([*airflow, "pools", "set", "gpu", "1", "GPU workers: one placement job per GPU node"],
                   check=True, env=env, stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    """Start both UIs, print where they are, wait for Ctrl-C, stop every child."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--airflow-port", type=int, default=8080)
    parser.add_argument("--mlflow-port", type=int, default=5000)
    parser.add_argument("--timeout", type=float, default=0, help="stop after this many seconds (0: never)")
    args = parser.parse_args(argv)
    os.environ.setdefault("CELERITAS_HOME", str(ROOT))
    env = environment(args.airflow_port, args.mlflow_port)
    sys.path.insert(0, str(ROOT))
    from tasks import tracking

    store = tracking.tracking_uri()
    print("airflow: migrating the metadata database and creating the gpu pool ...", flush=True)
    _prepare_airflow(env)
    logs = ROOT / "build" / "ui"
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    stopping = False

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    airflow_env = loopback_only_airflow(logs / "bin", env)
    try:
        for name, command, command_env in (
                ("airflow", [str(VENV_BIN / "airflow"), "standalone"], airflow_env),
                ("mlflow", [str(VENV_BIN / "mlflow"), "ui", "--backend-store-uri", store,
                            "--host", "127.0.0.1", "--port", str(args.mlflow_port)], env)):
            with open(logs / f"{name}.log", "ab") as log:
                procs.append(subprocess.Popen(command, env=command_env, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True, cwd=ROOT))
        _report(args, env, logs, procs, lambda: stopping)
    finally:
        print("stopping Airflow and MLflow ...", flush=True)
        _stop(procs)
        print("stopped", flush=True)
    return 0


def _report(args: argparse.Namespace, env: dict[str, str], logs: Path,
            procs: list[subprocess.Popen[bytes]], stopping: Callable[[], bool]) -> None:
    """Wait until both UIs answer, print their URLs and the admin password file, then wait for the
    end (Ctrl-C, SIGTERM, ``--timeout``, or a UI that exits)."""
    from celeritas_core.readwrite.redact import redact
    from tasks.tracking import TRAINING_VIEW

    airflow_url = f"http://127.0.0.1:{args.airflow_port}"
    mlflow_url = f"http://127.0.0.1:{args.mlflow_port}"
    start, shown = time.monotonic(), False
    passwords = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
    while not stopping():
        if any(p.poll() is not None for p in procs):
            print(f"a UI exited; its log is under {logs}", file=sys.stderr, flush=True)
            return
        if not shown and _up(f"{airflow_url}/api/v2/monitor/health") and _up(f"{mlflow_url}/health"):
            shown = True
            print(f"Airflow UI: {airflow_url}  (user admin; password in {passwords})")
            store = redact(env.get("MLFLOW_TRACKING_URI") or "build/mlflow")
            print(f"MLflow UI:  {mlflow_url}/#/experiments?{TRAINING_VIEW}  (tracking store {store})")
            print(f"logs:       {logs}/airflow.log, {logs}/mlflow.log")
            print("Ctrl-C stops both.", flush=True)
        if args.timeout and time.monotonic() - start > args.timeout:
            return
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
