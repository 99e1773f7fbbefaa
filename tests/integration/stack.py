"""A real distributed deployment on this machine, for the integration tests.

PostgreSQL and Redis from Debian's packages, an MLflow server on PostgreSQL, an S3 endpoint (moto's
server) behind a fault-injecting proxy (:mod:`tests.faulty_proxy`, threads of the test
process), and Airflow with the CeleryExecutor: scheduler, DAG processor, API server and two Celery
workers, one on the default queue and one on the ``gpu`` queue (with the hostnames
``default-worker`` and ``gpu-worker`` in the task instances, through ``[core] hostname_callable``).
Everything listens on 127.0.0.1 on free ports, keeps its files and logs under
``build/integration/``, runs in its own process group and carries the marker ``CELERITAS_IT_RUN``
in its environment; :meth:`Stack.stop` stops every process it started by PID (SIGTERM, then
SIGKILL) and :func:`leftovers` finds any that survived.

Tasks are retried as in production (2 retries), 5 s apart rather than 30 s, and a task whose worker
died is failed (then retried) after 30 s without a heartbeat rather than 300 s: the fault tests
(``test_faults.py``) kill workers and servers with :meth:`Stack.kill` and start them again.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faulty_proxy import FaultyProxy
from tests.mlflow_server import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
GRACE_S = 30.0
START_S = 240.0
#: The bucket and prefix S3 run directories may use (``CELERITAS_RUNS_S3_PREFIX``).
S3_BUCKET = "celeritas-it"
S3_RUNS_PREFIX = f"s3://{S3_BUCKET}/runs"


def postgres_bin() -> Path | None:
    """The newest PostgreSQL server's bin folder from Debian's packages, or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else None


def missing_system_packages() -> list[str]:
    """The Debian packages the stack needs that this machine lacks."""
    missing = [] if postgres_bin() else ["postgresql"]
    if not shutil.which("redis-server"):
        missing.append("redis-server")
    return missing


def leftovers(marker: str) -> list[int]:
    """PIDs of processes whose environment holds ``CELERITAS_IT_RUN=<marker>``."""
    needle = f"CELERITAS_IT_RUN={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0") and _alive(entry):
                    found.append(int(entry.name))
    return found


def in_sessions(sessions: set[int]) -> list[int]:
    """The PIDs of the live processes in any of ``sessions`` (by session id, from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) in sessions and fields[0] != "Z":
                    found.append(int(entry.name))
    return found


def _alive(entry: Path) -> bool:
    """Whether the process at ``/proc/PID`` runs (not a zombie waiting to be reaped)."""
    try:
        return (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@dataclass
class Stack:
    """The running deployment: its URLs, credentials, environment and processes."""

    folder: Path
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    airflow_url: str = ""
    mlflow_url: str = ""
    password: str = ""
    pg_port: int = 0
    pg_data: Path | None = None
    #: The session of every process started (each starts one): what they start stays in it, even
    #: an Airflow task process, which moves to a process group of its own and hides its environment
    sessions: set[int] = field(default_factory=set)
    s3_proxy: FaultyProxy | None = None
    worker_env: dict[str, dict[str, str]] = field(default_factory=dict)

    # ---------------------------------------------------------------- processes
    def start(self, name: str, command: list[str], *, env: dict[str, str] | None = None,
              user: str | None = None) -> subprocess.Popen[bytes]:
        """Start ``command`` in its own process group, output to ``logs/NAME.log``."""
        if user is not None and os.geteuid() == 0:
            command = ["runuser", "-u", user, "--", *command]
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(command, env={**(env or self.env), "CELERITAS_IT_RUN": self.marker},
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.folder, start_new_session=True)
        self.procs[name] = proc
        self.sessions.add(proc.pid)
        return proc

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.folder / "logs" / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def wait_for(self, what: str, ready, name: str, timeout_s: float = START_S) -> None:
        """Wait until ``ready()`` is true; fail with the log of process ``name`` otherwise."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            proc = self.procs.get(name)
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up; log of {name}:\n{self.log_tail(name)}")
            time.sleep(0.5)

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to process ``name`` and every process in its session (what it started: an
        Airflow task process, in a process group of its own, included); wait until they are gone."""
        proc = self.procs[name]
        doomed = {proc.pid, *in_sessions({proc.pid})}
        for pid in doomed:
            with suppress(ProcessLookupError):
                os.kill(pid, sig)
        proc.wait(timeout=GRACE_S)
        deadline = time.monotonic() + GRACE_S
        while [pid for pid in doomed if _alive(Path(f"/proc/{pid}"))] and time.monotonic() < deadline:
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every process started, newest first: SIGTERM its group, SIGKILL after the grace."""
        if self.s3_proxy is not None:
            self.s3_proxy.close()
        for name, proc in reversed(list(self.procs.items())):
            if proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGINT if name == "postgres" else signal.SIGTERM)
                try:
                    proc.wait(timeout=GRACE_S)
                except subprocess.TimeoutExpired:
                    with suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            with suppress(ProcessLookupError):  # anything the group left behind
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in in_sessions(self.sessions):  # what left its group (an Airflow task process)
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.pg_data is not None:  # the database's files, outside the build folder
            shutil.rmtree(self.pg_data, ignore_errors=True)

    # ---------------------------------------------------------------- services
    def start_postgres(self) -> int:
        """A fresh PostgreSQL cluster on 127.0.0.1 with databases ``airflow`` and ``mlflow``."""
        bin_dir = postgres_bin()
        assert bin_dir is not None, "PostgreSQL is not installed (tests/integration/system_packages.sh)"
        data = Path(f"/tmp/celeritas-it-pg-{self.marker[:8]}")
        data.mkdir(mode=0o700)
        self.pg_data = data
        if os.geteuid() == 0:
            shutil.chown(data, "postgres", "postgres")
        run_as = "postgres" if os.geteuid() == 0 else None
        initdb = [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8"]
        if run_as:
            initdb = ["runuser", "-u", run_as, "--", *initdb]
        subprocess.run(initdb, check=True, capture_output=True, timeout=120)
        port = free_port()
        self.start("postgres", [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(data),
                                "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"], user=run_as)
        psql = ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-v", "ON_ERROR_STOP=1"]

        def ready() -> bool:
            return subprocess.run([*psql, "-c", "select 1"], capture_output=True).returncode == 0

        self.wait_for("PostgreSQL", ready, "postgres", 60)
        for db in ("airflow", "mlflow"):
            subprocess.run([*psql, "-c", f"create database {db}"], check=True, capture_output=True)
        return port

    def start_redis(self) -> int:
        port = free_port()
        self.start("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--daemonize", "no"])
        self.wait_for("Redis", lambda: _answers_tcp(port), "redis", 30)
        return port

    def start_mlflow(self, pg_port: int, port: int | None = None) -> None:
        """The MLflow server on PostgreSQL (on ``port``: again where it was, after :meth:`kill`)."""
        self.pg_port = pg_port
        port = port or free_port()
        self.mlflow_url = f"http://127.0.0.1:{port}"
        env = {**self.env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        env.pop("MLFLOW_TRACKING_URI", None)
        self.start("mlflow", [str(VENV_BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
                              "--workers", "1",
                              "--backend-store-uri", f"postgresql+psycopg2://postgres@127.0.0.1:{pg_port}/mlflow",
                              "--serve-artifacts", "--artifacts-destination",
                              str(self.folder / "mlflow-artifacts")], env=env)
        self.wait_for("MLflow", lambda: _answers_http(f"{self.mlflow_url}/health"), "mlflow")

    def airflow_environment(self, pg_port: int, redis_port: int, api_port: int) -> dict[str, str]:
        db = f"postgresql+psycopg2://postgres@127.0.0.1:{pg_port}/airflow"
        self.airflow_url = f"http://127.0.0.1:{api_port}"
        home = self.folder / "airflow"
        home.mkdir(parents=True, exist_ok=True)
        return {
            **self.env, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db,
            "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql+psycopg2://postgres@127.0.0.1:{pg_port}/airflow",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.airflow_url}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__BASE_URL": self.airflow_url,
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(32),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "MLFLOW_TRACKING_URI": self.mlflow_url, "CELERITAS_MLFLOW_UI_URL": self.mlflow_url,
            "CELERITAS_HOME": str(self.folder / "home"), "CELERITAS_RETRIES": "2",
            "CELERITAS_RETRY_DELAY_SECONDS": "5",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_SEC": "5",
        }

    def start_airflow(self, pg_port: int, redis_port: int) -> None:
        api_port = free_port()
        env = self.airflow_environment(pg_port, redis_port, api_port)
        airflow = str(VENV_BIN / "airflow")
        for command in (["db", "migrate"], ["pools", "set", "gpu", "1", "Celeritas GPU nodes"]):
            done = subprocess.run([airflow, *command], env=env, capture_output=True, text=True, timeout=600)
            output = done.stdout[-2000:] + done.stderr[-2000:]
            assert done.returncode == 0, f"airflow {' '.join(command)}:\n{output}"
        self.env = env
        self.start("api-server", [airflow, "api-server", "--host", "127.0.0.1", "--port", str(api_port),
                                  "--workers", "1"])
        self.start("scheduler", [airflow, "scheduler"])
        self.start("dag-processor", [airflow, "dag-processor"])
        python_path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        for queue in ("default", "gpu"):
            self.worker_env[queue] = {
                **env, "CELERITAS_IT_HOSTNAME": f"{queue}-worker", "PYTHONPATH": python_path,
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tests.integration.hostnames.from_environment"}
            self.start_worker(queue)
        health = f"{self.airflow_url}/api/v2/monitor/health"
        self.wait_for("the Airflow API server", lambda: _answers_http(health), "api-server")
        self.password = _password(Path(env["AIRFLOW_HOME"]))

    def start_worker(self, queue: str, **extra_env: str) -> None:
        """The Celery worker of ``queue`` (``default`` or ``gpu``), one task at a time (again after
        :meth:`kill`; ``extra_env`` added to its environment)."""
        # no log server: Airflow binds it to every interface (no host setting); the workers
        # write their task logs under this machine's AIRFLOW_HOME, where the API server reads them
        self.start(f"worker-{queue}", [str(VENV_BIN / "airflow"), "celery", "worker", "--queues", queue,
                                       "--concurrency", "1", "--celery-hostname", f"{queue}-worker@%h",
                                       "--without-gossip", "--without-mingle", "--skip-serve-logs"],
                   env={**self.worker_env[queue], **extra_env})

    def start_s3(self) -> None:
        """moto's S3 server, the bucket :data:`S3_BUCKET`, and the fault-injecting proxy in front of it
        that the tasks talk to (``CELERITAS_S3_ENDPOINT_URL``; run directories under
        :data:`S3_RUNS_PREFIX` allowed)."""
        port = free_port()
        self.start("s3", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)])
        self.wait_for("moto's S3 server", lambda: _answers_tcp(port), "s3", 60)
        self.s3_proxy = FaultyProxy(port)
        self.env.update({"CELERITAS_S3_ENDPOINT_URL": self.s3_proxy.url, "AWS_ACCESS_KEY_ID": "testing",
                         "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                         "CELERITAS_RUNS_S3_PREFIX": S3_RUNS_PREFIX})
        for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            self.env.pop(name, None)
        self.s3_client().create_bucket(Bucket=S3_BUCKET)

    def s3_client(self) -> Any:
        """A boto3 client on moto's server itself (past the proxy)."""
        import boto3

        endpoint = f"http://127.0.0.1:{self.s3_proxy.target_port}" if self.s3_proxy else None
        return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    # ---------------------------------------------------------------- the REST API
    def token(self) -> str:
        status, answer = self.call("POST", "/auth/token", {"username": "admin", "password": self.password},
                                   token=None)
        assert status in (200, 201), answer
        return str(answer["access_token"])

    def call(self, method: str, path: str, body: dict | None = None, *, token: str | None = "auto"
             ) -> tuple[int, dict]:
        """An API call's status and JSON answer (errors included)."""
        headers = {"Content-Type": "application/json"}
        if token == "auto":
            token = self.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(f"{self.airflow_url}{path}", method=method, headers=headers,
                                         data=json.dumps(body).encode() if body is not None else None)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


    # ---------------------------------------------------------------- DAG runs
    def wait_for_dag(self, dag_id: str, timeout_s: float = 180) -> None:
        """Wait until the DAG processor has parsed ``dag_id``; unpause it."""
        token = self.token()
        deadline = time.monotonic() + timeout_s
        while self.call("GET", f"/api/v2/dags/{dag_id}", token=token)[0] != 200:
            assert time.monotonic() < deadline, f"{dag_id} never parsed:\n{self.log_tail('dag-processor')}"
            time.sleep(2)
        status, answer = self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False}, token=token)
        assert status == 200, answer

    def wait_for_run(self, dag_id: str, run_id: str, timeout_s: float) -> str:
        """The run's final state (success or failed), waiting at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            status, run = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            assert status == 200, run
            if run["state"] in ("success", "failed"):
                return str(run["state"])
            assert time.monotonic() < deadline, (
                f"run {run_id} still {run['state']} after {timeout_s} s;\nscheduler:\n"
                f"{self.log_tail('scheduler')}\ngpu worker:\n{self.log_tail('worker-gpu')}")
            time.sleep(3)

    def runs(self, dag_id: str) -> list[dict]:
        status, answer = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")
        assert status == 200, answer
        return list(answer["dag_runs"])


def _password(home: Path) -> str:
    """The admin password the simple auth manager generated."""
    path = home / "simple_auth_manager_passwords.json.generated"
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    return str(json.loads(path.read_text())["admin"])


def _answers_http(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _answers_tcp(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start_stack(folder: Path) -> Stack:
    """Start the whole deployment under ``folder`` (stopping what started if any part fails)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    stack = Stack(folder=folder)
    stack.env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                 "TF_CPP_MIN_LOG_LEVEL": "2"}
    for name in ("MLFLOW_TRACKING_URI", "AIRFLOW_HOME", "AIRFLOW__CORE__EXECUTOR"):
        stack.env.pop(name, None)
    try:
        pg_port = stack.start_postgres()
        redis_port = stack.start_redis()
        stack.start_mlflow(pg_port)
        stack.start_s3()
        stack.start_airflow(pg_port, redis_port)
    except BaseException:
        stack.stop()
        raise
    return stack
