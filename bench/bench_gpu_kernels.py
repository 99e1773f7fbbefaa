"""Does the analytical cost model (``analytical:h100``) predict real GPU kernel times?

The GPU machine this project can sometimes measure on is one H100 or H200 with PyTorch, JAX and
CuPy but no TensorFlow, so the TensorFlow harness (``bench/bench_gpu.py``) cannot run there. This
benchmark splits the question in two, so that the GPU side needs no TensorFlow:

``export`` (here, with TensorFlow)
    builds the zoo models' training steps (the paper's configurations) at several batch sizes,
    reads every op's static shapes, attributes and small constant inputs (axes, permutations,
    multiples), and its analytical FLOPs and bytes touched (:mod:`celeritas_tf.analytical`), and
    writes the distinct kernels and how often each graph runs each one to a catalogue,
    ``bench/gpu_kernel_catalog.json`` (``celeritas-gpu-kernel-catalog/1``, committed, so the GPU
    side runs from a clone);

``run`` (the default; on the GPU machine)
    times each catalogued kernel with PyTorch on the GPU (JAX when PyTorch has no GPU), and the
    card's copy bandwidth (host to device, device to host, device to device, pinned host memory),
    and compares with the analytical model evaluated from the catalogue's FLOPs and bytes;

``report RESULTS`` (here or anywhere)
    the tables of an earlier run's results against this checkout's presets
    (:data:`celeritas_tf.analytical.DEVICES`), or those the catalogue recorded at export
    (``--catalogue-presets``): how a change of the model scores on kernels timed once.

How a kernel is timed (PyTorch on CUDA): inputs are random (never zeros), ``cudnn.benchmark`` is
on (TensorFlow autotunes convolutions too), three warm-up calls, then ``r`` back-to-back calls
(``r`` so that they take about 2 ms, at most 32) are captured in a CUDA graph and the graph is
replayed 5 times between CUDA events: ``graph_us`` is the median replay over ``r``, the device
time of the op's kernels with launch gaps of about a microsecond. ``eager_us`` is the same ``r``
calls launched one by one from Python (the median of 3 runs over ``r``): for short kernels it is
the launch rate, not the kernel. A kernel of 1 ms or more gets one eager run and 3 replays. Small
inputs stay in the L2 cache between repeats (as a consumer finds its producer's output there),
so memory-bound kernels of under about 50 MB can beat the DRAM bandwidth. TF32: TensorFlow runs
float32 matmuls and convolutions in TF32 by default on Ampere and newer; matmul and convolution
kinds are timed both ways (``tf32`` and ``fp32`` columns). The analytical model's FLOP peak is
FP32 without tensor cores.

What it reports (stdout, the table last; ``build/bench/gpu_kernels.json``):

* the **per-op floor**: the smallest kernel (one float added) in graph replay and eager launch,
  against the model's ``launch_overhead_us``;
* per **op kind** (``conv``, ``conv_input``, ``conv_filter``, ``matmul``, ``batch_matmul``,
  ``einsum``, ``elementwise``, ``reduce``, ``pool``, ``pool_grad``, ``softmax``, ``copy``,
  ``optimizer``): the kernels timed, the median of measured / analytical over them, and the
  time-weighted ratio (sum measured over sum analytical, each kernel counted as often as the
  graphs run it);
* per **model graph** (model, batch): the analytical and measured sum over the timed ops, their
  ratio, and the time-weighted deviation ``Σ|measured − analytical| / Σ measured``; and the share
  of the graph's analytical time in ops no backend kernel stands for (``untimed``);
* the **copy bandwidth**: per direction a least-squares fit ``t = latency + bytes / bandwidth``
  over 4 KiB to 1 GiB.

A budget of work, not of time, shapes the figures: kernels are timed in a fixed order
(:func:`kernel_order`: every graph's heaviest kernel, then every graph's second, …) and
``--max-kernels`` cuts the tail. ``--budget-s`` (a wall-clock limit, for the machine's
10-minute calls) may stop early; the output then says how many were cut, and ``--resume``
with that run's results times only the rest in a later call.

Without a GPU (no PyTorch or JAX GPU), ``run`` prints one line and exits 0. ``--cpu-rehearsal``
times the small kernels (``--max-bytes``, default 8 MiB in the rehearsal) with JAX or PyTorch
on the CPU to check the harness end to end: its figures are not GPU figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "celeritas-gpu-kernel-catalog/1"
RESULT_FORMAT = "celeritas-gpu-kernels/1"
DEFAULT_CATALOG = Path(__file__).resolve().parent / "gpu_kernel_catalog.json"
CATALOG_HELP = "the kernel catalogue (default: bench/gpu_kernel_catalog.json)"
DEFAULT_OUT = "build/bench/gpu_kernels.json"
NO_GPU = "bench_gpu_kernels: no GPU visible to PyTorch or JAX; nothing measured, nothing written"
MIB = 2**20
#: The paper's four models at their paper batch and two smaller ones (micro-batches: the per-op
#: floor matters there). The batches are the paper's divided by 1, 8 and 64 (at least 1).
EXPORT_MODELS = ("inception_v3", "nmt", "transformer", "tensor_holography")
BATCH_DIVISORS = (1, 8, 64)
#: A few calls of one kernel captured in one CUDA graph should take about this long (µs).
TARGET_CAPTURE_US = 2000.0
MAX_REPEATS = 32
GRAPH_REPLAYS = 5
EAGER_RUNS = 3
WARMUP_CALLS = 3
#: Kernels whose repeated outputs would hold more than this are captured fewer times (bytes).
MAX_CAPTURE_BYTES = 4 * 2**30
COPY_SIZES = tuple(4096 * 4**k for k in range(10))  # 4 KiB .. 1 GiB
REHEARSAL_MAX_BYTES = 8 * MIB
#: A kernel at least this long (µs) is timed with one eager run and 3 graph replays.
LONG_KERNEL_US = 1000.0
#: The PyTorch caching allocator is emptied between kernels once it holds this much (bytes).
RELEASE_BYTES = 16 * 2**30
#: The largest batch of an export of the models' small configurations (``export --small``).
SMALL_BATCH = 8

#: TensorFlow op type → the kind of kernel that stands for it (ops missing here are untimed).
KINDS: dict[str, str] = {
    "Conv2D": "conv",
    "DepthwiseConv2dNative": "conv",
    "Conv2DBackpropInput": "conv_input",
    "DepthwiseConv2dNativeBackpropInput": "conv_input",
    "Conv2DBackpropFilter": "conv_filter",
    "DepthwiseConv2dNativeBackpropFilter": "conv_filter",
    "MatMul": "matmul",
    "BatchMatMul": "batch_matmul",
    "BatchMatMulV2": "batch_matmul",
    "BatchMatMulV3": "batch_matmul",
    "Einsum": "einsum",
    "Sum": "reduce",
    "Mean": "reduce",
    "Max": "reduce",
    "Min": "reduce",
    "Prod": "reduce",
    "BiasAddGrad": "reduce",
    "L2Loss": "reduce",
    "MaxPool": "pool",
    "AvgPool": "pool",
    "MaxPoolGrad": "pool_grad",
    "AvgPoolGrad": "pool_grad",
    "Softmax": "softmax",
    "LogSoftmax": "softmax",
    "SparseSoftmaxCrossEntropyWithLogits": "softmax",
    "ConcatV2": "copy",
    "Pack": "copy",
    "Tile": "copy",
    "Transpose": "copy",
    "Split": "copy",
    "SplitV": "copy",
    "Unpack": "copy",
    "Slice": "copy",
    "StridedSlice": "copy",
    "Pad": "copy",
    "GatherV2": "copy",
    "BroadcastTo": "copy",
    "Fill": "copy",
    "ZerosLike": "copy",
    "OnesLike": "copy",
    "ResourceApplyAdam": "optimizer",
    "ResourceApplyGradientDescent": "optimizer",
    "AssignVariableOp": "optimizer",
    "AssignSubVariableOp": "optimizer",
    "AssignAddVariableOp": "optimizer",
}
_UNARY = (
    "Relu",
    "Neg",
    "Rsqrt",
    "Sqrt",
    "Sigmoid",
    "Tanh",
    "Exp",
    "Log",
    "Square",
    "Cast",
    "Reciprocal",
    "Abs",
    "Sign",
    "Floor",
    "Erf",
    "Softplus",
    "LogicalNot",
    "MatrixBandPart",
    "Relu6",
    "Elu",
)
_BINARY = (
    "AddV2",
    "Add",
    "Sub",
    "Mul",
    "RealDiv",
    "Div",
    "Maximum",
    "Minimum",
    "SquaredDifference",
    "ReluGrad",
    "RsqrtGrad",
    "SigmoidGrad",
    "TanhGrad",
    "SqrtGrad",
    "BiasAdd",
    "FloorMod",
    "Pow",
    "Less",
    "Greater",
    "LessEqual",
    "GreaterEqual",
    "Equal",
    "NotEqual",
    "LogicalAnd",
    "LogicalOr",
    "FloorDiv",
    "DivNoNan",
    "MulNoNan",
)
KINDS.update({op: "elementwise" for op in (*_UNARY, *_BINARY, "SelectV2", "Select", "AddN")})
#: Kinds timed both in TF32 and in strict FP32.
PRECISION_KINDS = frozenset({"conv", "conv_input", "conv_filter", "matmul", "batch_matmul", "einsum"})
KIND_ORDER = (
    "conv",
    "conv_input",
    "conv_filter",
    "matmul",
    "batch_matmul",
    "einsum",
    "elementwise",
    "reduce",
    "pool",
    "pool_grad",
    "softmax",
    "copy",
    "optimizer",
)
#: Attributes a kernel's shape of work depends on (the rest, e.g. names, do not change its time).
_ATTRS = (
    "strides",
    "padding",
    "data_format",
    "dilations",
    "transpose_a",
    "transpose_b",
    "adj_x",
    "adj_y",
    "equation",
    "ksize",
    "keep_dims",
    "num_split",
    "axis",
    "begin_mask",
    "end_mask",
    "shrink_axis_mask",
    "new_axis_mask",
    "ellipsis_mask",
    "N",
    "is_training",
)


# --------------------------------------------------------------------------------------------
# the catalogue


class BadInput(Exception):
    """A catalogue or results file that cannot be used: one line, exit 2."""


@dataclass(frozen=True)
class Kernel:
    """One distinct op of the catalogue: what runs and what the analytical model charges it."""

    op: str
    kind: str
    inputs: tuple[tuple[tuple[int, ...], str], ...]
    """Data inputs: (shape, dtype name) each; a resource input is the variable's (shape, dtype)."""
    outputs: tuple[tuple[tuple[int, ...], str], ...]
    attrs: Mapping[str, Any]
    consts: Mapping[int, list[int]]
    """Small integer constant inputs by input position (axes, permutations, multiples)."""
    flops: float
    bytes_touched: float

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "kind": self.kind,
            "inputs": [[list(s), d] for s, d in self.inputs],
            "outputs": [[list(s), d] for s, d in self.outputs],
            "attrs": dict(self.attrs),
            "consts": {str(k): v for k, v in self.consts.items()},
            "flops": self.flops,
            "bytes": self.bytes_touched,
        }

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> Kernel:
        return Kernel(
            doc["op"],
            doc["kind"],
            tuple((tuple(int(x) for x in s), str(d)) for s, d in doc["inputs"]),
            tuple((tuple(int(x) for x in s), str(d)) for s, d in doc["outputs"]),
            dict(doc["attrs"]),
            {int(k): list(v) for k, v in doc["consts"].items()},
            float(doc["flops"]),
            float(doc["bytes"]),
        )


@dataclass(frozen=True)
class GraphUse:
    """How one model graph (model, batch) uses the catalogue's kernels."""

    model: str
    batch: int
    ops: int
    kernels: tuple[tuple[int, int], ...]
    """(kernel index, how many ops of the graph are that kernel)."""
    untimed: Mapping[str, tuple[int, float, float]]
    """Op type → (ops, FLOPs, bytes touched) of the graph's non-free ops no kernel stands for."""


@dataclass(frozen=True)
class Catalog:
    """The kernels of the zoo graphs and the analytical device presets they are compared with."""

    devices: Mapping[str, Mapping[str, float]]
    kernels: tuple[Kernel, ...]
    graphs: tuple[GraphUse, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "devices": {k: dict(v) for k, v in self.devices.items()},
            "kernels": [k.to_json() for k in self.kernels],
            "graphs": [
                {
                    "model": g.model,
                    "batch": g.batch,
                    "ops": g.ops,
                    "kernels": [list(x) for x in g.kernels],
                    "untimed": {k: list(v) for k, v in g.untimed.items()},
                }
                for g in self.graphs
            ],
        }

    @staticmethod
    def load(path: Path) -> Catalog:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise BadInput(f"cannot read catalogue {path}: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise BadInput(f"{path} is not a {FORMAT} file")
        graphs = tuple(
            GraphUse(
                g["model"],
                int(g["batch"]),
                int(g["ops"]),
                tuple((int(i), int(n)) for i, n in g["kernels"]),
                {k: (int(v[0]), float(v[1]), float(v[2])) for k, v in g["untimed"].items()},
            )
            for g in doc["graphs"]
        )
        return Catalog(doc["devices"], tuple(Kernel.from_json(k) for k in doc["kernels"]), graphs)


def roofline_us(kernel: Kernel, device: Mapping[str, float]) -> float:
    """The analytical model's time without its per-op floor (µs): max(FLOPs / peak, bytes / bandwidth)."""
    return (
        max(
            kernel.flops / device["peak_flops_per_s"],
            kernel.bytes_touched / device["memory_bandwidth_bytes_per_s"],
        )
        * 1e6
    )


def analytical_us(kernel: Kernel, device: Mapping[str, float]) -> float:
    """The analytical model's time of ``kernel`` (µs): the roofline plus the per-op floor."""
    return roofline_us(kernel, device) + device["launch_overhead_us"]


# --------------------------------------------------------------------------------------------
# export (with TensorFlow)


def export_catalog(
    models: Sequence[str], divisors: Sequence[int], *, paper: bool = True, log: Callable[[str], None] = print
) -> Catalog:
    """Build each model's training step at its batch divided by each of ``divisors`` and
    catalogue its kernels (see the module docstring). Needs TensorFlow."""
    # lazy: TensorFlow (seconds to import) is needed by export only; the GPU side has none
    from celeritas_tf.analytical import DEVICES, StaticShapes, analytical_cost_report
    from celeritas_tf.models import get_model
    from celeritas_tf.step import build_training_step
    from celeritas_tf.zoo import ZOO

    index: dict[str, int] = {}
    kernels: list[Kernel] = []
    graphs: list[GraphUse] = []
    for name in models:
        base = int(ZOO[name].paper_batch_size) if paper else SMALL_BATCH
        for batch in sorted({max(1, base // d) for d in divisors}, reverse=True):
            started = time.perf_counter()
            graph_def = build_training_step(get_model(name, paper=paper), batch).step_graph_def()
            report = analytical_cost_report(graph_def, DEVICES["h100"])
            shapes = StaticShapes(graph_def)
            counts: dict[int, int] = {}
            untimed: dict[str, list[float]] = {}
            for node in graph_def.node:
                if report.bytes_touched[node.name] == 0 and report.flops[node.name] == 0:
                    continue  # a free op (no kernel)
                kernel = _kernel_of(node, shapes, report)
                if kernel is None:
                    row = untimed.setdefault(node.op, [0, 0.0, 0.0])
                    row[0] += 1
                    row[1] += report.flops[node.name]
                    row[2] += report.bytes_touched[node.name]
                    continue
                key = json.dumps(kernel.to_json(), sort_keys=True)
                k = index.setdefault(key, len(kernels))
                if k == len(kernels):
                    kernels.append(kernel)
                counts[k] = counts.get(k, 0) + 1
            graphs.append(
                GraphUse(
                    name,
                    batch,
                    len(graph_def.node),
                    tuple(sorted(counts.items())),
                    {op: (int(r[0]), r[1], r[2]) for op, r in sorted(untimed.items())},
                )
            )
            log(
                f"export: {name} batch {batch}: {len(graph_def.node)} ops, {len(counts)} distinct kernels "
                f"({len(kernels)} in all), {time.perf_counter() - started:.0f} s"
            )
    devices = current_presets()
    return Catalog(devices, tuple(kernels), tuple(graphs))


def _kernel_of(node: Any, shapes: Any, report: Any) -> Kernel | None:
    """The catalogue entry of one non-free op, or None when no kernel kind stands for it."""
    kind = KINDS.get(node.op)
    if kind is None:
        return None
    inputs: list[tuple[tuple[int, ...], str]] = []
    consts: dict[int, list[int]] = {}
    for position, text in enumerate(i for i in node.input if not i.startswith("^")):
        producer, _, slot = text.partition(":")
        k = int(slot) if slot else 0
        info = shapes.info.get(producer)
        if info is None or k >= len(info.shapes):
            return None
        dtype = _dtype_name(info.dtypes[k]) if k < len(info.dtypes) else "float32"
        if dtype == "resource":
            variable = _variable_of(producer, shapes)
            if variable is None:
                return None
            inputs.append(variable)
            continue
        inputs.append((tuple(int(d) for d in info.shapes[k]), dtype))
        value = _small_int_const(shapes.nodes.get(producer))
        if value is not None:
            consts[position] = value
    info = shapes.info[node.name]
    outputs = tuple(
        (tuple(int(d) for d in s), _dtype_name(info.dtypes[k]) if k < len(info.dtypes) else "float32")
        for k, s in enumerate(info.shapes)
    )
    attrs = {name: _attr_value(node.attr[name]) for name in _ATTRS if name in node.attr}
    return Kernel(
        node.op,
        kind,
        tuple(inputs),
        outputs,
        attrs,
        consts,
        float(report.flops[node.name]),
        float(report.bytes_touched[node.name]),
    )


def _dtype_name(enum: int) -> str:
    # lazy: export only (TensorFlow is loaded by then)
    import tensorflow as tf

    try:
        return str(tf.dtypes.as_dtype(enum).name)
    except TypeError:
        return "float32"


def _variable_of(op: str, shapes: Any) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) of the variable behind a resource handle (unknown dims as 1)."""
    # lazy: export only (TensorFlow is loaded by then)
    from celeritas_tf.analytical import variable_node

    node = variable_node(op, shapes)
    if node is None or "shape" not in node.attr or "dtype" not in node.attr:
        return None
    dims = tuple(max(int(d.size), 1) for d in node.attr["shape"].shape.dim)
    return dims, _dtype_name(node.attr["dtype"].type)


def _small_int_const(node: Any) -> list[int] | None:
    """The values of an integer ``Const`` of at most 64 elements (axes, permutations…), else None."""
    if node is None or node.op != "Const" or "value" not in node.attr:
        return None
    # lazy: export only (TensorFlow is loaded by then)
    import tensorflow as tf

    value = tf.make_ndarray(node.attr["value"].tensor)
    if value.dtype.kind not in "iu" or value.size > 64:
        return None
    return [int(x) for x in value.reshape(-1)]


def _attr_value(attr: Any) -> Any:
    """A NodeDef attribute as JSON (ints, floats, strings, booleans, lists of ints)."""
    which = attr.WhichOneof("value")
    if which == "list":
        return [int(x) for x in attr.list.i] or [x.decode() for x in attr.list.s]
    if which == "s":
        return attr.s.decode()
    if which in ("i", "f", "b"):
        return getattr(attr, which)
    return None


# --------------------------------------------------------------------------------------------
# shapes of work shared by the backends


class Unsupported(Exception):
    """The backend has no kernel that stands for this op with these inputs."""


def _spatial(kernel: Kernel, attr: str, default: int) -> tuple[int, int]:
    """(height, width) entries of a 4-element NHWC/NCHW attribute (strides, dilations, ksize)."""
    values = kernel.attrs.get(attr) or [default] * 4
    if len(values) != 4:
        raise Unsupported(f"{attr}={values}")
    return (int(values[2]), int(values[3])) if _nchw(kernel) else (int(values[1]), int(values[2]))


def _nchw(kernel: Kernel) -> bool:
    return str(kernel.attrs.get("data_format", "NHWC")).upper().startswith("NC")


def _nhwc_dims(kernel: Kernel, shape: Sequence[int]) -> tuple[int, int, int, int]:
    """(N, H, W, C) of a 4-d activation in the kernel's data format."""
    if len(shape) != 4:
        raise Unsupported(f"a {len(shape)}-d activation")
    n, a, b, c = (int(x) for x in shape)
    return (n, b, c, a) if _nchw(kernel) else (n, a, b, c)


def same_padding(size: int, window: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TensorFlow's SAME padding (before, after) of one spatial dimension."""
    effective = (window - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def pads(
    kernel: Kernel,
    hw: tuple[int, int],
    window: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int] = (1, 1),
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Per spatial dimension, the (before, after) padding of ``kernel``'s ``padding`` attribute."""
    padding = str(kernel.attrs.get("padding", "VALID")).upper()
    if padding == "VALID":
        return (0, 0), (0, 0)
    if padding != "SAME":
        raise Unsupported(f"padding {padding}")
    return (
        same_padding(hw[0], window[0], stride[0], dilation[0]),
        same_padding(hw[1], window[1], stride[1], dilation[1]),
    )


def axes_of(kernel: Kernel, position: int, rank: int) -> tuple[int, ...]:
    """The reduction axes a constant input gives (non-negative, sorted)."""
    if kernel.op == "BiasAddGrad":
        return tuple(a for a in range(rank) if a != (1 if _nchw(kernel) else rank - 1))
    if kernel.op == "L2Loss":
        return tuple(range(rank))
    values = kernel.consts.get(position)
    if values is not None:
        return tuple(sorted({int(a) % max(rank, 1) for a in values}))
    # axes computed at run time (a broadcast's gradient, from BroadcastGradientArgs): the leading
    # axes whose removal leaves the output's elements
    shape = kernel.inputs[0][0]
    elements = math.prod(kernel.outputs[0][0]) if kernel.outputs else 1
    lead = next((k for k in range(rank + 1) if math.prod(shape[k:]) == elements), rank)
    return tuple(range(lead))


@dataclass
class Timing:
    """One kernel's measured times (µs) in one precision."""

    graph_us: float | None
    eager_us: float
    repeats: int
    note: str = ""


# --------------------------------------------------------------------------------------------
# PyTorch


class TorchBackend:
    """Kernels and timing through PyTorch (CUDA graphs and events on a GPU; wall clock on CPU)."""

    name = "torch"

    def __init__(self, device: str) -> None:
        # lazy: PyTorch exists on the GPU machine only, and the export side never needs it
        import torch
        import torch.nn.functional as functional

        self.torch, self.F, self.device = torch, functional, torch.device(device)
        self.cuda = self.device.type == "cuda"
        torch.backends.cudnn.benchmark = True
        self.generator = torch.Generator(device=self.device).manual_seed(0)

    def describe(self) -> dict[str, Any]:
        torch = self.torch
        out: dict[str, Any] = {"backend": "torch", "torch": torch.__version__, "device": str(self.device)}
        if self.cuda:
            props = torch.cuda.get_device_properties(self.device)
            out.update(
                gpu=props.name,
                multiprocessors=props.multi_processor_count,
                memory_bytes=props.total_memory,
                cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(),
            )
        return out

    def set_tf32(self, on: bool) -> None:
        self.torch.backends.cuda.matmul.allow_tf32 = on
        self.torch.backends.cudnn.allow_tf32 = on

    # -- tensors
    def tensor(self, shape: Sequence[int], dtype: str, *, high: int | None = None) -> Any:
        torch = self.torch
        shape = tuple(int(s) for s in shape)
        if dtype == "bool":
            return torch.rand(shape, device=self.device, generator=self.generator) > 0.5
        if dtype.startswith(("int", "uint")):
            return torch.randint(
                0,
                high or 7,
                shape,
                device=self.device,
                generator=self.generator,
                dtype=torch.int64 if dtype == "int64" else torch.int32,
            )
        tdtype = getattr(torch, dtype, torch.float32)
        return torch.rand(shape, device=self.device, generator=self.generator, dtype=tdtype) + 0.5

    def channels_last(self, nhwc: tuple[int, int, int, int], dtype: str = "float32") -> Any:
        n, h, w, c = nhwc
        return self.tensor((n, c, h, w), dtype).contiguous(memory_format=self.torch.channels_last)

    # -- kernels
    def build(self, kernel: Kernel) -> Callable[[], Any]:
        builder = getattr(self, f"_{kernel.kind}", None)
        if builder is None:
            raise Unsupported(kernel.kind)
        return builder(kernel)

    def _conv_geometry(
        self, kernel: Kernel, x_shape: Sequence[int], filter_shape: Sequence[int]
    ) -> dict[str, Any]:
        n, h, w, c = _nhwc_dims(kernel, x_shape)
        if len(filter_shape) != 4:
            raise Unsupported("filter rank")
        kh, kw, cin, cout = (int(v) for v in filter_shape)
        stride, dilation = _spatial(kernel, "strides", 1), _spatial(kernel, "dilations", 1)
        (ph0, ph1), (pw0, pw1) = pads(kernel, (h, w), (kh, kw), stride, dilation)
        if kernel.op.startswith("Depthwise"):
            groups, weight = c, (c * cout, 1, kh, kw)
        else:
            if cin <= 0 or c % cin:
                raise Unsupported("groups")
            groups, weight = c // cin, (cout, cin, kh, kw)
        padding = (max(ph0, ph1), max(pw0, pw1))  # symmetric: PyTorch has no asymmetric conv padding
        oh = (h + 2 * padding[0] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
        ow = (w + 2 * padding[1] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
        return dict(
            x=(n, h, w, c),
            weight=weight,
            out=(n, oh, ow, weight[0]),
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
        )

    def _conv(self, kernel: Kernel) -> Callable[[], Any]:
        g = self._conv_geometry(kernel, kernel.inputs[0][0], kernel.inputs[1][0])
        x = self.channels_last(g["x"])
        weight = self.tensor(g["weight"], "float32").contiguous(memory_format=self.torch.channels_last)
        return lambda: self.F.conv2d(x, weight, None, g["stride"], g["padding"], g["dilation"], g["groups"])

    def _conv_backward(
        self, kernel: Kernel, x_shape: Sequence[int], filter_shape: Sequence[int], mask: list[bool]
    ) -> Callable[[], Any]:
        g = self._conv_geometry(kernel, x_shape, filter_shape)
        x = self.channels_last(g["x"])
        weight = self.tensor(g["weight"], "float32").contiguous(memory_format=self.torch.channels_last)
        grad = self.channels_last(g["out"])
        backward = self.torch.ops.aten.convolution_backward
        return lambda: backward(
            grad,
            x,
            weight,
            None,
            list(g["stride"]),
            list(g["padding"]),
            list(g["dilation"]),
            False,
            [0, 0],
            g["groups"],
            mask,
        )

    def _conv_input(self, kernel: Kernel) -> Callable[[], Any]:
        return self._conv_backward(kernel, kernel.outputs[0][0], kernel.inputs[1][0], [True, False, False])

    def _conv_filter(self, kernel: Kernel) -> Callable[[], Any]:
        return self._conv_backward(kernel, kernel.inputs[0][0], kernel.outputs[0][0], [False, True, False])

    def _matmul(self, kernel: Kernel) -> Callable[[], Any]:
        a, b = (self.tensor(s, d) for s, d in kernel.inputs[:2])
        ta = bool(kernel.attrs.get("transpose_a") or kernel.attrs.get("adj_x"))
        tb = bool(kernel.attrs.get("transpose_b") or kernel.attrs.get("adj_y"))
        return lambda: self.torch.matmul(a.mT if ta else a, b.mT if tb else b)

    _batch_matmul = _matmul

    def _einsum(self, kernel: Kernel) -> Callable[[], Any]:
        operands = [self.tensor(s, d) for s, d in kernel.inputs]
        equation = str(kernel.attrs.get("equation", ""))
        return lambda: self.torch.einsum(equation, *operands)

    def _elementwise(self, kernel: Kernel) -> Callable[[], Any]:
        torch, aten = self.torch, self.torch.ops.aten
        op = kernel.op
        args = [self.tensor(s, d) for s, d in kernel.inputs]
        if op == "BiasAdd" and _nchw(kernel) and args[0].dim() == 4:
            args[1] = args[1].reshape(-1, 1, 1)
        out_dtype = kernel.outputs[0][1]
        if op == "AddN":
            return lambda: torch.stack(args).sum(0) if len(args) > 2 else torch.add(args[0], args[1])
        if op in ("SelectV2", "Select"):
            cond = args[0] if args[0].dtype == torch.bool else args[0] > 3
            return lambda: torch.where(cond, args[1], args[2])
        if op == "Cast":
            target = getattr(torch, out_dtype, torch.float32)
            return lambda: args[0].to(target)
        unary = {
            "Relu": torch.relu,
            "Neg": torch.neg,
            "Rsqrt": torch.rsqrt,
            "Sqrt": torch.sqrt,
            "Sigmoid": torch.sigmoid,
            "Tanh": torch.tanh,
            "Exp": torch.exp,
            "Log": torch.log,
            "Square": torch.square,
            "Reciprocal": torch.reciprocal,
            "Erf": torch.erf,
            "Softplus": self.F.softplus,
            "MatrixBandPart": torch.tril,
        }
        binary = {
            "ReluGrad": lambda dy, y: aten.threshold_backward(dy, y, 0),
            "SigmoidGrad": lambda y, dy: aten.sigmoid_backward(dy, y),
            "TanhGrad": lambda y, dy: aten.tanh_backward(dy, y),
            "RealDiv": torch.div,
            "Div": torch.div,
            "Sub": torch.sub,
            "Maximum": torch.maximum,
            "Minimum": torch.minimum,
            "FloorMod": torch.remainder,
            "Less": torch.lt,
            "Greater": torch.gt,
            "Equal": torch.eq,
            "LogicalAnd": torch.logical_and,
        }
        if op == "MatrixBandPart":
            return lambda: torch.tril(args[0])
        if len(args) == 1:
            fn = unary.get(op, torch.neg if args[0].is_floating_point() else torch.bitwise_not)
            return lambda: fn(args[0])
        if len(args) == 2:
            fn2 = binary.get(op, torch.mul if args[0].dtype != torch.bool else torch.logical_or)
            return lambda: fn2(args[0], args[1])
        raise Unsupported(f"{op} with {len(args)} inputs")

    def _reduce(self, kernel: Kernel) -> Callable[[], Any]:
        torch = self.torch
        x = self.tensor(*kernel.inputs[0])
        axes = axes_of(kernel, 1, x.dim())
        keep = bool(kernel.attrs.get("keep_dims", False))
        if not axes:
            return lambda: x.clone()
        if kernel.op == "L2Loss":
            return lambda: torch.linalg.vector_norm(x)
        fn = {"Mean": torch.mean, "Sum": torch.sum, "BiasAddGrad": torch.sum, "Prod": torch.prod}.get(
            kernel.op
        )
        if fn is not None:
            return lambda: fn(x, dim=axes, keepdim=keep)
        extreme = torch.amax if kernel.op == "Max" else torch.amin
        return lambda: extreme(x, dim=axes, keepdim=keep)

    def _pool_geometry(self, kernel: Kernel, x_shape: Sequence[int]) -> dict[str, Any]:
        n, h, w, c = _nhwc_dims(kernel, x_shape)
        window, stride = _spatial(kernel, "ksize", 1), _spatial(kernel, "strides", 1)
        (ph0, ph1), (pw0, pw1) = pads(kernel, (h, w), window, stride)
        padding = (min(max(ph0, ph1), window[0] // 2), min(max(pw0, pw1), window[1] // 2))
        return dict(x=(n, h, w, c), window=window, stride=stride, padding=padding)

    def _pool(self, kernel: Kernel) -> Callable[[], Any]:
        g = self._pool_geometry(kernel, kernel.inputs[0][0])
        x = self.channels_last(g["x"])
        if kernel.op == "MaxPool":
            return lambda: self.F.max_pool2d(x, g["window"], g["stride"], g["padding"])
        return lambda: self.F.avg_pool2d(x, g["window"], g["stride"], g["padding"], count_include_pad=False)

    def _pool_grad(self, kernel: Kernel) -> Callable[[], Any]:
        aten = self.torch.ops.aten
        g = self._pool_geometry(kernel, kernel.outputs[0][0])
        x = self.channels_last(g["x"])
        window, stride, padding = list(g["window"]), list(g["stride"]), list(g["padding"])
        if kernel.op == "MaxPoolGrad":
            out, indices = self.F.max_pool2d(x, g["window"], g["stride"], g["padding"], return_indices=True)
            grad = self.torch.rand_like(out)
            return lambda: aten.max_pool2d_with_indices_backward(
                grad, x, window, stride, padding, [1, 1], False, indices
            )
        grad = self.torch.rand_like(self.F.avg_pool2d(x, g["window"], g["stride"], g["padding"]))
        return lambda: aten.avg_pool2d_backward(grad, x, window, stride, padding, False, False, None)

    def _softmax(self, kernel: Kernel) -> Callable[[], Any]:
        torch = self.torch
        logits = self.tensor(*kernel.inputs[0])
        if kernel.op == "SparseSoftmaxCrossEntropyWithLogits":
            labels = self.tensor(kernel.inputs[1][0], "int64", high=int(logits.shape[-1]))
            return lambda: (self.F.cross_entropy(logits, labels, reduction="none"), torch.softmax(logits, -1))
        fn = torch.log_softmax if kernel.op == "LogSoftmax" else torch.softmax
        return lambda: fn(logits, -1)

    def _copy(self, kernel: Kernel) -> Callable[[], Any]:
        torch, op = self.torch, kernel.op
        args = [self.tensor(s, d) for s, d in kernel.inputs]
        if op == "ConcatV2" and kernel.consts.get(len(args) - 1):
            axis = int(kernel.consts[len(args) - 1][0])
            return lambda: torch.cat(args[:-1], dim=axis)
        if op == "Pack":
            axis = int(kernel.attrs.get("axis", 0) or 0)
            return lambda: torch.stack(args, dim=axis)
        if op == "Tile" and kernel.consts.get(1):
            multiples = kernel.consts[1]
            return lambda: args[0].repeat(*multiples)
        if op == "Transpose" and kernel.consts.get(1):
            perm = kernel.consts[1]
            return lambda: args[0].permute(*perm).contiguous()
        if op == "GatherV2" and kernel.consts.get(2) is not None:
            axis = int(kernel.consts[2][0]) % max(args[0].dim(), 1)
            index = self.tensor((max(args[1].numel(), 1),), "int64", high=int(args[0].shape[axis]))
            return lambda: torch.index_select(args[0], axis, index)
        if op in ("Fill", "ZerosLike", "OnesLike"):
            shape = kernel.outputs[0][0]
            return lambda: torch.full(shape, 1.0, device=self.device)
        # Split, Unpack, Slice, StridedSlice, Pad, BroadcastTo…: one copy of the outputs' elements
        elements = sum(math.prod(s) for s, _ in kernel.outputs)
        source = self.tensor((elements,), kernel.outputs[0][1])
        target = torch.empty_like(source)
        return lambda: target.copy_(source)

    def _optimizer(self, kernel: Kernel) -> Callable[[], Any]:
        torch = self.torch
        var = self.tensor(*kernel.inputs[0])
        if kernel.op == "ResourceApplyAdam":
            m, v, grad = (
                self.tensor(*kernel.inputs[0]),
                self.tensor(*kernel.inputs[0]),
                self.tensor(*kernel.inputs[0]),
            )
            step = torch.ones((), device=self.device)
            return lambda: torch._fused_adam_(
                [var],
                [grad],
                [m],
                [v],
                [],
                [step],
                lr=1e-3,
                beta1=0.9,
                beta2=0.999,
                weight_decay=0.0,
                eps=1e-7,
                amsgrad=False,
                maximize=False,
            )
        value = self.tensor(*kernel.inputs[-1])
        if kernel.op == "AssignVariableOp":
            return lambda: var.copy_(value)
        if kernel.op == "ResourceApplyGradientDescent":
            return lambda: var.sub_(value, alpha=1e-3)
        return lambda: var.sub_(value) if kernel.op == "AssignSubVariableOp" else var.add_(value)

    # -- timing
    def time(self, fn: Callable[[], Any], output_bytes: float) -> Timing:
        """Time ``fn`` (see the module docstring): warm-up, CUDA-graph replays and eager launches."""
        if not self.cuda:
            return _wall_clock(fn, self.torch.cpu.synchronize if hasattr(self.torch, "cpu") else None)
        torch = self.torch
        for _ in range(WARMUP_CALLS):
            fn()
        torch.cuda.synchronize()
        single = self._events(fn, 1)
        repeats = int(min(MAX_REPEATS, max(1, math.ceil(TARGET_CAPTURE_US / max(single, 1.0)))))
        repeats = int(max(1, min(repeats, MAX_CAPTURE_BYTES // max(int(output_bytes), 1))))
        long = single >= LONG_KERNEL_US  # long kernels vary little: fewer runs
        runs = 1 if long else EAGER_RUNS
        eager = statistics.median(self._events(fn, repeats) for _ in range(runs)) / repeats
        try:
            graph = torch.cuda.CUDAGraph()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with torch.cuda.graph(graph):
                    for _ in range(repeats):
                        fn()
            if any("empty" in str(w.message).lower() for w in caught):
                return Timing(None, eager, repeats, "no CUDA graph: nothing was captured")
            graph.replay()
            torch.cuda.synchronize()
            replays = [self._events(graph.replay, 1) for _ in range(3 if long else GRAPH_REPLAYS)]
            del graph
            return Timing(statistics.median(replays) / repeats, eager, repeats)
        except Exception as exc:
            torch.cuda.synchronize()
            return Timing(None, eager, repeats, f"no CUDA graph: {str(exc).splitlines()[0][:120]}")

    def _events(self, fn: Callable[[], Any], calls: int) -> float:
        """Device time of ``calls`` back-to-back calls of ``fn`` between two CUDA events (µs)."""
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) * 1e3

    def release(self) -> None:
        """Give cached device memory back once it holds more than :data:`RELEASE_BYTES`."""
        if self.cuda and self.torch.cuda.memory_reserved(self.device) > RELEASE_BYTES:
            self.torch.cuda.empty_cache()

    def floor_kernel(self) -> Callable[[], Any]:
        x = self.tensor((1,), "float32")
        return lambda: self.torch.add(x, 1.0)

    def copy_times(self, size: int) -> dict[str, float]:
        """Median time (µs) of one copy of ``size`` bytes per direction (pinned host memory)."""
        if not self.cuda:
            return {}
        torch = self.torch
        host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        device, other = (torch.empty(size, dtype=torch.uint8, device=self.device) for _ in range(2))
        copies = {
            "h2d": lambda: device.copy_(host, non_blocking=True),
            "d2h": lambda: host.copy_(device, non_blocking=True),
            "d2d": lambda: other.copy_(device),
        }
        out = {}
        for direction, fn in copies.items():
            fn()
            out[direction] = statistics.median(self._events(fn, 1) for _ in range(5))
        return out


def _wall_clock(fn: Callable[[], Any], synchronize: Callable[[], Any] | None = None) -> Timing:
    """Host wall-clock time of ``fn`` (µs): median of 5 runs after the warm-up (CPU rehearsals)."""

    def once() -> float:
        started = time.perf_counter()
        result = fn()
        block = getattr(result, "block_until_ready", None)
        if block is not None:
            block()
        if synchronize is not None:
            synchronize()
        return (time.perf_counter() - started) * 1e6

    for _ in range(WARMUP_CALLS):
        once()
    return Timing(None, statistics.median(once() for _ in range(5)), 1)


# --------------------------------------------------------------------------------------------
# JAX


class JaxBackend:
    """Kernels through JAX (each op one jitted function); timed by host wall clock after
    ``block_until_ready`` (dispatch included), so it suits rehearsals, not floors."""

    name = "jax"

    def __init__(self, platform_name: str) -> None:
        # lazy: JAX is installed for the tests and exists on the GPU machine; export never needs it
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp, self.lax = jax, jnp, jax.lax
        self.device = jax.devices(platform_name)[0]
        self.rng = np.random.default_rng(0)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "jax",
            "jax": self.jax.__version__,
            "device": str(self.device),
            "gpu": getattr(self.device, "device_kind", ""),
        }

    def set_tf32(self, on: bool) -> None:
        self.jax.config.update("jax_default_matmul_precision", "tensorfloat32" if on else "float32")

    def tensor(self, shape: Sequence[int], dtype: str, *, high: int | None = None) -> Any:
        shape = tuple(int(s) for s in shape)
        if dtype == "bool":
            value = self.rng.random(shape) > 0.5
        elif dtype.startswith(("int", "uint")):
            value = self.rng.integers(0, high or 7, shape).astype(np.int32)
        else:
            value = (self.rng.random(shape, dtype=np.float32) + 0.5).astype(np.float32)
        return self.jax.device_put(value, self.device)

    def build(self, kernel: Kernel) -> Callable[[], Any]:
        builder = getattr(self, f"_{kernel.kind}", None)
        if builder is None:
            raise Unsupported(kernel.kind)
        fn, args = builder(kernel)
        jitted = self.jax.jit(fn)
        return lambda: jitted(*args)

    def _conv_fn(
        self, kernel: Kernel, x_shape: Sequence[int], filter_shape: Sequence[int]
    ) -> tuple[Any, Any, Any]:
        _, h, w, c = _nhwc_dims(kernel, x_shape)
        kh, kw, cin, cout = (int(v) for v in filter_shape)
        stride, dilation = _spatial(kernel, "strides", 1), _spatial(kernel, "dilations", 1)
        padding = pads(kernel, (h, w), (kh, kw), stride, dilation)
        groups, hwio = (
            (c, (kh, kw, 1, c * cout))
            if kernel.op.startswith("Depthwise")
            else (c // max(cin, 1), (kh, kw, cin, cout))
        )
        numbers = ("NCHW", "HWIO", "NCHW") if _nchw(kernel) else ("NHWC", "HWIO", "NHWC")

        def conv(x: Any, weight: Any) -> Any:
            return self.lax.conv_general_dilated(
                x,
                weight,
                stride,
                padding,
                rhs_dilation=dilation,
                dimension_numbers=numbers,
                feature_group_count=groups,
            )

        return conv, self.tensor(x_shape, "float32"), self.tensor(hwio, "float32")

    def _conv(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        conv, x, weight = self._conv_fn(kernel, kernel.inputs[0][0], kernel.inputs[1][0])
        return conv, [x, weight]

    def _conv_input(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        conv, x, weight = self._conv_fn(kernel, kernel.outputs[0][0], kernel.inputs[1][0])
        grad = self.tensor(kernel.inputs[2][0], "float32")
        return (lambda x_, w_, g_: self.jax.vjp(lambda t: conv(t, w_), x_)[1](g_)[0]), [x, weight, grad]

    def _conv_filter(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        conv, x, weight = self._conv_fn(kernel, kernel.inputs[0][0], kernel.outputs[0][0])
        grad = self.tensor(kernel.inputs[2][0], "float32")
        return (lambda x_, w_, g_: self.jax.vjp(lambda t: conv(x_, t), w_)[1](g_)[0]), [x, weight, grad]

    def _matmul(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        jnp = self.jnp
        ta = bool(kernel.attrs.get("transpose_a") or kernel.attrs.get("adj_x"))
        tb = bool(kernel.attrs.get("transpose_b") or kernel.attrs.get("adj_y"))

        def matmul(a: Any, b: Any) -> Any:
            return jnp.matmul(jnp.swapaxes(a, -1, -2) if ta else a, jnp.swapaxes(b, -1, -2) if tb else b)

        return matmul, [self.tensor(s, d) for s, d in kernel.inputs[:2]]

    _batch_matmul = _matmul

    def _einsum(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        equation = str(kernel.attrs.get("equation", ""))
        return (lambda *ops: self.jnp.einsum(equation, *ops)), [self.tensor(s, d) for s, d in kernel.inputs]

    def _elementwise(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        jnp, op = self.jnp, kernel.op
        args = [self.tensor(s, d) for s, d in kernel.inputs]
        if op == "AddN":
            return (lambda *xs: sum(xs[1:], xs[0])), args
        if op in ("SelectV2", "Select"):
            return (lambda c, a, b: jnp.where(c if c.dtype == jnp.bool_ else c > 3, a, b)), args
        if op == "Cast":
            target = jnp.dtype(kernel.outputs[0][1]) if kernel.outputs[0][1] != "bool" else jnp.bool_
            return (lambda x: x.astype(target)), args
        if op == "BiasAdd" and _nchw(kernel) and args[0].ndim == 4:
            return (lambda x, b: x + b.reshape(-1, 1, 1)), args
        unary = {
            "Relu": self.jax.nn.relu,
            "Rsqrt": self.lax.rsqrt,
            "Sqrt": jnp.sqrt,
            "Sigmoid": self.jax.nn.sigmoid,
            "Tanh": jnp.tanh,
            "Exp": jnp.exp,
            "Log": jnp.log,
            "Square": jnp.square,
        }
        binary = {
            "ReluGrad": lambda dy, y: jnp.where(y > 0, dy, 0),
            "SigmoidGrad": lambda y, dy: dy * y * (1 - y),
            "TanhGrad": lambda y, dy: dy * (1 - y * y),
            "RealDiv": jnp.divide,
            "Sub": jnp.subtract,
            "Maximum": jnp.maximum,
            "Minimum": jnp.minimum,
            "FloorMod": jnp.remainder,
            "SquaredDifference": lambda a, b: jnp.square(a - b),
            "Less": jnp.less,
        }
        if op == "MatrixBandPart":
            return jnp.tril, args[:1]
        if len(args) == 1:
            return unary.get(
                op, jnp.negative if jnp.issubdtype(args[0].dtype, jnp.floating) else jnp.invert
            ), args
        if len(args) == 2:
            return binary.get(op, jnp.multiply if args[0].dtype != jnp.bool_ else jnp.logical_or), args
        raise Unsupported(f"{op} with {len(args)} inputs")

    def _reduce(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        jnp = self.jnp
        x = self.tensor(*kernel.inputs[0])
        axes = axes_of(kernel, 1, x.ndim)
        keep = bool(kernel.attrs.get("keep_dims", False))
        if kernel.op == "L2Loss":
            return (lambda t: jnp.sum(t * t) / 2), [x]
        fn = {"Mean": jnp.mean, "Max": jnp.max, "Min": jnp.min, "Prod": jnp.prod}.get(kernel.op, jnp.sum)
        return (lambda t: fn(t, axis=axes, keepdims=keep)), [x]

    def _window(self, kernel: Kernel, x_shape: Sequence[int]) -> tuple[Any, Any, Any]:
        _, h, w, _ = _nhwc_dims(kernel, x_shape)
        window, stride = _spatial(kernel, "ksize", 1), _spatial(kernel, "strides", 1)
        padding = pads(kernel, (h, w), window, stride)
        if _nchw(kernel):
            return (1, 1, *window), (1, 1, *stride), ((0, 0), (0, 0), *padding)
        return (1, *window, 1), (1, *stride, 1), ((0, 0), *padding, (0, 0))

    def _pool_fn(self, kernel: Kernel, x_shape: Sequence[int]) -> Any:
        lax, jnp = self.lax, self.jnp
        dims, strides, padding = self._window(kernel, x_shape)
        if kernel.op.startswith("MaxPool"):
            return lambda x: lax.reduce_window(x, -jnp.inf, lax.max, dims, strides, padding)
        ones = jnp.ones(tuple(int(s) for s in x_shape), jnp.float32)
        count = lax.reduce_window(ones, 0.0, lax.add, dims, strides, padding)
        return lambda x: lax.reduce_window(x, 0.0, lax.add, dims, strides, padding) / count

    def _pool(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        return self._pool_fn(kernel, kernel.inputs[0][0]), [self.tensor(*kernel.inputs[0])]

    def _pool_grad(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        shape = kernel.outputs[0][0]
        pool = self._pool_fn(kernel, shape)
        x = self.tensor(shape, "float32")
        grad = self.tensor(kernel.inputs[-1][0], "float32")
        return (lambda x_, g_: self.jax.vjp(pool, x_)[1](g_)[0]), [x, grad]

    def _softmax(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        nn, jnp = self.jax.nn, self.jnp
        logits = self.tensor(*kernel.inputs[0])
        if kernel.op == "SparseSoftmaxCrossEntropyWithLogits":
            labels = self.tensor(kernel.inputs[1][0], "int32", high=int(logits.shape[-1]))

            def xent(z: Any, y: Any) -> Any:
                log_p = nn.log_softmax(z, -1)
                return -jnp.take_along_axis(log_p, y[:, None], -1)[:, 0], jnp.exp(log_p)

            return xent, [logits, labels]
        return (nn.log_softmax if kernel.op == "LogSoftmax" else nn.softmax), [logits]

    def _copy(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        jnp, op = self.jnp, kernel.op
        args = [self.tensor(s, d) for s, d in kernel.inputs]
        if op == "ConcatV2" and kernel.consts.get(len(args) - 1):
            axis = int(kernel.consts[len(args) - 1][0])
            return (lambda *xs: jnp.concatenate(xs, axis=axis)), args[:-1]
        if op == "Tile" and kernel.consts.get(1):
            multiples = tuple(kernel.consts[1])
            return (lambda x: jnp.tile(x, multiples)), args[:1]
        if op == "Transpose" and kernel.consts.get(1):
            perm = tuple(kernel.consts[1])
            return (lambda x: jnp.transpose(x, perm)), args[:1]
        elements = sum(math.prod(s) for s, _ in kernel.outputs)
        return (lambda x: -x), [self.tensor((elements,), "float32")]

    def _optimizer(self, kernel: Kernel) -> tuple[Any, list[Any]]:
        jnp = self.jnp
        shape, dtype = kernel.inputs[0]
        if kernel.op == "ResourceApplyAdam":

            def adam(var: Any, m: Any, v: Any, g: Any) -> Any:
                m2 = 0.9 * m + 0.1 * g
                v2 = 0.999 * v + 0.001 * g * g
                return var - 1e-3 * m2 / (jnp.sqrt(v2) + 1e-7), m2, v2

            return adam, [self.tensor(shape, dtype) for _ in range(4)]
        return (lambda var, value: var - value), [self.tensor(shape, dtype), self.tensor(*kernel.inputs[-1])]

    def time(self, fn: Callable[[], Any], output_bytes: float) -> Timing:
        return _wall_clock(fn)

    def release(self) -> None:
        return None

    def floor_kernel(self) -> Callable[[], Any]:
        x = self.tensor((1,), "float32")
        add = self.jax.jit(lambda t: t + 1.0)
        return lambda: add(x)

    def copy_times(self, size: int) -> dict[str, float]:
        return {}


# --------------------------------------------------------------------------------------------
# running and reporting


@dataclass
class KernelResult:
    """One catalogued kernel's analytical and measured times (µs)."""

    index: int
    op: str
    kind: str
    analytical_us: float
    roofline_us: float
    times: dict[str, Timing] = field(default_factory=dict)
    """By precision: ``tf32`` and ``fp32`` for matmul and convolution kinds, else ``default``."""
    error: str = ""

    def measured_us(self, precision: str = "tf32") -> float | None:
        """The kernel's device time: graph replay where captured, else eager (TF32 where timed both ways)."""
        timing = self.times.get(precision) or self.times.get("default")
        if timing is None:
            return None
        return timing.graph_us if timing.graph_us is not None else timing.eager_us


def kernel_order(catalog: Catalog, device: Mapping[str, float]) -> list[int]:
    """Kernel indices in the order they are timed: each graph's kernels ranked by the analytical
    time they take in it (count × time, index breaking ties), then the graphs' first-ranked
    kernels, their second-ranked, and so on, each kernel once. A cut tail so leaves every graph,
    micro-batches too, with its heaviest kernels timed."""
    rankings = []
    for graph in catalog.graphs:
        weights = {k: count * analytical_us(catalog.kernels[k], device) for k, count in graph.kernels}
        rankings.append(sorted(weights, key=lambda k: (-weights[k], k)))
    order: list[int] = []
    seen: set[int] = set()
    for rank in range(max((len(r) for r in rankings), default=0)):
        for ranking in rankings:
            if rank < len(ranking) and ranking[rank] not in seen:
                seen.add(ranking[rank])
                order.append(ranking[rank])
    order.extend(k for k in range(len(catalog.kernels)) if k not in seen)
    return order


def output_bytes(kernel: Kernel) -> float:
    """Bytes of the kernel's outputs (4 per element: an upper bound for the dtypes catalogued)."""
    return float(sum(4 * math.prod(s) for s, _ in kernel.outputs))


def measure_kernels(
    catalog: Catalog,
    backend: Any,
    device: Mapping[str, float],
    *,
    max_kernels: int | None,
    max_bytes: float | None,
    budget_s: float | None,
    log: Callable[[str], None],
    done: Mapping[int, KernelResult] | None = None,
) -> tuple[list[KernelResult], dict[str, int]]:
    """Time the catalogue's kernels in :func:`kernel_order`; also how many each limit cut.
    Kernels in ``done`` (an earlier run's, ``--resume``) keep their figures and are not timed again."""
    done = done or {}
    order = [k for k in kernel_order(catalog, device) if k not in done]
    cut = {"max_kernels": 0, "max_bytes": 0, "budget_s": 0}
    if max_kernels is not None:
        cut["max_kernels"] = max(len(order) - max_kernels, 0)
        order = order[:max_kernels]
    started = time.perf_counter()
    results: list[KernelResult] = list(done.values())
    for position, k in enumerate(order):
        kernel = catalog.kernels[k]
        if max_bytes is not None and kernel.bytes_touched > max_bytes:
            cut["max_bytes"] += 1
            continue
        if budget_s is not None and time.perf_counter() - started > budget_s:
            left = order[position:]
            cut["budget_s"] = sum(
                1 for i in left if max_bytes is None or catalog.kernels[i].bytes_touched <= max_bytes
            )
            cut["max_bytes"] += len(left) - cut["budget_s"]
            break
        result = KernelResult(
            k, kernel.op, kernel.kind, analytical_us(kernel, device), roofline_us(kernel, device)
        )
        precisions = ("tf32", "fp32") if kernel.kind in PRECISION_KINDS else ("default",)
        try:
            for precision in precisions:
                backend.set_tf32(precision != "fp32")
                result.times[precision] = backend.time(backend.build(kernel), output_bytes(kernel))
        except Unsupported as exc:
            result.error = f"unsupported: {exc}"
        except Exception as exc:
            result.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        finally:
            backend.set_tf32(True)
            backend.release()
        results.append(result)
        if (position + 1) % 200 == 0:
            log(f"  {position + 1}/{len(order)} kernels, {time.perf_counter() - started:.0f} s")
    return results, cut


def _median(values: Iterable[float]) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(values) if values else None


def kind_table(catalog: Catalog, results: Sequence[KernelResult]) -> list[dict[str, Any]]:
    """Per op kind: kernels timed and failed, median and time-weighted measured / analytical."""
    uses = [0] * len(catalog.kernels)
    for graph in catalog.graphs:
        for k, count in graph.kernels:
            uses[k] += count
    rows = []
    for kind in KIND_ORDER:
        mine = [r for r in results if r.kind == kind]
        timed = [r for r in mine if not r.error and r.measured_us() is not None]
        if not mine:
            continue
        row: dict[str, Any] = {"kind": kind, "timed": len(timed), "failed": len(mine) - len(timed)}
        for precision in ("tf32", "fp32") if kind in PRECISION_KINDS else ("default",):
            measured = [(r, r.measured_us(precision)) for r in timed]
            measured = [(r, m) for r, m in measured if m is not None]
            suffix = "" if precision in ("tf32", "default") else "_fp32"
            row[f"median_ratio{suffix}"] = _median(m / r.analytical_us for r, m in measured)
            total_a = sum(uses[r.index] * r.analytical_us for r, _ in measured)
            row[f"weighted_ratio{suffix}"] = (
                sum(uses[r.index] * m for r, m in measured) / total_a if total_a else None
            )
            row[f"median_roofline_efficiency{suffix}"] = _median(
                r.roofline_us / m for r, m in measured if m > 0
            )
        row["median_eager_us"] = _median(r.times[next(iter(r.times))].eager_us for r in timed)
        rows.append(row)
    return rows


def graph_table(
    catalog: Catalog, results: Sequence[KernelResult], device: Mapping[str, float]
) -> list[dict[str, Any]]:
    """Per model graph: analytical and measured sums over its timed ops, their ratio, the
    time-weighted deviation, and the share of its analytical time left untimed."""
    by_index = {r.index: r for r in results}
    rows = []
    for graph in catalog.graphs:
        total_a = measured_a = measured_m = deviation = 0.0
        for k, count in graph.kernels:
            a = analytical_us(catalog.kernels[k], device)
            total_a += count * a
            result = by_index.get(k)
            m = result.measured_us() if result is not None and not result.error else None
            if m is None:
                continue
            measured_a += count * a
            measured_m += count * m
            deviation += count * abs(m - a)
        untimed_a = sum(
            n * device["launch_overhead_us"]
            + max(f / device["peak_flops_per_s"], b / device["memory_bandwidth_bytes_per_s"]) * 1e6
            for n, f, b in graph.untimed.values()
        )
        total = total_a + untimed_a
        rows.append(
            {
                "model": graph.model,
                "batch": graph.batch,
                "ops": graph.ops,
                "analytical_us": measured_a,
                "measured_us": measured_m,
                "ratio": measured_m / measured_a if measured_a else None,
                "weighted_deviation": deviation / measured_m if measured_m else None,
                "untimed_share": (total - measured_a) / total if total else None,
            }
        )
    return rows


def fit_copies(samples: Mapping[int, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Per direction, the least-squares fit ``t = latency + bytes / bandwidth`` (relative errors)."""
    out: dict[str, dict[str, float]] = {}
    directions = sorted({d for row in samples.values() for d in row})
    for direction in directions:
        sizes = np.array([s for s in samples if direction in samples[s]], dtype=np.float64)
        times = np.array([samples[int(s)][direction] for s in sizes], dtype=np.float64)
        if len(sizes) < 2:
            continue
        weights = 1.0 / np.maximum(times, 1e-9)
        design = np.stack([np.ones_like(sizes), sizes], axis=1) * weights[:, None]
        (latency, per_byte), *_ = np.linalg.lstsq(design, times * weights, rcond=None)
        largest = int(sizes.max())
        out[direction] = {
            "latency_us": float(latency),
            "bandwidth_gb_per_s": float(1e-3 / per_byte) if per_byte > 0 else float("nan"),
            "largest_copy_gb_per_s": float(largest / samples[largest][direction] * 1e-3),
        }
    return out


def pick_backend(name: str, cpu_rehearsal: bool) -> Any | None:
    """A GPU backend (PyTorch first, then JAX), or for a rehearsal a CPU one; None if none."""
    candidates = ("torch", "jax") if name == "auto" else (name,)
    if not cpu_rehearsal:
        for candidate in candidates:
            backend = _gpu_backend(candidate)
            if backend is not None:
                return backend
        return None
    for candidate in candidates:
        try:
            return TorchBackend("cpu") if candidate == "torch" else JaxBackend("cpu")
        except ImportError:
            continue
    return None


def _gpu_backend(name: str) -> Any | None:
    try:
        if name == "torch":
            # lazy: PyTorch is optional (the GPU machine has it; tests use JAX)
            import torch

            return TorchBackend("cuda") if torch.cuda.is_available() else None
        # lazy: JAX is optional
        import jax

        return JaxBackend("gpu") if any(d.platform == "gpu" for d in jax.devices()) else None
    except (ImportError, RuntimeError):
        return None


def measure_floor(backend: Any) -> dict[str, float | None]:
    """The per-op floor: the smallest kernel's graph-replay and eager times (µs)."""
    timing = backend.time(backend.floor_kernel(), 4.0)
    return {"graph_us": timing.graph_us, "eager_us": timing.eager_us}


def load_results(
    path: Path,
    catalog: Catalog,
    catalog_digest: str,
    device: Mapping[str, float],
    *,
    with_failed: bool = False,
    option: str = "--resume",
) -> tuple[dict[str, Any], dict[int, KernelResult]]:
    """An earlier run of the same catalogue (``--resume``, ``report``): its document, and its
    kernels with their times (those that failed too with ``with_failed``), their analytical
    figures recomputed for ``device``. A file that is no such run ends the program in one line."""
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or doc.get("format") != RESULT_FORMAT:
            raise BadInput(f"{option} {path} is not a {RESULT_FORMAT} results file")
        if doc.get("meta", {}).get("catalogue_sha256") != catalog_digest:
            raise BadInput(f"{option} {path} is not a run of this catalogue")
        done = {}
        for row in doc["kernels"]:
            if row["error"] and not with_failed:
                continue
            index = int(row["index"])
            kernel = catalog.kernels[index]
            times = {
                p: Timing(t["graph_us"], t["eager_us"], int(t["repeats"]), str(t["note"]))
                for p, t in row["times"].items()
            }
            done[index] = KernelResult(
                index,
                kernel.op,
                kernel.kind,
                analytical_us(kernel, device),
                roofline_us(kernel, device),
                times,
                str(row["error"]),
            )
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read {option} {path}: {exc}") from None
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise BadInput(f"{option} {path}: malformed results ({type(exc).__name__}: {exc})") from None
    return doc, done


def comparison(
    catalog: Catalog, results: Sequence[KernelResult], device: Mapping[str, float]
) -> dict[str, Any]:
    """The parts of a report that compare ``results`` with the analytical ``device``: the
    preset, the per-kind and per-graph tables, and the failures (``run`` and ``report``)."""
    return {
        "analytical_device": dict(device),
        "kinds": kind_table(catalog, results),
        "graphs": graph_table(catalog, results, device),
        "errors": error_summary(results),
    }


def measure_copies(backend: Any, sizes: Sequence[int]) -> dict[int, dict[str, float]]:
    """Per copy size (bytes), the backend's copy time per direction (µs); sizes whose copy
    failed (out of pinned memory, say) are left out and said so."""
    copies: dict[int, dict[str, float]] = {}
    for size in sizes:
        try:
            copies[size] = backend.copy_times(size)
        except Exception as exc:
            print(f"copy of {size} bytes failed: {type(exc).__name__}: {exc}", flush=True)
    return copies


def error_summary(results: Sequence[KernelResult], limit: int = 8) -> list[str]:
    """The most frequent reasons kernels failed, as ``count × op kind: reason`` lines."""
    counts: dict[tuple[str, str], int] = {}
    for result in results:
        if result.error:
            key = (result.kind, result.error)
            counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [f"{n} x {kind}: {error}" for (kind, error), n in ranked[:limit]]


def run(args: argparse.Namespace) -> int:
    """The ``run`` command: time the catalogue on this machine's GPU (or rehearse on its CPU)."""
    backend = pick_backend(args.backend, args.cpu_rehearsal)
    if backend is None:
        print(
            NO_GPU
            if not args.cpu_rehearsal
            else "bench_gpu_kernels: neither PyTorch nor JAX is installed; nothing measured, nothing written"
        )
        return 0
    catalog = Catalog.load(Path(args.catalog))
    if args.device not in catalog.devices:
        print(
            f"bench_gpu_kernels: unknown --device {args.device!r} (catalogue has {sorted(catalog.devices)})",
            file=sys.stderr,
        )
        return 2
    device = catalog.devices[args.device]
    max_bytes = (
        args.max_bytes
        if args.max_bytes is not None
        else (REHEARSAL_MAX_BYTES if args.cpu_rehearsal else None)
    )
    started = time.perf_counter()
    meta = {
        **backend.describe(),
        "rehearsal": bool(args.cpu_rehearsal),
        "analytical_device": args.device,
        "host": platform.node(),
        "catalogue": str(args.catalog),
        "catalogue_sha256": hashlib.sha256(Path(args.catalog).read_bytes()).hexdigest(),
    }
    done = (
        load_results(Path(args.resume), catalog, meta["catalogue_sha256"], device)[1] if args.resume else {}
    )
    if args.resume:
        meta.update(resumed_from=str(args.resume), resumed_kernels=len(done))
    print(
        f"bench_gpu_kernels: {meta.get('gpu') or meta['device']} via {backend.name}"
        + (" (CPU rehearsal: not GPU figures)" if args.cpu_rehearsal else ""),
        flush=True,
    )
    try:
        floor = measure_floor(backend)
    except Exception as exc:
        print(f"floor failed: {type(exc).__name__}: {exc}", flush=True)
        floor = {"graph_us": None, "eager_us": None}
    results, cut = measure_kernels(
        catalog,
        backend,
        device,
        max_kernels=args.max_kernels,
        max_bytes=max_bytes,
        budget_s=args.budget_s,
        log=lambda line: print(line, flush=True),
        done=done,
    )
    copies = measure_copies(backend, () if args.cpu_rehearsal else COPY_SIZES)
    report = {
        "format": RESULT_FORMAT,
        "meta": meta,
        "seconds": time.perf_counter() - started,
        "floor": floor,
        "cut": cut,
        "copies": {"samples_us": {str(s): v for s, v in copies.items()}, "fit": fit_copies(copies)},
        **comparison(catalog, results, device),
        "kernels": [_result_json(r) for r in results],
    }
    _write_json(Path(args.out), report)
    print(format_report(report))
    print(f"wrote {args.out}")
    return 0


def _result_json(result: KernelResult) -> dict[str, Any]:
    return {
        "index": result.index,
        "op": result.op,
        "kind": result.kind,
        "analytical_us": result.analytical_us,
        "roofline_us": result.roofline_us,
        "error": result.error,
        "times": {
            p: {"graph_us": t.graph_us, "eager_us": t.eager_us, "repeats": t.repeats, "note": t.note}
            for p, t in result.times.items()
        },
    }


def _write_json(path: Path, document: Mapping[str, Any], *, indent: int | None = 1) -> None:
    """Write ``document`` to ``path`` atomically (a temporary file renamed over it); non-finite
    numbers become null (JSON has none). Not ``celeritas_core``'s ``write_json_atomic``: ``run``
    imports nothing of the project, since the GPU machine it is written for lacks its
    dependencies (orjson)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    text = json.dumps(
        _finite(document),
        indent=indent,
        allow_nan=False,
        default=_json_default,
        separators=None if indent else (",", ":"),
    )
    temporary.write_text(text + "\n")
    os.replace(temporary, path)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (recursively)."""
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _fmt(value: float | None, pattern: str = "{:.2f}") -> str:
    return "-" if value is None else pattern.format(value)


def format_report(report: Mapping[str, Any]) -> str:
    """The tables printed at the end of a run (floor, kinds, graphs, copies)."""
    floor, device = report["floor"], report["analytical_device"]
    lines = [
        f"per-op floor: graph replay {_fmt(floor['graph_us'])} µs, eager launch {_fmt(floor['eager_us'])} µs "
        f"(model: {device['launch_overhead_us']:.1f} µs)"
    ]
    lines.extend(f"failed: {line}" for line in report.get("errors", ()))
    cut = {k: v for k, v in report["cut"].items() if v}
    if cut:
        lines.append(
            "not timed: " + ", ".join(f"{v} kernels by --{k.replace('_', '-')}" for k, v in cut.items())
        )
    lines.append(
        f"{'kind':13s} {'timed':>5s} {'fail':>4s} {'med m/a':>8s} {'wtd m/a':>8s} {'fp32 med':>8s} "
        f"{'fp32 wtd':>8s} {'roof eff':>8s} {'eager µs':>8s}"
    )
    for row in report["kinds"]:
        lines.append(
            f"{row['kind']:13s} {row['timed']:5d} {row['failed']:4d} {_fmt(row.get('median_ratio')):>8s} "
            f"{_fmt(row.get('weighted_ratio')):>8s} {_fmt(row.get('median_ratio_fp32')):>8s} "
            f"{_fmt(row.get('weighted_ratio_fp32')):>8s} {_fmt(row.get('median_roofline_efficiency')):>8s} "
            f"{_fmt(row.get('median_eager_us'), '{:.1f}'):>8s}"
        )
    lines.append(
        f"{'model':18s} {'batch':>5s} {'analyt ms':>9s} {'meas ms':>9s} {'m/a':>6s} "
        f"{'w.dev':>6s} {'untimed':>7s}"
    )
    for row in report["graphs"]:
        lines.append(
            f"{row['model']:18s} {row['batch']:5d} {row['analytical_us'] / 1e3:9.2f} "
            f"{row['measured_us'] / 1e3:9.2f} {_fmt(row['ratio']):>6s} {_fmt(row['weighted_deviation']):>6s} "
            f"{_fmt(row['untimed_share'], '{:.1%}'):>7s}"
        )
    for direction, fit in report["copies"]["fit"].items():
        lines.append(
            f"copy {direction}: {fit['bandwidth_gb_per_s']:.1f} GB/s fitted, "
            f"latency {fit['latency_us']:.1f} µs, "
            f"1 GiB at {fit['largest_copy_gb_per_s']:.1f} GB/s"
        )
    return "\n".join(lines)


def rescore(args: argparse.Namespace) -> int:
    """The ``report`` command: an earlier run's kernel times against the analytical model with
    the presets of this checkout (``celeritas_tf.analytical.DEVICES``: no TensorFlow needed), or
    the catalogue's (``--catalogue-presets``), and print its tables."""
    catalog = Catalog.load(Path(args.catalog))
    digest = hashlib.sha256(Path(args.catalog).read_bytes()).hexdigest()
    devices = dict(catalog.devices) if args.catalogue_presets else current_presets()
    if args.device not in devices:
        print(
            f"bench_gpu_kernels: unknown --device {args.device!r} (known: {sorted(devices)})", file=sys.stderr
        )
        return 2
    device = devices[args.device]
    previous, done = load_results(
        Path(args.results), catalog, digest, device, with_failed=True, option="report"
    )
    results = [done[k] for k in sorted(done)]
    report = {**previous, **comparison(catalog, results, device)}
    print(
        f"{previous['meta'].get('gpu') or previous['meta']['device']}, {len(results)} kernels, "
        f"against analytical:{args.device} ({'the catalogue' if args.catalogue_presets else 'this checkout'})"
    )
    print(format_report(report))
    return 0


def current_presets() -> dict[str, dict[str, float]]:
    """This checkout's analytical device presets, as the catalogue records them."""
    # lazy: celeritas_tf.analytical imports TensorFlow only when a graph is analysed, not here
    from celeritas_tf.analytical import DEVICES

    return {
        name: {
            "peak_flops_per_s": spec.peak_flops_per_s,
            "memory_bandwidth_bytes_per_s": spec.memory_bandwidth_bytes_per_s,
            "launch_overhead_us": spec.launch_overhead_us,
        }
        for name, spec in DEVICES.items()
    }


def export(args: argparse.Namespace) -> int:
    """The ``export`` command: write the catalogue (needs TensorFlow)."""
    models = tuple(m for m in args.models.split(",") if m) if args.models else EXPORT_MODELS
    catalog = export_catalog(models, BATCH_DIVISORS, paper=not args.small)
    _write_json(Path(args.out), catalog.to_json(), indent=None)
    print(f"wrote {args.out}: {len(catalog.kernels)} kernels of {len(catalog.graphs)} graphs")
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command")
    timing = sub.add_parser("run", help="time the catalogue's kernels on this machine's GPU (default)")
    timing.add_argument("--catalog", default=str(DEFAULT_CATALOG), help=CATALOG_HELP)
    timing.add_argument("--out", default=DEFAULT_OUT, help="the results JSON (default: %(default)s)")
    timing.add_argument("--backend", choices=("auto", "torch", "jax"), default="auto")
    timing.add_argument(
        "--device", default="h100", help="the analytical preset compared with (default: h100)"
    )
    timing.add_argument(
        "--max-kernels",
        type=_positive_int,
        default=None,
        help="time only the first N kernels of the fixed order (each graph's heaviest first)",
    )
    timing.add_argument(
        "--max-bytes",
        type=float,
        default=None,
        help="skip kernels touching more bytes (default: none; 8 MiB in a rehearsal)",
    )
    timing.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="stop timing new kernels after this many seconds (wall clock; the output says so)",
    )
    timing.add_argument(
        "--resume",
        default=None,
        help="an earlier run's results JSON of the same catalogue: its kernels are kept, not timed again",
    )
    timing.add_argument(
        "--cpu-rehearsal",
        action="store_true",
        help="without a GPU, rehearse on the CPU with small kernels (not GPU figures)",
    )
    again = sub.add_parser("report", help="an earlier run's times against this checkout's analytical presets")
    again.add_argument("results", help="a run's results JSON")
    again.add_argument("--catalog", default=str(DEFAULT_CATALOG), help=CATALOG_HELP)
    again.add_argument("--device", default="h100", help="the analytical preset compared with (default: h100)")
    again.add_argument(
        "--catalogue-presets",
        action="store_true",
        help="use the presets the catalogue recorded at export instead of this checkout's",
    )
    catalogue = sub.add_parser("export", help="write the catalogue from the zoo's graphs (needs TensorFlow)")
    catalogue.add_argument("--out", default=str(DEFAULT_CATALOG))
    catalogue.add_argument(
        "--models", default="", help=f"comma-separated zoo models (default: {','.join(EXPORT_MODELS)})"
    )
    catalogue.add_argument(
        "--small",
        action="store_true",
        help=f"the models' small configurations at batch {SMALL_BATCH} (tests)",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("run", "export", "report", "-h", "--help"):
        argv = ["run", *argv]
    return parser.parse_args(argv)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    commands = {"export": export, "report": rescore}
    try:
        return commands.get(args.command, run)(args)
    except BadInput as exc:
        print(f"bench_gpu_kernels: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
