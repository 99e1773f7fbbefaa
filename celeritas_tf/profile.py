"""Run a training step with full tracing and read per-op time (µs) and memory (bytes).

``RunOptions(trace_level=FULL_TRACE)`` fills ``RunMetadata.step_stats``: per device, per executed
op, its start and end (µs) and the allocations of its outputs. An op's **time** is
``op_end_rel_micros − op_start_rel_micros``, the median over the traced steps; its **memory** is
the bytes of its outputs (``allocation_description.requested_bytes``) plus its persistent memory
(``memory_stats``), the largest over the traced steps. Scratch (temp) memory is left out: it is
freed when the op ends, so summing it over a device's ops would overstate what the device
holds. Variables hold their own size (a resource handle's output is 0 bytes). Ops the runtime
does not trace (fed placeholders appear as ``_arg_NAME_0_K``; constants folded away) keep time 0
and the bytes of their static outputs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from celeritas_tf.extract import variable_bytes
from celeritas_tf.step import TrainingStep
from celeritas_tf.tf import cpu_device, session_config, tensorflow

_ARG = re.compile(r"^_arg_(.+)_0_\d+$")
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
        op._set_device(cpu_device(int(target)))


def trace_step(
    step: TrainingStep,
    *,
    num_devices: int = 1,
    assignment: Mapping[str, int] | None = None,
    traced_steps: int = 3,
    warmup_steps: int = 1,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> StepTrace:
    """Run ``warmup_steps`` untraced then ``traced_steps`` fully traced steps of ``step`` on
    ``num_devices`` logical CPU devices, ops placed by ``assignment`` (all on device 0 when None)."""
    tf = tensorflow()
    tf1 = tf.compat.v1
    place_ops(step, assignment)
    rng = np.random.default_rng(seed)
    fetches = [step.train_op, step.loss]
    times: dict[str, list[float]] = {}
    memory: dict[str, float] = {}
    devices: dict[str, str] = {}
    walls: list[float] = []
    with tf1.Session(graph=step.graph, config=session_config(num_devices)) as session:
        session.run(step.init_op)
        for _ in range(warmup_steps):
            session.run(fetches, step.feed_dict(rng))
        for k in range(traced_steps):
            metadata = tf1.RunMetadata()
            start = time.perf_counter()
            session.run(fetches, step.feed_dict(rng),
                        options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE), run_metadata=metadata)
            walls.append(time.perf_counter() - start)
            for dev in metadata.step_stats.dev_stats:
                for ns in dev.node_stats:
                    name = _op_name(ns.node_name)
                    if name is None:
                        continue
                    times.setdefault(name, []).append(float(ns.op_end_rel_micros - ns.op_start_rel_micros))
                    out = sum(o.tensor_description.allocation_description.requested_bytes for o in ns.output)
                    extra = 0
                    if ns.HasField("memory_stats"):  # scratch (temp) memory is freed when the op ends
                        extra = ns.memory_stats.persistent_memory_size
                    memory[name] = max(memory.get(name, 0.0), float(out + extra))
                    devices[name] = dev.device
            if progress is not None:
                progress(f"batch {step.batch_size}: traced step {k + 1}/{traced_steps}")
    for op in step.graph.get_operations():
        if op.type in ("VarHandleOp", "VariableV2") and op.name in memory:
            memory[op.name] = variable_bytes(op)
    return StepTrace(step.batch_size, {n: float(np.median(v)) for n, v in times.items()}, memory, devices,
                     walls)


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
