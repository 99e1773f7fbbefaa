"""TensorFlow adapter: model zoo, training-step graphs, profiling, Standard Evaluation, validation.

Everything here imports TensorFlow, so nothing in :mod:`celeritas_core` imports this package; the
CLI imports it lazily, only for the commands that need it. Graphs run in
``tf.compat.v1`` graph mode (``Session`` with ``RunOptions(trace_level=FULL_TRACE)``), with
logical CPU devices (``ConfigProto(device_count={"CPU": N, "GPU": 0})``) standing in for GPUs
where none are present, or on logical GPUs split from one GPU (:func:`celeritas_tf.tf.use_logical_gpus`,
used by ``bench/bench_gpu.py``).
"""
