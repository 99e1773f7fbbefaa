"""Turn a TensorFlow training step into a ``celeritas-graph/1`` graph.

One node per op of the step's GraphDef, in GraphDef order. One edge per input: a data input
``name:k`` carries the bytes of the producer's output ``k`` at the step's batch size (static shape ×
dtype size; resource handles and unknown shapes carry 0 bytes), a control input ``^name`` carries
0 bytes on its own ``src_output`` slot (one past the producer's data outputs). Co-location groups
join what TensorFlow's placer keeps together: the ``_class: loc:@X`` attributes and every op that
consumes a resource handle with the op that produced it (resource ops run where the variable
lives). A group is named after one of its members (the variable, where there is one).

Liveness fields (``docs/formats.md``): a variable's ``persistent_bytes`` is its size; every op's
``output_bytes`` are its outputs' static sizes (0 for an output that is a variable's buffer); an
op with a cost gets ``scratch_bytes`` = its memory cost minus its outputs' static sizes and its
persistent bytes (at least 0), which is the temp memory the profile measured (or its regression
prediction). Output aliases (an output sharing an input's buffer) come from the trace
(:func:`celeritas_tf.profile.output_aliases`) or, untraced, from op types (:func:`view_aliases`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeritas_core.graphs.graph import Graph, Liveness
from celeritas_tf.identity import step_digest
from celeritas_tf.step import TrainingStep


class _UnionFind:
    def __init__(self, names: list[str]) -> None:
        self.parent = {n: n for n in names}

    def find(self, x: str) -> str:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # keep the variable-like (shorter) name as the root, for readable group names
            if (len(rb), rb) < (len(ra), ra):
                ra, rb = rb, ra
            self.parent[rb] = ra


def tensor_bytes(tensor: Any) -> float:
    """Bytes of a graph tensor from its static shape (0 for resources, variants and unknown shapes)."""
    dtype = tensor.dtype
    if dtype.name in ("resource", "variant", "string"):
        return 0.0
    shape = tensor.shape
    if shape.rank is None or any(d is None for d in shape.as_list()):
        return 0.0
    return float(np.prod(shape.as_list(), dtype=np.float64) * dtype.size)


def graph_from_step(
    step: TrainingStep,
    costs: Mapping[str, tuple[float, float]] | None = None,
    *,
    name: str | None = None,
    meta: Mapping[str, Any] | None = None,
    aliases: Mapping[str, Sequence[Any]] | None = None,
) -> Graph:
    """The step as a Graph; ``costs`` maps op name to ``(time_us, memory_bytes)`` (missing ops:
    time 0 and the bytes of their outputs); ``aliases`` maps op name to how each output's buffer
    relates to its inputs (:data:`celeritas_tf.profile.OutputAlias`, as profiled). The graph's
    ``meta["op_keys_digest"]`` records the structure of the step's ops
    (:func:`celeritas_tf.identity.step_digest`): placements made on it carry it to validation."""
    graph_def = step.step_graph_def()
    nodes = _step_nodes(step, graph_def)
    edges = _step_edges(step, graph_def, nodes)
    data_inputs = set(zip(edges.dst, edges.src, edges.out_slot, strict=True))
    alias_pairs, dropped = _apply_aliases(aliases or {}, nodes.index, nodes.outputs, data_inputs)
    time_us, memory, scratch = _apply_costs(nodes, costs or {})
    # parallel edges (the same tensor used twice by one op) are kept: the simulator merges them
    return Graph.from_arrays(
        name=name or step.model.name,
        node_names=nodes.names,
        ops=nodes.ops,
        time_us=np.maximum(time_us, 0.0),
        memory_bytes=np.maximum(memory, 0.0),
        colocation=edges.colocation,
        edge_src=np.asarray(edges.src, dtype=np.int64),
        edge_dst=np.asarray(edges.dst, dtype=np.int64),
        edge_bytes=np.asarray(edges.nbytes),
        edge_src_output=np.asarray(edges.out_slot, dtype=np.int64),
        liveness=Liveness.from_lists(nodes.persistent, scratch, nodes.outputs, alias_pairs),
        meta={"source": "tensorflow", "model": step.model.name, "batch_size": step.batch_size,
              "model_config": dict(step.model.config), "op_keys_digest": step_digest(step),
              **({"dropped_output_aliases": dropped} if dropped else {}), **dict(meta or {})},
    )


@dataclass
class _StepNodes:
    """The step's ops in GraphDef order with their static output and variable sizes (bytes)."""

    names: list[str]
    index: dict[str, int]
    ops: list[str]
    num_outputs: list[int]
    outputs: list[list[float]]
    output_bytes: np.ndarray
    persistent: list[float]


def _step_nodes(step: TrainingStep, graph_def: Any) -> _StepNodes:
    """Names, op types and static sizes of the step's ops."""
    names = [node.name for node in graph_def.node]
    output_bytes = np.zeros(len(names))
    persistent = [0.0] * len(names)
    outputs: list[list[float]] = [[] for _ in names]
    num_outputs = [0] * len(names)
    for i, n in enumerate(names):
        op = step.graph.get_operation_by_name(n)
        num_outputs[i] = len(op.outputs)
        outputs[i] = [tensor_bytes(t) for t in op.outputs]
        output_bytes[i] = sum(outputs[i])
        if op.type in ("VarHandleOp", "VariableV2"):  # the variable lives all step; its handle is free
            output_bytes[i] = persistent[i] = variable_bytes(op)
            outputs[i] = [0.0] * len(op.outputs)
    return _StepNodes(names, {n: i for i, n in enumerate(names)}, [node.op for node in graph_def.node],
                      num_outputs, outputs, output_bytes, persistent)


@dataclass
class _StepEdges:
    """One edge per input (producer index, consumer index, bytes, output slot) and the groups."""

    src: list[int]
    dst: list[int]
    nbytes: list[float]
    out_slot: list[int]
    colocation: list[str | None]


def _step_edges(step: TrainingStep, graph_def: Any, nodes: _StepNodes) -> _StepEdges:
    """Data and control edges of the step, and its co-location groups (module docstring)."""
    groups = _UnionFind(nodes.names)
    edges = _StepEdges([], [], [], [], [])
    for j, node in enumerate(graph_def.node):
        for text in node.input:
            if text.startswith("^"):
                producer, slot, size = text[1:], None, 0.0
            else:
                producer, _, k = text.partition(":")
                slot = int(k) if k else 0
                tensor = step.graph.get_operation_by_name(producer).outputs[slot]
                size = tensor_bytes(tensor)
                if tensor.dtype.name == "resource":
                    groups.union(producer, node.name)
            if producer not in nodes.index:
                continue  # outside the step (cannot happen for an extracted subgraph)
            i = nodes.index[producer]
            edges.src.append(i)
            edges.dst.append(j)
            edges.nbytes.append(size)
            edges.out_slot.append(nodes.num_outputs[i] if slot is None else slot)
        if "_class" in node.attr:
            for loc in node.attr["_class"].list.s:
                target = loc.decode().removeprefix("loc:@")
                if target in nodes.index:
                    groups.union(target, node.name)
    roots = [groups.find(n) for n in nodes.names]
    sizes: dict[str, int] = {}
    for r in roots:
        sizes[r] = sizes.get(r, 0) + 1
    edges.colocation = [r if sizes[r] > 1 else None for r in roots]
    return edges


def _apply_costs(nodes: _StepNodes, costs: Mapping[str, tuple[float, float]]
                 ) -> tuple[np.ndarray, np.ndarray, list[float | None]]:
    """Per op: time (µs), memory (bytes, static outputs when no cost) and scratch (bytes: what its
    memory cost exceeds its outputs and variables; None for ops without a cost)."""
    time_us = np.zeros(len(nodes.names))
    memory = nodes.output_bytes.copy()
    scratch: list[float | None] = [None] * len(nodes.names)
    for n, (t, m) in costs.items():
        i = nodes.index.get(n)
        if i is None:
            continue
        time_us[i] = t
        memory[i] = m
        static = nodes.output_bytes[i] if nodes.persistent[i] == 0 else 0.0  # every output, aliased or not
        scratch[i] = max(float(m) - static - nodes.persistent[i], 0.0) if np.isfinite(m) else 0.0
    return time_us, memory, scratch


#: Op types whose output 0 is always a view of their input 0 (no copy, in every TensorFlow kernel).
VIEW_OPS = frozenset({"Identity", "Reshape", "Squeeze", "ExpandDims", "StopGradient", "Snapshot",
                      "PreventGradient", "EnsureShape"})
#: Op types whose output is a variable's buffer, read without a copy while no one writes it.
VARIABLE_READ_OPS = frozenset({"ReadVariableOp"})


def view_aliases(step: TrainingStep) -> dict[str, list[Any]]:
    """Output aliases known from op types alone, for graphs whose step was not traced (static or
    analytical costs): views share their input's buffer; variable reads are ``"external"``.
    In-place forwarding, which TensorFlow decides at run time, is only seen by a trace."""
    out: dict[str, list[Any]] = {}
    for op in step.graph.get_operations():
        if op.type in VIEW_OPS and op.inputs and op.outputs:
            source = op.inputs[0]
            out[op.name] = [(source.op.name, source.value_index)] + [None] * (len(op.outputs) - 1)
        elif op.type in VARIABLE_READ_OPS:
            out[op.name] = ["external"] * len(op.outputs)
    return out


def _apply_aliases(aliases: Mapping[str, Sequence[Any]], index: Mapping[str, int],
                   outputs: list[list[float]], data_inputs: set[tuple[int, int, int]]
                   ) -> tuple[list[list[tuple[int, int] | None] | None], int]:
    """Per op: the ``(producer index, output)`` each output shares a buffer with; an ``"external"``
    output (a buffer outside the step, e.g. a variable read) gets 0 output bytes instead.

    An alias that names no input of the op in this graph is dropped, and counted (the second
    value; the graph records it as ``meta["dropped_output_aliases"]``): aliases come from a
    profile, and one taken of another configuration of the model (other layers, other image
    size) names ops that are other ops here; that must show, not fail the graph. ``data_inputs``
    holds ``(consumer, producer, output)`` of every edge."""
    pairs: list[list[tuple[int, int] | None] | None] = [None] * len(outputs)
    dropped = 0
    for name, entries in aliases.items():
        i = index.get(name)
        if i is None:
            continue
        row: list[tuple[int, int] | None] = [None] * len(outputs[i])
        for o, entry in zip(range(len(row)), entries, strict=False):  # extra entries are ignored
            if entry == "external":
                outputs[i][o] = 0.0
            elif isinstance(entry, list | tuple) and len(entry) == 2:
                if entry[0] in index and (i, index[entry[0]], int(entry[1])) in data_inputs:
                    row[o] = (index[entry[0]], int(entry[1]))
                else:
                    dropped += 1
        pairs[i] = row if any(r is not None for r in row) else None
    return pairs, dropped


def variable_bytes(op: Any) -> float:
    """Size (bytes) of the variable a ``VarHandleOp``/``VariableV2`` op holds, from its attrs."""
    try:
        shape = [d.size for d in op.get_attr("shape").dim]
        dtype = op.get_attr("dtype")
    except ValueError:
        return 0.0
    if any(d < 0 for d in shape):
        return 0.0
    return float(np.prod(shape, dtype=np.float64) * dtype.size)
