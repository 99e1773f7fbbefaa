"""bench/bench_gpu.py's labels, without TensorFlow: logical GPUs split from one chip are reported as
contention on that chip (never as a multi-GPU result), TF32 is stated beside the figures, and the
feeds the client's CPU runs are not counted as ops off the device."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # bench/ is a folder of scripts, not a package
import bench_gpu  # noqa: E402
from bench_gpu import ModelResult, PlacerRun  # noqa: E402

GPU = "/job:localhost/replica:0/task:0/device:GPU:{}"
CPU = "/job:localhost/replica:0/task:0/device:CPU:{}"


def _document(device: dict, rng: np.random.Generator) -> dict:
    """A benchmark document of one model and two placers that ran on ``device``."""
    runs = tuple(PlacerRun(name, float(rng.uniform(1e3, 1e5)), (1e8, 2e8), False,
                           step_seconds=(0.01, 0.02), enforced_step_seconds=(0.02, 0.03),
                           measured_peak_bytes=(1.1e8, 1.9e8)) for name in ("single", "celeritas"))
    result = ModelResult("mlp", 32, (2, 4, 8), 109, 0, 0.01, 0.2, runs, 3.0)
    settings = {"device_memory_mib": device.get("memory_limit_mib") or 512, "warmup_steps": 5, "steps": 2}
    transfer = {"describe": "t = 1 µs/B · bytes + 2 µs"}
    return bench_gpu.build_document(device, settings, transfer, [result], 9.0)


# ---------------------------------------------------------------------------------------------
# Ops off the device: feeds do not count


def test_feeds_are_not_counted_off_the_device(rng: np.random.Generator) -> None:
    """Fed placeholders always run on the client's CPU (``_arg_…``); only other ops on the other
    kind of device count (soft placement: no kernel for the device)."""
    kernels = [f"op{k}" for k in range(int(rng.integers(5, 20)))]
    no_kernel = [f"cpu_only{k}" for k in range(int(rng.integers(1, 6)))]
    feeds = ["features", "labels"]
    devices = {name: GPU.format(k % 3) for k, name in enumerate(kernels)}
    devices |= {name: CPU.format(0) for name in [*no_kernel, *feeds]}
    devices["_arg_extra_0_2"] = CPU.format(0)  # a raw feed entry, should a trace keep one
    devices["op0"] = GPU.format(0) + "/stream:all"
    op_types = {**dict.fromkeys(kernels, "MatMul"), **dict.fromkeys(no_kernel, "Unique"),
                **dict.fromkeys(feeds, "Placeholder")}
    assert bench_gpu.ops_off_device(devices, op_types, "GPU") == len(no_kernel)
    # on logical CPU devices (the rehearsal), nothing is off the device
    assert bench_gpu.ops_off_device({n: CPU.format(1) for n in devices}, op_types, "CPU") == 0
    # a placeholder that is not fed but ran on the device is no feed of the CPU: not counted either way
    assert bench_gpu.ops_off_device({"features": GPU.format(0)}, op_types, "GPU") == 0


# ---------------------------------------------------------------------------------------------
# One chip, not a multi-GPU result


@pytest.mark.parametrize("physical", [1, 2, 8])
def test_logical_gpus_of_one_chip_are_labelled_contention_on_one_chip(physical: int,
                                                                     rng: np.random.Generator) -> None:
    device = bench_gpu.device_info("GPU", "NVIDIA H100 80GB HBM3", 4, 8192, physical_gpus=physical,
                                   tf32=True, compute_capability=(9, 0))
    assert device["physical_gpus"] == physical and device["chips_used"] == 1
    assert device["topology"] == bench_gpu.ONE_CHIP
    assert "contention on one chip" in device["topology"] and "not a multi-GPU result" in device["topology"]
    doc = _document(device, rng)
    assert json.loads(json.dumps(doc))["device"]["topology"] == bench_gpu.ONE_CHIP
    header = bench_gpu.report_lines(doc)[:4]
    text = "\n".join(header)
    assert bench_gpu.ONE_CHIP in header[0] and "4 logical GPUs" in header[0]
    assert f"{physical} physical GPU" in text and "same-chip copies" in text
    assert "multi-GPU result" not in text.replace("not a multi-GPU result", "")


def test_an_older_document_is_still_labelled_one_chip(rng: np.random.Generator) -> None:
    """A GPU document written before the label (no ``topology``) came from the same one-chip
    split, so its report says so too."""
    device = {"kind": "GPU", "description": "NVIDIA A100", "logical_devices": 3, "memory_limit_mib": 512}
    assert bench_gpu.ONE_CHIP in bench_gpu.report_lines(_document(device, rng))[0]


def test_the_cpu_rehearsal_is_not_labelled_as_gpus(rng: np.random.Generator) -> None:
    device = bench_gpu.device_info("CPU", "logical CPU devices", 2, None, physical_gpus=0, tf32=True,
                                   compute_capability=None)
    assert device["topology"] == bench_gpu.CPU_THREADS and "logical GPUs" not in device["topology"]
    assert "not GPU figures" in device["topology"]
    assert device["physical_gpus"] == 0
    assert bench_gpu.ONE_CHIP not in "\n".join(bench_gpu.report_lines(_document(device, rng)))


# ---------------------------------------------------------------------------------------------
# TF32 beside the figures


@pytest.mark.parametrize("capability", [(8, 0), (9, 0), None])
def test_tf32_on_is_recorded_and_printed(capability: tuple[int, int] | None,
                                        rng: np.random.Generator) -> None:
    device = bench_gpu.device_info("GPU", "a GPU", 2, 1024, physical_gpus=1, tf32=True,
                                   compute_capability=capability)
    assert device["tf32"] is True
    assert device["compute_capability"] == (None if capability is None else list(capability))
    note = device["tf32_note"]
    assert note.startswith("TF32: on") and "analytical" in note and "FP32" in note
    doc = json.loads(json.dumps(_document(device, rng)))
    assert doc["device"]["tf32"] is True and doc["device"]["tf32_note"] == note
    assert note in bench_gpu.report_lines(doc)[:4]


def test_tf32_off_or_without_tensor_cores_says_fp32(rng: np.random.Generator) -> None:
    off = bench_gpu.device_info("GPU", "a GPU", 2, 1024, physical_gpus=1, tf32=False,
                                compute_capability=(9, 0))
    assert off["tf32"] is False and off["tf32_note"].startswith("TF32: off") and "FP32" in off["tf32_note"]
    volta = bench_gpu.device_info("GPU", "V100", 2, 1024, physical_gpus=1, tf32=True,
                                  compute_capability=(7, 0))
    assert volta["tf32"] is True and "7.0" in volta["tf32_note"] and "FP32" in volta["tf32_note"]
    assert off["tf32_note"] in bench_gpu.report_lines(_document(off, rng))[:4]


def test_an_older_document_without_tf32_prints_unknown(rng: np.random.Generator) -> None:
    device = {"kind": "GPU", "description": "NVIDIA A100", "logical_devices": 2, "memory_limit_mib": 512}
    assert "TF32: unknown" in "\n".join(bench_gpu.report_lines(_document(device, rng))[:4])
