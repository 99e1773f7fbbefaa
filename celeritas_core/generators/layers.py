"""Layer-level training steps of branchy CNNs whose co-location groups tie forward to backward.

The graphs a layer-level profile of a real training step gives (one node per Keras layer and pass):
every layer has a **forward node**, and a **backward node** computing the gradient of its inputs;
a layer with weights (convolution, dense) has a second backward node for the gradient of its
weights (TensorFlow's ``Conv2DBackpropInput`` and ``Conv2DBackpropFilter``). The layer's nodes
form **one co-location group**, as a layer's variables tie them in a real step (the forward reads
the weights, the weight gradient updates them), so a placer must keep a layer's forward and
backward on one device although they run far apart in time.

Shapes:

* ``inception``: a stem, then Inception-v3-like modules (Szegedy et al., "Rethinking the Inception
  architecture for computer vision", CVPR 2016): four branches (1x1; 1x1 then 3x3; 1x1 then two
  3x3; average pool then 1x1) of conv / batch-norm / ReLU layers joined by a concatenation, a
  grid reduction (stride 2) every ``modules_per_stage`` modules; global pooling, a dense layer and
  the loss.
* ``resnet``: a stem, then ResNet-50-like bottleneck blocks (He et al., "Deep residual learning
  for image recognition", CVPR 2016): 1x1, 3x3, 1x1 conv / batch-norm (/ ReLU) layers, a
  projection shortcut (conv, batch-norm) in a stage's first block, the residual add and a ReLU;
  four stages of ``(3, 4, 6, 3)`` blocks times ``depth``.

Costs: the V100-class roofline of :mod:`celeritas_core.generators.families` with seeded
log-normal noise; a backward node costs its forward (input gradient of an elementwise layer) or
its forward's FLOPs (each of a conv's or dense layer's two gradients), as in the usual 2x rule.
Edges carry activation bytes: forward ``F(p) -> F(l)`` the input activation; backward
``B(c) -> B(l)`` the gradient of ``l``'s output (its size), for every consumer ``c``;
``F(p) -> B(l)`` and ``F(p) -> W(l)`` the saved input activations the gradients read; ``F(l) ->
B(l)`` the saved output (ReLU, batch-norm). Memory: without liveness fields (the sum model) a
forward node holds its output plus its layer's parameters four times (weights, gradient, two Adam
slots: the group's parameter bytes), a backward node its outputs; with ``liveness=True`` the
parameters are persistent bytes of the forward node and every output lives until its consumers
finish, so a layer's activation lives from its forward to its backward.

Everything is a pure function of its arguments (one ``numpy.random.default_rng(seed)``). Units: µs
and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.graph import Graph, Liveness

__all__ = ["LAYER_SHAPES", "layer_training_graph"]

#: The shapes :func:`layer_training_graph` builds.
LAYER_SHAPES = ("inception", "resnet")

_FLOPS_PER_US = 1.5e7  # 15 TFLOP/s fp32 (as families a and b)
_BYTES_PER_US = 9.0e5  # 900 GB/s device memory
_HEAVY_LAUNCH_US = 5.0  # Conv2D / MatMul launch
_ELTWISE_LAUNCH_US = 3.0  # memory-bound op launch
_NOISE_SIGMA = 0.25  # log-normal spread of layer times
_FLOAT = 4  # bytes per element
_PARAM_COPIES = 4  # weights, their gradient, Adam's two slots
_RESNET_STAGES = (3, 4, 6, 3)  # bottleneck blocks per stage (ResNet-50)


@dataclass
class _Layer:
    """One forward layer: kind, inputs (layer indices), output bytes, FLOPs and parameter bytes."""

    name: str
    kind: str
    inputs: list[int]
    out_bytes: float
    flops: float = 0.0
    param_bytes: float = 0.0
    consumers: list[int] = field(default_factory=list)


class _Net:
    """Forward layers appended in topological order, with their output shapes."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.layers: list[_Layer] = []

    def add(self, name: str, kind: str, inputs: list[int], side: int, channels: int, *,
            flops: float = 0.0, param_bytes: float = 0.0) -> int:
        out = float(_FLOAT * self.batch * side * side * channels)
        self.layers.append(_Layer(name, kind, inputs, out, flops, param_bytes))
        for i in inputs:
            self.layers[i].consumers.append(len(self.layers) - 1)
        return len(self.layers) - 1

    def conv_bn(self, name: str, x: int, side: int, c_in: int, c_out: int, kernel: int, stride: int = 1,
                relu: bool = True) -> tuple[int, int]:
        """Conv, batch-norm and (optionally) ReLU layers; returns (last layer, output side)."""
        out_side = max(1, -(-side // stride))
        flops = 2.0 * self.batch * out_side * out_side * kernel * kernel * c_in * c_out
        h = self.add(f"{name}/conv", "Conv2D", [x], out_side, c_out, flops=flops,
                     param_bytes=_FLOAT * kernel * kernel * c_in * c_out)
        h = self.add(f"{name}/bn", "BatchNorm", [h], out_side, c_out, param_bytes=_FLOAT * 2 * c_out)
        if relu:
            h = self.add(f"{name}/relu", "Relu", [h], out_side, c_out)
        return h, out_side


def _stem(net: _Net, resolution: int, width: int) -> tuple[int, int]:
    x = net.add("input", "Input", [], resolution, 3)
    h, side = net.conv_bn("stem/conv_0", x, resolution, 3, width // 2, 3, stride=2)
    h, side = net.conv_bn("stem/conv_1", h, side, width // 2, width, 3)
    side = max(1, -(-side // 2))
    return net.add("stem/pool", "MaxPool", [h], side, width), side


def _inception(net: _Net, modules: int, resolution: int, width: int) -> tuple[int, int]:
    h, side = _stem(net, resolution, width)
    channels = width
    reductions = {modules // 3, 2 * modules // 3} - {0}  # two grid reductions, as Inception-v3's
    for m in range(modules):
        stride = 2 if m in reductions else 1
        p = f"mixed_{m}"
        c = max(16, channels // 4)
        a, out_side = net.conv_bn(f"{p}/b0", h, side, channels, c, 1, stride)
        b, _ = net.conv_bn(f"{p}/b1_0", h, side, channels, c // 2, 1)
        b, _ = net.conv_bn(f"{p}/b1_1", b, side, c // 2, c, 3, stride)
        d, _ = net.conv_bn(f"{p}/b2_0", h, side, channels, c // 2, 1)
        d, _ = net.conv_bn(f"{p}/b2_1", d, side, c // 2, c, 3)
        d, _ = net.conv_bn(f"{p}/b2_2", d, side, c, c, 3, stride)
        pool = net.add(f"{p}/b3_pool", "AvgPool", [h], out_side, channels)
        e, _ = net.conv_bn(f"{p}/b3", pool, out_side, channels, c, 1)
        channels = 4 * c if stride == 1 else 4 * c * 2
        if stride == 2:  # reductions widen the grid's channels (as Inception-v3's do)
            e, _ = net.conv_bn(f"{p}/b3_wide", e, out_side, c, c * 5, 1)
            channels = 3 * c + c * 5
        side = out_side
        h = net.add(f"{p}/concat", "Concat", [a, b, d, e], side, channels)
    return h, channels


def _resnet(net: _Net, depth: int, resolution: int, width: int) -> tuple[int, int]:
    h, side = _stem(net, resolution, width)
    channels = width
    for s, blocks in enumerate(_RESNET_STAGES):
        inner = width * 2**s
        for k in range(blocks * depth):
            p = f"stage{s}/block{k}"
            stride = 2 if s > 0 and k == 0 else 1
            a, out_side = net.conv_bn(f"{p}/a", h, side, channels, inner, 1, stride)
            a, _ = net.conv_bn(f"{p}/b", a, out_side, inner, inner, 3)
            a, _ = net.conv_bn(f"{p}/c", a, out_side, inner, 4 * inner, 1, relu=False)
            shortcut = h
            if k == 0:
                shortcut, _ = net.conv_bn(f"{p}/proj", h, side, channels, 4 * inner, 1, stride, relu=False)
            side, channels = out_side, 4 * inner
            h = net.add(f"{p}/add", "Add", [a, shortcut], side, channels)
            h = net.add(f"{p}/relu", "Relu", [h], side, channels)
    return h, channels


def _check(value: object, field_name: str, low: int, high: int) -> int:
    if not (isinstance(value, int | np.integer) and not isinstance(value, bool) and low <= value <= high):
        raise CeleritasInputError(f"{field_name}: must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


def _head(net: _Net, h: int, channels: int, classes: int) -> None:
    pool = net.add("head/pool", "Mean", [h], 1, channels)
    logits = net.add("head/dense", "MatMul", [pool], 1, classes, flops=2.0 * net.batch * channels * classes,
                     param_bytes=_FLOAT * channels * classes)
    net.add("head/loss", "Loss", [logits], 1, 1)


def _forward_us(layer: _Layer, net: _Net) -> float:
    if layer.flops > 0:
        return layer.flops / _FLOPS_PER_US + _HEAVY_LAUNCH_US
    read = sum(net.layers[i].out_bytes for i in layer.inputs)
    return (read + layer.out_bytes) / _BYTES_PER_US + _ELTWISE_LAUNCH_US


class _StepBuilder:
    """Nodes (forward, input gradient, weight gradient per layer) and edges of the training step."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.ops: list[str] = []
        self.base_us: list[float] = []
        self.coloc: list[str] = []
        self.persistent: list[float] = []
        self.scratch: list[float] = []
        self.outputs: list[list[float]] = []
        self.src: list[int] = []
        self.dst: list[int] = []
        self.out: list[int] = []
        self.nbytes: list[float] = []

    def node(self, name: str, op: str, us: float, group: str, *, outputs: list[float],
             persistent: float = 0.0, scratch: float = 0.0) -> int:
        self.names.append(name)
        self.ops.append(op)
        self.base_us.append(us)
        self.coloc.append(group)
        self.outputs.append(outputs)
        self.persistent.append(persistent)
        self.scratch.append(scratch)
        return len(self.names) - 1

    def edge(self, src: int, dst: int, output: int = 0) -> None:
        self.src.append(src)
        self.dst.append(dst)
        self.out.append(output)
        self.nbytes.append(self.outputs[src][output])


def _build_step(net: _Net) -> _StepBuilder:
    s = _StepBuilder()
    fwd = [s.node(f"{ly.name}/fwd", ly.kind, _forward_us(ly, net), ly.name, outputs=[ly.out_bytes],
                  persistent=_PARAM_COPIES * ly.param_bytes) for ly in net.layers]
    for ly, f in zip(net.layers, fwd, strict=True):
        for p in ly.inputs:
            s.edge(fwd[p], f)
    grad_in: list[int] = [-1] * len(net.layers)  # input-gradient node per layer
    grad_w: list[int] = [-1] * len(net.layers)  # weight-gradient node per conv / dense layer
    for i in range(len(net.layers) - 1, -1, -1):
        ly = net.layers[i]
        if not ly.inputs:
            continue
        outs = [net.layers[p].out_bytes for p in ly.inputs]
        us = _forward_us(ly, net) if ly.flops <= 0 else ly.flops / _FLOPS_PER_US + _HEAVY_LAUNCH_US
        grad_in[i] = s.node(f"{ly.name}/grad_input", f"{ly.kind}Grad", us, ly.name, outputs=outs)
        if ly.flops > 0:
            grad_w[i] = s.node(f"{ly.name}/grad_weights", f"{ly.kind}GradWeights", us, ly.name, outputs=[],
                               scratch=ly.param_bytes)
        # what the gradients read: the output gradient from every consumer's input gradient, the
        # layer's own forward (weights, or the saved output), the saved inputs (weight gradient)
        sinks = [grad_in[i]] + ([grad_w[i]] if grad_w[i] >= 0 else [])
        for c in ly.consumers:
            port = net.layers[c].inputs.index(i)
            for sink in sinks:
                s.edge(grad_in[c], sink, port)
        s.edge(fwd[i], grad_in[i])
        if grad_w[i] >= 0:
            for p in ly.inputs:
                s.edge(fwd[p], grad_w[i])
    return s


def layer_training_graph(
    shape: str = "inception",
    *,
    size: int = 8,
    seed: int = 0,
    batch_size: int = 32,
    resolution: int = 147,
    width: int = 64,
    classes: int = 1000,
    liveness: bool = False,
    name: str | None = None,
) -> Graph:
    """A layer-level training step of a branchy CNN whose co-location groups tie each layer's
    forward node to its gradient nodes (module docstring).

    Parameters
    ----------
    shape : {"inception", "resnet"}
        Inception-v3-like modules or ResNet-50-like bottleneck blocks.
    size : int, optional
        Inception: the number of modules (two grid reductions among them); ResNet: the depth multiplier
        of the ``(3, 4, 6, 3)`` blocks per stage (1 is ResNet-50's layout). In [1, 64].
    seed : int, optional
        Seed of the layer times' log-normal noise (>= 0).
    batch_size, resolution, width, classes : int, optional
        Images per step, input side (pixels), the stem's channels, and output classes.
    liveness : bool, optional
        Give liveness fields (parameters persistent, activations live until their last
        consumer) instead of the sum model.
    name : str, optional
        The graph's name; default ``"layers-{shape}{size}-s{seed}"``.

    Returns
    -------
    Graph
        Nodes ``<layer>/fwd``, ``<layer>/grad_input`` and, for conv and dense layers,
        ``<layer>/grad_weights``, all of one layer in the co-location group ``<layer>``.

    Examples
    --------
    >>> from celeritas_core.generators.layers import layer_training_graph
    >>> g = layer_training_graph("resnet", size=1)
    >>> g.num_nodes, len(set(g.colocation))
    (412, 179)
    >>> sorted(n for n, c in zip(g.node_names, g.colocation) if c == "stage0/block0/a/conv")
    ['stage0/block0/a/conv/fwd', 'stage0/block0/a/conv/grad_input', 'stage0/block0/a/conv/grad_weights']
    """
    if shape not in LAYER_SHAPES:
        raise CeleritasInputError(f"shape: must be one of {', '.join(LAYER_SHAPES)}, got {shape!r}")
    size = _check(size, "size", 1, 64)
    seed = _check(seed, "seed", 0, 2**63 - 1)
    batch_size = _check(batch_size, "batch_size", 1, 1_000_000)
    resolution = _check(resolution, "resolution", 8, 100_000)
    width = _check(width, "width", 8, 100_000)
    classes = _check(classes, "classes", 1, 1_000_000)
    net = _Net(batch_size)
    if shape == "inception":
        h, channels = _inception(net, size, resolution, width)
    else:
        h, channels = _resnet(net, size, resolution, width)
    _head(net, h, channels, classes)
    s = _build_step(net)
    rng = np.random.default_rng(seed)
    time_us = np.asarray(s.base_us) * rng.lognormal(0.0, _NOISE_SIGMA, size=len(s.names))
    memory = np.asarray([p + sum(o) + c for p, o, c in zip(s.persistent, s.outputs, s.scratch, strict=True)])
    live = (Liveness.from_lists(persistent=s.persistent, scratch=s.scratch, outputs=s.outputs)
            if liveness else None)
    return Graph.from_arrays(
        name=name or f"layers-{shape}{size}-s{seed}", node_names=s.names, ops=s.ops, time_us=time_us,
        memory_bytes=memory, edge_src=s.src, edge_dst=s.dst, edge_bytes=s.nbytes, edge_src_output=s.out,
        colocation=s.coloc, liveness=live,
        meta={"source": "layer_training_graph", "shape": shape, "size": size, "seed": seed,
              "layers": len(net.layers)})
