"""Analytical per-op GPU costs of a TensorFlow GraphDef, from static shapes alone (nothing runs).

Paper-scale graphs cannot be profiled without the GPUs the paper used, so this module estimates
each op's time on a chosen device with a **roofline** model:

    time_us = max(flops / peak_flops_per_s, bytes_touched / memory_bandwidth_bytes_per_s) · 1e6
              + launch_overhead_us

``bytes_touched`` is the bytes of the op's data inputs plus the bytes of its outputs, from the
``_output_shapes`` attribute (``as_graph_def(add_shapes=True)``) and the output dtypes the op's
registered ``OpDef`` gives (``T``/``dtype``/``out_type``… attributes). A resource input (a variable
handle) counts the variable's bytes twice for the dense optimiser updates (``ResourceApply*``:
read-modify-write of var and slots), once for ``Assign*VariableOp`` (a write), and not at all
otherwise (``ResourceGather`` touches only the rows it outputs). Unknown dimensions are taken as 1
and counted (:attr:`AnalyticalCosts.unknown_dims`); an unknown rank counts as one unknown dim.

**FLOPs** (:func:`op_flops`), first match wins:

* our formulas for the heavy ops, exact from static shapes in either data layout:
  ``MatMul``/``_FusedMatMul`` (``transpose_a``): 2·k·|out|;
  ``BatchMatMul``/``V2``/``V3`` (``adj_x``): 2·k·|out| (TensorFlow's registered statistic reads
  ``transpose_a``, which these ops do not have, so it is wrong for ``adj_x=True``);
  ``Einsum``: 2·∏(every index size) for two operands, |input| for one;
  ``Conv2D``/``Conv3D``/``_FusedConv2D``: 2·|out|·∏(filter dims but the last);
  ``Conv2DBackpropInput``/``Conv3DBackpropInputV2`` and ``…BackpropFilter…``: 2·|out_backprop|·
  ∏(filter dims but the last) (the forward conv's FLOPs, stride-exact);
  ``DepthwiseConv2dNative``: 2·|out|·kh·kw, and its ``BackpropInput``/``BackpropFilter``:
  2·|out_backprop|·kh·kw;
  ``FusedBatchNorm``/``V2``/``V3``: 8·|x| in training (mean, variance, normalise, scale, shift),
  2·|x| in inference (per-channel folded scale and shift); ``FusedBatchNormGrad``/``V2``/``V3``:
  10·|x| in training, 5·|x| otherwise;
* TensorFlow's registered ``"flops"`` statistic (``ops.get_stats_for_node_def``) for the ops that
  have one (element-wise arithmetic and comparisons, reductions, ``Softmax``, ``BiasAdd``/
  ``BiasAddGrad``, ``AddN``, ``L2Loss``, pooling and pooling gradients…), evaluated on our
  static shapes with unknown dims as 1; a statistic that raises (pooling in NCHW) falls through;
* everything else: one FLOP per output element (element-wise ops, activations and their
  gradients, data movement — the roofline makes the latter memory-bound anyway); an op without
  outputs (optimiser updates) counts one per element of its largest data input.

**Free ops** (time 0, no kernel launch): :data:`FREE_OPS` — bookkeeping and metadata-only ops
(``NoOp``, ``Const``, ``Placeholder``, variable handles, ``Identity``/``ReadVariableOp`` on one
device, ``Reshape``/``ExpandDims``/``Squeeze`` which alias their input, ``Shape``/``Size``/
``Rank`` computed on the host). Cross-device copies are not ops here: the placer charges them.

**Memory** of an op: the bytes of its outputs (resource handles and variants are 0 bytes), except a
variable handle (``VarHandleOp``/``VariableV2``), which holds the variable: its ``shape``
attribute × ``dtype`` size. Aliasing ops (``Identity``, ``ReadVariableOp``…) are
charged their outputs' bytes like any op, as :mod:`celeritas_tf.profile` does for measured costs.

Everything is a pure function of the GraphDef and the device, so costs are deterministic. Device
presets (:data:`DEVICES`): the FP32 peak is NVIDIA's datasheet figure without tensor cores. For
the V100 and A100 the bandwidth is the datasheet's HBM figure and the per-op floor 5 µs (a
typical kernel launch plus TensorFlow executor dispatch; not measured). The H100's bandwidth and
floor were measured on an H100 80GB HBM3 (``bench/bench_gpu_kernels.py``, docs/tensorflow.md,
"What the H100 measured"): 2.96 TB/s of bytes read plus written (a 1 GiB device-to-device copy;
the datasheet's 3.35 is not reached), and a floor of 1.6 µs, the median device time of the 336
catalogued kernels whose roofline is under 0.5 µs, replayed in CUDA graphs (the 5 µs floor
charged tiny ops about three times their device time, which dominates micro-batch graphs). The
floor is device time: a step whose host cannot launch ops that fast is host-bound, which the
simulator does not model. Float32 matmuls and convolutions run in TF32 by default on the A100 and
H100 (TensorFlow's default): they measured about twice as fast as this FP32 model on the H100
(the figures of the same section).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celeritas_core.errors import CeleritasInputError
from celeritas_tf.tf import tensorflow

GIB = 2**30


@dataclass(frozen=True)
class DeviceSpec:
    """An accelerator for the roofline model."""

    name: str
    peak_flops_per_s: float
    memory_bandwidth_bytes_per_s: float
    launch_overhead_us: float
    memory_bytes: float


#: Device presets (FP32 CUDA-core peak from NVIDIA's datasheets, no tensor cores / TF32; the
#: H100's bandwidth and floor measured, see the module docstring).
DEVICES: dict[str, DeviceSpec] = {
    # Tesla V100 SXM2 32 GB: 15.7 TFLOP/s FP32, 900 GB/s HBM2
    "v100": DeviceSpec("v100", 15.7e12, 900e9, 5.0, 32 * GIB),
    # A100 SXM4 40 GB: 19.5 TFLOP/s FP32, 1,555 GB/s HBM2
    "a100": DeviceSpec("a100", 19.5e12, 1555e9, 5.0, 40 * GIB),
    # H100 SXM5 80 GB: 67 TFLOP/s FP32 (datasheet); 2.96 TB/s and a 1.6 µs floor measured
    # (bench/bench_gpu_kernels.py on an H100 80GB HBM3, 2026-11-27; datasheet: 3.35 TB/s)
    "h100": DeviceSpec("h100", 67e12, 2.96e12, 1.6, 80 * GIB),
}

ANALYTICAL_PREFIX = "analytical:"

#: Ops that take no time: bookkeeping, variable handles and metadata-only ops (see module doc).
FREE_OPS = frozenset({
    "NoOp", "Const", "HostConst", "Placeholder", "PlaceholderWithDefault", "PlaceholderV2",
    "VarHandleOp", "VariableV2", "Variable", "_VarHandlesOp", "VarIsInitializedOp",
    "Identity", "IdentityN", "ReadVariableOp", "StopGradient", "PreventGradient",
    "Reshape", "ExpandDims", "Squeeze", "Shape", "ShapeN", "Size", "Rank",
    "_Arg", "_Retval", "_Recv", "_Send", "_HostRecv", "_HostSend",
})

#: Ops whose output is a variable's handle; their memory is the variable's size.
VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})

_ASSIGN_OPS = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})

# FLOPs per element of x for the fused batch norm ops: (training, inference)
_BN_FORWARD = (8.0, 2.0)
_BN_GRAD = (10.0, 5.0)


def parse_cost_source(text: str) -> DeviceSpec:
    """The device of a cost source ``analytical:DEVICE`` (``analytical:v100``; case-insensitive)."""
    known = ", ".join(ANALYTICAL_PREFIX + d for d in sorted(DEVICES))
    if not isinstance(text, str):
        raise CeleritasInputError(f"cost source must be a string like 'analytical:v100', got {text!r}")
    prefix, sep, device = text.strip().partition(":")
    if not sep or prefix.lower() != ANALYTICAL_PREFIX[:-1]:
        raise CeleritasInputError(f"malformed cost source {text!r} (expected one of: {known})")
    spec = DEVICES.get(device.strip().lower())
    if spec is None:
        raise CeleritasInputError(f"unknown device {device.strip()!r} in cost source {text!r} "
                                  f"(known: {known})")
    return spec


# --------------------------------------------------------------------------------------------
# static shapes and dtypes


_DTYPE_SIZES: dict[int, int] = {}
_OP_DEFS: dict[str, Any] = {}


def _dtype_size(enum: int) -> int:
    """Bytes per element of a DataType enum (0 for resource, variant and string; 4 if unknown)."""
    size = _DTYPE_SIZES.get(enum)
    if size is None:
        tf = tensorflow()
        try:
            dtype = tf.dtypes.as_dtype(enum)
            size = 0 if dtype.name in ("resource", "variant", "string") else int(dtype.size)
        except TypeError:
            size = 4
        _DTYPE_SIZES[enum] = size
    return size


def _op_def(op_type: str) -> Any:
    """The registered OpDef of ``op_type`` (None for an op this TensorFlow does not know)."""
    if op_type not in _OP_DEFS:
        # lazy: TensorFlow loads only when a graph is analysed, not on import
        from tensorflow.python.framework import op_def_registry

        _OP_DEFS[op_type] = op_def_registry.get(op_type)
    return _OP_DEFS[op_type]


def _output_dtypes(node: Any) -> list[int]:
    """DataType enums of ``node``'s outputs, from its OpDef and attributes."""
    op_def = _op_def(node.op)
    if op_def is None:  # an op this TensorFlow does not know: guess from the usual attributes
        for name in ("T", "dtype", "out_type"):
            if name in node.attr and node.attr[name].type:
                n = len(node.attr["_output_shapes"].list.shape) if "_output_shapes" in node.attr else 1
                return [node.attr[name].type] * n
        return []
    defaults = {a.name: a.default_value for a in op_def.attr if a.HasField("default_value")}

    def attr(name: str) -> Any:
        return node.attr[name] if name in node.attr else defaults.get(name)

    dtypes: list[int] = []
    for arg in op_def.output_arg:
        if arg.type_list_attr:
            value = attr(arg.type_list_attr)
            dtypes.extend(value.list.type if value is not None else [])
            continue
        if arg.type:
            dtype = arg.type
        else:
            value = attr(arg.type_attr)
            dtype = value.type if value is not None else 0
        count = 1
        if arg.number_attr:
            value = attr(arg.number_attr)
            count = int(value.i) if value is not None else 1
        dtypes.extend([dtype] * count)
    return dtypes


def _attr_bool(node: Any, name: str, default: bool) -> bool:
    return bool(node.attr[name].b) if name in node.attr else default


def _prod(dims: tuple[int, ...] | list[int]) -> float:
    result = 1.0
    for d in dims:
        result *= d
    return result


@dataclass
class _NodeInfo:
    shapes: list[tuple[int, ...]]  # one per output, unknown dims as 1
    dtypes: list[int]
    output_bytes: list[float]
    unknown_dims: int


def _known(dims: Any) -> tuple[int, ...]:
    return tuple(int(d) if d is not None and int(d) >= 0 else 1 for d in dims)


class StaticShapes:
    """Output shapes and bytes of every op of a GraphDef, read from ``_output_shapes`` (unknown dims
    as 1). It answers ``get_tensor_by_name(name).get_shape()`` like a ``tf.Graph``, so TensorFlow's
    registered statistics run on it without importing the GraphDef into a graph."""

    def __init__(self, graph_def: Any) -> None:
        self.nodes: dict[str, Any] = {}
        self.info: dict[str, _NodeInfo] = {}
        for node in graph_def.node:
            self.nodes[node.name] = node
            self.info[node.name] = self._read(node)

    @staticmethod
    def _read(node: Any) -> _NodeInfo:
        dtypes = _output_dtypes(node)
        shapes: list[tuple[int, ...]] = []
        unknown = 0
        if "_output_shapes" in node.attr:
            for proto in node.attr["_output_shapes"].list.shape:
                if proto.unknown_rank:
                    unknown += 1
                    shapes.append(())
                    continue
                dims = [d.size for d in proto.dim]
                unknown += sum(1 for d in dims if d < 0)
                shapes.append(tuple(d if d >= 0 else 1 for d in dims))
        else:
            unknown += len(dtypes)
            shapes = [()] * len(dtypes)
        if len(dtypes) < len(shapes):  # custom op without an OpDef and no dtype attribute: float32
            dtypes = dtypes + [1] * (len(shapes) - len(dtypes))
        nbytes = [_prod(s) * _dtype_size(dtypes[k]) for k, s in enumerate(shapes)]
        if node.op in VARIABLE_OPS:
            nbytes = [_variable_bytes(node), *nbytes[1:]]
            if "shape" in node.attr:
                proto = node.attr["shape"].shape
                unknown += 1 if proto.unknown_rank else sum(1 for d in proto.dim if d.size < 0)
        return _NodeInfo(shapes, dtypes[:len(shapes)], nbytes, unknown)

    # -- the tf.Graph-like interface used by TensorFlow's statistics functions
    def get_tensor_by_name(self, name: str) -> _StaticTensor:
        op, _, k = name.partition(":")
        return _StaticTensor(self.shape(op, int(k) if k else 0))

    def shape(self, op: str, k: int = 0) -> tuple[int, ...]:
        """Static shape of output ``k`` of ``op`` (unknown dims as 1; () if unknown)."""
        info = self.info.get(op)
        if info is None or k >= len(info.shapes):
            return ()
        return info.shapes[k]


class _StaticTensor:
    __slots__ = ("_dims",)

    def __init__(self, dims: tuple[int, ...]) -> None:
        self._dims = dims

    def get_shape(self) -> Any:
        # lazy: TensorFlow loads only when a graph is analysed, not on import
        from tensorflow.python.framework import tensor_shape

        return tensor_shape.TensorShape(list(self._dims))

    @property
    def shape(self) -> Any:
        return self.get_shape()


class _GraphShapes:
    """Shapes from a ``tf.Graph`` holding the op, with unknown dims as 1."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def get_tensor_by_name(self, name: str) -> _StaticTensor:
        return _StaticTensor(self.shape(*_split(name)))

    def shape(self, op: str, k: int = 0) -> tuple[int, ...]:
        shape = self.graph.get_tensor_by_name(f"{op}:{k}").shape
        return () if shape.rank is None else _known(shape.as_list())


def _split(tensor_name: str) -> tuple[str, int]:
    op, _, k = tensor_name.lstrip("^").partition(":")
    return op, int(k) if k else 0


def _variable_bytes(node: Any) -> float:
    """Bytes of the variable a ``VarHandleOp``/``VariableV2`` NodeDef declares (unknown dims as 1)."""
    if "shape" not in node.attr or "dtype" not in node.attr:
        return 0.0
    proto = node.attr["shape"].shape
    if proto.unknown_rank:
        return float(_dtype_size(node.attr["dtype"].type))
    dims = [d.size if d.size >= 0 else 1 for d in proto.dim]
    return _prod(dims) * _dtype_size(node.attr["dtype"].type)


# --------------------------------------------------------------------------------------------
# FLOPs


def _data_inputs(node: Any) -> list[str]:
    return [i for i in node.input if not i.startswith("^")]


def _in_shape(shapes: Any, node: Any, index: int) -> tuple[int, ...]:
    inputs = _data_inputs(node)
    if index >= len(inputs):
        return ()
    return shapes.shape(*_split(inputs[index]))


def _matmul(shapes: Any, node: Any, out: tuple[int, ...]) -> float:
    a = _in_shape(shapes, node, 0)
    if len(a) < 2:
        return _prod(out)
    if node.op.startswith("BatchMatMul"):
        k = a[-2] if _attr_bool(node, "adj_x", False) else a[-1]
    else:
        k = a[-2] if _attr_bool(node, "transpose_a", False) else a[-1]
    return 2.0 * k * _prod(out)


def _conv(shapes: Any, node: Any, out: tuple[int, ...]) -> float:
    kernel = _in_shape(shapes, node, 1)
    return 2.0 * _prod(out) * _prod(kernel[:-1])


def _conv_backprop_input(shapes: Any, node: Any, out: tuple[int, ...]) -> float:
    kernel = _in_shape(shapes, node, 1)
    return 2.0 * _prod(_in_shape(shapes, node, 2)) * _prod(kernel[:-1])


def _conv_backprop_filter(shapes: Any, node: Any, out: tuple[int, ...]) -> float:
    return 2.0 * _prod(_in_shape(shapes, node, 2)) * _prod(out[:-1])


def _depthwise(shapes: Any, node: Any, out: tuple[int, ...]) -> float:
    kernel = _in_shape(shapes, node, 1)
    return 2.0 * _prod(out) * _prod(kernel[:2])


def _depthwise_backprop_input(shapes: Any, node: Any, out: tuple[int, ...]) -> float:
    kernel = _in_shape(shapes, node, 1)
    return 2.0 * _prod(_in_shape(shapes, node, 2)) * _prod(kernel[:2])


def _depthwise_backprop_filter(shapes: Any, node: Any, out: tuple[int, ...]) -> float:
    return 2.0 * _prod(_in_shape(shapes, node, 2)) * _prod(out[:2])


def _batch_norm(shapes: Any, node: Any, out: tuple[int, ...]) -> float:
    training = _attr_bool(node, "is_training", True)
    return _prod(_in_shape(shapes, node, 0)) * _BN_FORWARD[0 if training else 1]


def _batch_norm_grad(shapes: Any, node: Any, out: tuple[int, ...]) -> float:
    training = _attr_bool(node, "is_training", True)
    return _prod(_in_shape(shapes, node, 1)) * _BN_GRAD[0 if training else 1]


_EINSUM_TERM = re.compile(r"^[A-Za-z.]*$")


def _einsum(shapes: Any, node: Any, out: tuple[int, ...]) -> float:
    equation = node.attr["equation"].s.decode() if "equation" in node.attr else ""
    lhs = equation.replace(" ", "").split("->")[0]
    terms = lhs.split(",")
    inputs = [_in_shape(shapes, node, i) for i in range(len(terms))]
    if len(terms) == 1 or not all(_EINSUM_TERM.match(t) for t in terms):
        return _prod(inputs[0]) if len(terms) == 1 else _prod(out)
    sizes: dict[str, int] = {}
    ellipsis: list[int] = []
    for term, dims in zip(terms, inputs, strict=True):
        labels = term.replace("...", "")
        n_ell = max(len(dims) - len(labels), 0) if "..." in term else 0
        before, _, after = term.partition("...") if "..." in term else (term, "", "")
        named = list(before) + list(after)
        named_dims = list(dims[:len(before)]) + list(dims[len(before) + n_ell:])
        for label, d in zip(named, named_dims, strict=False):
            sizes[label] = max(sizes.get(label, 1), d)
        ell = list(dims[len(before):len(before) + n_ell])
        # broadcast ellipsis dims, aligned on the right
        if len(ell) > len(ellipsis):
            ellipsis = [1] * (len(ell) - len(ellipsis)) + ellipsis
        for j, d in enumerate(ell):
            pos = len(ellipsis) - len(ell) + j
            ellipsis[pos] = max(ellipsis[pos], d)
    return 2.0 * _prod(list(sizes.values())) * _prod(ellipsis)


#: Ops with our own FLOP formula (see the module docstring), ``f(shapes, node, out_shape)``.
OWN_FORMULAS: Mapping[str, Any] = {
    "MatMul": _matmul, "_FusedMatMul": _matmul,
    "BatchMatMul": _matmul, "BatchMatMulV2": _matmul, "BatchMatMulV3": _matmul,
    "Einsum": _einsum,
    "Conv2D": _conv, "Conv3D": _conv, "_FusedConv2D": _conv,
    "Conv2DBackpropInput": _conv_backprop_input, "Conv3DBackpropInputV2": _conv_backprop_input,
    "Conv3DBackpropInput": _conv_backprop_input,
    "Conv2DBackpropFilter": _conv_backprop_filter, "Conv3DBackpropFilterV2": _conv_backprop_filter,
    "Conv3DBackpropFilter": _conv_backprop_filter,
    "DepthwiseConv2dNative": _depthwise,
    "DepthwiseConv2dNativeBackpropInput": _depthwise_backprop_input,
    "DepthwiseConv2dNativeBackpropFilter": _depthwise_backprop_filter,
    "FusedBatchNorm": _batch_norm, "FusedBatchNormV2": _batch_norm, "FusedBatchNormV3": _batch_norm,
    "FusedBatchNormGrad": _batch_norm_grad, "FusedBatchNormGradV2": _batch_norm_grad,
    "FusedBatchNormGradV3": _batch_norm_grad,
}


def op_flops(node_def: Any, graph: Any) -> float:
    """FLOPs of one op from static shapes (unknown dims as 1). ``graph`` is a ``tf.Graph`` holding
    the op, or a :class:`StaticShapes` of its GraphDef (much faster for many ops). Free ops
    (:data:`FREE_OPS`) have 0 FLOPs. See the module docstring for which op gets which formula."""
    shapes = graph if isinstance(graph, StaticShapes | _GraphShapes) else _GraphShapes(graph)
    return _flops(node_def, shapes)


def _flops(node: Any, shapes: Any) -> float:
    if node.op in FREE_OPS:
        return 0.0
    out = shapes.shape(node.name, 0) if _output_count(node, shapes) else ()
    formula = OWN_FORMULAS.get(node.op)
    if formula is not None:
        return float(formula(shapes, node, out))
    # lazy: TensorFlow loads only when a graph is analysed, not on import
    from tensorflow.python.framework import ops

    try:
        value = ops.get_stats_for_node_def(shapes, node, "flops").value
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        value = None  # e.g. pooling in NCHW: TensorFlow's statistic supports NHWC only
    if value is not None:
        return float(value)
    n_out = _output_count(node, shapes)
    if n_out:
        return float(sum(_prod(shapes.shape(node.name, k)) for k in range(n_out)))
    inputs = _data_inputs(node)
    return float(max((_prod(shapes.shape(*_split(i))) for i in inputs), default=0.0))


def _output_count(node: Any, shapes: Any) -> int:
    if isinstance(shapes, StaticShapes):
        info = shapes.info.get(node.name)
        return len(info.shapes) if info is not None else 0
    try:
        return len(shapes.graph.get_operation_by_name(node.name).outputs)
    except (KeyError, ValueError):
        return 0


# --------------------------------------------------------------------------------------------
# costs


@dataclass
class AnalyticalCosts:
    """Per-op analytical costs and what went into them."""

    device: DeviceSpec
    costs: dict[str, tuple[float, float]]
    """op name → (time_us, memory_bytes)."""
    flops: dict[str, float] = field(default_factory=dict)
    bytes_touched: dict[str, float] = field(default_factory=dict)
    unknown_dims: int = 0
    """Unknown dimensions in the GraphDef's output shapes (each taken as 1)."""
    ops_with_unknown_dims: list[str] = field(default_factory=list)

    @property
    def total_time_us(self) -> float:
        """Sum of every op's time (a serial execution of the step)."""
        return float(sum(t for t, _ in self.costs.values()))


def analytical_cost_report(graph_def: Any, device: DeviceSpec) -> AnalyticalCosts:
    """Roofline costs of every op of ``graph_def`` on ``device`` (see the module docstring)."""
    if not isinstance(device, DeviceSpec):
        raise CeleritasInputError(f"device must be a DeviceSpec, got {type(device).__name__}")
    if len(graph_def.node) and not any("_output_shapes" in n.attr for n in graph_def.node):
        raise CeleritasInputError("the GraphDef has no _output_shapes (build it with "
                                  "as_graph_def(add_shapes=True))")
    shapes = StaticShapes(graph_def)
    report = AnalyticalCosts(device, {})
    peak = float(device.peak_flops_per_s)
    bandwidth = float(device.memory_bandwidth_bytes_per_s)
    for node in graph_def.node:
        info = shapes.info[node.name]
        if info.unknown_dims:
            report.unknown_dims += info.unknown_dims
            report.ops_with_unknown_dims.append(node.name)
        memory = float(sum(info.output_bytes))
        if node.op in FREE_OPS:
            report.costs[node.name] = (0.0, memory)
            report.flops[node.name] = 0.0
            report.bytes_touched[node.name] = 0.0
            continue
        touched = _input_bytes(node, shapes) + (0.0 if node.op in VARIABLE_OPS else memory)
        flops = _flops(node, shapes)
        seconds = max(flops / peak, touched / bandwidth)
        report.costs[node.name] = (seconds * 1e6 + float(device.launch_overhead_us), memory)
        report.flops[node.name] = flops
        report.bytes_touched[node.name] = touched
    return report


def analytical_costs(graph_def: Any, device: DeviceSpec) -> dict[str, tuple[float, float]]:
    """Per op name, ``(time_us, memory_bytes)`` on ``device`` from static shapes (roofline)."""
    return analytical_cost_report(graph_def, device).costs


def _input_bytes(node: Any, shapes: StaticShapes) -> float:
    """Bytes of the data inputs ``node`` reads (resource inputs: see the module docstring)."""
    if node.op.startswith("ResourceApply"):
        resource_factor = 2.0
    elif node.op in _ASSIGN_OPS:
        resource_factor = 1.0
    else:
        resource_factor = 0.0
    total = 0.0
    for text in _data_inputs(node):
        op, k = _split(text)
        info = shapes.info.get(op)
        if info is None or k >= len(info.output_bytes):
            continue
        if info.dtypes and k < len(info.dtypes) and _dtype_size(info.dtypes[k]) == 0:
            if resource_factor:
                total += resource_factor * _resource_bytes(op, shapes)
            continue
        total += info.output_bytes[k]
    return total


def _resource_bytes(op: str, shapes: StaticShapes) -> float:
    """Size of the variable behind a resource handle output by ``op`` (0 when none is found)."""
    node = variable_node(op, shapes)
    return _variable_bytes(node) if node is not None else 0.0


def variable_node(op: str, shapes: StaticShapes, depth: int = 0) -> Any:
    """The NodeDef of the variable (``VarHandleOp``, ``VariableV2``…) whose handle ``op``
    outputs, through ``Identity`` chains; None when there is none."""
    node = shapes.nodes.get(op)
    if node is None or depth > 16:
        return None
    if node.op in VARIABLE_OPS or node.op == "_VarHandlesOp":
        return node
    inputs = _data_inputs(node)
    if node.op in ("Identity", "IdentityN", "StopGradient") and inputs:
        return variable_node(_split(inputs[0])[0], shapes, depth + 1)
    return None
