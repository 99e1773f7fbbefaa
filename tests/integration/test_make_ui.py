"""`make ui` as a new user runs it: both UIs answer on 127.0.0.1, no process it started listens on
another address (Airflow's log servers would listen on every interface), the DAGs folder is dags/
with no example DAGs and no import errors, the gpu pool exists, the placement DAG's form parameters
are served, and Ctrl-C stops every process it started."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _processes_with(marker: str) -> list[int]:
    """PIDs whose environment holds ``marker`` (e.g. ``AIRFLOW__API__PORT=8123``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in environ:
            found.append(int(entry.name))
    return found


def _descendants(root: int) -> set[int]:
    """``root`` and every process below it (setproctitle overwrites a process's environment, so
    Airflow's API server and log servers do not show the marker of :func:`_processes_with`)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if entry.name.isdigit():  # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process ``pid`` holds open (none if it is gone)."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:
        pass
    return inodes


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} writes it: 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    return ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))


def _listening(pids: set[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that one of ``pids`` holds."""
    inodes = set().union(*(_socket_inodes(pid) for pid in pids)) if pids else set()
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[9]) in inodes:  # 0A: LISTEN
                host, port = fields[1].split(":")
                found.add((str(_address(host)), int(port, 16)))
    return found


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def _get(url: str, token: str | None = None) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _send(method: str, url: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    """An API call's status and JSON answer (errors included)."""
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _token(base: str) -> str:
    passwords = ROOT / "build" / "airflow" / "simple_auth_manager_passwords.json.generated"
    password = json.loads(passwords.read_text())["admin"]
    request = urllib.request.Request(f"{base}/auth/token", method="POST",
                                     data=json.dumps({"username": "admin", "password": password}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["access_token"]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to find every process make ui started")
def test_make_ui_serves_both_uis_with_our_dags_and_stops_everything_on_ctrl_c() -> None:
    airflow_port, mlflow_port = _free_port(), _free_port()
    marker = f"AIRFLOW__API__PORT={airflow_port}"
    ui = subprocess.Popen([sys.executable, "examples/run_ui.py", "--airflow-port", str(airflow_port),
                           "--mlflow-port", str(mlflow_port), "--timeout", str(STARTUP_S + 120)],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    printed: list[str] = []
    try:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            line = ui.stdout.readline()
            if not line:
                break
            printed.append(line)
            if line.startswith("Ctrl-C stops both"):
                break
        text = "".join(printed)
        assert "Ctrl-C stops both" in text, text
        base = f"http://127.0.0.1:{airflow_port}"
        mlflow_link = f"MLflow UI:  http://127.0.0.1:{mlflow_port}/#/experiments?workflowType=machine_learning"
        assert f"Airflow UI: {base}" in text and mlflow_link in text, text
        token = _token(base)
        dags = {d["dag_id"] for d in _get(f"{base}/api/v2/dags?limit=100", token)["dags"]}
        ours = {"celeritas_placement", "celeritas_fleet", "celeritas_train_on_champion"}
        assert dags == ours, dags  # dags/ only, no examples
        assert _get(f"{base}/api/v2/importErrors", token)["total_entries"] == 0
        assert _get(f"{base}/api/v2/pools/gpu", token)["slots"] >= 1
        params = _get(f"{base}/api/v2/dags/celeritas_placement/details", token)["params"]
        assert "null" in params["run_dir"]["schema"]["type"]  # the form leaves it optional
        assert params["placers"]["schema"]["examples"]  # a multi-select
        assert urllib.request.urlopen(f"http://127.0.0.1:{mlflow_port}/health", timeout=10).status == 200
        trigger = f"{base}/api/v2/dags/celeritas_placement/dagRuns"
        runs_before = _get(trigger, token)["total_entries"]
        assert _send("DELETE", f"{base}/api/v2/pools/gpu", token)[0] == 204
        try:  # a deployment without the gpu pool: refused at once, not "scheduled" forever
            status, answer = _send("POST", trigger, token, {"logical_date": None, "conf": {}})
            assert status == 400 and answer["detail"].startswith("Airflow pool 'gpu' does not exist"), answer
        finally:
            _send("POST", f"{base}/api/v2/pools", token, {"name": "gpu", "slots": 1})
        assert _get(trigger, token)["total_entries"] == runs_before  # and nothing was created
        assert _processes_with(marker), "no process carries the UI's environment"
        deadline = time.monotonic() + 120  # the scheduler and the triggerer start their log servers first
        while time.monotonic() < deadline:
            health = _get(f"{base}/api/v2/monitor/health")
            if all((health.get(c) or {}).get("status") == "healthy" for c in ("scheduler", "triggerer")):
                break
            time.sleep(1)
        assert health["scheduler"]["status"] == health["triggerer"]["status"] == "healthy", health
        for _ in range(10):
            listening = _listening(_descendants(ui.pid) | set(_processes_with(marker)))
            assert {("127.0.0.1", airflow_port), ("127.0.0.1", mlflow_port)} <= listening, listening
            exposed = sorted(a for a in listening if not _loopback(a[0]))
            assert exposed == [], f"make ui listens beyond 127.0.0.1: {exposed}"
            time.sleep(1)
    finally:
        ui.send_signal(signal.SIGINT)
        try:
            rest = ui.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            ui.kill()
            rest = ui.communicate()[0]
    assert "stopped" in rest, rest
    deadline = time.monotonic() + 10
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _processes_with(marker) == [], "processes left running after Ctrl-C"
