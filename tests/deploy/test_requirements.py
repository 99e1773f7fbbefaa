"""docker/requirements-*.txt: exact pins, consistent with constraints.txt, covering the package's
dependencies; TensorFlow only in the workers, the CUDA build only in the GPU worker. (Whether
each set resolves is checked against the package index by tests/integration/test_docker_requirements.py.)"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.deploy.deployfiles import DOCKER, REQUIREMENTS, ROOT, constraint_pins, normalize, pins

PIPELINE = {"apache-airflow-providers-celery", "celery", "redis", "psycopg2-binary"}


def _project_dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [*project["dependencies"], *project["optional-dependencies"]["pipeline"]]
    return {normalize(n.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()) for n in names}


@pytest.mark.parametrize("image", sorted(REQUIREMENTS))
def test_pins_agree_with_constraints(image: str) -> None:
    constraints = constraint_pins()
    found = pins(REQUIREMENTS[image])
    differ = {n: (v, constraints[n]) for n, (v, _) in found.items()
              if n in constraints and v != constraints[n]}
    assert not differ, f"{image}: pins differ from constraints.txt (image, constraints): {differ}"


@pytest.mark.parametrize("image", sorted(REQUIREMENTS))
def test_each_set_has_the_package_dependencies_and_the_celery_postgres_stack(image: str) -> None:
    found = set(pins(REQUIREMENTS[image]))
    missing = (_project_dependencies() | PIPELINE) - found
    assert not missing, f"{image}: missing {sorted(missing)}"
    assert pins(REQUIREMENTS[image])["apache-airflow"][0] == constraint_pins()["apache-airflow"]


def test_tensorflow_only_in_the_workers_and_cuda_only_on_the_gpu() -> None:
    control, cpu, gpu = (pins(REQUIREMENTS[n]) for n in ("control-plane", "cpu-worker", "gpu-worker"))
    assert not [n for n in control if n.startswith(("tensorflow", "nvidia-"))], control
    tf_version = constraint_pins()["tensorflow-cpu"]
    assert cpu["tensorflow-cpu"] == (tf_version, "")
    assert "tensorflow" not in cpu and not [n for n in cpu if n.startswith("nvidia-")]
    assert gpu["tensorflow"] == (tf_version, "and-cuda")
    assert "tensorflow-cpu" not in gpu
    assert [n for n in gpu if n.startswith("nvidia-cudnn")], "the CUDA libraries are pinned too"


def _constraints_gpu(source: Path, target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(DOCKER / "constraints-gpu.sh"), str(source), str(target)],
                          capture_output=True, text=True, timeout=30)


def test_gpu_constraints_are_constraints_less_tensorflow_cpu(tmp_path: Path) -> None:
    target = tmp_path / "constraints-gpu.txt"
    done = _constraints_gpu(ROOT / "constraints.txt", target)
    assert done.returncode == 0, done.stderr
    original = (ROOT / "constraints.txt").read_text().splitlines()
    expected = [line for line in original if not line.startswith("tensorflow-cpu==")]
    assert target.read_text().splitlines() == expected
    assert len(original) - len(target.read_text().splitlines()) == 1
    # a constraints file without the pin is an error, not a silent copy
    plain = tmp_path / "plain.txt"
    plain.write_text("numpy==2.0.0\n")
    refused = _constraints_gpu(plain, tmp_path / "out.txt")
    assert refused.returncode != 0 and "no tensorflow-cpu pin" in refused.stderr
