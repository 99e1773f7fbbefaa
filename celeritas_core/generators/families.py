"""Seeded graph families for the placement-quality benchmark (``bench/bench_quality.py``).

Five families, each a list of :class:`Instance` (a graph and the cluster to place it on):

* **a — training steps**: the synthetic TensorFlow training steps of
  :mod:`celeritas_core.generators.synthetic` (forward, backward, Adam, co-location groups), a few hundred
  to a few thousand ops, in three variants:

  - the sum model (no liveness fields: an op's memory is held all step) with the default
    transfer model (PCIe class, CCR 22–49), on 2 and 4 devices that each hold 30–60 % of the
    model's memory (the model does not fit one device, as in the Celeritas paper's evaluation),
    plus cases where one device holds the whole model;
  - ``…/live``: the same four steps (the 407-op one, ``mlp-qkv``, ``conv-inception``, the
    paper-shaped Tensor Holography), seed 0, **with liveness fields** (``liveness=True``:
    variables and Adam slots persistent, activations live until their gradient ops, views
    aliasing their input), on the :data:`LIVENESS_SETUPS` (2, 4 and 8 devices of 30–60 % of the
    **one-device liveness peak**, :func:`celeritas_core.simulation.memory.one_device_peak_bytes`), default
    transfer model;
  - ``…/cheap``: **memory-bound training steps with cheap transfers**, the ``/live`` graphs and
    setups on :func:`cheap_cluster`: an NVLink-shaped link (150 GB/s and 2 µs, see
    :data:`NVLINK_SLOPE_US_PER_BYTE`) scaled by one factor per graph to CCR
    :data:`CHEAP_CCR` = 0.05 (31–67 times faster than NVLink: with roofline op times NVLink
    itself gives CCR 1.6–3.4, while profiled steps lie below 0.1; see :func:`cheap_cluster`).
    Several devices are needed for memory, and transfers hardly cost: the regime of real
    extracted training steps.
* **b — inference graphs with parallel branches**: Inception-like modules
  (:func:`inception_graph`; Szegedy et al., "Going deeper with convolutions", CVPR 2015, and
  "Rethinking the Inception architecture", CVPR 2016) and multi-tower graphs
  (:func:`towers_graph`; Cheng et al., "Wide & Deep learning for recommender systems", DLRS 2016;
  Ma et al., "Modeling task relationships in multi-task learning with multi-gate
  mixture-of-experts", KDD 2018). Op times and tensor sizes come from shape arithmetic with the
  V100-class roofline of :mod:`celeritas_core.generators.synthetic` and seeded noise; no co-location
  groups; an op's memory is its output tensor.
* **c — random layered task DAGs** (:func:`layered_dag`) in the style of the classic static
  scheduling benchmarks: Tobita & Kasahara, "A standard task graph set for fair evaluation of
  multiprocessor scheduling algorithms", J. Scheduling 5(5), 2002 (the STG set: layered random
  shapes with a set mean number of predecessors, integer task times), and Davidović & Crainic,
  "Benchmark-problem instances for static scheduling of task graphs with communication delays on
  homogeneous multiprocessor systems", Computers & OR 33(8), 2006 (such shapes with
  communication delays at a chosen CCR). CCR ∈ {0, 0.1, 1, 10}, exact under :func:`layered_cluster`.
* **d — small graphs** (at most 30 ops) from families b and c at mixed CCR on 2–4 devices,
  small enough for the exact MILP placer ``optimal``.
* **e — layer-level CNN training steps** (:func:`celeritas_core.generators.layers.layer_training_graph`):
  Inception- and ResNet-like, 350–900 nodes, every layer's forward node and gradient nodes in one
  co-location group, half with liveness fields; on 6 and 8 devices that together hold 2 or 3
  times the step's one-device peak (so 2–3 devices' worth is needed), with cheap transfers
  (:func:`cheap_cluster`, CCR :data:`CHEAP_CCR`) or medium ones (a linear link without latency,
  CCR :data:`LAYER_MEDIUM_CCR`).

Everything is a pure function of its arguments: numpy only, one ``numpy.random.default_rng(seed)``
per graph, so a seed gives the same graph on every machine. Units: time in µs, memory and tensor
sizes in bytes. Parameters follow the cited conventions and are fixed here; none was tuned to
favour a placer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.generators.layers import layer_training_graph
from celeritas_core.generators.synthetic import (
    GraphBuilder,
    paper_shaped_graph,
    small_training_graph,
    training_step_graph,
)
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.simulation.memory import one_device_peak_bytes

__all__ = [
    "CHEAP_CCR",
    "FAMILIES",
    "LAYERED_CCRS",
    "LAYERED_INTERCEPT_US",
    "LAYERED_SLOPE_US_PER_BYTE",
    "LAYER_MEDIUM_CCR",
    "LIVENESS_SETUPS",
    "NVLINK_INTERCEPT_US",
    "NVLINK_SLOPE_US_PER_BYTE",
    "Instance",
    "benchmark_instances",
    "cheap_cluster",
    "inception_graph",
    "layered_cluster",
    "layered_dag",
    "scale_to_ccr",
    "towers_graph",
]

#: Family letter -> title.
FAMILIES: dict[str, str] = {
    "a": "training-step graphs",
    "b": "inference graphs with parallel branches",
    "c": "random layered task DAGs (STG style)",
    "d": "small graphs for the exact MILP",
    "e": "layer-level CNN training steps (forward and backward co-located)",
}
_ALIASES = {"training": "a", "inference": "b", "layered": "c", "small": "d", "layers": "e"}

#: The CCR values of family c (Davidović & Crainic's range, plus 0 = no communication).
LAYERED_CCRS: tuple[float, ...] = (0.0, 0.1, 1.0, 10.0)
#: Transfer model of family c: linear in bytes, no fixed latency, so CCR 0 means free transfers.
LAYERED_SLOPE_US_PER_BYTE = 1e-4
LAYERED_INTERCEPT_US = 0.0
#: The link family a's cheap-transfer instances are shaped after: NVLink 2.0 between two V100s,
#: 150 GB/s per direction (six links of 25 GB/s; NVIDIA Tesla V100 GPU architecture whitepaper,
#: 2017; any pair of a DGX-2's 16 GPUs through NVSwitch), i.e. 1/1.5e5 µs per byte ...
NVLINK_SLOPE_US_PER_BYTE = 1.0 / 1.5e5
#: ... and 2 µs per transfer (a peer copy's launch and completion; interconnect tables give
#: 1–2 µs for NVLink: an assumed round figure, not a measurement).
NVLINK_INTERCEPT_US = 2.0
#: CCR (``levels.ccr``) of family a's cheap-transfer instances: half the 0.1 below which profiled
#: training steps lie, so the claim "CCR < 0.1" holds with room.
CHEAP_CCR = 0.05
#: CCR of family e's medium-transfer instances: ten times the cheap ones', on a link without latency.
LAYER_MEDIUM_CCR = 0.5
#: Family a's (devices, share of the one-device liveness peak per device) for the graphs with
#: liveness fields: every share of 30, 45 and 60 % on 2, 4 and 8 devices whose devices hold
#: 1.2–3.6 times the peak in total (1.2: the least of the sum-model cases, 2 x 60 % and 4 x 30 %;
#: a split adds received copies, so less would rarely fit).
LIVENESS_SETUPS: tuple[tuple[int, float], ...] = tuple(
    (d, share) for d in (2, 4, 8) for share in (0.3, 0.45, 0.6) if 1.2 - 1e-9 <= d * share <= 3.6 + 1e-9)

# ---------------------------------------------------------------------------- cost model
# The roofline of celeritas_core.generators.synthetic (V100 class), so families a and b price ops alike.
_FLOPS_PER_US = 1.5e7  # 15 TFLOP/s fp32
_BYTES_PER_US = 9.0e5  # 900 GB/s device memory
_HEAVY_LAUNCH_US = 5.0  # Conv2D / MatMul launch
_ELTWISE_LAUNCH_US = 3.0  # memory-bound op launch
_SOURCE_US = 0.1  # Placeholder
_NOISE_SIGMA = 0.25  # log-normal spread of op times
_FLOAT = 4  # bytes per element
_TASK_MEMORY_BYTES = 2**20  # family c: 1 MiB per task, small next to any device
_STG_TIME_RANGE = (1, 100)  # family c: integer task times, µs
_BRANCH_WIDTHS = (256, 512, 1024, 2048)  # tower widths (features), powers of two as in practice


@dataclass(frozen=True, eq=False)
class Instance:
    """One benchmark case: a graph, the cluster to place it on, and where it comes from."""

    name: str
    family: str
    graph: Graph
    cluster: Cluster
    notes: str = ""
    variant: str = ""
    """Family a: ``"live"`` (liveness fields), ``"cheap"`` (liveness fields and a transfer model of
    CCR :data:`CHEAP_CCR`) or ``""`` (the sum model and the default transfer model). Family e:
    ``"cheap"`` or ``"medium"`` (its transfer model)."""

    @property
    def fits_one_device(self) -> bool:
        """True when device 0 alone holds the whole model: its liveness-aware peak replayed on one
        device (:func:`~celeritas_core.simulation.memory.one_device_peak_bytes`; the sum without liveness)."""
        return bool(self.cluster.memory_bytes[0] >= one_device_peak_bytes(self.graph))


# ---------------------------------------------------------------------------- builder
class _Dag(GraphBuilder):
    """Ops whose memory and outgoing tensors are their output (bytes), built in topological order."""

    def op(self, name: str, op: str, base_us: float, out_bytes: float, inputs: Sequence[int] = ()) -> int:
        """Add an op of ``base_us`` µs (before noise) with output ``out_bytes`` reading ``inputs``."""
        return self.add(name, op, out_bytes=out_bytes, base_us=base_us, inputs=inputs)

    def graph(self, name: str, rng: np.random.Generator, meta: dict[str, object]) -> Graph:
        """Freeze: times get log-normal noise; memory and edge bytes are the producers' outputs."""
        out = np.rint(np.asarray(self.out_bytes, dtype=np.float64))
        src = np.asarray(self.src, dtype=np.int64)
        noise = rng.lognormal(0.0, _NOISE_SIGMA, size=len(self.names))
        return Graph.from_arrays(
            name=name, node_names=self.names, ops=self.ops,
            time_us=np.asarray(self.base_us, dtype=np.float64) * noise, memory_bytes=out,
            edge_src=src, edge_dst=self.dst, edge_bytes=out[src], meta=meta)


def _conv_us(batch: int, pixels: int, kernel: int, c_in: int, c_out: int) -> float:
    """Time (µs) of a ``kernel``×``kernel`` convolution: 2·B·pixels·k²·Cin·Cout FLOPs at 15 TFLOP/s."""
    return 2.0 * batch * pixels * kernel * kernel * c_in * c_out / _FLOPS_PER_US + _HEAVY_LAUNCH_US


def _matmul_us(batch: int, n_in: int, n_out: int) -> float:
    """Time (µs) of a dense layer: 2·B·in·out FLOPs at 15 TFLOP/s plus the launch."""
    return 2.0 * batch * n_in * n_out / _FLOPS_PER_US + _HEAVY_LAUNCH_US


def _eltwise_us(nbytes: float) -> float:
    """Time (µs) of a memory-bound op touching ``nbytes`` bytes at 900 GB/s plus the launch."""
    return nbytes / _BYTES_PER_US + _ELTWISE_LAUNCH_US


#: Size limits of the generators (a larger request is an input error, not minutes of work).
MAX_TASKS = 2_000_000
MAX_TOWERS = 100_000
MAX_STAGES = 40
MAX_SIZE = 1_000_000  # batch size, resolution, channels, features, classes, depth
MAX_PREDECESSORS = 1_000.0


def _check_int(value: object, field: str, minimum: int, maximum: int | None = None) -> int:
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= minimum
    if ok and maximum is not None and value > maximum:
        ok = False
    if not ok:
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise CeleritasInputError(f"{field}: must be an integer {bound}, got {value!r}")
    return int(value)


def _check_number(value: object, field: str, *, positive: bool = False) -> float:
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    if ok:
        num = float(value)  # type: ignore[arg-type]
        ok = math.isfinite(num) and (num > 0 if positive else num >= 0)
    if not ok:
        raise CeleritasInputError(f"{field}: must be a finite number {'> 0' if positive else '>= 0'}, "
                                  f"got {value!r}")
    return float(value)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- family b
def inception_graph(
    *,
    modules: int = 4,
    seed: int = 0,
    batch_size: int = 32,
    resolution: int = 35,
    channels: int = 192,
    modules_per_stage: int = 3,
    classes: int = 1000,
    name: str | None = None,
) -> Graph:
    """An inference graph of Inception-like modules: parallel conv chains joined by ``ConcatV2``.

    Shape (Szegedy et al. 2015/2016; Inception-v3's 35×35×192 grid after the stem):

    * **stem**: ``input`` (``Placeholder``, B×(4R)²×3) → ``stem/conv_0`` (3×3, stride 2, 32
      channels) → ``stem/conv_1`` (3×3, stride 2, ``channels`` channels) at R×R;
    * **modules**: each has one pool branch (``AvgPool`` 3×3 then a 1×1 ``Conv2D``) and 2 or 3
      conv branches (drawn) whose chain lengths are distinct, drawn from {1, 2, 3, 4}: a 1×1
      ``Conv2D`` then 3×3 ``Conv2D`` ops; the branches meet in ``ConcatV2``. The first module of
      every ``modules_per_stage`` after the first stage halves the grid (stride 2 in each
      branch's first op) and the target width doubles, as at Inception's grid reductions; each
      branch gets width·U(0.75, 1.25)/branches channels, rounded to a multiple of 16;
    * **head**: global ``Mean`` → ``MatMul`` (``classes`` outputs) → ``Softmax``.

    Each conv op stands for Conv2D with its bias/batch norm and ReLU fused, as in inference
    graphs after constant folding and fusion. Costs: ``time_us`` (µs) = FLOPs at 15 TFLOP/s
    + 5 µs for convs and the dense layer, bytes touched at 900 GB/s + 3 µs for pool, concat and
    softmax, times log-normal noise (σ = 0.25); ``memory_bytes`` = the op's output (fp32), and
    each edge carries its producer's output. A module has at most 12 ops, so ``modules`` = 1
    gives at most 18 ops and 2 at most 30.

    Parameters
    ----------
    modules : int, optional
        number of Inception modules (>= 1).
    seed : int, optional
        seed of the branch shapes and of the time noise.
    batch_size : int, optional
        images per inference batch (tensor sizes scale with it).
    resolution : int, optional
        R, the grid side after the stem (pixels).
    channels : int, optional
        the stem's output channels and the first stage's target module width.
    modules_per_stage : int, optional
        modules between grid reductions.
    classes : int, optional
        outputs of the classifier.
    name : str, optional
        graph name (default ``inception-m{modules}-s{seed}``).

    Returns
    -------
    Graph
        A :class:`Graph` with ``meta`` ``source``, ``family``, ``seed``, ``batch_size``.

    Raises
    ------
    CeleritasInputError
        A count or size that is not an integer in its range.

    Examples
    --------
    >>> from celeritas_core import inception_graph
    >>> graph = inception_graph(modules=1)
    >>> graph.name, graph.num_nodes, graph.node_names[:3]
    ('inception-m1-s0', 18, ('input', 'stem/conv_0', 'stem/conv_1'))
    """
    per_stage = _check_int(modules_per_stage, "modules_per_stage", 1)
    # the width doubles at every stage: beyond MAX_STAGES the costs overflow a float
    modules = _check_int(modules, "modules", 1, per_stage * MAX_STAGES)
    seed = _check_int(seed, "seed", 0)
    batch = _check_int(batch_size, "batch_size", 1, MAX_SIZE)
    res = _check_int(resolution, "resolution", 1, MAX_SIZE)
    width = _check_int(channels, "channels", 1, MAX_SIZE)
    classes = _check_int(classes, "classes", 1, MAX_SIZE)
    rng = np.random.default_rng(seed)
    g = _Dag()
    side = 4 * res
    x = g.op("input", "Placeholder", _SOURCE_US, _FLOAT * batch * side * side * 3)
    x, side, c_in = _conv(g, "stem/conv_0", x, batch, side, 3, 32, kernel=3, stride=2)
    x, side, c_in = _conv(g, "stem/conv_1", x, batch, side, c_in, width, kernel=3, stride=2)
    for m in range(modules):
        stage = m // per_stage
        stride = 2 if stage > 0 and m % per_stage == 0 else 1
        x, side, c_in = _inception_module(g, rng, f"module_{m}", x, batch, side, c_in,
                                          width * 2**stage, stride)
    pixels = side * side
    pooled = g.op("head/Mean", "Mean", _eltwise_us(_FLOAT * batch * pixels * c_in), _FLOAT * batch * c_in,
                   [x])
    logits = g.op("head/MatMul", "MatMul", _matmul_us(batch, c_in, classes), _FLOAT * batch * classes,
                   [pooled])
    g.op("head/Softmax", "Softmax", _eltwise_us(2 * _FLOAT * batch * classes), _FLOAT * batch * classes,
          [logits])
    return g.graph(name or f"inception-m{modules}-s{seed}", rng,
                   {"source": "celeritas_core.generators.families.inception_graph", "family": "b",
                    "seed": seed, "batch_size": batch, "modules": modules})


def _conv(g: _Dag, name: str, x: int, batch: int, side: int, c_in: int, c_out: int, *, kernel: int,
          stride: int) -> tuple[int, int, int]:
    """A fused ``Conv2D`` (same padding): returns (node, output side, output channels)."""
    out_side = max(1, -(-side // stride))
    pixels = out_side * out_side
    node = g.op(name, "Conv2D", _conv_us(batch, pixels, kernel, c_in, c_out),
                 _FLOAT * batch * pixels * c_out, [x])
    return node, out_side, c_out


def _inception_module(g: _Dag, rng: np.random.Generator, prefix: str, x: int, batch: int, side: int,
                      c_in: int, target: int, stride: int) -> tuple[int, int, int]:
    """One module: a pool branch plus 2–3 conv chains of distinct lengths, joined by ConcatV2."""
    conv_branches = int(rng.integers(2, 4))
    lengths = rng.choice(np.arange(1, 5), size=conv_branches, replace=False).tolist()
    shares = rng.uniform(0.75, 1.25, size=conv_branches + 1)
    widths = [max(16, 16 * round(target * s / (conv_branches + 1) / 16)) for s in shares]
    outs: list[int] = []
    out_side = side
    for b, (length, c) in enumerate(zip(lengths, widths[:-1], strict=True)):
        h, out_side, ch = _conv(g, f"{prefix}/branch_{b}/conv_0", x, batch, side, c_in, c,
                                kernel=1, stride=stride)
        for k in range(1, length):
            h, out_side, ch = _conv(g, f"{prefix}/branch_{b}/conv_{k}", h, batch, out_side, ch, c,
                                    kernel=3, stride=1)
        outs.append(h)
    pool_side = max(1, -(-side // stride))
    pool_bytes = _FLOAT * batch * pool_side * pool_side * c_in
    pool = g.op(f"{prefix}/pool/AvgPool", "AvgPool",
                 _eltwise_us(_FLOAT * batch * side * side * c_in + pool_bytes), pool_bytes, [x])
    h, out_side, _ = _conv(g, f"{prefix}/pool/conv", pool, batch, pool_side, c_in, widths[-1],
                           kernel=1, stride=1)
    outs.append(h)
    c_out = sum(widths)
    out_bytes = _FLOAT * batch * out_side * out_side * c_out
    concat = g.op(f"{prefix}/concat", "ConcatV2", _eltwise_us(2 * out_bytes), out_bytes, outs)
    return concat, out_side, c_out


def towers_graph(
    *,
    towers: int = 4,
    seed: int = 0,
    min_depth: int = 1,
    max_depth: int = 6,
    batch_size: int = 256,
    input_features: int = 512,
    classes: int = 1,
    name: str | None = None,
) -> Graph:
    """A multi-tower inference graph: ``towers`` independent MLP towers from one input, joined at the end.

    The shape of wide-and-deep and multi-head / multi-task models (Cheng et al. 2016; Ma et al.
    2018): ``input`` (``Placeholder``, B×``input_features``) feeds every tower; tower ``t`` is a
    chain of ``depth_t`` ~ U{min_depth..max_depth} dense layers (``MatMul`` with bias and ReLU
    fused) of width ``w_t`` drawn from {256, 512, 1024, 2048}; the towers meet in ``ConcatV2``,
    then a ``MatMul`` head (``classes`` outputs) and a ``Sigmoid``. Costs as in
    :func:`inception_graph`: dense layers 2·B·in·out FLOPs at 15 TFLOP/s + 5 µs, memory-bound ops
    at 900 GB/s + 3 µs, times log-normal noise (σ = 0.25); ``memory_bytes`` = the op's output
    (fp32); each edge carries its producer's output. Ops: 4 + Σ depth_t.

    Parameters
    ----------
    towers : int, optional
        number of towers (>= 1).
    seed : int, optional
        seed of the tower shapes and of the time noise.
    min_depth, max_depth : int, optional
        range of dense layers per tower (1 <= min <= max).
    batch_size : int, optional
        examples per inference batch.
    input_features : int, optional
        width of the shared input.
    classes : int, optional
        outputs of the head.
    name : str, optional
        graph name (default ``towers-k{towers}-s{seed}``).

    Returns
    -------
    Graph
        A :class:`Graph` with ``meta`` as :func:`inception_graph`'s.

    Raises
    ------
    CeleritasInputError
        A count or size that is not an integer in its range.

    Examples
    --------
    >>> from celeritas_core import towers_graph
    >>> towers_graph(towers=2, max_depth=2).node_names
    ('input', 'tower_0/dense_0', 'tower_0/dense_1', 'tower_1/dense_0', 'tower_1/dense_1',
     'concat', 'head/MatMul', 'head/Sigmoid')
    """
    towers = _check_int(towers, "towers", 1, MAX_TOWERS)
    seed = _check_int(seed, "seed", 0)
    lo = _check_int(min_depth, "min_depth", 1, MAX_SIZE)
    hi = _check_int(max_depth, "max_depth", lo, MAX_SIZE)
    batch = _check_int(batch_size, "batch_size", 1, MAX_SIZE)
    features = _check_int(input_features, "input_features", 1, MAX_SIZE)
    classes = _check_int(classes, "classes", 1, MAX_SIZE)
    rng = np.random.default_rng(seed)
    g = _Dag()
    x = g.op("input", "Placeholder", _SOURCE_US, _FLOAT * batch * features)
    outs: list[int] = []
    total = 0
    for t in range(towers):
        depth = int(rng.integers(lo, hi + 1))
        w = int(rng.choice(_BRANCH_WIDTHS))
        h, n_in = x, features
        for k in range(depth):
            h = g.op(f"tower_{t}/dense_{k}", "MatMul", _matmul_us(batch, n_in, w), _FLOAT * batch * w, [h])
            n_in = w
        outs.append(h)
        total += w
    out_bytes = _FLOAT * batch * total
    concat = g.op("concat", "ConcatV2", _eltwise_us(2 * out_bytes), out_bytes, outs)
    logits = g.op("head/MatMul", "MatMul", _matmul_us(batch, total, classes), _FLOAT * batch * classes,
                   [concat])
    g.op("head/Sigmoid", "Sigmoid", _eltwise_us(2 * _FLOAT * batch * classes), _FLOAT * batch * classes,
          [logits])
    return g.graph(name or f"towers-k{towers}-s{seed}", rng,
                   {"source": "celeritas_core.generators.families.towers_graph", "family": "b", "seed": seed,
                    "batch_size": batch, "towers": towers})


# ---------------------------------------------------------------------------- family c
def layered_cluster(num_devices: int, memory_bytes: float) -> Cluster:
    """``num_devices`` identical devices with the family-c transfer model (1e-4 µs/B, 0 µs latency)."""
    return Cluster.homogeneous(num_devices, memory_bytes, slope_us_per_byte=LAYERED_SLOPE_US_PER_BYTE,
                               intercept_us=LAYERED_INTERCEPT_US)


def layered_dag(
    *,
    tasks: int,
    ccr: float,
    seed: int = 0,
    mean_predecessors: float = 3.0,
    shape: float = 1.0,
    task_memory_bytes: float = _TASK_MEMORY_BYTES,
    name: str | None = None,
) -> Graph:
    """A random layered task DAG (STG style) with an exact CCR under :func:`layered_cluster`.

    Construction (Tobita & Kasahara 2002; Davidović & Crainic 2006; layer count and widths as in
    Topcuoglu, Hariri & Wu, "Performance-effective and low-complexity task scheduling for
    heterogeneous computing", IEEE TPDS 13(3), 2002):

    * ``L = max(2, round(sqrt(tasks) / shape))`` layers; the widths are a random composition of
      ``tasks`` (every layer >= 1 task, the rest split by uniform random weights);
    * every task after the first layer reads one task of the previous layer (so the depth is L)
      and Poisson(``mean_predecessors`` − 1) more tasks drawn from all earlier layers (edges only
      go forward, never within a layer);
    * task times are integers uniform on [1, 100] µs (integer processing times from a uniform
      range, as in the STG set; the range [1, 100] is this benchmark's choice);
    * edge weights are integers uniform on [1, 100], then every edge's bytes are scaled by one
      factor so that Σ transfer time / Σ task time = ``ccr`` exactly with 1e-4 µs/byte and no
      latency (``ccr`` = 0 gives 0-byte edges, i.e. free transfers). Bytes are not rounded;
    * every task holds ``task_memory_bytes`` (default 1 MiB): memory is not the constraint here.

    Parameters
    ----------
    tasks : int
        number of tasks (>= 2).
    ccr : float
        communication-to-computation ratio (>= 0), as :func:`celeritas_core.graphs.levels.ccr`
        computes it on :func:`layered_cluster`.
    seed : int, optional
        seed of the shape, times and edge weights.
    mean_predecessors : float, optional
        mean in-degree of a non-entry task (>= 1; the STG "samepred"/"layrpred"
        methods fix this mean; 3 by default).
    shape : float, optional
        HEFT's α: > 1 gives wide shallow graphs, < 1 narrow deep ones.
    task_memory_bytes : float, optional
        memory of each task (bytes).
    name : str, optional
        graph name (default ``layered-n{tasks}-ccr{ccr:g}-s{seed}``).

    Returns
    -------
    Graph
        The task DAG (µs and bytes).

    Raises
    ------
    CeleritasInputError
        A count that is not an integer in its range, or a number out of its range.

    Examples
    --------
    >>> from celeritas_core import ccr, layered_dag
    >>> from celeritas_core.generators.families import layered_cluster
    >>> graph = layered_dag(tasks=10, ccr=1.0)
    >>> graph.name, graph.num_nodes, ccr(graph, layered_cluster(2, 1e9))
    ('layered-n10-ccr1-s0', 10, 1.0)
    """
    n = _check_int(tasks, "tasks", 2, MAX_TASKS)
    target = _check_number(ccr, "ccr")
    seed = _check_int(seed, "seed", 0)
    mean_pred = _check_number(mean_predecessors, "mean_predecessors")
    if not 1 <= mean_pred <= MAX_PREDECESSORS:
        raise CeleritasInputError(f"mean_predecessors: must be in [1, {MAX_PREDECESSORS:g}], "
                                  f"got {mean_predecessors!r}")
    alpha = _check_number(shape, "shape", positive=True)
    memory = _check_number(task_memory_bytes, "task_memory_bytes")
    rng = np.random.default_rng(seed)
    layers = _layer_widths(rng, n, min(n, max(2, round(math.sqrt(n) / alpha))))
    src, dst = _layered_edges(rng, layers, mean_pred)
    lo, hi = _STG_TIME_RANGE
    times = rng.integers(lo, hi + 1, size=n).astype(np.float64)
    weights = rng.integers(lo, hi + 1, size=len(src)).astype(np.float64)
    scale = target * times.sum() / (LAYERED_SLOPE_US_PER_BYTE * weights.sum()) if target > 0 else 0.0
    layer_of = np.repeat(np.arange(len(layers)), layers)
    return Graph.from_arrays(
        name=name or f"layered-n{n}-ccr{target:g}-s{seed}",
        node_names=[f"L{layer_of[i]}/t{i}" for i in range(n)], ops=["Task"] * n, time_us=times,
        memory_bytes=np.full(n, memory), edge_src=src, edge_dst=dst, edge_bytes=weights * scale,
        meta={"source": "celeritas_core.generators.families.layered_dag", "family": "c", "seed": seed,
              "target_ccr": target, "layers": len(layers), "mean_predecessors": mean_pred})


def _layer_widths(rng: np.random.Generator, n: int, layers: int) -> list[int]:
    """A random composition of ``n`` into ``layers`` positive parts."""
    weights = rng.uniform(0.0, 1.0, size=layers) + 1e-12
    extra = rng.multinomial(n - layers, weights / weights.sum())
    return (1 + extra).astype(int).tolist()


def _layered_edges(rng: np.random.Generator, layers: list[int],
                   mean_pred: float) -> tuple[list[int], list[int]]:
    """Edges into every non-entry task: one from the previous layer, Poisson(mean−1) from earlier ones."""
    src: list[int] = []
    dst: list[int] = []
    start = layers[0]
    for layer in range(1, len(layers)):
        prev_lo = start - layers[layer - 1]
        for v in range(start, start + layers[layer]):
            first = int(rng.integers(prev_lo, start))
            extra = min(int(rng.poisson(mean_pred - 1.0)), start - 1)
            others = rng.choice(start - 1, size=extra, replace=False) if extra else np.empty(0, int)
            preds = [first, *(int(u) + (u >= first) for u in others)]  # skip ``first``: no duplicates
            src.extend(preds)
            dst.extend([v] * len(preds))
        start += layers[layer]
    return src, dst


def scale_to_ccr(graph: Graph, ccr: float, cluster: Cluster) -> Graph:
    """The same graph with every edge's bytes times one factor so that ``levels.ccr`` equals ``ccr``.

    Σ transfer = slope·s·Σ bytes + intercept·edges (µs), solved for ``s`` exactly (bytes are not
    rounded). Raises :class:`CeleritasInputError` when the latency alone exceeds ``ccr`` or the
    graph has no bytes to scale.
    """
    target = _check_number(ccr, "ccr")
    work = graph.total_time_us
    fixed = cluster.intercept_us * graph.num_edges
    total = float(graph.edge_bytes.sum())
    need = target * work - fixed
    if work <= 0 or need < 0 or (need > 0 and (total <= 0 or cluster.slope_us_per_byte <= 0)):
        raise CeleritasInputError(f"cannot reach CCR {target:g} for {graph.name!r} with this transfer model")
    scale = need / (cluster.slope_us_per_byte * total) if need > 0 else 0.0
    return Graph.from_arrays(
        name=graph.name, node_names=graph.node_names, ops=graph.ops, time_us=graph.time_us,
        memory_bytes=graph.memory_bytes, colocation=graph.colocation, edge_src=graph.edge_src,
        edge_dst=graph.edge_dst, edge_bytes=graph.edge_bytes * scale,
        edge_src_output=graph.edge_src_output, meta={**graph.meta, "target_ccr": target},
        check_acyclic=False)


def cheap_cluster(graph: Graph, num_devices: int, memory_bytes: float, ccr: float = CHEAP_CCR) -> Cluster:
    """``num_devices`` identical devices of ``memory_bytes`` bytes whose transfer model is the
    NVLink-shaped one (:data:`NVLINK_SLOPE_US_PER_BYTE`, :data:`NVLINK_INTERCEPT_US`) times one
    factor ``f <= 1`` so that ``levels.ccr(graph, cluster) == ccr`` (or below, when NVLink itself
    is below it).

    Why scaled: on the roofline-costed synthetic steps NVLink itself gives CCR 1.6–3.4, since an
    elementwise op moves its bytes at HBM speed (900 GB/s), faster than any link; profiled steps
    measure op times far above the roofline (launch and executor overheads) and lie below CCR 0.1.
    A link ``1/f`` times faster stands for op times ``1/f`` times the roofline's, as the byte
    scale of :func:`celeritas_core.generators.synthetic.paper_shaped_graph` stands for a slower link.
    """
    target = _check_number(ccr, "ccr")
    nvlink_us = (NVLINK_SLOPE_US_PER_BYTE * float(graph.edge_bytes.sum())
                 + NVLINK_INTERCEPT_US * graph.num_edges)
    factor = min(1.0, target * graph.total_time_us / nvlink_us) if nvlink_us > 0 else 1.0
    return Cluster.homogeneous(num_devices, memory_bytes, slope_us_per_byte=factor * NVLINK_SLOPE_US_PER_BYTE,
                               intercept_us=factor * NVLINK_INTERCEPT_US)


# ---------------------------------------------------------------------------- instances
def benchmark_instances(family: str, *, quick: bool = False, seed: int = 0) -> list[Instance]:
    """The benchmark's instances of ``family`` (``"a"``–``"d"`` or ``training``, ``inference``,
    ``layered``, ``small``); ``quick`` keeps a handful for tests; ``seed`` offsets every
    generator seed.

    Parameters
    ----------
    family : str
        ``"a"`` (training steps), ``"b"`` (inference graphs with parallel branches), ``"c"``
        (random layered task DAGs), ``"d"`` (graphs small enough for the exact MILP), or the
        aliases ``training``, ``inference``, ``layered``, ``small``.
    quick : bool, optional
        Only a few small instances (for tests and examples).
    seed : int, optional
        Added to every generator's seed (>= 0).

    Returns
    -------
    list of Instance
        Each with its ``name``, ``family``, ``graph`` and the ``cluster`` to place it on.

    Raises
    ------
    CeleritasInputError
        An unknown family, or a seed that is not an integer >= 0.

    Examples
    --------
    >>> from celeritas_core import benchmark_instances, place
    >>> instances = benchmark_instances("small", quick=True)
    >>> [(i.name, i.graph.num_nodes, i.cluster.num_devices) for i in instances]
    [('small-layered-n10-s1000/2dev', 10, 2), ('small-inception-m1-s1001/2dev', 15, 2)]
    >>> placement = place(instances[0].graph, instances[0].cluster, "m-topo")
    >>> placement.oom
    False
    """
    key = _ALIASES.get(family, family)
    if key not in FAMILIES:
        raise CeleritasInputError(
            f"unknown family {family!r} (known: {', '.join(FAMILIES)} or {', '.join(_ALIASES)})")
    seed = _check_int(seed, "seed", 0)
    return _BUILDERS[key](quick, seed)


def _medium_mlp(s: int, liveness: bool = False) -> Graph:
    """Transformer-like training step: Q/K/V projections, layer norm, residuals (1,068 ops)."""
    return training_step_graph(layers=10, width=512, seed=s, name="mlp-qkv", branches=3, kernel="MatMul",
                               join="add", residual=True, norm=True, extra_elementwise=2, reshapes=1,
                               batch_size=16, positions=128, classes=1000, liveness=liveness)


def _medium_conv(s: int, liveness: bool = False) -> Graph:
    """Inception-like training step: 4 conv branches, batch norm, 2 grid reductions (1,399 ops)."""
    return training_step_graph(layers=12, width=128, seed=s, name="conv-inception", branches=4,
                               kernel="Conv2D", join="concat", norm=True, batch_size=32, positions=35 * 35,
                               stages=2, classes=1000, liveness=liveness)


def _holo(s: int, liveness: bool = False) -> Graph:
    """The paper-shaped Tensor Holography training step (3,810 ops)."""
    return paper_shaped_graph("tensor_holography", seed=s, liveness=liveness)


def _small(s: int, liveness: bool = False) -> Graph:
    """The bundled 407-op conv training step."""
    return small_training_graph(s, liveness=liveness)


#: A family-a case: (graph builder, seed offset, devices, fraction of the model's memory per device).
_Case = tuple[Callable[..., Graph], int, int, float]


def _training_instances(quick: bool, seed: int) -> list[Instance]:
    """Family a: synthetic training steps, sum model, on devices holding 30–60 % of the model or
    all of it; then the same steps with liveness fields (``/live``) and with liveness fields and
    cheap transfers (``/cheap``) on 2, 4 and 8 devices holding 30–60 % of the one-device peak."""
    plan: list[_Case] = [(_small, 0, 2, 0.6), (_small, 0, 4, 0.3), (_small, 0, 2, 1.25)]
    live: list[_Case] = [(_small, 0, 2, 0.6)]
    cheap: list[_Case] = [(_small, 0, 4, 0.6)]
    if not quick:
        plan += [
            (_small, 1, 2, 0.6), (_small, 1, 4, 0.3), (_small, 2, 2, 0.6), (_small, 2, 4, 0.45),
            (_medium_mlp, 0, 2, 0.6), (_medium_mlp, 0, 4, 0.3), (_medium_mlp, 1, 4, 0.45),
            (_medium_mlp, 1, 4, 1.25),
            (_medium_conv, 0, 2, 0.6), (_medium_conv, 0, 4, 0.3), (_medium_conv, 1, 4, 1.25),
            (_holo, 0, 4, 0.3), (_holo, 0, 2, 0.6), (_holo, 0, 4, 1.25),
        ]
        live = cheap = [(build, 0, devices, share) for build in (_small, _medium_mlp, _medium_conv, _holo)
                        for devices, share in LIVENESS_SETUPS]
    cache: dict[tuple[str, int, bool], Graph] = {}

    def graph_of(build: Callable[..., Graph], s: int, liveness: bool) -> Graph:
        key = (build.__name__, s, liveness)
        if key not in cache:
            cache[key] = build(s, liveness=liveness)
        return cache[key]

    out = []
    for build, offset, devices, share in plan:
        graph = graph_of(build, seed + offset, False)
        cluster = Cluster.homogeneous(devices, share * graph.total_memory_bytes)
        out.append(Instance(f"{graph.name}-s{seed + offset}/{devices}x{share:.0%}", "a", graph, cluster,
                            f"{devices} devices x {share:.0%} of model memory, default transfer model"))
    for variant, cases in (("live", live), ("cheap", cheap)):
        for build, offset, devices, share in cases:
            graph = graph_of(build, seed + offset, True)
            out.append(_liveness_instance(graph, seed + offset, devices, share, variant))
    return out


def _liveness_instance(graph: Graph, s: int, devices: int, share: float, variant: str) -> Instance:
    """A family-a instance of a graph with liveness fields: devices of ``share`` times its one-device
    peak (bytes), the default transfer model (``live``) or :func:`cheap_cluster` (``cheap``)."""
    memory = share * one_device_peak_bytes(graph)
    name = f"{graph.name}-s{s}/{devices}x{share:.0%}/{variant}"
    if variant == "live":
        return Instance(name, "a", graph, Cluster.homogeneous(devices, memory),
                        f"{devices} devices x {share:.0%} of the one-device liveness peak, default transfer "
                        f"model", variant)
    cluster = cheap_cluster(graph, devices, memory)
    return Instance(name, "a", graph, cluster,
                    f"{devices} devices x {share:.0%} of the one-device liveness peak, NVLink-shaped link "
                    f"scaled to CCR {CHEAP_CCR:g}: {cluster.slope_us_per_byte:.3g} µs/B + "
                    f"{cluster.intercept_us:.3g} µs", variant)


def _inference_instances(quick: bool, seed: int) -> list[Instance]:
    """Family b: Inception-like and multi-tower graphs on 2/4 devices, ample or tight memory."""
    graphs = [inception_graph(modules=4, seed=seed), towers_graph(towers=4, seed=seed + 1)]
    if not quick:
        graphs += [inception_graph(modules=8, seed=seed + 2), inception_graph(modules=12, seed=seed + 3),
                   towers_graph(towers=2, seed=seed + 4), towers_graph(towers=8, seed=seed + 5),
                   towers_graph(towers=16, seed=seed + 6)]
    # (devices, memory per device as a fraction of the model): ample, and tight on 4 devices
    setups = [(2, 1.0), (4, 1.0), (4, 0.4)] if not quick else [(2, 1.0)]
    out = []
    for graph in graphs:
        for devices, share in setups:
            cluster = Cluster.homogeneous(devices, share * graph.total_memory_bytes)
            out.append(Instance(f"{graph.name}/{devices}x{share:.0%}", "b", graph, cluster,
                                f"{devices} devices x {share:.0%} of model memory, default transfer model"))
    return out


def _layered_instances(quick: bool, seed: int) -> list[Instance]:
    """Family c: tasks x CCR x devices; every device holds the whole DAG (memory is no constraint)."""
    sizes, devices = ((50,), (2, 4)) if quick else ((50, 100, 200, 500), (2, 4, 8))
    ccrs = (0.0, 1.0) if quick else LAYERED_CCRS
    out = []
    k = 0
    for n in sizes:
        for target in ccrs:
            for d in devices:
                graph = layered_dag(tasks=n, ccr=target, seed=seed + k)
                k += 1
                cluster = layered_cluster(d, graph.total_memory_bytes)
                out.append(Instance(f"{graph.name}/{d}dev", "c", graph, cluster,
                                    f"{d} devices, ample memory, 1e-4 µs/B and no latency"))
    return out


def _small_instances(quick: bool, seed: int) -> list[Instance]:
    """Family d: graphs of at most 30 ops from families b and c at mixed CCR on 2–4 devices."""
    # (kind, size, CCR, devices); CCR None keeps the graph's own (shape-arithmetic) CCR
    plan: list[tuple[str, int, float | None, int]] = [
        ("layered", 10, 1.0, 2), ("inception", 1, None, 2),
    ]
    if not quick:
        plan += [
            ("layered", 12, 0.1, 3), ("layered", 14, 10.0, 2), ("layered", 16, 0.0, 4),
            ("layered", 20, 1.0, 4), ("towers", 3, None, 3), ("towers", 4, 1.0, 2),
            ("inception", 1, 1.0, 4),
        ]
    out = []
    for k, (kind, size, target, devices) in enumerate(plan):
        s = seed + 1000 + k
        if kind == "layered":
            graph = layered_dag(tasks=size, ccr=target or 0.0, seed=s, name=f"small-layered-n{size}-s{s}")
            cluster = layered_cluster(devices, graph.total_memory_bytes)
        else:
            graph = (inception_graph(modules=size, seed=s, name=f"small-inception-m{size}-s{s}")
                     if kind == "inception" else
                     towers_graph(towers=size, max_depth=4, seed=s, name=f"small-towers-k{size}-s{s}"))
            cluster = Cluster.homogeneous(devices, graph.total_memory_bytes)
            if target is not None:
                graph = scale_to_ccr(graph, target, cluster)
        ccr_text = "own CCR" if target is None else f"CCR {target:g}"
        out.append(Instance(f"{graph.name}/{devices}dev", "d", graph, cluster,
                            f"{graph.num_nodes} ops, {ccr_text}, {devices} devices, ample memory"))
    return out


def _layer_instances(quick: bool, seed: int) -> list[Instance]:
    """Family e: layer-level CNN training steps (shape, size, liveness) on 6 and 8 devices holding 2
    or 3 times the one-device peak in all, at cheap and medium CCR."""
    graphs = [("resnet", 1, False), ("inception", 6, True)]
    setups: list[tuple[int, float, str]] = [(6, 2.0, "cheap"), (8, 3.0, "medium")]
    if not quick:
        graphs += [("resnet", 2, True), ("inception", 16, False)]
        setups = [(d, k, t) for d, k in ((6, 2.0), (8, 3.0)) for t in ("cheap", "medium")]
    out = []
    for g_index, (shape, size, live) in enumerate(graphs):
        graph = layer_training_graph(shape, size=size, seed=seed + g_index, liveness=live)
        memory = one_device_peak_bytes(graph)
        for devices, total, transfers in setups:
            per_device = total * memory / devices
            if transfers == "cheap":
                cluster = cheap_cluster(graph, devices, per_device)
            else:
                slope = LAYER_MEDIUM_CCR * graph.total_time_us / float(graph.edge_bytes.sum())
                cluster = Cluster.homogeneous(devices, per_device, slope_us_per_byte=slope, intercept_us=0.0)
            model = "liveness" if live else "sum model"
            target = LAYER_MEDIUM_CCR if transfers == "medium" else CHEAP_CCR
            out.append(Instance(
                f"{graph.name}/{devices}x{total:g}of{devices}/{transfers}", "e", graph, cluster,
                f"{graph.num_nodes} nodes ({model}), {devices} devices holding {total:g}x the one-device "
                f"peak in all, {transfers} transfers (CCR {target:g})", transfers))
    return out


_BUILDERS: dict[str, Callable[[bool, int], list[Instance]]] = {
    "a": _training_instances,
    "b": _inference_instances,
    "c": _layered_instances,
    "d": _small_instances,
    "e": _layer_instances,
}
