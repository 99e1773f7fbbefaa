"""The costs of one micro-batch: a training step's graph at batch ``B / M``.

Two sources, per op:

* **the per-op regressions** (Standard Evaluation's fits, ``celeritas-fits``; :class:`CostFits`)
  when the caller gives them: the op's time (µs) and memory (bytes) predicted at ``B / M``;
* **otherwise a scaling** of the graph's costs (measured or modelled at ``B``): an op's time is a
  fixed part, at most the per-op floor ``floor_us``, plus the rest, which scales with the batch:
  ``t' = min(t, floor) + max(t - floor, 0) / M``. The floor is what an op costs whatever its size
  (the kernel launch and the framework's dispatch), so that small micro-batches are not free.
  Its default, 5 µs, is the launch overhead of the V100 and A100 presets of the analytical cost
  model (``celeritas_tf.analytical``; the synthetic generators use the same figure for a heavy
  op); measured on an H100 (``bench/bench_gpu_kernels.py``, ``bench/results/``), an empty kernel
  costs 1.2 µs replayed in a CUDA graph and 24 µs launched eagerly. A graph may record its own
  in ``meta["op_floor_us"]``.

Sizes: the tensors that carry the batch scale by ``1 / M``; the tensors that do not are kept: the
ones read from the ops run once (weights), and the **weight-shaped** ones, the gradients that
reach an update (:data:`~celeritas_core.pipeline.roles.AFTER`) and, backwards from them, every
tensor of the same byte size that an op feeding them consumes (the sum of a weight's gradients
over its uses, their casts). An op's ``memory_bytes`` and its scratch scale with the batch unless
all its outputs are weight-shaped; persistent bytes (variables, slots) never scale.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.graph import Graph, Liveness, TensorView
from celeritas_core.pipeline.roles import AFTER, OpRoles

#: Default per-op floor (µs): the launch overhead of the V100/A100 presets (module docstring).
DEFAULT_OP_FLOOR_US = 5.0


class BatchFits(Protocol):
    """What the scaling reads from per-op fits: names and the costs predicted at a batch size."""

    names: tuple[str, ...]

    def predict(self, batch_size: float) -> tuple[np.ndarray, np.ndarray]:
        """Time (µs) and memory (bytes) of every op of :attr:`names` at ``batch_size``."""
        ...


def op_floor_us(graph: Graph, floor_us: float | None = None) -> float:
    """The per-op floor (µs): ``floor_us`` when given, else the graph's ``meta["op_floor_us"]``,
    else :data:`DEFAULT_OP_FLOOR_US`."""
    if floor_us is None:
        floor_us = float(graph.meta.get("op_floor_us", DEFAULT_OP_FLOOR_US))
    if not np.isfinite(floor_us) or floor_us < 0:
        raise CeleritasInputError(f"op floor must be a time in µs >= 0, got {floor_us!r}")
    return float(floor_us)


def batch_tensors(graph: Graph, roles: OpRoles) -> np.ndarray:
    """Per tensor of :attr:`Graph.tensors`: True when its size scales with the batch (module
    docstring), False for weights and weight-shaped gradients."""
    t = graph.tensors
    per_mb = roles.per_micro_batch
    scales = per_mb[t.producer].copy()
    feeds_update = np.zeros(t.num_tensors, dtype=bool)
    feeds_update[t.edge_tensor[roles.role[graph.edge_dst] == AFTER]] = True
    fixed = feeds_update & scales
    # backwards through same-size inputs, in reverse topological order of the producers
    size = t.nbytes
    rank = graph.topological_rank
    for tensor in sorted(np.flatnonzero(fixed).tolist(), key=lambda x: -rank[t.producer[x]]):
        _fix_same_size_inputs(graph, t, per_mb, fixed, int(tensor), size)
    return scales & ~fixed


def _fix_same_size_inputs(graph: Graph, t: TensorView, per_mb: np.ndarray, fixed: np.ndarray, tensor: int,
                          size: np.ndarray) -> None:
    """Mark, depth first, the per-micro-batch input tensors of ``tensor``'s producer that have its
    size (the weight-shaped chain behind a gradient)."""
    stack = [tensor]
    while stack:
        u = int(t.producer[stack.pop()])
        for e in graph.pred_edge[graph.pred_ptr[u]:graph.pred_ptr[u + 1]]:
            src = int(graph.edge_src[e])
            inp = int(t.edge_tensor[e])
            if per_mb[src] and not fixed[inp] and size[inp] == size[tensor]:
                fixed[inp] = True
                stack.append(inp)


def microbatch_graph(graph: Graph, roles: OpRoles, micro_batches: int, *, floor_us: float | None = None,
                     fits: BatchFits | None = None, batch_size: int | None = None) -> Graph:
    """``graph`` with the costs of one micro-batch of ``batch_size / micro_batches`` (module
    docstring); ops run once per step keep their costs.

    Parameters
    ----------
    graph : Graph
        A training step at batch ``batch_size``.
    roles : OpRoles
        Its ops' roles (:func:`~celeritas_core.pipeline.roles.op_roles`).
    micro_batches : int
        M >= 1.
    floor_us : float, optional
        The per-op floor (µs; :func:`op_floor_us`).
    fits : BatchFits, optional
        Per-op fits: the ops they name take their predicted time and memory at ``B / M``
        (``batch_size`` then required).
    batch_size : int, optional
        B, for the fits.

    Returns
    -------
    Graph
        The same ops and edges, with per-micro-batch costs; ``meta["micro_batches"]`` records M.

    Examples
    --------
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> from celeritas_core.pipeline.roles import op_roles
    >>> g = small_training_graph(0)
    >>> mb = microbatch_graph(g, op_roles(g), 4)
    >>> i = g.index["layer_0/branch_0/Conv2D"]
    >>> bool(mb.time_us[i] < g.time_us[i]), bool(mb.time_us[i] >= min(g.time_us[i], 5.0))
    (True, True)
    >>> w = g.index["layer_0/branch_0/kernel"]
    >>> bool(mb.memory_bytes[w] == g.memory_bytes[w])   # a variable: once per step
    True
    """
    if micro_batches < 1:
        raise CeleritasInputError(f"micro-batches must be >= 1, got {micro_batches}")
    if micro_batches == 1:
        return graph
    floor = op_floor_us(graph, floor_us)
    per_mb = roles.per_micro_batch
    m = float(micro_batches)
    time_us = graph.time_us.copy()
    fixed = np.minimum(time_us, floor)
    time_us[per_mb] = (fixed + (time_us - fixed) / m)[per_mb]
    scales = batch_tensors(graph, roles)
    t = graph.tensors
    edge_factor = np.where(scales[t.edge_tensor], 1.0 / m, 1.0)
    op_scales = per_mb & _all_outputs_scale(graph, scales)
    memory = np.where(op_scales, graph.memory_bytes / m, graph.memory_bytes)
    if fits is not None:
        time_us, memory = _from_fits(graph, per_mb, fits, batch_size, micro_batches, time_us, memory)
    liveness = _scaled_liveness(graph, graph.liveness, scales, op_scales, m)
    return graph.with_costs(time_us=time_us, memory_bytes=memory, edge_bytes=graph.edge_bytes * edge_factor,
                            liveness=liveness, meta={**graph.meta, "micro_batches": micro_batches})


def _all_outputs_scale(graph: Graph, scales: np.ndarray) -> np.ndarray:
    """Per op: False when it has an output tensor that does not scale (a weight-shaped one)."""
    t = graph.tensors
    out = np.ones(graph.num_nodes, dtype=bool)
    out[t.producer[~scales]] = False
    return out


def _from_fits(graph: Graph, per_mb: np.ndarray, fits: BatchFits, batch_size: int | None,
               micro_batches: int, time_us: np.ndarray, memory: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Time and memory of the fitted per-micro-batch ops at ``batch_size / micro_batches``."""
    if batch_size is None:
        raise CeleritasInputError("micro-batch costs from fits need the batch size")
    fit_time, fit_memory = fits.predict(batch_size / micro_batches)
    where: Mapping[str, int] = graph.index
    time_us, memory = time_us.copy(), memory.copy()
    for j, name in enumerate(fits.names):
        i = where.get(name)
        if i is not None and per_mb[i]:
            time_us[i] = max(0.0, float(fit_time[j]))
            memory[i] = max(0.0, float(fit_memory[j]))
    return time_us, memory


def _scaled_liveness(graph: Graph, live: Liveness | None, scales: np.ndarray, op_scales: np.ndarray,
                     m: float) -> Liveness | None:
    """The liveness fields at one micro-batch: batch-carrying outputs and scratch over ``m``."""
    if live is None:
        return None
    t = graph.tensors
    owner = np.repeat(np.arange(graph.num_nodes), np.diff(live.output_ptr))
    position = np.arange(len(live.output_bytes)) - live.output_ptr[owner]
    known = t.ids(owner, position)
    # an output that no edge carries scales with its op
    out_scales = np.where(known >= 0, scales[np.maximum(known, 0)], op_scales[owner])
    return replace(live, output_bytes=np.where(out_scales, live.output_bytes / m, live.output_bytes),
                   scratch_bytes=np.where(op_scales, live.scratch_bytes / m, live.scratch_bytes))
