"""Import TensorFlow once, quietly, in graph mode (``tf.compat.v1``), and build session configs.

Steps run on logical CPU devices (``CPU:k``) unless :func:`use_logical_gpus` split the first GPU
into logical GPUs (``GPU:k``, each with its own memory limit) for the rest of the process
(``bench/bench_gpu.py`` does). :func:`step_device` names the device ``k`` of whichever is in use.
On logical CPU devices a session creates no GPU device, even with a CUDA build of TensorFlow on a
machine with GPUs. The GPU path measures memory as TensorFlow's BFC allocator reports it, so it
refuses another allocator (:func:`check_gpu_allocator`); :func:`tf32_enabled` says whether float32
matmuls and convolutions may run in TF32 there.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from celeritas_core.errors import CeleritasInputError

_TF: Any = None

#: Memory limits (MiB) of the logical GPUs steps run on, set by :func:`use_logical_gpus`; empty:
#: steps run on logical CPU devices.
_LOGICAL_GPU_MIB: tuple[int, ...] = ()

#: The environment variable that picks TensorFlow's GPU allocator, and the values (after trimming,
#: in any case) that keep its default BFC allocator; any other value is refused on the GPU path,
#: whichever allocator it picks.
GPU_ALLOCATOR_VARIABLE = "TF_GPU_ALLOCATOR"
BFC_ALLOCATOR_VALUES = ("", "bfc")


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

    On logical CPU devices the session asks for zero GPUs (``device_count["GPU"] = 0``): a GPU
    left out of ``device_count`` means every GPU to TensorFlow, so with its CUDA build each CPU
    session would also create every GPU device and its allocator would take their memory.
    """
    tf = tensorflow()
    tf1 = tf.compat.v1
    cores = os.cpu_count() or 1
    gpus = _LOGICAL_GPU_MIB
    devices = {"CPU": 1, "GPU": len(gpus)} if gpus else {"CPU": int(num_devices), "GPU": 0}
    config = tf1.ConfigProto(device_count=devices,
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


def check_gpu_allocator(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a ``TF_GPU_ALLOCATOR`` (in ``environ``, default the process's environment) other
    than unset, empty or ``bfc``, in one line.

    The GPU measurements assume TensorFlow's BFC allocator: each logical GPU's memory limit is a
    BFC pool, ``get_memory_info(..)["peak"]`` is that pool's peak and the traced allocation records
    are its allocations. With another allocator (``cuda_malloc_async``: CUDA's stream-ordered
    pool) the limits, peaks and records mean something else, so the figures would not compare
    with the replayed peaks. Reads only the environment, so it can run before TensorFlow looks
    for GPUs.
    """
    value = (os.environ if environ is None else environ).get(GPU_ALLOCATOR_VARIABLE)
    if value is None or value.strip().lower() in BFC_ALLOCATOR_VALUES:
        return
    raise CeleritasInputError(
        f"{GPU_ALLOCATOR_VARIABLE}={value!r}: the GPU measurements need TensorFlow's default BFC "
        f"allocator (logical-GPU memory limits, allocator peaks and allocation records assume it); "
        f"unset {GPU_ALLOCATOR_VARIABLE} (or set it to bfc) and run again")


def tf32_enabled() -> bool:
    """Whether float32 matmuls and convolutions may run in TF32 on GPUs that have it (compute
    capability 8.0 and newer): TensorFlow's setting
    (``tf.config.experimental.tensor_float_32_execution_enabled()``, on by default), off where
    ``NVIDIA_TF32_OVERRIDE=0`` (cuBLAS and cuDNN then never use TF32, whatever TensorFlow asks).

    The analytical costs (:mod:`celeritas_tf.analytical`) use FP32 peaks, so with TF32 on such a
    GPU runs those ops faster than they model; ``bench/bench_gpu.py`` records which it was.
    """
    if os.environ.get("NVIDIA_TF32_OVERRIDE", "").strip() == "0":
        return False
    return bool(tensorflow().config.experimental.tensor_float_32_execution_enabled())


def use_logical_gpus(memory_limits_mib: Sequence[int]) -> int:
    """Split the first physical GPU into one logical GPU per entry of ``memory_limits_mib`` (MiB:
    each gets its own allocator with that limit) and run every later step, trace, validation and
    calibration of this process on them (``GPU:k``) instead of on logical CPU devices; other
    physical GPUs are hidden. Returns the number of physical GPUs; 0 changes nothing.

    TensorFlow fixes its devices the first time anything runs, so call this first; calling it
    again with other limits raises ``RuntimeError``. A ``TF_GPU_ALLOCATOR`` other than BFC raises
    :class:`~celeritas_core.errors.CeleritasInputError` (:func:`check_gpu_allocator`) before
    TensorFlow looks for GPUs, with a GPU or without.
    """
    global _LOGICAL_GPU_MIB
    limits = tuple(int(m) for m in memory_limits_mib)
    if not limits or min(limits) < 1:
        raise ValueError(f"need at least one memory limit of 1 MiB or more, got {list(memory_limits_mib)!r}")
    check_gpu_allocator()
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
