"""A real ``mlflow server`` for tests: ``with mlflow_server(tmp_path) as url: ...``.

The server runs from this interpreter's environment (``sys.executable -m mlflow server``), bound
to 127.0.0.1 on a free port, with a SQLite backend store and proxied artifacts
(``--serve-artifacts --artifacts-destination``) under the given folder. One uvicorn worker and
no job runner (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``, otherwise it forks huey consumers
that can outlive the server) keep the start to a few seconds. It runs in its own process group
so stopping it takes uvicorn's worker along; its output goes to ``<folder>/server.log``, quoted
in the error when it does not start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

START_TIMEOUT_S = 60.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, SIGKILL it if still there after 15 s."""
    if proc.poll() is not None:
        return
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


@contextmanager
def mlflow_server(folder: Path, *, timeout_s: float = START_TIMEOUT_S) -> Iterator[str]:
    """Start ``mlflow server`` on 127.0.0.1 with its store under ``folder``; yield its URL; stop it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", "--backend-store-uri", f"sqlite:///{folder.resolve() / 'db.sqlite'}",
           "--serve-artifacts", "--artifacts-destination", str(folder.resolve() / "artifacts")]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    log_path = folder / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=folder, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                why = (f"exited with {proc.returncode}" if proc.poll() is not None
                       else f"no answer in {timeout_s} s")
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"mlflow server on {url} {why}; log {log_path}:\n{tail}")
            time.sleep(0.2)
        yield url
    finally:
        _stop(proc)
