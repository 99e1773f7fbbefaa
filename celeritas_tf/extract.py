"""Turn a TensorFlow training step into a ``celeritas-graph/1`` graph.

One node per op of the step's GraphDef, in GraphDef order. One edge per input: a data input
``name:k`` carries the bytes of the producer's output ``k`` at the step's batch size (static shape ×
dtype size; resource handles and unknown shapes carry 0 bytes), a control input ``^name`` carries
0 bytes on its own ``src_output`` slot (one past the producer's data outputs). Co-location groups
join what TensorFlow's placer keeps together: the ``_class: loc:@X`` attributes and every op that
consumes a resource handle with the op that produced it (resource ops run where the variable
lives). A group is named after one of its members (the variable, where there is one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from celeritas_core.graph import Graph, Liveness
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


def _tensor_bytes(tensor: Any) -> float:
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
) -> Graph:
    """The step as a Graph; ``costs`` maps op name to ``(time_us, memory_bytes)`` (missing ops:
    time 0 and the bytes of their outputs)."""
    graph_def = step.step_graph_def()
    names = [node.name for node in graph_def.node]
    index = {n: i for i, n in enumerate(names)}
    tf_graph = step.graph
    ops = [node.op for node in graph_def.node]
    output_bytes = np.zeros(len(names))
    num_outputs = np.zeros(len(names), dtype=np.int64)
    persistent: list[float] = [0.0] * len(names)
    outputs: list[list[float]] = [[] for _ in names]
    for i, n in enumerate(names):
        op = tf_graph.get_operation_by_name(n)
        num_outputs[i] = len(op.outputs)
        outputs[i] = [_tensor_bytes(t) for t in op.outputs]
        output_bytes[i] = sum(outputs[i])
        if op.type in ("VarHandleOp", "VariableV2"):  # the variable lives all step; its handle is free
            output_bytes[i] = persistent[i] = variable_bytes(op)
            outputs[i] = [0.0] * len(op.outputs)
    groups = _UnionFind(names)
    src: list[int] = []
    dst: list[int] = []
    nbytes: list[float] = []
    out_slot: list[int] = []
    for j, node in enumerate(graph_def.node):
        for text in node.input:
            if text.startswith("^"):
                producer, slot, size = text[1:], None, 0.0
            else:
                producer, _, k = text.partition(":")
                slot = int(k) if k else 0
                tensor = tf_graph.get_operation_by_name(producer).outputs[slot]
                size = _tensor_bytes(tensor)
                if tensor.dtype.name == "resource":
                    groups.union(producer, node.name)
            if producer not in index:
                continue  # outside the step (cannot happen for an extracted subgraph)
            i = index[producer]
            src.append(i)
            dst.append(j)
            nbytes.append(size)
            out_slot.append(int(num_outputs[i]) if slot is None else slot)
        if "_class" in node.attr:
            for loc in node.attr["_class"].list.s:
                target = loc.decode().removeprefix("loc:@")
                if target in index:
                    groups.union(target, node.name)
    roots = [groups.find(n) for n in names]
    sizes: dict[str, int] = {}
    for r in roots:
        sizes[r] = sizes.get(r, 0) + 1
    colocation = [r if sizes[r] > 1 else None for r in roots]
    time_us = np.zeros(len(names))
    memory = output_bytes.copy()
    for n, (t, m) in (costs or {}).items():
        if n in index:
            time_us[index[n]] = t
            memory[index[n]] = m
    # parallel edges (the same tensor used twice by one op) are kept: the simulator merges them
    return Graph.from_arrays(
        name=name or step.model.name,
        node_names=names,
        ops=ops,
        time_us=np.maximum(time_us, 0.0),
        memory_bytes=np.maximum(memory, 0.0),
        colocation=colocation,
        edge_src=np.asarray(src, dtype=np.int64),
        edge_dst=np.asarray(dst, dtype=np.int64),
        edge_bytes=np.asarray(nbytes),
        edge_src_output=np.asarray(out_slot, dtype=np.int64),
        liveness=Liveness.from_lists(persistent, [None] * len(names), outputs),
        meta={"source": "tensorflow", "model": step.model.name, "batch_size": step.batch_size,
              "model_config": dict(step.model.config), **dict(meta or {})},
    )


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
