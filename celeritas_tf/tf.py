"""Import TensorFlow once, quietly, in graph mode (``tf.compat.v1``), and build session configs.

Steps run on logical CPU devices (``CPU:k``) unless :func:`use_logical_gpus` split the first GPU
into logical GPUs (``GPU:k``, each with its own memory limit) for the rest of the process
(``bench/bench_gpu.py`` does). :func:`step_device` names the device ``k`` of whichever is in use.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

_TF: Any = None

#: Memory limits (MiB) of the logical GPUs steps run on, set by :func:`use_logical_gpus`; empty:
#: steps run on logical CPU devices.
_LOGICAL_GPU_MIB: tuple[int, ...] = ()


def tensorflow() -> Any:
    """The ``tensorflow`` module with eager execution disabled and C++ logging quiet."""
    global _TF
    if _TF is None:
        if "tensorflow" in sys.modules and os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "0":
            warnings.warn("TensorFlow was imported before celeritas_tf with oneDNN optimisations possibly on "
                          "(TF_ENABLE_ONEDNN_OPTS is not 0; TensorFlow turns them on for CPUs with AVX-512 "
                          "VNNI or newer): its fused kernels allocate differently, so profiled memory "
                          "differs; set TF_ENABLE_ONEDNN_OPTS=0 or use celeritas_tf before TensorFlow",
                          RuntimeWarning, stacklevel=2)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # deterministic op set, no fusion rewrites
        # lazy: TensorFlow (seconds to import) loads on the first call, after its settings
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")
        tf.compat.v1.disable_eager_execution()
        _TF = tf
    return _TF


def session_config(num_devices: int = 1) -> Any:
    """A ``ConfigProto`` with ``num_devices`` logical CPU devices, grappler rewrites off (so op
    names match the graph we built), graph-level optimisation off and a cost model recorded.

    Each op runs single-threaded (intra-op 1), so one logical device behaves like one processor;
    up to ``min(num_devices, cores)`` ops run at once (inter-op), so devices can overlap as far
    as the machine's cores allow (and one device, run with :func:`run_options`, one op at a time).
    Each session gets its own thread pools: by default TensorFlow shares the pools of the first
    session in the process, so a one-device trace after a two-device run would run two ops at
    once (and overlap their scratch memory).

    After :func:`use_logical_gpus` the session instead sees every logical GPU (TensorFlow creates
    a process's GPU devices once, so every session must describe the same ones) and one CPU, and
    soft placement is on: an op without a GPU kernel runs on the CPU instead of failing the step
    (``bench/bench_gpu.py`` counts such ops).
    """
    tf = tensorflow()
    tf1 = tf.compat.v1
    cores = os.cpu_count() or 1
    gpus = _LOGICAL_GPU_MIB
    config = tf1.ConfigProto(device_count={"CPU": 1, "GPU": len(gpus)} if gpus else {"CPU": int(num_devices)},
                             intra_op_parallelism_threads=1,
                             inter_op_parallelism_threads=max(1, min(int(num_devices), cores)),
                             allow_soft_placement=bool(gpus),
                             use_per_session_threads=True)
    if gpus:
        config.gpu_options.visible_device_list = "0"
        config.gpu_options.experimental.virtual_devices.add(memory_limit_mb=[float(m) for m in gpus])
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    config.graph_options.optimizer_options.opt_level = tf1.OptimizerOptions.L0
    config.graph_options.optimizer_options.do_common_subexpression_elimination = False
    config.graph_options.optimizer_options.do_constant_folding = False
    config.graph_options.optimizer_options.do_function_inlining = False
    config.graph_options.build_cost_model = 1
    return config


def use_logical_gpus(memory_limits_mib: Sequence[int]) -> int:
    """Split the first physical GPU into one logical GPU per entry of ``memory_limits_mib`` (MiB:
    each gets its own allocator with that limit) and run every later step, trace, validation and
    calibration of this process on them (``GPU:k``) instead of on logical CPU devices; other
    physical GPUs are hidden. Returns the number of physical GPUs; 0 changes nothing.

    TensorFlow fixes its devices the first time anything runs, so call this first; calling it
    again with other limits raises ``RuntimeError``.
    """
    global _LOGICAL_GPU_MIB
    limits = tuple(int(m) for m in memory_limits_mib)
    if not limits or min(limits) < 1:
        raise ValueError(f"need at least one memory limit of 1 MiB or more, got {list(memory_limits_mib)!r}")
    if _LOGICAL_GPU_MIB and limits != _LOGICAL_GPU_MIB:
        raise RuntimeError(f"logical GPUs are already set up with limits {list(_LOGICAL_GPU_MIB)} MiB")
    tf = tensorflow()
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return 0
    if not _LOGICAL_GPU_MIB:
        tf.config.set_visible_devices(gpus[0], "GPU")
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=m) for m in limits])
        _LOGICAL_GPU_MIB = limits
    return len(gpus)


def logical_gpu_limits_mib() -> tuple[int, ...]:
    """The memory limits (MiB) of the logical GPUs in use; empty when steps run on logical CPUs."""
    return _LOGICAL_GPU_MIB


def run_options(num_devices: int, *, trace: bool = False) -> Any:
    """The ``RunOptions`` of every ``Session.run`` of a step on ``num_devices`` devices: full
    tracing when ``trace``; on one device every op runs on the caller's thread, one after another,
    as on one GPU stream. (TensorFlow's executor otherwise runs cheap ops inline beside the pool
    thread, so the order, and with it the peak memory, changed from process to process: Inception
    v3 at batch 8 measured 285 to 383 MiB; sequentially it measures the same every time.)"""
    tf1 = tensorflow().compat.v1
    options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE if trace else tf1.RunOptions.NO_TRACE)
    if num_devices == 1:
        options.inter_op_thread_pool = -1
    return options


def device_name(index: int | str, kind: str = "CPU") -> str:
    """The TensorFlow name of device ``kind:index`` of this process."""
    return f"/job:localhost/replica:0/task:0/device:{kind}:{index}"


def cpu_device(index: int) -> str:
    """The TensorFlow name of logical CPU device ``index``."""
    return device_name(index)


def step_device(index: int) -> str:
    """The TensorFlow name of device ``index`` that steps run on: logical GPU ``index`` after
    :func:`use_logical_gpus`, else logical CPU device ``index``."""
    return device_name(index, "GPU" if _LOGICAL_GPU_MIB else "CPU")
