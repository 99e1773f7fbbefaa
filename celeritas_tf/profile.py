"""Run a training step with full tracing and read per-op time (µs) and memory (bytes).

``RunOptions(trace_level=FULL_TRACE)`` fills ``RunMetadata.step_stats``: per device the executor
ran ops on (``/job:localhost/replica:0/task:0/device:CPU:k`` or ``…/device:GPU:k``), per executed
op, its start and end (µs) and the allocations of its outputs. On a GPU the tracer adds
pseudo-devices named after the physical GPU (:func:`is_tracer_device`): ``/device:GPU:0/stream:all``
holds every kernel once, named after the op that launched it (``dense/MatMul:MatMul``) or after
the kernel when no op did; ``/device:GPU:0/stream:N`` repeats them per stream;
``/device:GPU:0/memcpy``, ``…/stream:N<MemcpyH2D>`` and ``…/sync`` hold copies and waits.

An op's **time** is the median over the traced steps of: on a GPU, the sum of the durations of
its kernels in ``stream:all`` (the executor's entry there only times the enqueue on the host);
an op of the GPU without kernels (shapes, reshapes, variable handles), and every op of a CPU
device, ``op_end_rel_micros − op_start_rel_micros`` of its executor entry. Kernels named after no
op of the graph are left out. Logical GPUs split from one card share its streams, so a kernel
is matched to its op by name, and where an op ran, like its memory, comes from its executor
entry. Its **memory** is the bytes of all its outputs (``allocation_description.requested_bytes``)
plus its persistent and its scratch memory (``memory_stats``: ``persistent_memory_size``,
``temp_memory_size``), the largest over the traced steps; the scratch part alone is kept as
:attr:`StepTrace.scratch_bytes` (extraction turns it into the op's ``scratch_bytes``, live only
while the op runs). Variables hold their own size (a resource handle's output is 0 bytes). Ops the
runtime does not trace (fed placeholders appear as ``_arg_NAME_0_K``; constants folded away)
keep time 0 and the bytes of their static outputs.

The **measured peak** of each device (:func:`measured_peak_bytes`) comes from TensorFlow's
tracking allocator: with full tracing every allocation an op makes, and its release, is recorded
with a timestamp (``AllocatorMemoryUsed.allocation_records``; a release is a negative record).
The peak of a device is the bytes resident when the step starts (its variables and optimizer
slots, and the fed inputs, which no allocation record of the step holds: see
:func:`resident_bytes`) plus the largest running sum of the records of the ops that ran on it, on
its own allocators only (:func:`_device_allocator`): a GPU counts its own (``GPU_k_bfc``, one per
logical GPU), never the pinned host memory its ops also use (``gpu_host_bfc``, ``cuda_host_bfc``).
A tensor a GPU receives from another device is copied in by the rendezvous, outside every op's
tracking allocator, so its bytes are in no record: a GPU's measured peak leaves them out. Logical
CPU devices share the host's memory: a tensor sent to another CPU device is not copied, so its
bytes count only on the device whose op allocated it; the one-device peak is exact on CPU.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from celeritas_tf.extract import tensor_bytes, variable_bytes
from celeritas_tf.identity import step_op_keys
from celeritas_tf.step import TrainingStep
from celeritas_tf.tf import device_name, run_options, session_config, step_device, tensorflow

_ARG = re.compile(r"^_arg_(.+)_0_\d+$")
#: TensorFlow's allocator of logical GPU k.
_GPU_BFC = re.compile(r"^GPU_(\d+)_bfc$", re.IGNORECASE)
#: A GPU tracer pseudo-device: something after the device's index (``/device:GPU:0/stream:all``).
_TRACER_DEVICE = re.compile(r"device:[^/:]+:\d+/")
_RUNTIME_OPS = ("_SOURCE", "_SINK")


@dataclass
class StepTrace:
    """Per-op figures of one configuration of a step: time (µs), memory (bytes), step wall times."""

    batch_size: int
    time_us: dict[str, float]
    memory_bytes: dict[str, float]
    devices: dict[str, str] = field(default_factory=dict)
    """The device each traced op ran on (as TensorFlow names it)."""
    step_seconds: list[float] = field(default_factory=list)
    scratch_bytes: dict[str, float] = field(default_factory=dict)
    """Per op: scratch (temp) bytes, live only while it runs (ops with none are left out)."""
    peak_bytes: dict[str, float] = field(default_factory=dict)
    """Per device (as TensorFlow names it): measured peak bytes, the largest over the traced steps
    (see :func:`measured_peak_bytes`)."""
    aliases: dict[str, list[OutputAlias]] = field(default_factory=dict)
    """Per op with any: how each output's buffer relates to its inputs (the last traced step;
    see :func:`output_aliases`)."""
    op_keys: dict[str, str] = field(default_factory=dict)
    """Per op of the traced step: its structure key (:func:`celeritas_tf.identity.op_key`), which
    says which op a figure belongs to in another process or at another batch size."""
    time_samples: dict[str, list[float]] = field(default_factory=dict)
    """Per op: its time (µs) in each traced step, in order (:attr:`time_us` is their median)."""


def place_ops(step: TrainingStep, assignment: Mapping[str, int] | None) -> None:
    """Pin the step's ops to logical devices (``assignment``: op name → device index); every other
    op of the graph (initialisers) follows the op it is co-located with, else device 0."""
    graph = step.graph
    device_of = dict(assignment or {})
    for op in graph.get_operations():
        if op.name in device_of:
            target = device_of[op.name]
        else:
            target = 0
            for loc in op.colocation_groups():
                anchor = loc.decode().removeprefix("loc:@")
                if anchor in device_of:
                    target = device_of[anchor]
                    break
        op._set_device(step_device(int(target)))
    step.forget_graph_def()  # its NodeDefs carry the old devices


def trace_step(
    step: TrainingStep,
    *,
    num_devices: int = 1,
    assignment: Mapping[str, int] | None = None,
    traced_steps: int = 3,
    warmup_steps: int = 1,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    more_steps: Callable[[Mapping[str, list[float]]], int] | None = None,
) -> StepTrace:
    """Run ``warmup_steps`` untraced then ``traced_steps`` fully traced steps of ``step`` on
    ``num_devices`` logical devices (CPUs, or GPUs after :func:`celeritas_tf.tf.use_logical_gpus`),
    ops placed by ``assignment`` (all on device 0 when None).
    ``more_steps`` (e.g. :func:`celeritas_core.statistics.estimation.traced_steps_needed`) gets the per-op
    times (µs) of the steps traced so far and returns how many traced steps to have in all; one
    more is traced while it asks for more, so the count depends on the figures, never on time."""
    tf = tensorflow()
    tf1 = tf.compat.v1
    place_ops(step, assignment)
    rng = np.random.default_rng(seed)
    fetches = [step.train_op, step.loss]
    stats = _TraceStats(_data_inputs(step))
    resident = resident_bytes(step)
    with tf1.Session(graph=step.graph, config=session_config(num_devices)) as session:
        session.run(step.init_op)
        for _ in range(warmup_steps):
            session.run(fetches, step.feed_dict(rng), options=run_options(num_devices))
        k = 0
        while k < traced_steps or (more_steps is not None and k < more_steps(stats.times)):
            metadata = tf1.RunMetadata()
            start = time.perf_counter()
            session.run(fetches, step.feed_dict(rng),
                        options=run_options(num_devices, trace=True), run_metadata=metadata)
            stats.walls.append(time.perf_counter() - start)
            stats.add(metadata.step_stats, resident, with_aliases=k == traced_steps - 1)
            k += 1
            if progress is not None:
                progress(f"batch {step.batch_size}: traced step {k}/{traced_steps}" if k <= traced_steps
                         else f"batch {step.batch_size}: extra traced step {k} (noisy times)")
    for op in step.graph.get_operations():
        if op.type in ("VarHandleOp", "VariableV2") and op.name in stats.memory:
            stats.memory[op.name] = variable_bytes(op)
            stats.scratch.pop(op.name, None)
    return StepTrace(step.batch_size, {n: float(np.median(v)) for n, v in stats.times.items()}, stats.memory,
                     stats.devices, stats.walls, stats.scratch, stats.peaks, stats.aliases,
                     op_keys=step_op_keys(step), time_samples=stats.times)


#: How an output's buffer relates to the op's inputs: None (its own buffer), ``(producer,
#: output)`` (shares that input's buffer) or ``"external"`` (a buffer that lives outside the step,
#: e.g. a variable read without a copy).
OutputAlias = tuple[str, int] | str | None


@dataclass
class _TraceStats:
    """Per-op figures gathered over the traced steps (µs, bytes)."""

    inputs: Mapping[str, list[tuple[str, int]]]
    times: dict[str, list[float]] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    scratch: dict[str, float] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    aliases: dict[str, list[OutputAlias]] = field(default_factory=dict)
    walls: list[float] = field(default_factory=list)

    def add(self, step_stats: Any, resident: Mapping[str, float], *, with_aliases: bool = False) -> None:
        """Fold in one traced step's ``StepStats``; ``with_aliases`` (the last traced step) also
        records its output aliases, which the trace keeps."""
        nodes = _executor_nodes(step_stats)
        kernels = _kernel_times_us(step_stats, self.inputs)
        for name, (device, ns) in nodes.items():
            host_us = float(ns.op_end_rel_micros - ns.op_start_rel_micros)
            on_gpu = _device_parts(device)[0] == "GPU"
            self.times.setdefault(name, []).append(kernels.get(name, host_us) if on_gpu else host_us)
            # every output counts, aliased or not: forwarding depends on the order ops ran in, and
            # the per-op cost must not (aliases shape the liveness replay, not the sum model)
            out = sum(o.tensor_description.allocation_description.requested_bytes for o in ns.output)
            persistent = scratch = 0
            if ns.HasField("memory_stats"):
                persistent = ns.memory_stats.persistent_memory_size
                scratch = ns.memory_stats.temp_memory_size
            self.memory[name] = max(self.memory.get(name, 0.0), float(out + persistent + scratch))
            if scratch > 0:
                self.scratch[name] = max(self.scratch.get(name, 0.0), float(scratch))
            self.devices[name] = device
        if with_aliases:
            self.aliases = {n: a for n, a in output_aliases(nodes, self.inputs).items()
                            if any(x is not None for x in a)}
        for device, peak in measured_peak_bytes(step_stats, resident).items():
            self.peaks[device] = max(self.peaks.get(device, 0.0), peak)


def _executor_nodes(step_stats: Any) -> dict[str, tuple[str, Any]]:
    """``op → (device, entry)`` of the executor's entries (the GPU tracer's pseudo-devices left
    out): where each op ran, its host-side times and its memory. An op with several entries
    (e.g. inside a loop) keeps its last."""
    return {name: (dev.device, ns) for dev in step_stats.dev_stats if not is_tracer_device(dev.device)
            for ns in dev.node_stats if (name := _op_name(ns.node_name)) is not None}


def _kernel_times_us(step_stats: Any, ops: Collection[str]) -> dict[str, float]:
    """Per op of ``ops`` that launched GPU kernels: the sum of its kernels' durations (µs), read
    from the tracer's ``/device:GPU:N/stream:all`` (each kernel once; the ``stream:N`` devices
    repeat them). A kernel belongs to the op its entry is named after (``op:Type``); kernels of
    no op of ``ops`` (named after the kernel itself) are left out. Logical GPUs of one card share
    its streams, so only the op's name, never the stream device, says which op a kernel is."""
    out: dict[str, float] = {}
    for dev in step_stats.dev_stats:
        if not dev.device.endswith("/stream:all"):
            continue
        for ns in dev.node_stats:
            name = _op_name(ns.node_name)
            if name is not None and name in ops:
                out[name] = out.get(name, 0.0) + _tracer_duration_us(ns)
    return out


def _tracer_duration_us(ns: Any) -> float:
    """Duration (µs) of a GPU tracer entry: ``all_end_rel_nanos`` when set, else
    ``all_end_rel_micros`` (whole µs: the tracer's start is ``all_start_micros`` and its
    ``op_start_rel_micros`` is 0, so ``op_end_rel_micros`` holds the same duration)."""
    return ns.all_end_rel_nanos / 1e3 if ns.all_end_rel_nanos else float(ns.all_end_rel_micros)


def output_aliases(nodes: Mapping[str, tuple[str, Any]],
                   inputs: Mapping[str, list[tuple[str, int]]]) -> dict[str, list[OutputAlias]]:
    """Which outputs of one traced step share a buffer with an input, from the allocation id of
    every output (``allocation_description.allocation_id``; 0 = unknown). An output whose id is
    an input's shares that input's buffer (a view, or an input buffer TensorFlow forwarded); one
    whose op allocated nothing and whose id is no input's is ``"external"``."""
    ids = {(name, o.slot): o.tensor_description.allocation_description.allocation_id
           for name, (_, ns) in nodes.items() for o in ns.output}
    out: dict[str, list[OutputAlias]] = {}
    for name, (_, ns) in nodes.items():
        allocated = any(r.alloc_bytes > 0 for m in ns.memory for r in m.allocation_records)
        by_id = {ids[t]: t for t in inputs.get(name, []) if ids.get(t)}
        entries: list[OutputAlias] = [None] * (max((o.slot for o in ns.output), default=-1) + 1)
        for o in ns.output:
            a = o.tensor_description.allocation_description.allocation_id
            if a and a in by_id:
                entries[o.slot] = by_id[a]
            elif a and not allocated and o.tensor_description.allocation_description.requested_bytes:
                entries[o.slot] = "external"
        out[name] = entries
    return out


def _data_inputs(step: TrainingStep) -> dict[str, list[tuple[str, int]]]:
    """Every op's data inputs as ``(producer, output index)``."""
    return {op.name: [(t.op.name, t.value_index) for t in op.inputs] for op in step.graph.get_operations()}


def resident_bytes(step: TrainingStep) -> dict[str, float]:
    """Bytes live on each device when a step starts (by TensorFlow device name), sized from their
    static shapes: every variable (weights, optimizer slots) and every fed input, on the device
    its placeholder is placed on. No allocation record of the step holds a fed input: a CPU
    device gets the fed array from the session as it is, and a GPU gets a copy that the
    rendezvous allocates with the GPU's own allocator, outside every op's tracking allocator
    (TensorFlow's ``SameWorkerRecvDone``; an upper bound there, as the copy goes once its
    consumers ran)."""
    out: dict[str, float] = {}
    for op in step.graph.get_operations():
        if op.type in ("VarHandleOp", "VariableV2"):
            size = variable_bytes(op)
        elif op.type == "Placeholder":
            size = sum(tensor_bytes(t) for t in op.outputs)
        else:
            continue
        device = _canonical_device(op.device)
        out[device] = out.get(device, 0.0) + size
    return out


def measured_peak_bytes(step_stats: Any, resident: Mapping[str, float]) -> dict[str, float]:
    """Peak bytes of each device in one traced step: ``resident`` bytes plus the largest running
    sum of the allocation records (allocations positive, releases negative, in time order) of the
    ops that ran on it, on its own allocators (:func:`_device_allocator`). Devices without records
    report their resident bytes; the GPU tracer's pseudo-devices (:func:`is_tracer_device`) have
    no peak."""
    peaks = {_canonical_device(d): float(b) for d, b in resident.items()}
    for dev in step_stats.dev_stats:
        if is_tracer_device(dev.device):
            continue
        kind, index = _device_parts(dev.device)
        records = [(r.alloc_micros, r.alloc_bytes) for ns in dev.node_stats for m in ns.memory
                   if _device_allocator(m.allocator_name, kind, index) for r in m.allocation_records]
        if not records:
            continue
        when = np.array([t for t, _ in records], dtype=np.int64)
        delta = np.array([b for _, b in records], dtype=np.float64)
        order = np.lexsort((delta, when))  # at one instant, releases before allocations
        running = float(np.cumsum(delta[order]).max(initial=0.0))
        device = device_name(index, kind)
        peaks[device] = peaks.get(device, 0.0) + max(running, 0.0)
    return peaks


def _device_allocator(allocator: str, kind: str, index: str) -> bool:
    """Whether allocations on ``allocator`` count toward the memory of device ``kind:index``.

    A GPU counts its own allocator only: ``GPU_<k>_bfc`` (TensorFlow's allocator of logical GPU
    ``k``; each logical GPU split from a card has its own) or ``gpu_async_<n>`` (the one
    ``TF_GPU_ALLOCATOR=cuda_malloc_async`` installs, named after the physical GPU, so any ``n``).
    Host allocators (pinned ``gpu_host_bfc`` and ``cuda_host_bfc``, ``cpu``) hold host memory,
    not the GPU's. A CPU device counts every allocator: they all draw on the host's memory."""
    if kind != "GPU":
        return True
    own = _GPU_BFC.match(allocator)
    return own.group(1) == index if own else allocator.lower().startswith("gpu_async_")


def is_tracer_device(name: str) -> bool:
    """Whether a step-stats device is one of the GPU tracer's pseudo-devices rather than a device
    the executor ran ops on: ``/device:GPU:0/stream:all``, ``/device:GPU:0/stream:7``,
    ``/device:GPU:0/stream:7<MemcpyH2D>``, ``/device:GPU:0/memcpy``, ``/device:GPU:0/sync``
    (anything after the device's index). They are named after the physical GPU, hold kernels and
    copies (no memory) and repeat each kernel once per stream and once in ``stream:all``."""
    return _TRACER_DEVICE.search(name) is not None


def _device_parts(name: str) -> tuple[str, str]:
    """``(kind, index)`` of a TensorFlow device name in any spelling (``/device:CPU:1``,
    ``/job:localhost/replica:0/task:0/device:GPU:0``, ``CPU:1``; empty: CPU 0)."""
    if not name:
        return "CPU", "0"
    kind, _, index = name.rsplit("device:", 1)[-1].upper().partition(":")
    return kind, index or "0"


def _canonical_device(name: str) -> str:
    """``/job:localhost/replica:0/task:0/device:CPU:0`` for any spelling TensorFlow uses (empty:
    device 0 of the CPU)."""
    kind, index = _device_parts(name)
    return device_name(index, kind)


def device_kind(name: str) -> str:
    """The kind of a TensorFlow device name in any spelling (``CPU``, ``GPU``; empty: ``CPU``)."""
    return _device_parts(name)[0]


def device_index(name: str) -> int | None:
    """The index of a TensorFlow device name in any spelling (None when it has none)."""
    index = _device_parts(name)[1]
    return int(index) if index.isdigit() else None


def _op_name(node_name: str) -> str | None:
    """The graph op a step-stats entry belongs to (None for runtime-only entries)."""
    if node_name in _RUNTIME_OPS or node_name.startswith("_retval"):
        return None
    if "/_" in node_name and node_name.rsplit("/", 1)[-1].startswith("_"):
        return None  # runtime-inserted send/receive nodes
    match = _ARG.match(node_name)
    if match:
        return match.group(1)
    return node_name.split(":", 1)[0]


def trace_costs(trace: StepTrace) -> dict[str, tuple[float, float]]:
    """``op → (time_us, memory_bytes)`` of a trace, for :func:`celeritas_tf.extract.graph_from_step`."""
    return {n: (trace.time_us.get(n, 0.0), trace.memory_bytes.get(n, 0.0))
            for n in set(trace.time_us) | set(trace.memory_bytes)}
