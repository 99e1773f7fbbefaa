"""bench/bench_gpu.py with TensorFlow: without a GPU it says so in one line, writes nothing and exits
0; its CPU rehearsal runs the whole harness (each placement free and with its order enforced); and
the logical-GPU set-up it relies on (celeritas_tf.tf.use_logical_gpus) configures sessions and
devices as TensorFlow needs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from celeritas_core.errors import CeleritasInputError
from celeritas_tf import tf as tf_setup
from celeritas_tf.evaluation import check_devices

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))  # bench/ is a folder of scripts, not a package
import bench_gpu  # noqa: E402


def test_without_a_gpu_it_says_so_writes_nothing_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}  # no GPU on any machine
    proc = subprocess.run([sys.executable, str(BENCH / "bench_gpu.py"), "--models", "mlp", "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stdout.splitlines()
    assert line.startswith(bench_gpu.NO_GPU) and line.endswith(bench_gpu.NOTHING_DONE)
    import tensorflow as tf

    assert line == bench_gpu.no_gpu_line(tf.test.is_built_with_cuda())
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_cpu_rehearsal_runs_every_step_and_reports_what_it_measured(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    placers = ["single", "m-topo", "celeritas"]
    argv = ["--cpu-rehearsal", "--models", "mlp", "--devices", "2", "--steps", "3", "--traced-steps", "1",
            "--placers", ",".join(placers), "--out", str(out)]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert bench_gpu.main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["device"]["kind"] == "CPU" and doc["settings"]["steps"] == 3
    [model] = doc["models"]
    assert "error" not in model, model
    assert model["profile_batches"] == list(bench_gpu.profile_batches(bench_gpu.DEFAULT_BATCH))
    assert model["ops_off_device"] == 0 and model["ops"] > 0
    rows = model["placers"]
    assert [r["placer"] for r in rows] == placers
    for r in rows:
        assert r["ran"] and r["error"] is None and r["timed_steps"] == 3 and r["peak_source"] == "trace"
        assert len(r["memory"]) == 2 and r["memory"][0]["measured_bytes"] > 0
        assert r["measured_mean_us"] > 0 and r["simulated_us"] > 0
        assert r["measured_over_simulated"] == pytest.approx(r["measured_mean_us"] / r["simulated_us"])
        # both orders timed, interleaved: the simulator's order enforced, and TensorFlow's own
        assert set(r["modes"]) == {"free", "enforced"} and r["modes"]["free"]["measured_mean_us"] == \
            r["measured_mean_us"]
        for figures in r["modes"].values():
            assert figures["timed_steps"] == 3 and figures["measured_mean_us"] > 0
            ratio = figures["measured_mean_us"] / r["simulated_us"]
            assert figures["measured_over_simulated"] == pytest.approx(ratio)
    for mode in ("free", "enforced"):
        assert model["spearman_by_mode"][mode] == bench_gpu.spearman(
            [r["simulated_us"] for r in rows], [r["modes"][mode]["measured_mean_us"] for r in rows])
    assert model["spearman"] == model["spearman_by_mode"]["free"]
    text = stdout.getvalue()
    assert "mlp (batch 32" in text and all(f"  {p} " in text for p in placers) and f"wrote {out}" in text
    assert "free/sim" in text and "enf/sim" in text


def test_logical_gpus_shape_sessions_devices_and_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tf_setup, "_LOGICAL_GPU_MIB", (300, 500, 700))
    config = tf_setup.session_config(2)
    assert dict(config.device_count) == {"CPU": 1, "GPU": 3}
    [virtual] = config.gpu_options.experimental.virtual_devices
    assert list(virtual.memory_limit_mb) == [300, 500, 700] and config.gpu_options.visible_device_list == "0"
    assert config.allow_soft_placement and config.inter_op_parallelism_threads == min(2, os.cpu_count() or 1)
    assert tf_setup.step_device(2) == "/job:localhost/replica:0/task:0/device:GPU:2"
    check_devices(3)
    with pytest.raises(CeleritasInputError, match="3 logical GPUs"):
        check_devices(4)
    monkeypatch.setattr(tf_setup, "_LOGICAL_GPU_MIB", ())
    plain = tf_setup.session_config(2)
    assert dict(plain.device_count) == {"CPU": 2, "GPU": 0} and not plain.allow_soft_placement
    assert not plain.gpu_options.experimental.virtual_devices
    assert tf_setup.step_device(1) == tf_setup.cpu_device(1)


def test_use_logical_gpus_refuses_bad_limits_and_changes_nothing_without_a_gpu() -> None:
    with pytest.raises(ValueError):
        tf_setup.use_logical_gpus([])
    with pytest.raises(ValueError):
        tf_setup.use_logical_gpus([512, 0])
    if tf_setup.tensorflow().config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU: splitting it would change the devices of later tests")
    assert tf_setup.use_logical_gpus([512, 512]) == 0
    assert tf_setup.logical_gpu_limits_mib() == () and tf_setup.step_device(0) == tf_setup.cpu_device(0)
