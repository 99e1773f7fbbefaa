"""Seeded synthetic TensorFlow training-step graphs shaped like the paper's four models.

The generator builds what ``tf.gradients`` plus ``tf.train.AdamOptimizer`` would produce for a
stack of layers, without TensorFlow:

* **forward**: a chain of layers; each layer has one or more parallel branches (a ``MatMul`` or
  ``Conv2D`` reading a ``VariableV2`` through its ``/read`` identity, then ``BiasAdd`` or
  ``FusedBatchNormV3``, optional extra elementwise ops, ``Relu``), joined by ``ConcatV2``
  (inception modules) or ``AddN``, plus an optional residual ``AddV2``; then a pooling and dense
  head and a ``SparseSoftmaxCrossEntropyWithLogits`` loss;
* **backward**: one or two gradient ops per forward op, in reverse, with TensorFlow's ``AddN``
  aggregation where a tensor has several consumers and long skip edges from the forward
  activations kept alive until their gradient ops (``ReluGrad``, ``Conv2DBackpropFilter``, …);
* **optimizer**: one ``ApplyAdam`` per variable reading the variable, its two Adam slots, the
  shared hyper-parameter constants and the gradient; variable, ``/read``, slots and update form a
  co-location group named after the variable (what TensorFlow's ``_class: loc:@<var>`` gives).

Many ops have no inputs (variables, slots, constants), as in real graphs. Costs: ``time_us``
(µs) from a V100-class roofline (FLOPs at 15 TFLOP/s plus 5 µs launch for ``MatMul``/``Conv2D``
and their gradients, bytes touched at 900 GB/s plus 3 µs for elementwise ops, 1 µs for
bookkeeping ops, ~0 for constants and variables) times seeded log-normal noise;
``memory_bytes`` is the size of the op's outputs (activations large, variables medium, aliases
such as ``/read`` and ``Reshape`` and the updates 0); each edge carries the byte size of the
source output it reads (``src_output`` > 0 only for the extra outputs of ``FusedBatchNormV3``,
its gradient, ``ShapeN``, ``ConcatOffset`` and the loss). Everything is deterministic for a given
seed (``numpy.random.default_rng``), and the node order is a topological order except for
padding constants, which come last.

``liveness=True`` (off by default; without it a graph is exactly what it was before the option)
also gives every op the liveness fields of docs/formats.md, filled the way
``celeritas_tf.extract`` fills them for a real step: variables and Adam slots hold their bytes as
``persistent_bytes``, every other op declares its outputs (``output_bytes``), views (a variable's
``/read``, ``Reshape``, ``ExpandDims``) alias their first input (``output_aliases``), and
``scratch_bytes`` is 0. The one-device peak then follows tensor lifetimes (forward activations
live until their gradient ops) instead of the sum: about a quarter to a third of it.

:func:`paper_shaped_graph` picks a layer stack per model, pads with small constants to the exact
node count of the paper's CCR table, then multiplies every edge's bytes by one factor so that
:func:`celeritas_core.graphs.levels.ccr` matches the table's CCR (recorded as ``meta["byte_scale"]``;
between about 0.6 and 3.5 for the four models: the paper's measured links were slower or faster
than the default transfer model). Op memory is not scaled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Literal

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph, Liveness

__all__ = [
    "PAPER_MODELS",
    "PaperModel",
    "paper_shaped_graph",
    "small_training_graph",
    "training_step_graph",
]

Kernel = Literal["MatMul", "Conv2D"]
Join = Literal["concat", "add"]


@dataclass(frozen=True)
class PaperModel:
    """One row of the paper's CCR table: node count and communication-to-computation ratio."""

    name: str
    nodes: int
    ccr: float
    description: str


#: The paper's four models (node counts and CCRs of its CCR table).
PAPER_MODELS: dict[str, PaperModel] = {
    m.name: m
    for m in (
        PaperModel("tensor_holography", 3810, 49.147,
                   "fully convolutional network at full image resolution with residual connections"),
        PaperModel("inception_v3", 6332, 33.118,
                   "convolutional network of inception modules: parallel branches joined by ConcatV2, "
                   "batch normalization"),
        PaperModel("nmt", 25463, 18.630,
                   "recurrent translation model: a long chain of LSTM-like cells (MatMul and gate "
                   "elementwise ops)"),
        PaperModel("transformer", 36352, 111.957,
                   "transformer: parallel Q/K/V projections, layer normalization, residual "
                   "connections and many elementwise ops"),
    )
}

# ---------------------------------------------------------------------------- cost model
_FLOPS_PER_US = 1.5e7  # 15 TFLOP/s (V100-class fp32)
_BYTES_PER_US = 9.0e5  # 900 GB/s device memory bandwidth (V100-class)
_HEAVY_LAUNCH_US = 5.0
_ELTWISE_LAUNCH_US = 3.0
_META_US = 1.0  # Identity, Shape, NoOp and other bookkeeping ops
_SOURCE_US = 0.1  # Const, VariableV2, Placeholder: ~0
_NOISE_SIGMA = 0.25  # log-normal spread of op times
_FLOAT = 4  # bytes per element
_SMALL = 16  # bytes of a shape or offset vector
_DEFAULT_CLUSTER_MEMORY = 32 * 2**30  # bytes per device of the default 4-device cluster
#: Most ops :func:`paper_shaped_graph` builds (a 10M-op graph takes about a minute and ~10 GiB).
MAX_GENERATED_NODES = 10_000_000


def _heavy_us(flops: float) -> float:
    """Time (µs) of a MatMul/Conv2D-like op of ``flops`` floating-point operations."""
    return flops / _FLOPS_PER_US + _HEAVY_LAUNCH_US


def _eltwise_us(nbytes: float) -> float:
    """Time (µs) of a memory-bound op touching ``nbytes`` bytes (inputs plus outputs)."""
    return nbytes / _BYTES_PER_US + _ELTWISE_LAUNCH_US


# ---------------------------------------------------------------------------- builder
#: An op input: a node (its output 0) or ``(node, src_output, bytes)``.
_Input = int | tuple[int, int, float]


class GraphBuilder:
    """Append-only lists of nodes and edges; inputs always precede consumers (a DAG by design)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.ops: list[str] = []
        self.base_us: list[float] = []
        self.memory: list[float] = []
        self.out_bytes: list[float] = []
        self.coloc: list[str | None] = []
        self.outputs: list[tuple[float, ...] | None] = []  # every output's bytes; None: (out_bytes,)
        self.src: list[int] = []
        self.dst: list[int] = []
        self.ebytes: list[float] = []
        self.eout: list[int] = []

    def add(
        self,
        name: str,
        op: str,
        *,
        out_bytes: float,
        base_us: float,
        inputs: Sequence[_Input] = (),
        memory: float | None = None,
        coloc: str | None = None,
        outputs: Sequence[float] | None = None,
    ) -> int:
        """Add an op whose output 0 has ``out_bytes`` bytes; return its index. ``outputs`` gives
        every output's bytes of an op that has other than the one output of ``out_bytes`` (only
        the liveness fields read it)."""
        i = len(self.names)
        self.names.append(name)
        self.ops.append(op)
        self.base_us.append(base_us)
        self.out_bytes.append(out_bytes)
        self.memory.append(out_bytes if memory is None else memory)
        self.coloc.append(coloc)
        self.outputs.append(None if outputs is None else tuple(outputs))
        for inp in inputs:
            if isinstance(inp, tuple):
                s, o, b = inp
            else:
                s, o, b = inp, 0, self.out_bytes[inp]
            self.src.append(s)
            self.dst.append(i)
            self.eout.append(o)
            self.ebytes.append(b)
        return i

    def const(self, name: str, nbytes: float = _FLOAT) -> int:
        """A ``Const`` op (no inputs) of ``nbytes`` bytes."""
        return self.add(name, "Const", out_bytes=nbytes, base_us=_SOURCE_US)


@dataclass
class _Var:
    """A trainable variable: its ops and, once the backward pass ran, its gradient."""

    name: str
    var: int
    read: int
    slots: tuple[int, int]
    nbytes: float
    grad: _Input | None = None


@dataclass(frozen=True)
class _Spec:
    """Shape of a generated training step (see :func:`training_step_graph`)."""

    layers: int
    width: int
    branches: int
    kernel: Kernel
    join: Join
    residual: bool
    norm: bool
    extra_elementwise: int
    reshapes: int
    batch_size: int
    positions: int
    stages: int
    classes: int


def _variable(g: GraphBuilder, variables: list[_Var], name: str, nbytes: float) -> int:
    """A ``VariableV2`` with its ``/read`` identity and two Adam slots; returns the read op."""
    var = g.add(name, "VariableV2", out_bytes=nbytes, base_us=_SOURCE_US, coloc=name)
    read = g.add(f"{name}/read", "Identity", out_bytes=nbytes, base_us=_META_US, inputs=(var,),
                 memory=0.0, coloc=name)
    m = g.add(f"{name}/Adam", "VariableV2", out_bytes=nbytes, base_us=_SOURCE_US, coloc=name)
    v = g.add(f"{name}/Adam_1", "VariableV2", out_bytes=nbytes, base_us=_SOURCE_US, coloc=name)
    variables.append(_Var(name, var, read, (m, v), nbytes))
    return read


# Forward-op records for the backward pass: (kind, node, args).
_Fwd = tuple[str, int, tuple[int, ...]]


@dataclass
class _Net:
    """A training step being built: the builder, its shape, its variables and, for the backward
    pass, the forward ops (``fwd``) and the nodes a gradient flows into (``diff``)."""

    g: GraphBuilder
    s: _Spec
    variables: list[_Var] = field(default_factory=list)
    fwd: list[_Fwd] = field(default_factory=list)
    diff: set[int] = field(default_factory=set)

    def record(self, kind: str, node: int, args: tuple[int, ...]) -> int:
        """Note a differentiable forward op for the backward pass; return it."""
        self.fwd.append((kind, node, args))
        self.diff.add(node)
        return node


def _forward(net: _Net) -> int:
    """Build input, layers and the loss; return the loss node ``xent`` (its output 1 is the backprop)."""
    s = net.s
    x = net.g.add("input", "Placeholder", out_bytes=_FLOAT * s.batch_size * s.positions * s.width,
                  base_us=_SOURCE_US)
    pos = s.positions
    for layer in range(s.layers):
        x, pos = _layer(net, layer, x)
    return _head(net, x, pos)


def _layer(net: _Net, layer: int, x: int) -> tuple[int, int]:
    """One layer over input ``x``: its branches, their join and the residual; return the layer's
    output and its positions per example."""
    g, s = net.g, net.s
    k = 9 if s.kernel == "Conv2D" else 1
    width_b = s.width // s.branches if s.join == "concat" else s.width
    stage = layer * (s.stages + 1) // s.layers
    pos = max(1, s.positions // 4**stage)
    act = _FLOAT * s.batch_size * pos * width_b
    flops = 2.0 * s.batch_size * pos * k * s.width * width_b
    outs: list[int] = []
    for b in range(s.branches):
        p = f"layer_{layer}/branch_{b}" if s.branches > 1 else f"layer_{layer}"
        kread = _variable(g, net.variables, f"{p}/kernel", _FLOAT * k * s.width * width_b)
        h = g.add(f"{p}/{s.kernel}", s.kernel, out_bytes=act, base_us=_heavy_us(flops), inputs=(x, kread))
        net.record("kernel", h, (x, kread, len(net.variables) - 1, int(flops)))
        for e in range(s.reshapes):
            shape = g.const(f"{p}/Reshape_{e}/shape", _SMALL)
            h = net.record("reshape", g.add(f"{p}/Reshape_{e}", "Reshape", out_bytes=act, base_us=_META_US,
                                            inputs=(h, shape), memory=0.0), (h,))
        cur = _normalise(net, p, h, act, width_b)
        outs.append(_activations(net, p, cur, act))
    joined = _join(net, layer, outs, act)
    if s.residual:
        out_bytes = g.out_bytes[joined]
        joined = net.record("residual", g.add(f"layer_{layer}/add", "AddV2", out_bytes=out_bytes,
                                              base_us=_eltwise_us(3 * out_bytes), inputs=(x, joined)),
                            (x, joined))
    return joined, pos


def _normalise(net: _Net, p: str, h: int, act: float, width_b: int) -> int:
    """``FusedBatchNormV3`` (gamma, beta) or ``BiasAdd`` (bias) after branch ``p``'s weighted op."""
    g, variables = net.g, net.variables
    if net.s.norm:
        gread = _variable(g, variables, f"{p}/gamma", _FLOAT * width_b)
        bread = _variable(g, variables, f"{p}/beta", _FLOAT * width_b)
        c_mean = g.const(f"{p}/Const", 0.0)
        c_var = g.const(f"{p}/Const_1", 0.0)
        stats = _FLOAT * width_b
        cur = g.add(f"{p}/FusedBatchNormV3", "FusedBatchNormV3", out_bytes=act,
                    base_us=_eltwise_us(3 * act), inputs=(h, gread, bread, c_mean, c_var),
                    memory=act + 5 * stats, outputs=(act, *(stats,) * 5))
        return net.record("norm", cur, (h, gread, len(variables) - 2, len(variables) - 1, int(stats)))
    bread = _variable(g, variables, f"{p}/bias", _FLOAT * width_b)
    cur = g.add(f"{p}/BiasAdd", "BiasAdd", out_bytes=act, base_us=_eltwise_us(2 * act), inputs=(h, bread))
    return net.record("bias", cur, (h, len(variables) - 1))


def _activations(net: _Net, p: str, cur: int, act: float) -> int:
    """Branch ``p``'s extra elementwise ops (``Mul``, ``Sigmoid``, ``Tanh`` in turn), then ``Relu``."""
    g = net.g
    for e in range(net.s.extra_elementwise):
        kind = ("mul", "sigmoid", "tanh")[e % 3]
        if kind == "mul":
            c = g.const(f"{p}/mul_{e}/y")
            nxt = g.add(f"{p}/mul_{e}", "Mul", out_bytes=act, base_us=_eltwise_us(2 * act), inputs=(cur, c))
            cur = net.record("mul", nxt, (cur, c))
        else:
            op = "Sigmoid" if kind == "sigmoid" else "Tanh"
            nxt = g.add(f"{p}/{op}_{e}", op, out_bytes=act, base_us=_eltwise_us(2 * act), inputs=(cur,))
            cur = net.record(kind, nxt, (cur,))
    r = g.add(f"{p}/Relu", "Relu", out_bytes=act, base_us=_eltwise_us(2 * act), inputs=(cur,))
    return net.record("relu", r, (cur,))


def _join(net: _Net, layer: int, outs: list[int], act: float) -> int:
    """Merge a layer's branch outputs: ``ConcatV2`` or ``AddN`` (a single branch is its own output)."""
    g = net.g
    if len(outs) == 1:
        return outs[0]
    if net.s.join == "concat":
        axis = g.const(f"layer_{layer}/concat/axis")
        joined = g.add(f"layer_{layer}/concat", "ConcatV2", out_bytes=act * len(outs),
                       base_us=_eltwise_us(2 * act * len(outs)), inputs=(*outs, axis))
        return net.record("concat", joined, (*outs, axis))
    joined = g.add(f"layer_{layer}/AddN", "AddN", out_bytes=act,
                   base_us=_eltwise_us(act * (len(outs) + 1)), inputs=outs)
    return net.record("addn", joined, tuple(outs))


def _head(net: _Net, x: int, pos: int) -> int:
    """Global average pool, dense logits, softmax cross-entropy; return the loss node ``xent``."""
    g, s, variables = net.g, net.s, net.variables
    in_features = g.out_bytes[x] / (_FLOAT * s.batch_size * pos)
    pool_axis = g.const("head/Mean/reduction_indices", 2 * _FLOAT)
    pooled_bytes = _FLOAT * s.batch_size * in_features
    pooled = g.add("head/Mean", "Mean", out_bytes=pooled_bytes,
                   base_us=_eltwise_us(g.out_bytes[x] + pooled_bytes), inputs=(x, pool_axis))
    net.record("pool", pooled, (x, pool_axis))
    logits_bytes = _FLOAT * s.batch_size * s.classes
    kread = _variable(g, variables, "head/dense/kernel", _FLOAT * in_features * s.classes)
    flops = 2.0 * s.batch_size * in_features * s.classes
    logits = g.add("head/dense/MatMul", "MatMul", out_bytes=logits_bytes, base_us=_heavy_us(flops),
                   inputs=(pooled, kread))
    net.record("kernel", logits, (pooled, kread, len(variables) - 1, int(flops)))
    bread = _variable(g, variables, "head/dense/bias", _FLOAT * s.classes)
    biased = g.add("head/dense/BiasAdd", "BiasAdd", out_bytes=logits_bytes,
                   base_us=_eltwise_us(2 * logits_bytes), inputs=(logits, bread))
    net.record("bias", biased, (logits, len(variables) - 1))
    labels = g.add("labels", "Placeholder", out_bytes=_FLOAT * s.batch_size, base_us=_SOURCE_US)
    xent = g.add("loss/SparseSoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
                 out_bytes=_FLOAT * s.batch_size, base_us=_eltwise_us(3 * logits_bytes),
                 inputs=(biased, labels), memory=_FLOAT * s.batch_size + logits_bytes,
                 outputs=(_FLOAT * s.batch_size, logits_bytes))
    # the backward pass starts here: its first gradient flows into the biased logits
    net.fwd.append(("xent", xent, (biased,)))
    return xent


class _Gradients:
    """Gradient contributions per forward node, summed by TensorFlow's ``AddN`` when several."""

    def __init__(self, net: _Net) -> None:
        self.net = net
        self.contrib: dict[int, list[_Input]] = {}
        self.addn = 0

    def give(self, node: int, grad: _Input) -> None:
        """Add ``grad`` to ``node``'s gradient (ignored when no gradient flows into ``node``)."""
        if node in self.net.diff:
            self.contrib.setdefault(node, []).append(grad)

    def take(self, node: int) -> _Input | None:
        """``node``'s whole gradient (an ``AddN`` of several contributions), or None."""
        parts = self.contrib.pop(node, None)
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        g = self.net.g
        nbytes = g.out_bytes[node]
        name = "gradients/AddN" if self.addn == 0 else f"gradients/AddN_{self.addn}"
        self.addn += 1
        return g.add(name, "AddN", out_bytes=nbytes, base_us=_eltwise_us(nbytes * (len(parts) + 1)),
                     inputs=parts)


def _backward(net: _Net, xent: int) -> None:
    """Append the gradient ops (reverse of ``net.fwd``), filling each variable's ``grad``."""
    grads = _Gradients(net)
    dlogits = _loss_gradient(net, xent)
    for kind, node, args in reversed(net.fwd):
        if kind == "xent":
            grads.give(args[0], dlogits)
            continue
        dy = grads.take(node)
        if dy is None:
            continue
        if kind not in _GRADIENT_OPS:  # pragma: no cover - every recorded kind has gradient ops
            raise AssertionError(kind)
        _GRADIENT_OPS[kind](net, grads, node, args, dy, f"gradients/{net.g.names[node]}_grad")


def _loss_gradient(net: _Net, xent: int) -> int:
    """The loss value (fetched only) and ``d loss / d logits = backprop(xent) / batch``."""
    g, s = net.g, net.s
    batch_bytes = _FLOAT * s.batch_size
    logits_bytes = _FLOAT * s.batch_size * s.classes
    # the loss value itself is only fetched, not differentiated through
    g.add("loss/Mean", "Mean", out_bytes=_FLOAT, base_us=_eltwise_us(batch_bytes),
          inputs=((xent, 0, batch_bytes), g.const("loss/Const")))
    grad_ys = g.add("gradients/Fill", "Fill", out_bytes=_FLOAT, base_us=_META_US,
                    inputs=(g.const("gradients/Shape", 0.0), g.const("gradients/grad_ys_0")))
    r = g.add("gradients/loss/Mean_grad/Reshape", "Reshape", out_bytes=_FLOAT, base_us=_META_US,
              inputs=(grad_ys, g.const("gradients/loss/Mean_grad/Reshape/shape", _FLOAT)))
    t = g.add("gradients/loss/Mean_grad/Tile", "Tile", out_bytes=batch_bytes,
              base_us=_eltwise_us(batch_bytes),
              inputs=(r, g.const("gradients/loss/Mean_grad/Const", _FLOAT)))
    d = g.add("gradients/loss/Mean_grad/truediv", "RealDiv", out_bytes=batch_bytes,
              base_us=_eltwise_us(2 * batch_bytes),
              inputs=(t, g.const("gradients/loss/Mean_grad/Cast")))
    e = g.add("gradients/loss/xent_grad/ExpandDims", "ExpandDims", out_bytes=batch_bytes,
              base_us=_META_US, inputs=(d, g.const("gradients/loss/xent_grad/ExpandDims/dim")))
    return g.add("gradients/loss/xent_grad/mul", "Mul", out_bytes=logits_bytes,
                 base_us=_eltwise_us(3 * logits_bytes), inputs=(e, (xent, 1, logits_bytes)))


def _kernel_grad(net: _Net, grads: _Gradients, node: int, args: tuple[int, ...], dy: _Input, gp: str) -> None:
    """``Conv2DBackpropFilter``/``Input`` or the two ``MatMul`` gradients of a weighted op."""
    g, diff = net.g, net.diff
    x, kread, vi, flops = args
    var = net.variables[vi]
    if g.ops[node] == "Conv2D":
        var.grad = g.add(f"{gp}/Conv2DBackpropFilter", "Conv2DBackpropFilter",
                         out_bytes=var.nbytes, base_us=_heavy_us(flops),
                         inputs=(x, g.const(f"{gp}/ShapeN_1", _SMALL), dy))
        if x in diff:
            grads.give(x, g.add(f"{gp}/Conv2DBackpropInput", "Conv2DBackpropInput",
                                out_bytes=g.out_bytes[x], base_us=_heavy_us(flops),
                                inputs=(g.const(f"{gp}/ShapeN", _SMALL), kread, dy)))
        return
    if x in diff:
        grads.give(x, g.add(f"{gp}/MatMul", "MatMul", out_bytes=g.out_bytes[x],
                            base_us=_heavy_us(flops), inputs=(dy, kread)))
    var.grad = g.add(f"{gp}/MatMul_1", "MatMul", out_bytes=var.nbytes,
                     base_us=_heavy_us(flops), inputs=(x, dy))


def _bias_grad(net: _Net, grads: _Gradients, node: int, args: tuple[int, ...], dy: _Input, gp: str) -> None:
    """``BiasAddGrad`` for the bias; the input gets ``dy`` itself."""
    h, vi = args
    var = net.variables[vi]
    var.grad = net.g.add(f"{gp}/BiasAddGrad", "BiasAddGrad", out_bytes=var.nbytes,
                         base_us=_eltwise_us(net.g.out_bytes[node]), inputs=(dy,))
    grads.give(h, dy)


def _norm_grad(net: _Net, grads: _Gradients, node: int, args: tuple[int, ...], dy: _Input, gp: str) -> None:
    """``FusedBatchNormGradV3``: the input's gradient (output 0), gamma's (1) and beta's (2)."""
    g = net.g
    nbytes = g.out_bytes[node]
    h, gread, vg, vb, stats = args
    grad = g.add(f"{gp}/FusedBatchNormGradV3", "FusedBatchNormGradV3", out_bytes=nbytes,
                 base_us=_eltwise_us(4 * nbytes), memory=nbytes + 2 * stats,
                 outputs=(nbytes, stats, stats, 0.0, 0.0),
                 inputs=(dy, h, gread, (node, 3, stats), (node, 4, stats)))
    net.variables[vg].grad = (grad, 1, stats)
    net.variables[vb].grad = (grad, 2, stats)
    grads.give(h, grad)


def _reshape_grad(net: _Net, grads: _Gradients, node: int, args: tuple[int, ...], dy: _Input,
                  gp: str) -> None:
    """A ``Reshape`` back to the input's shape."""
    g = net.g
    (x,) = args
    grads.give(x, g.add(f"{gp}/Reshape", "Reshape", out_bytes=g.out_bytes[node], base_us=_META_US,
                        memory=0.0, inputs=(dy, g.const(f"{gp}/Shape", _SMALL))))


def _mul_grad(net: _Net, grads: _Gradients, node: int, args: tuple[int, ...], dy: _Input, gp: str) -> None:
    """``dy`` times the constant factor."""
    g = net.g
    nbytes = g.out_bytes[node]
    x, c = args
    grads.give(x, g.add(f"{gp}/Mul", "Mul", out_bytes=nbytes, base_us=_eltwise_us(2 * nbytes),
                        inputs=(dy, c)))


def _activation_grad(net: _Net, grads: _Gradients, node: int, args: tuple[int, ...], dy: _Input, gp: str,
                     *, op: str, dy_first: bool) -> None:
    """``op`` (``SigmoidGrad``, ``TanhGrad``, ``ReluGrad``) of the op's own output and ``dy``."""
    g = net.g
    nbytes = g.out_bytes[node]
    (x,) = args
    ins: tuple[_Input, ...] = (dy, node) if dy_first else (node, dy)
    grads.give(x, g.add(f"{gp}/{op}", op, out_bytes=nbytes, base_us=_eltwise_us(3 * nbytes), inputs=ins))


def _concat_grad(net: _Net, grads: _Gradients, node: int, args: tuple[int, ...], dy: _Input,
                 gp: str) -> None:
    """``ShapeN`` and ``ConcatOffset``, then one ``Slice`` of ``dy`` per concatenated input."""
    g = net.g
    *outs, axis = args
    shapes = g.add(f"{gp}/ShapeN", "ShapeN", out_bytes=_SMALL, base_us=_META_US,
                   inputs=outs, memory=_SMALL * len(outs), outputs=(_SMALL,) * len(outs))
    offsets = g.add(f"{gp}/ConcatOffset", "ConcatOffset", out_bytes=_SMALL, base_us=_META_US,
                    inputs=(axis, *((shapes, i, _SMALL) for i in range(len(outs)))),
                    memory=_SMALL * len(outs), outputs=(_SMALL,) * len(outs))
    for i, o in enumerate(outs):
        part = g.out_bytes[o]
        grads.give(o, g.add(f"{gp}/Slice_{i}", "Slice", out_bytes=part, base_us=_eltwise_us(2 * part),
                            inputs=(dy, (offsets, i, _SMALL), (shapes, i, _SMALL))))


def _sum_grad(net: _Net, grads: _Gradients, node: int, args: tuple[int, ...], dy: _Input, gp: str) -> None:
    """``AddN`` and the residual ``AddV2``: every input gets ``dy`` itself."""
    for o in args:
        grads.give(o, dy)


def _pool_grad(net: _Net, grads: _Gradients, node: int, args: tuple[int, ...], dy: _Input, gp: str) -> None:
    """Global average pool: ``Tile`` ``dy`` back to the input's shape, divide by the positions."""
    g = net.g
    x, _axis = args
    full = g.out_bytes[x]
    tiled = g.add(f"{gp}/Tile", "Tile", out_bytes=full, base_us=_eltwise_us(full),
                  inputs=(dy, g.const(f"{gp}/Tile/multiples", _SMALL)))
    grads.give(x, g.add(f"{gp}/truediv", "RealDiv", out_bytes=full, base_us=_eltwise_us(2 * full),
                        inputs=(tiled, g.const(f"{gp}/Cast"))))


_GradientOps = Callable[[_Net, _Gradients, int, tuple[int, ...], _Input, str], None]

#: The gradient ops of each kind of forward op (``gp`` is the ``gradients/<op>_grad`` name prefix).
_GRADIENT_OPS: dict[str, _GradientOps] = {
    "kernel": _kernel_grad, "bias": _bias_grad, "norm": _norm_grad, "reshape": _reshape_grad,
    "mul": _mul_grad,
    "sigmoid": partial(_activation_grad, op="SigmoidGrad", dy_first=False),
    "tanh": partial(_activation_grad, op="TanhGrad", dy_first=False),
    "relu": partial(_activation_grad, op="ReluGrad", dy_first=True),
    "concat": _concat_grad, "addn": _sum_grad, "residual": _sum_grad, "pool": _pool_grad,
}


def _optimizer(g: GraphBuilder, variables: list[_Var]) -> None:
    """Append Adam: hyper-parameters, one ``ApplyAdam`` per variable, the beta-power updates."""
    first = variables[0].name  # TF colocates the beta powers with the first variable
    lr = g.const("Adam/learning_rate")
    beta1 = g.const("Adam/beta1")
    beta2 = g.const("Adam/beta2")
    eps = g.const("Adam/epsilon")
    powers = []
    for p in ("beta1_power", "beta2_power"):
        var = g.add(p, "VariableV2", out_bytes=_FLOAT, base_us=_SOURCE_US, coloc=first)
        read = g.add(f"{p}/read", "Identity", out_bytes=_FLOAT, base_us=_META_US, inputs=(var,),
                     memory=0.0, coloc=first)
        powers.append((var, read))
    updates = []
    for v in variables:
        if v.grad is None:  # pragma: no cover - every variable is used by the loss
            raise AssertionError(f"variable {v.name} has no gradient")
        updates.append(g.add(
            f"Adam/update_{v.name}/ApplyAdam", "ApplyAdam", out_bytes=0.0,
            base_us=_eltwise_us(5 * v.nbytes), coloc=v.name,
            inputs=(v.var, v.slots[0], v.slots[1], powers[0][1], powers[1][1], lr, beta1, beta2, eps,
                    v.grad)))
    group = g.add("Adam/update", "NoOp", out_bytes=0.0, base_us=_META_US, inputs=updates, outputs=())
    assigns = []
    for i, ((var, read), beta) in enumerate(zip(powers, (beta1, beta2), strict=True)):
        suffix = "" if i == 0 else f"_{i}"
        mul = g.add(f"Adam/mul{suffix}", "Mul", out_bytes=_FLOAT, base_us=_eltwise_us(3 * _FLOAT),
                    inputs=(read, beta, group), coloc=first)
        assigns.append(g.add(f"Adam/Assign{suffix}", "Assign", out_bytes=0.0, base_us=_META_US,
                             inputs=(var, mul), coloc=first))
    g.add("Adam", "NoOp", out_bytes=0.0, base_us=_META_US, inputs=(group, *assigns), outputs=())


def _build(s: _Spec) -> GraphBuilder:
    """The whole training step as builder lists (costs still noise-free)."""
    net = _Net(GraphBuilder(), s)
    xent = _forward(net)
    _backward(net, xent)
    _optimizer(net.g, net.variables)
    return net.g


#: Op types whose output 0 is a view of input 0 (no copy): the ones this generator makes, out of
#: ``celeritas_tf.extract.VIEW_OPS`` (a layer above, so not imported here).
_VIEW_OPS = frozenset({"Identity", "Reshape", "ExpandDims"})
#: Op types that hold a variable (weights, Adam slots, beta powers) for the whole step.
_VARIABLE_OPS = frozenset({"VariableV2"})


def _liveness(g: GraphBuilder, memory: np.ndarray) -> Liveness:
    """The liveness fields (docs/formats.md) of the built ops, as ``celeritas_tf.extract`` fills
    them for a real step, so the one-device peak follows tensor lifetimes instead of the sum.

    Bytes, per op of rounded ``memory`` (``memory_bytes``): a ``VariableV2`` keeps its memory as
    ``persistent_bytes`` and its outputs are 0 bytes (the variable's own buffer); every other op
    declares its outputs (``out_bytes``, or every output of a multi-output op such as
    ``FusedBatchNormV3``; none for a ``NoOp``); a view op (``Identity`` such as a variable's
    ``/read``, ``Reshape``, ``ExpandDims``) declares its output at full size but as an alias of
    its first input, so it adds no bytes on its device (a copy sent elsewhere is full size);
    ``scratch_bytes`` is what the memory exceeds the outputs and persistent bytes by (0 for every
    op this generator makes). O(ops + edges), one Python pass.
    """
    first_input: dict[int, tuple[int, int]] = {}
    for s, d, o in zip(g.src, g.dst, g.eout, strict=True):
        first_input.setdefault(d, (s, o))
    persistent: list[float | None] = []
    scratch: list[float | None] = []
    outputs: list[list[float] | None] = []
    aliases: list[list[tuple[int, int] | None] | None] = []
    for i, op in enumerate(g.ops):
        declared = g.outputs[i]
        sizes = np.rint(np.asarray((g.out_bytes[i],) if declared is None else declared, dtype=np.float64))
        keep = 0.0
        if op in _VARIABLE_OPS:
            keep, sizes[:] = float(memory[i]), 0.0
        persistent.append(keep)
        scratch.append(max(float(memory[i]) - keep - float(sizes.sum()), 0.0))
        outputs.append(sizes.tolist())
        view = op in _VIEW_OPS and len(sizes) and i in first_input
        aliases.append([first_input[i], *[None] * (len(sizes) - 1)] if view else None)
    return Liveness.from_lists(persistent, scratch, outputs, aliases)


def _check_int(value: object, field: str, minimum: int) -> int:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < minimum:
        raise CeleritasInputError(f"{field}: must be an integer >= {minimum}, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------- public API
def training_step_graph(
    *,
    layers: int,
    width: int,
    seed: int = 0,
    name: str = "synthetic",
    branches: int = 1,
    kernel: Kernel = "MatMul",
    join: Join = "concat",
    residual: bool = False,
    norm: bool = False,
    extra_elementwise: int = 0,
    reshapes: int = 0,
    batch_size: int = 32,
    positions: int = 1,
    stages: int = 0,
    classes: int = 1000,
    num_nodes: int | None = None,
    model: str | None = None,
    liveness: bool = False,
) -> Graph:
    """A seeded synthetic TensorFlow training step (forward, loss, backward, Adam updates).

    Parameters
    ----------
    layers : int
        number of layers in the forward chain (>= 1).
    width : int
        channels (``Conv2D``) or features (``MatMul``) of each layer's output.
    seed : int, optional
        seed of the cost noise (and of where padding constants attach).
    name : str, optional
        graph name.
    branches : int, optional
        parallel branches per layer (inception modules, Q/K/V projections).
    kernel : {"MatMul", "Conv2D"}, optional
        the weighted op of each branch, ``"MatMul"`` or ``"Conv2D"`` (3×3).
    join : {"concat", "add"}, optional
        how branches merge: ``"concat"`` (``ConcatV2``, each branch ``width // branches``
        wide) or ``"add"`` (``AddN``, each branch ``width`` wide).
    residual : bool, optional
        add the layer input to its output (``AddV2``).
    norm : bool, optional
        ``FusedBatchNormV3`` (gamma and beta variables) instead of ``BiasAdd``.
    extra_elementwise : int, optional
        elementwise ops per branch between the bias/norm and the ``Relu``
        (cycling ``Mul`` by a constant, ``Sigmoid``, ``Tanh``), as in LSTM gates or attention.
    reshapes : int, optional
        ``Reshape`` ops per branch after the weighted op (split heads and the like):
        ~1 µs each and no memory of their own, but they pass the whole tensor on.
    batch_size : int, optional
        examples per step; tensor sizes (bytes) scale with it.
    positions : int, optional
        spatial positions (``Conv2D``: height·width) or tokens (``MatMul``) per example.
    stages : int, optional
        times the positions shrink 4× (stride-2 downsampling) along the chain.
    classes : int, optional
        output classes of the dense head.
    num_nodes : int, optional
        pad with small ``Const`` ops (one edge each) to exactly this many nodes; an
        error if the layer stack alone already has more.
    model : str, optional
        recorded in ``meta["model"]`` (default: ``name``).
    liveness : bool, optional
        give every op the liveness fields of docs/formats.md (:func:`_liveness`):
        variables and Adam slots persistent, activations live until their last consumer (the
        gradient ops), views aliasing their input. Off by default: the graph is then exactly
        what it was before the option existed (no liveness fields, peak = sum).

    Returns
    -------
    Graph
        The graph: ``time_us`` in µs, ``memory_bytes`` and edge bytes in bytes, every edge of one
        source output carrying the same byte size; ``meta`` holds ``source``, ``model``, ``seed``
        and ``batch_size`` (and ``liveness: true`` with the option).

    Raises
    ------
    CeleritasInputError
        A count that is not an integer or is below its minimum (1; 0 for ``extra_elementwise``,
        ``reshapes`` and ``stages``), an unknown ``kernel`` or ``join``, fewer ``width`` than
        ``branches`` with ``"concat"``, or a ``num_nodes`` below what the layers need.

    Examples
    --------
    >>> from celeritas_core import training_step_graph
    >>> graph = training_step_graph(layers=2, width=8, seed=1)
    >>> graph.num_nodes, graph.meta["seed"], {"MatMul", "ApplyAdam", "ReluGrad"} <= set(graph.ops)
    (85, 1, True)
    >>> training_step_graph(layers=2, width=8, seed=1, num_nodes=100).num_nodes   # padded
    100
    >>> training_step_graph(layers=2, width=8, seed=1).time_us.tolist() == graph.time_us.tolist()
    True
    """
    spec = _checked_spec(layers=layers, width=width, branches=branches, kernel=kernel, join=join,
                         residual=residual, norm=norm, extra_elementwise=extra_elementwise,
                         reshapes=reshapes, batch_size=batch_size, positions=positions, stages=stages,
                         classes=classes)
    seed = _check_int(seed, "seed", 0)
    if join == "concat" and spec.width < spec.branches:
        raise CeleritasInputError(f"width: {width} is less than branches ({branches}) with join='concat'")
    g = _build(spec)
    rng = np.random.default_rng(seed)
    n = len(g.names)
    if num_nodes is not None:
        target = _check_int(num_nodes, "num_nodes", 1)
        if target < n:
            raise CeleritasInputError(
                f"num_nodes: {layers} layers already need {n} nodes, more than {target}")
        _pad_constants(g, rng, target - n)
        n = target
    noise = rng.lognormal(0.0, _NOISE_SIGMA, size=n)
    memory = np.rint(np.asarray(g.memory, dtype=np.float64))
    meta: dict[str, object] = {"source": "synthetic", "model": model or name, "seed": seed,
                               "batch_size": spec.batch_size}
    if liveness:
        meta["liveness"] = True
    return Graph.from_arrays(
        name=name, node_names=g.names, ops=g.ops, time_us=np.asarray(g.base_us, dtype=np.float64) * noise,
        memory_bytes=memory, colocation=g.coloc,
        edge_src=g.src, edge_dst=g.dst, edge_bytes=np.rint(np.asarray(g.ebytes, dtype=np.float64)),
        edge_src_output=g.eout, meta=meta, liveness=_liveness(g, memory) if liveness else None,
    )


def _checked_spec(*, layers: int, width: int, branches: int, kernel: Kernel, join: Join, residual: bool,
                  norm: bool, extra_elementwise: int, reshapes: int, batch_size: int, positions: int,
                  stages: int, classes: int) -> _Spec:
    """The :func:`training_step_graph` arguments as a :class:`_Spec`; raise on the first bad one."""
    if kernel not in ("MatMul", "Conv2D"):
        raise CeleritasInputError(f"kernel: must be 'MatMul' or 'Conv2D', got {kernel!r}")
    if join not in ("concat", "add"):
        raise CeleritasInputError(f"join: must be 'concat' or 'add', got {join!r}")
    return _Spec(
        layers=_check_int(layers, "layers", 1),
        width=_check_int(width, "width", 1),
        branches=_check_int(branches, "branches", 1),
        kernel=kernel,
        join=join,
        residual=bool(residual),
        norm=bool(norm),
        extra_elementwise=_check_int(extra_elementwise, "extra_elementwise", 0),
        reshapes=_check_int(reshapes, "reshapes", 0),
        batch_size=_check_int(batch_size, "batch_size", 1),
        positions=_check_int(positions, "positions", 1),
        stages=_check_int(stages, "stages", 0),
        classes=_check_int(classes, "classes", 1),
    )


def _pad_constants(g: GraphBuilder, rng: np.random.Generator, count: int) -> None:
    """Append ``count`` small shape/scalar constants, each feeding one random op that has inputs
    (like ``Reshape`` shapes)."""
    has_inputs = np.unique(np.asarray(g.dst, dtype=np.int64))
    targets = has_inputs[rng.integers(0, len(has_inputs), size=count)].tolist()
    for i, dst in enumerate(targets):
        c = g.const(f"pad/Const_{i}", 2 * _FLOAT)
        g.src.append(c)
        g.dst.append(int(dst))
        g.eout.append(0)
        g.ebytes.append(2 * _FLOAT)


@dataclass(frozen=True)
class _Shape:
    """Per-model layer stack for :func:`paper_shaped_graph` (``layers`` fills the node count)."""

    width: int
    branches: int
    kernel: Kernel
    join: Join
    residual: bool
    norm: bool
    extra_elementwise: int
    batch_size: int
    positions: int
    stages: int
    classes: int
    reshapes: int = 0


_SHAPES: dict[str, _Shape] = {
    # full-resolution conv stack (192×192 pixels, 24 channels), residual connections, batch 1
    "tensor_holography": _Shape(width=24, branches=1, kernel="Conv2D", join="concat", residual=True,
                                norm=False, extra_elementwise=1, batch_size=1, positions=192 * 192,
                                stages=0, classes=16),
    # inception modules: 4 conv branches joined by ConcatV2, batch norm, 35×35 down to 8×8 pixels
    "inception_v3": _Shape(width=128, branches=4, kernel="Conv2D", join="concat", residual=False,
                           norm=True, extra_elementwise=0, batch_size=32, positions=35 * 35,
                           stages=2, classes=1000),
    # unrolled LSTM-like cells with residual connections: one MatMul and the gates' elementwise ops
    "nmt": _Shape(width=1024, branches=1, kernel="MatMul", join="concat", residual=True, norm=False,
                  extra_elementwise=5, batch_size=256, positions=1, stages=0, classes=32000),
    # Q/K/V-like projections with head reshapes joined by AddN, layer norm, residual connections
    "transformer": _Shape(width=256, branches=3, kernel="MatMul", join="add", residual=True, norm=True,
                          extra_elementwise=3, batch_size=16, positions=128, stages=0, classes=32000,
                          reshapes=3),
}


def _layers_for(shape: _Shape, nodes: int) -> int:
    """Most layers whose training step has at most ``nodes`` nodes (the count is affine in layers)."""
    c2 = len(_build(_Spec(layers=2, **asdict(shape))).names)
    c3 = len(_build(_Spec(layers=3, **asdict(shape))).names)
    per = c3 - c2
    if nodes < c2:
        raise CeleritasInputError(f"nodes: cannot build {nodes:,} ops: two layers already need {c2:,}")
    return 2 + (nodes - c2) // per


def _scale_to_ccr(graph: Graph, target: float, cluster: Cluster) -> Graph:
    """Scale every edge's bytes by one factor so that ``ccr(graph, cluster) == target``.

    Σ comm = slope·s·Σ bytes + intercept·edges (µs), so the scale ``s`` is solved exactly; bytes
    are then rounded to whole bytes and the solve repeated on the rounded sizes (a few times at
    most). Op memory is left as is: the factor stands for a slower effective link than the
    cluster's transfer model, not for bigger tensors.
    """
    work = graph.total_time_us
    fixed = cluster.intercept_us * graph.num_edges
    total_bytes = float(graph.edge_bytes.sum())
    if work <= 0 or fixed >= target * work or cluster.slope_us_per_byte <= 0 or total_bytes <= 0:
        raise CeleritasInputError(
            f"cannot reach CCR {target:g} for {graph.name!r}: the per-edge latency alone gives CCR "
            f"{fixed / work if work > 0 else float('inf'):.3f} (and the slope is "
            f"{cluster.slope_us_per_byte:g} µs/byte)")
    edge_bytes = graph.edge_bytes
    scale = 1.0
    for _ in range(4):
        step = (target * work - fixed) / (cluster.slope_us_per_byte * float(edge_bytes.sum()))
        scale *= step
        edge_bytes = np.rint(graph.edge_bytes * scale)
        if abs(step - 1.0) < 1e-9:
            break
    meta = {**graph.meta, "target_ccr": target, "byte_scale": round(scale, 6)}
    return Graph.from_arrays(
        name=graph.name, node_names=graph.node_names, ops=graph.ops, time_us=graph.time_us,
        memory_bytes=graph.memory_bytes, colocation=graph.colocation, edge_src=graph.edge_src,
        edge_dst=graph.edge_dst, edge_bytes=edge_bytes, edge_src_output=graph.edge_src_output,
        meta=meta, liveness=graph.liveness, check_acyclic=False)


def paper_shaped_graph(model: str, *, seed: int = 0, cluster: Cluster | None = None,
                       nodes: int | None = None, liveness: bool = False) -> Graph:
    """A synthetic training step with the node count and CCR of one of the paper's models.

    Parameters
    ----------
    model : str
        a key of :data:`PAPER_MODELS`.
    seed : int, optional
        seed of the op-time noise.
    cluster : Cluster, optional
        the transfer model the CCR is measured with (default: 4 devices, default
        transfer model; only its slope and intercept matter).
    nodes : int, optional
        build this many ops instead of the paper's count (more or fewer layers of the
        same shape, same CCR), from the two layers' minimum up to :data:`MAX_GENERATED_NODES`.
    liveness : bool, optional
        give every op the liveness fields (:func:`training_step_graph`); output and
        persistent bytes are the op memory, not scaled with the edges' bytes.

    Returns
    -------
    Graph
        A graph named ``model`` with exactly ``nodes`` (default ``PAPER_MODELS[model].nodes``) nodes and
        ``levels.ccr(graph, cluster)`` within 1 % (in practice ~1e-6) of the table's CCR.

    Raises
    ------
    CeleritasInputError
        unknown model, or a transfer model whose per-edge latency alone
        exceeds the target CCR.

    Examples
    --------
    >>> from celeritas_core import Cluster, ccr, paper_shaped_graph
    >>> graph = paper_shaped_graph("nmt", nodes=1000)   # the paper's NMT has 25,463 ops
    >>> graph.name, graph.num_nodes, round(ccr(graph, Cluster.homogeneous(4, 1e9)), 2)
    ('nmt', 1000, 18.63)
    >>> paper_shaped_graph("gpt")
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: unknown model 'gpt'; known models: tensor_holography, ...
    """
    if model not in PAPER_MODELS:
        raise CeleritasInputError(
            f"unknown model {model!r}; known models: {', '.join(PAPER_MODELS)}")
    paper = PAPER_MODELS[model]
    shape = _SHAPES[model]
    count = paper.nodes if nodes is None else _check_int(nodes, "nodes", 1)
    if count > MAX_GENERATED_NODES:
        raise CeleritasInputError(f"nodes: must be at most {MAX_GENERATED_NODES:,}, got {count:,}")
    graph = training_step_graph(layers=_layers_for(shape, count), seed=seed, name=model,
                                num_nodes=count, model=model, liveness=liveness, **asdict(shape))
    if cluster is None:
        cluster = Cluster.homogeneous(4, _DEFAULT_CLUSTER_MEMORY)
    return _scale_to_ccr(graph, paper.ccr, cluster)


def small_training_graph(seed: int = 0, *, liveness: bool = False) -> Graph:
    """The bundled example ``training_step_small``: a 407-op conv training step (inception-like).

    Six layers of two 3×3 conv branches joined by ``ConcatV2``, batch norm and residual
    connections, batch 32 at 64×64 then 32×32 pixels: about 1.3 GiB of op memory in total, so it
    does not fit on one 600 MiB device but does on four. Costs are not rescaled (CCR ≈ 27 with
    the default transfer model). ``liveness`` gives every op the liveness fields
    (:func:`training_step_graph`).

    Parameters
    ----------
    seed : int, optional
        Seed of the op-time noise (0: the bundled file's graph).
    liveness : bool, optional
        Give every op the liveness fields.

    Returns
    -------
    Graph
        The 407-op training step.

    Examples
    --------
    >>> from celeritas_core import format_bytes, small_training_graph
    >>> graph = small_training_graph()
    >>> graph.name, graph.num_nodes, format_bytes(graph.total_memory_bytes)
    ('training_step_small', 407, '1.32 GiB')
    """
    return training_step_graph(
        layers=6, width=64, seed=seed, name="training_step_small", branches=2, kernel="Conv2D",
        join="concat", residual=True, norm=True, batch_size=32, positions=64 * 64, stages=1,
        classes=100, liveness=liveness)
