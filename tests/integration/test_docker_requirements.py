"""Each image's requirement set (docker/requirements-*.txt) resolves against the package index with
the constraints its Dockerfile installs it with, to the versions the project pins, and leaves no
package unpinned. Needs the package index (`make test-integration`); a few minutes, no Docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.deployfiles import DOCKER, REQUIREMENTS, ROOT, constraint_pins, normalize, pins

TIMEOUT_S = 900


def _constraints(image: str, tmp_path: Path) -> Path:
    """What the image's Dockerfile passes to `pip install -c`."""
    if image != "gpu-worker":
        return ROOT / "constraints.txt"
    target = tmp_path / "constraints-gpu.txt"
    subprocess.run(["sh", str(DOCKER / "constraints-gpu.sh"), str(ROOT / "constraints.txt"), str(target)],
                   check=True, timeout=30)
    return target


@pytest.mark.parametrize("image", sorted(REQUIREMENTS))
def test_requirement_set_resolves_to_the_pinned_versions(image: str, tmp_path: Path) -> None:
    constraints = _constraints(image, tmp_path)
    report = tmp_path / "report.json"
    # only the image's constraints: a PIP_CONSTRAINT from `make` would add tensorflow-cpu's pin
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--disable-pip-version-check", "--report", str(report),
         "-r", str(REQUIREMENTS[image]), "-c", str(constraints)],
        capture_output=True, text=True, timeout=TIMEOUT_S, env={**os.environ, "PIP_CONSTRAINT": ""})
    assert done.returncode == 0, done.stderr[-4000:]
    resolved = {normalize(item["metadata"]["name"]): item["metadata"]["version"]
                for item in json.loads(report.read_text())["install"]}
    expected = constraint_pins()
    for name in ("apache-airflow", "mlflow", "boto3"):
        assert resolved[name] == expected[name], (image, name, resolved.get(name))
    assert "apache-airflow-providers-celery" in resolved and "psycopg2-binary" in resolved
    tf = expected["tensorflow-cpu"]
    if image == "control-plane":
        assert not [n for n in resolved if n.startswith(("tensorflow", "nvidia-"))], image
    elif image == "cpu-worker":
        assert resolved["tensorflow-cpu"] == tf and "tensorflow" not in resolved
    else:
        assert resolved["tensorflow"] == tf and "tensorflow-cpu" not in resolved
        assert any(n.startswith("nvidia-cudnn") for n in resolved), "the and-cuda extra brought no CUDA"
    # the build installs exactly what is pinned: nothing resolved is left to the resolver's choice
    pinned = {**constraint_pins(constraints), **{n: v for n, (v, _) in pins(REQUIREMENTS[image]).items()}}
    loose = {n: v for n, v in resolved.items() if pinned.get(n) != v}
    assert not loose, f"{image}: resolved but not pinned (add to docker/requirements-{image}.txt): {loose}"
