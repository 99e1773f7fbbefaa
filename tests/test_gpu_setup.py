"""The GPU path's set-up, checked without a GPU: CPU sessions never create GPU devices, a GPU
allocator other than BFC is refused before TensorFlow looks for GPUs, TF32 is reported as
TensorFlow has it, and ``make setup TF_VARIANT=gpu`` installs the CUDA build of the pinned
TensorFlow (and nothing installs ``tensorflow-cpu`` over it later)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from celeritas_core.errors import CeleritasInputError

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")


def _pinned_tensorflow() -> str:
    """The TensorFlow version constraints.txt pins (as ``tensorflow-cpu``)."""
    [version] = re.findall(r"^tensorflow-cpu==(\S+)$", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    return version


# ---------------------------------------------------------------------------------------------
# Sessions and devices (TensorFlow)


@pytest.mark.tf
@pytest.mark.parametrize("devices", [1, 2, 4])
def test_a_cpu_session_creates_no_gpu_device(devices: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU path every session asks for zero GPUs explicitly: with a CUDA build of
    TensorFlow, leaving ``GPU`` out of ``device_count`` creates every GPU (and takes its memory)."""
    pytest.importorskip("tensorflow")
    from celeritas_tf import tf as tf_setup

    monkeypatch.setattr(tf_setup, "_LOGICAL_GPU_MIB", ())
    config = tf_setup.session_config(devices)
    assert "GPU" in config.device_count and config.device_count["GPU"] == 0
    assert config.device_count["CPU"] == devices
    assert not config.gpu_options.experimental.virtual_devices and not config.allow_soft_placement


@pytest.mark.tf
def test_a_cpu_session_runs_on_the_logical_cpus_it_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The zero-GPU config is one TensorFlow accepts: a session lists exactly its CPUs."""
    pytest.importorskip("tensorflow")
    from celeritas_tf import tf as tf_setup

    monkeypatch.setattr(tf_setup, "_LOGICAL_GPU_MIB", ())
    tf1 = tf_setup.tensorflow().compat.v1
    with tf1.Graph().as_default() as graph, tf1.Session(graph=graph, config=tf_setup.session_config(3)) as s:
        kinds = [d.device_type for d in s.list_devices()]
    assert kinds.count("CPU") == 3 and "GPU" not in kinds


# ---------------------------------------------------------------------------------------------
# The GPU allocator


@pytest.mark.tf
def test_the_cpu_path_takes_logical_devices_whatever_gpus_the_machine_has(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--devices 4`` on a machine with one GPU and no logical GPUs set up runs on 4 logical CPU
    devices: the machine's GPU count must not refuse it."""
    pytest.importorskip("tensorflow")
    from celeritas_tf import evaluation
    from celeritas_tf.tf import tensorflow

    tf = tensorflow()
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: ["/physical_device:GPU:0"] if kind == "GPU" else [])
    evaluation.check_devices(4)
    with pytest.raises(CeleritasInputError, match="at most"):
        evaluation.check_devices(evaluation.MAX_LOGICAL_DEVICES + 1)


@pytest.mark.tf
def test_a_dataset_is_read_in_a_session_that_creates_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The training consumer reads a ``tf.data.Dataset`` in a session of its own: with
    TensorFlow's default config that session would create every GPU and take its memory."""
    pytest.importorskip("tensorflow")
    import numpy as np

    from celeritas_tf import training
    from celeritas_tf.models import get_model
    from celeritas_tf.tf import tensorflow

    tf = tensorflow()
    configs = []
    real_session = tf.compat.v1.Session

    def session(*args: object, **kwargs: object) -> object:
        configs.append(kwargs.get("config"))
        return real_session(*args, **kwargs)

    monkeypatch.setattr(tf.compat.v1, "Session", session)
    model = get_model("mlp")
    features = np.zeros((4, 16), np.float32)
    labels = np.zeros((4,), np.int32)
    graph = tf.Graph()
    with graph.as_default():
        dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(2)
    batches = list(training._dataset_batches(dataset, model))
    assert len(batches) == 2
    assert configs and all(c is not None and dict(c.device_count).get("GPU") == 0 for c in configs)


@pytest.mark.parametrize("value", ["cuda_malloc_async", "cuda_malloc", "memory_guard", " async "])
def test_an_allocator_other_than_bfc_is_refused_in_one_line(value: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from celeritas_tf import tf as tf_setup

    monkeypatch.setenv("TF_GPU_ALLOCATOR", value)
    with pytest.raises(CeleritasInputError) as info:
        tf_setup.check_gpu_allocator()
    message = str(info.value)
    assert len(message.splitlines()) == 1
    assert "TF_GPU_ALLOCATOR" in message and repr(value) in message and "unset" in message


@pytest.mark.parametrize("value", [None, "", "bfc", "BFC"])
def test_the_bfc_allocator_is_accepted(value: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    from celeritas_tf import tf as tf_setup

    if value is None:
        monkeypatch.delenv("TF_GPU_ALLOCATOR", raising=False)
    else:
        monkeypatch.setenv("TF_GPU_ALLOCATOR", value)
    tf_setup.check_gpu_allocator()


def test_use_logical_gpus_refuses_the_allocator_before_looking_for_gpus(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal comes before TensorFlow is asked for GPUs (here it cannot be asked at all), so
    it holds on every machine, with a GPU or without."""
    from celeritas_tf import tf as tf_setup

    def no_tensorflow() -> None:
        raise AssertionError("TensorFlow was asked for its GPUs before the allocator was checked")

    monkeypatch.setattr(tf_setup, "tensorflow", no_tensorflow)
    monkeypatch.setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async")
    with pytest.raises(CeleritasInputError, match="TF_GPU_ALLOCATOR='cuda_malloc_async'"):
        tf_setup.use_logical_gpus([512, 512])
    assert tf_setup.logical_gpu_limits_mib() == ()


@pytest.mark.tf
def test_bench_gpu_refuses_the_allocator_in_one_line_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorflow")
    import sys

    sys.path.insert(0, str(ROOT / "bench"))  # bench/ is a folder of scripts, not a package
    import bench_gpu

    monkeypatch.setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async")
    out = tmp_path / "gpu.json"
    assert bench_gpu.main(["--models", "mlp", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert line.startswith("bench_gpu.py: error: TF_GPU_ALLOCATOR='cuda_malloc_async'") and "unset" in line
    assert captured.out == "" and not out.exists()


# ---------------------------------------------------------------------------------------------
# TF32


@pytest.mark.tf
def test_tf32_follows_tensorflow_and_nvidia_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`tf32_enabled` is TensorFlow's setting, turned off by ``NVIDIA_TF32_OVERRIDE=0``
    (which cuBLAS and cuDNN honour whatever TensorFlow says)."""
    pytest.importorskip("tensorflow")
    from celeritas_tf import tf as tf_setup

    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    experimental = tf_setup.tensorflow().config.experimental
    before = experimental.tensor_float_32_execution_enabled()
    try:
        for setting in (True, False):
            experimental.enable_tensor_float_32_execution(setting)
            assert tf_setup.tf32_enabled() is setting
        experimental.enable_tensor_float_32_execution(True)
        monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
        assert tf_setup.tf32_enabled() is False
    finally:
        experimental.enable_tensor_float_32_execution(before)


# ---------------------------------------------------------------------------------------------
# make setup: which TensorFlow build it installs


def _dry_setup(venv: Path, *variables: str) -> list[str]:
    """The commands ``make -n setup`` would run for a venv at ``venv`` (a fresh machine when it
    does not exist), TF_VARIANT only as ``variables`` give it."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_VARIANT", "MAKEFLAGS", "MFLAGS")}
    done = subprocess.run([MAKE or "make", "-n", "--no-print-directory", "-C", str(ROOT), "setup",
                           f"VENV={venv}", *variables], capture_output=True, text=True, env=env, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _installs(lines: list[str]) -> list[str]:
    return [line for line in lines if " -m pip install " in line]


def _extras(install: str) -> set[str]:
    [extras] = re.findall(r"-e '\.\[([^\]]*)\]'", install)
    return set(extras.split(","))


def _optional_dependencies() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _requires_tensorflow_cpu(extras: set[str]) -> bool:
    """Whether installing the project with ``extras`` brings ``tensorflow-cpu`` (following the
    project's extras that name the project itself)."""
    deps = _optional_dependencies()
    seen: set[str] = set()
    todo = list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in deps.get(extra, []):
            if re.match(r"^tensorflow-cpu\b", requirement):
                return True
            inner = re.match(r"^celeritas\[([^\]]*)\]", requirement)
            if inner:
                todo += inner.group(1).split(",")
    return False


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_setup_gpu_installs_the_cuda_build_of_the_pinned_version(tmp_path: Path) -> None:
    version = _pinned_tensorflow()
    lines = _dry_setup(tmp_path / "venv", "TF_VARIANT=gpu")
    [install] = _installs(lines)
    assert f"'tensorflow[and-cuda]=={version}'" in install
    assert "tensorflow-cpu" not in install and not _requires_tensorflow_cpu(_extras(install))
    # the CUDA libraries are pinned as the GPU image pins them
    assert "-c " in install and any("nvidia-" in line and "docker/requirements-gpu-worker.txt" in line
                                    for line in lines)
    # a CPU build already there is removed first (both builds install the package `tensorflow`)
    [uninstall] = [line for line in lines if " -m pip uninstall " in line]
    assert re.search(r"uninstall -q -y tensorflow-cpu;", uninstall)
    assert lines.index(uninstall) < lines.index(install)


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_setup_default_stays_the_cpu_build(tmp_path: Path) -> None:
    version = _pinned_tensorflow()
    lines = _dry_setup(tmp_path / "venv")
    [install] = _installs(lines)
    assert f"'tensorflow-cpu=={version}'" in install and "and-cuda" not in install
    assert not [line for line in lines if " -m pip uninstall " in line and "tensorflow-cpu" in line]
    # a hand-made `pip install -e '.[dev]'` still gets the CPU build, as before
    assert _requires_tensorflow_cpu({"dev"})
    precompile = f"{tmp_path / 'venv'}/bin/python -m celeritas_core.install.precompile"
    assert any(precompile in line for line in lines)


def _stamp(venv: Path, variant: str, *, stale: bool) -> None:
    """A venv whose install stamp records ``variant``: older than pyproject.toml when ``stale``."""
    venv.mkdir(parents=True, exist_ok=True)
    stamp = venv / ".installed-stamp"
    stamp.write_text(f"{variant}\n")
    sources = ("pyproject.toml", "constraints.txt", "docker/requirements-gpu-worker.txt")
    when = 0 if stale else max((ROOT / s).stat().st_mtime for s in sources) + 3600
    os.utime(stamp, (when, when))


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_the_variant_sticks_until_another_is_named(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # a GPU venv that a later pyproject.toml makes stale: plain `make setup` reinstalls the GPU build
    _stamp(venv, "gpu", stale=True)
    [install] = _installs(_dry_setup(venv))
    assert "tensorflow[and-cuda]" in install and "tensorflow-cpu" not in install
    # up to date: nothing reinstalls
    _stamp(venv, "gpu", stale=False)
    assert _installs(_dry_setup(venv)) == []
    assert _installs(_dry_setup(venv, "TF_VARIANT=gpu")) == []
    # naming the other variant reinstalls, though the stamp is newer than everything
    lines = _dry_setup(venv, "TF_VARIANT=cpu")
    [install] = _installs(lines)
    assert "'tensorflow-cpu==" in install
    [uninstall] = [line for line in lines if " -m pip uninstall " in line]
    assert re.search(r"uninstall -q -y tensorflow;", uninstall)


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_an_unknown_variant_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_VARIANT", "MAKEFLAGS", "MFLAGS")}
    done = subprocess.run([MAKE or "make", "-n", "-C", str(ROOT), "setup", f"VENV={tmp_path / 'venv'}",
                           "TF_VARIANT=cuda"], capture_output=True, text=True, env=env, timeout=60,
                          check=False)
    assert done.returncode != 0 and "TF_VARIANT" in done.stderr and "cuda" in done.stderr
