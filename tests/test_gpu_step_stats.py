"""Reading GPU step stats, on hand-built ``RunMetadata`` shaped as TensorFlow 2.21 writes them with
``FULL_TRACE`` on a GPU (no GPU needed).

Besides the executor's device (``/job:localhost/replica:0/task:0/device:GPU:k``, whose entries time
the *enqueue* of each op on the host and carry its memory), the GPU tracer adds pseudo-devices
named after the physical GPU (``tensorflow/core/profiler/convert/xplane_to_step_stats.cc``):
``/device:GPU:0/stream:all`` (every kernel, named ``op:Type`` after the op that launched it, or
after the kernel when no op did), ``/device:GPU:0/stream:N`` (the same kernels again, per stream),
``/device:GPU:0/memcpy`` and ``/device:GPU:0/stream:N<MemcpyH2D>`` (copies), ``/device:GPU:0/sync``.
A tracer entry's duration is in ``op_end_rel_micros`` and ``all_end_rel_micros``
(``op_start_rel_micros`` is 0); its start is ``all_start_micros``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("tensorflow")

from tensorflow.core.framework.step_stats_pb2 import DeviceStepStats, NodeExecStats
from tensorflow.core.protobuf.config_pb2 import RunMetadata

from celeritas_tf.calibrate import _gap_us
from celeritas_tf.evaluation import _peaks_by_index, peak_metrics
from celeritas_tf.order import executed_device_order
from celeritas_tf.profile import _TraceStats, measured_peak_bytes, resident_bytes
from celeritas_tf.tf import tensorflow

GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"
GPU1 = "/job:localhost/replica:0/task:0/device:GPU:1"
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
STREAM_ALL = "/device:GPU:0/stream:all"
CUTLASS = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(Params)"

#: The graph's ops (``_TraceStats.inputs`` keys): MatMul and Relu launch kernels on GPU:0,
#: MatMul_1 on logical GPU:1 (same card), Reshape launches none, Sum runs on the CPU.
GRAPH_OPS = ("x", "dense/MatMul", "dense/Relu", "dense/Reshape", "dense_1/MatMul_1", "loss/Sum")


def _executor_entry(dev: DeviceStepStats, name: str, start: int, enqueue_us: int, *, out_bytes: int = 0,
                    records: tuple[tuple[str, int, int], ...] = ()) -> NodeExecStats:
    """An executor entry: ``enqueue_us`` between op start and end, one output of ``out_bytes`` and
    ``(allocator, µs, bytes)`` allocation records."""
    ns = dev.node_stats.add(node_name=name, all_start_micros=start, op_start_rel_micros=1,
                            op_end_rel_micros=1 + enqueue_us, all_end_rel_micros=2 + enqueue_us,
                            timeline_label=f"{name} = Op()")
    if out_bytes:
        ns.output.add(slot=0).tensor_description.allocation_description.requested_bytes = out_bytes
    for allocator, when, size in records:
        memory = next((m for m in ns.memory if m.allocator_name == allocator), None)
        memory = memory or ns.memory.add(allocator_name=allocator)
        memory.allocation_records.add(alloc_micros=when, alloc_bytes=size)
    return ns


def _tracer_entry(dev: DeviceStepStats, node_name: str, start: int, duration_us: int) -> None:
    """A GPU tracer entry as ``SetNodeTimes`` fills it (no memory, no outputs)."""
    dev.node_stats.add(node_name=node_name, all_start_micros=start, op_start_rel_micros=0,
                       op_end_rel_micros=duration_us, all_end_rel_micros=duration_us,
                       timeline_label=f"{node_name.split(':')[0]} grid:80,1,1 block:256,1,1")


#: Kernels of ``stream:all``: (node name, start µs, duration µs).
KERNELS = (("dense/MatMul:MatMul", 120, 30), ("dense/MatMul:MatMul", 150, 12), ("dense/Relu:Relu", 170, 7),
           (CUTLASS, 180, 99), ("dense_1/MatMul_1:MatMul", 200, 40))


def gpu_run_metadata() -> RunMetadata:
    """One traced step on logical GPUs 0 and 1 of one card, laid out as TensorFlow 2.21 does:
    executor devices first, then the tracer's pseudo-devices (``stream:N`` before ``stream:all``)."""
    metadata = RunMetadata()
    stats = metadata.step_stats
    cpu = stats.dev_stats.add(device=CPU0)
    _executor_entry(cpu, "_arg_x_0_0", 90, 1, out_bytes=4096)
    _executor_entry(cpu, "loss/Sum", 300, 9, out_bytes=4, records=(("cpu", 301, 4),))
    gpu0 = stats.dev_stats.add(device=GPU0)
    _executor_entry(gpu0, "x/_1", 95, 3)  # receives the fed input: the rendezvous allocates its copy
    _executor_entry(gpu0, "dense/MatMul", 100, 5, out_bytes=8192,
                    records=(("GPU_0_bfc", 101, 8192), ("gpu_host_bfc", 101, 1 << 20)))
    _executor_entry(gpu0, "dense/Relu", 110, 2, out_bytes=8192, records=(("GPU_0_bfc", 111, 8192),))
    _executor_entry(gpu0, "dense/Reshape", 112, 4, out_bytes=8192)
    gpu1 = stats.dev_stats.add(device=GPU1)
    _executor_entry(gpu1, "dense_1/MatMul_1", 115, 6, out_bytes=1024,
                    records=(("GPU_1_bfc", 116, 1024), ("cuda_host_bfc", 116, 1 << 20)))
    for stream in ("/device:GPU:0/stream:7", "/device:GPU:0/stream:13"):
        dev = stats.dev_stats.add(device=stream)
        for name, start, duration in KERNELS:
            _tracer_entry(dev, name, start, duration)
    every = stats.dev_stats.add(device=STREAM_ALL)
    for name, start, duration in KERNELS:
        _tracer_entry(every, name, start, duration)
    copies = stats.dev_stats.add(device="/device:GPU:0/stream:14<MemcpyH2D>")
    _tracer_entry(copies, "edge_12_x/_3:MemcpyHtoD", 96, 2)
    _tracer_entry(copies, "MemcpyH2D", 97, 2)
    memcpy = stats.dev_stats.add(device="/device:GPU:0/memcpy")
    _tracer_entry(memcpy, "edge_12_x/_3:MemcpyHtoD", 96, 2)
    _tracer_entry(memcpy, "MemcpyH2D", 97, 2)
    sync = stats.dev_stats.add(device="/device:GPU:0/sync")
    _tracer_entry(sync, "cuStreamSynchronize", 250, 30)
    return metadata


def _folded(metadata: RunMetadata) -> _TraceStats:
    """The per-op figures ``trace_step`` gathers from this one traced step of a graph of ``GRAPH_OPS``."""
    stats = _TraceStats({name: [] for name in GRAPH_OPS})
    stats.add(metadata.step_stats, {}, with_aliases=True)
    return stats


def test_a_gpu_op_time_is_the_sum_of_its_stream_all_kernels():
    """Not the enqueue time of the executor entry, not the stream:N duplicates, not the copies."""
    times = _folded(gpu_run_metadata()).times
    assert times["dense/MatMul"] == [42.0]
    assert times["dense/Relu"] == [7.0]


def test_kernels_of_a_logical_gpu_are_found_by_op_name_on_the_physical_gpus_streams():
    stats = _folded(gpu_run_metadata())
    assert stats.times["dense_1/MatMul_1"] == [40.0]
    assert stats.devices["dense_1/MatMul_1"] == GPU1


def test_a_gpu_op_without_kernels_keeps_its_executor_time_and_cpu_ops_are_unchanged():
    times = _folded(gpu_run_metadata()).times
    assert times["dense/Reshape"] == [4.0]
    assert times["loss/Sum"] == [9.0]
    assert times["x"] == [1.0]


def test_kernels_without_an_op_of_the_graph_and_copies_are_not_ops():
    stats = _folded(gpu_run_metadata())
    assert set(stats.times) == set(GRAPH_OPS)
    assert set(stats.devices.values()) == {CPU0, GPU0, GPU1}


def test_memory_and_device_of_a_gpu_op_come_from_its_executor_entry():
    stats = _folded(gpu_run_metadata())
    assert stats.devices["dense/MatMul"] == GPU0
    assert stats.memory["dense/MatMul"] == 8192.0
    assert stats.memory["dense/Reshape"] == 8192.0


def test_kernel_durations_prefer_nanoseconds_when_the_tracer_writes_them():
    metadata = RunMetadata()
    _executor_entry(metadata.step_stats.dev_stats.add(device=GPU0), "dense/Relu", 100, 5)
    every = metadata.step_stats.dev_stats.add(device=STREAM_ALL)
    every.node_stats.add(node_name="dense/Relu:Relu", all_start_micros=120, all_end_rel_micros=2,
                         op_end_rel_micros=2, all_end_rel_nanos=2600, op_end_rel_nanos=2600)
    assert _folded(metadata).times["dense/Relu"] == [2.6]


def test_the_executed_order_leaves_out_the_gpu_tracers_pseudo_devices():
    executed = executed_device_order(gpu_run_metadata().step_stats)
    assert set(executed) == {CPU0, GPU0, GPU1}
    assert executed[GPU0] == ["dense/MatMul", "dense/Relu", "dense/Reshape"]


def test_the_calibration_gap_reads_executor_entries_only():
    """A kernel entry named like its op (no ``:Type``) must not replace the executor's times."""
    metadata = RunMetadata()
    stats = metadata.step_stats
    _executor_entry(stats.dev_stats.add(device=GPU0), "calibrate/0_cross/producer", 100, 5)
    _executor_entry(stats.dev_stats.add(device=GPU1), "calibrate/0_cross/consumer", 150, 5)
    every = stats.dev_stats.add(device=STREAM_ALL)
    _tracer_entry(every, "calibrate/0_cross/producer", 110, 20)
    _tracer_entry(every, "calibrate/0_cross/consumer", 160, 20)
    # producer ends at 100 + 2 + 5 = 107 µs, the consumer starts at 150 µs
    assert _gap_us(stats, "calibrate/0_cross/producer", "calibrate/0_cross/consumer") == pytest.approx(43.0)


def test_a_gpu_peak_is_not_replaced_by_the_cpu_peak_of_the_same_index():
    measured = {CPU0: 4096.0, GPU0: 4.0e8, GPU1: 2.0e8}
    assert _peaks_by_index(measured) == {0: 4.0e8, 1: 2.0e8}
    assert _peaks_by_index(dict(reversed(list(measured.items())))) == {0: 4.0e8, 1: 2.0e8}
    assert peak_metrics(measured, [4.4e8, 1.0e8])["measured_peak_memory_bytes"] == 4.0e8
    cpus = {CPU0: 10.0, "/job:localhost/replica:0/task:0/device:CPU:1": 20.0}
    assert _peaks_by_index(cpus) == {0: 10.0, 1: 20.0}


def test_a_gpu_peak_counts_its_own_allocator_only():
    """Pinned host memory (``gpu_host_bfc``, ``cuda_host_bfc``) is not the GPU's; each logical GPU
    has its own allocator; tracer pseudo-devices have no peak."""
    peaks = measured_peak_bytes(gpu_run_metadata().step_stats, {GPU0: 1000.0})
    assert peaks == {GPU0: 1000.0 + 8192 + 8192, GPU1: 1024.0, CPU0: 4.0}


def test_a_gpu_peak_leaves_out_another_gpus_allocator_and_host_allocators():
    metadata = RunMetadata()
    gpu1 = metadata.step_stats.dev_stats.add(device=GPU1)
    _executor_entry(gpu1, "a", 10, 1, records=(("GPU_1_bfc", 11, 300), ("GPU_0_bfc", 11, 5000),
                                                 ("cpu", 11, 7000), ("mklcpu", 11, 7000)))
    _executor_entry(gpu1, "b", 20, 1, records=(("GPU_1_bfc", 21, -300), ("GPU_1_bfc", 22, 200)))
    stream = metadata.step_stats.dev_stats.add(device=STREAM_ALL)
    _executor_entry(stream, "a:Op", 10, 1, records=(("GPU_0_bfc", 12, 9999),))
    assert measured_peak_bytes(metadata.step_stats, {}) == {GPU1: 300.0}


def test_fed_inputs_are_resident_on_the_device_of_their_placeholder_gpus_too():
    """No allocation record holds a fed input: a GPU's copy of it is allocated by the rendezvous
    (``SameWorkerRecvDone``: ``dst_device->GetAllocator``), not through an op's tracking allocator."""
    tf = tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/device:GPU:0"):
            tf.compat.v1.placeholder("float32", (8, 16), name="x")
            tf.Variable(tf.zeros((16, 4)), name="w")
        with tf.device("/device:CPU:0"):
            tf.compat.v1.placeholder("float32", (8, 2), name="y")
    resident = resident_bytes(SimpleNamespace(graph=graph))
    assert resident == {GPU0: 8 * 16 * 4 + 16 * 4 * 4, CPU0: 8 * 2 * 4}
