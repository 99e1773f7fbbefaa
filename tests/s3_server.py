"""A real S3 endpoint for tests: moto's server mode in a subprocess, bound to 127.0.0.1 only.

Usage (the caller sets the environment; this helper changes nothing global)::

    from tests.s3_server import moto_s3_server

    with moto_s3_server() as endpoint:          # e.g. "http://127.0.0.1:49731"
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        ...

The server is ``python -m moto.server -H 127.0.0.1 -p PORT`` run with the current interpreter
(works with moto 5.2.5 installed as ``moto[server]``), on a free port. Its state lives in the
process and is lost when it stops; any bucket name and fake credentials are accepted. Use
:func:`moto_s3_env` for the usual fake-credential environment.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (also handy as a closed port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _answers_http(port: int) -> bool:
    conn = http.client.HTTPConnection(HOST, port, timeout=1.0)  # direct: no proxy settings apply
    try:
        conn.request("GET", "/")
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


def _stop(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


@contextlib.contextmanager
def moto_s3_server(*, startup_timeout: float = 30.0, attempts: int = 3) -> Iterator[str]:
    """Run moto's S3 server on 127.0.0.1 for the block and yield its endpoint URL."""
    with tempfile.TemporaryFile() as log:
        for attempt in range(attempts):
            port = free_port()
            log.seek(0)
            log.truncate()
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + startup_timeout
                while proc.poll() is None and time.monotonic() < deadline:
                    if _answers_http(port):
                        break
                    time.sleep(0.05)
                else:
                    # exited (e.g. the port was taken meanwhile) or never answered
                    log.seek(0)
                    tail = log.read()[-2000:].decode("utf-8", "replace")
                    if attempt + 1 < attempts and proc.poll() is not None:
                        continue
                    raise RuntimeError(f"moto server on {HOST}:{port} did not start "
                                       f"(exit code {proc.poll()}): {tail}")
                yield f"http://{HOST}:{port}"
                return
            finally:
                _stop(proc)


def moto_s3_env(endpoint: str, region: str = "us-east-1") -> dict[str, str]:
    """Environment variables pointing boto3 at ``endpoint`` with fake credentials and no user config."""
    no_proxy = ",".join(x for x in (os.environ.get("NO_PROXY", ""), HOST, "localhost") if x)
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
    }


# Variables that would send boto3 elsewhere or to other credentials; unset them next to moto_s3_env().
AWS_ENV_TO_CLEAR = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL_S3", "CELERITAS_S3_ENDPOINT_URL",
                    "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE")
