"""The graph of one pipelined step: ``M`` copies of the per-micro-batch ops, accumulation before
each update, the ops run once kept once.

From a graph at micro-batch costs (:func:`~celeritas_core.pipeline.microbatch.microbatch_graph`)
and its roles, :func:`unroll` builds the graph the simulator replays:

* every :data:`~celeritas_core.pipeline.roles.BEFORE` and
  :data:`~celeritas_core.pipeline.roles.AFTER` op once, under its own name;
* every forward and backward op ``M`` times, copy ``k`` named ``mb{k}/NAME``, with its edges
  between copies of one micro-batch (a transfer per micro-batch) and from the ops run once
  (each copy reads the weights);
* for every tensor a per-micro-batch op gives an update (a weight's gradient), ``M - 1``
  accumulation ops ``mb{k}/NAME:OUTPUT/accumulate`` (``AddV2``): copy ``k``'s gradient is added
  in place to the sum of the ones before, on the device of the op that produces the gradient
  (where TensorFlow's micro-batch step colocates it: ``celeritas_tf.microbatch``), and the update
  reads the last sum: one sum is held per weight from the first micro-batch's gradient to the
  update, beside the gradient being added. A gradient whose update is on another device thus
  crosses once per step, as the last sum, not once per micro-batch; and the device that adds it
  never waits for another device in the middle of a micro-batch's backward (an addition on the
  update's device would hold that device's backward block until the producer's block ends,
  which serialises a pipeline whose weights and gradients are on different stages). An addition costs the
  per-op floor plus reading two tensors and writing one at the device's memory bandwidth
  (``meta["memory_bandwidth_bytes_per_us"]``, default 900,000 bytes/µs: the V100's 900 GB/s).

:class:`Unrolled` maps every node of the unrolled graph back to its op and micro-batch, so an
assignment of the graph gives each copy (and each accumulation) its op's device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from celeritas_core.graphs.graph import Graph, Liveness, unique_pairs
from celeritas_core.pipeline.microbatch import op_floor_us
from celeritas_core.pipeline.roles import AFTER, BACKWARD, BEFORE, OpRoles

#: Default memory bandwidth for an accumulation's cost (bytes/µs): a V100's 900 GB/s.
DEFAULT_BANDWIDTH_BYTES_PER_US = 900e3


@dataclass(frozen=True, eq=False)
class Unrolled:
    """A pipelined step's graph and where each of its nodes comes from."""

    graph: Graph
    micro_batches: int
    op: np.ndarray
    """Per node: the op of the original graph it runs (an accumulation: the gradient's producer)."""
    micro_batch: np.ndarray
    """Per node: its micro-batch, -1 for the ops run once."""
    role: np.ndarray
    """Per node: its op's role (an accumulation: backward)."""
    accumulation: np.ndarray
    """Per node: True for the accumulation ops."""
    accumulated_output: np.ndarray
    """Per node: for an accumulation, the output of :attr:`op` whose gradient it sums; else -1."""
    device_op: np.ndarray
    """Per node: the op whose device it runs on: :attr:`op`; for an accumulation, the gradient's
    producer (TensorFlow colocates it there)."""

    @functools.cached_property
    def update_reads(self) -> np.ndarray:
        """Per node: True for an op run once before the micro-batches that has inputs and whose
        every consumer is run once after them (an update's read of the learning rate or of another
        shared scalar): nothing in the micro-batches waits for it, so the schedules run it after the
        first forward block (:func:`~celeritas_core.pipeline.schedules.block_positions`). Sources
        (variables, slots, constants) are not reads: they keep their place."""
        g = self.graph
        feeds_other = np.zeros(g.num_nodes, dtype=bool)
        np.logical_or.at(feeds_other, g.edge_src, self.role[g.edge_dst] != AFTER)
        return (self.role == BEFORE) & (g.in_degree > 0) & (g.out_degree > 0) & ~feeds_other

    def expand(self, assignment: np.ndarray) -> np.ndarray:
        """The device of every node from the device of every op of the original graph."""
        return np.asarray(assignment, dtype=np.int64)[self.device_op]

    def nodes_of(self, rows: np.ndarray) -> np.ndarray:
        """The node of each row ``(op, micro_batch, accumulated_output)`` (a placement's
        ``pipeline.device_order``), -1 for a row that names no node of this step."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
        keys = self._keys(self.op, self.micro_batch, self.accumulated_output)
        order = np.argsort(keys, kind="stable")
        want = self._keys(rows[:, 0], rows[:, 1], rows[:, 2])
        pos = np.minimum(np.searchsorted(keys[order], want), len(keys) - 1)
        return np.where(keys[order][pos] == want, order[pos], -1)

    def _keys(self, op: np.ndarray, micro_batch: np.ndarray, output: np.ndarray) -> np.ndarray:
        """One int64 key per (op, micro-batch, output) triple (distinct for distinct triples)."""
        outputs = int(max(self.accumulated_output.max(initial=-1), output.max(initial=-1))) + 2
        return ((op * (self.micro_batches + 1) + (micro_batch + 1)) * outputs + (output + 1)).astype(np.int64)


def unroll(graph: Graph, roles: OpRoles, micro_batches: int) -> Unrolled:
    """The pipelined step of ``graph`` (at micro-batch costs) with ``micro_batches`` copies
    (module docstring).

    Examples
    --------
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> from celeritas_core.pipeline.roles import op_roles
    >>> from celeritas_core.pipeline.microbatch import microbatch_graph
    >>> g = small_training_graph(0)
    >>> roles = op_roles(g)
    >>> u = unroll(microbatch_graph(g, roles, 2), roles, 2)
    >>> per_mb = int(roles.per_micro_batch.sum())
    >>> u.graph.num_nodes == g.num_nodes + per_mb + int(u.accumulation.sum())
    True
    >>> "mb1/input" in u.graph.index and "Adam/update" in u.graph.index
    True
    """
    m = int(micro_batches)
    per_mb = roles.per_micro_batch
    shared = np.flatnonzero(~per_mb)
    batch = np.flatnonzero(per_mb)
    ns, nb, n = len(shared), len(batch), graph.num_nodes
    new_of = np.full(n, -1, dtype=np.int64)
    new_of[shared] = np.arange(ns)
    new_of[batch] = ns + np.arange(nb)  # copy k: + k * nb

    def copy(u: np.ndarray, k: np.ndarray | int) -> np.ndarray:
        return new_of[u] + np.asarray(k) * nb

    src, dst, out, nbytes = graph.edge_src, graph.edge_dst, graph.edge_src_output, graph.edge_bytes
    ps, pd = per_mb[src], per_mb[dst]
    ks = np.arange(m)
    parts_src, parts_dst, parts_out, parts_bytes = [], [], [], []

    def add(s: np.ndarray, d: np.ndarray, o: np.ndarray, b: np.ndarray) -> None:
        parts_src.append(s.reshape(-1))
        parts_dst.append(d.reshape(-1))
        parts_out.append(o.reshape(-1))
        parts_bytes.append(b.reshape(-1))

    once = ~ps & ~pd
    add(new_of[src[once]], new_of[dst[once]], out[once], nbytes[once])
    for sel, both in ((~ps & pd, False), (ps & pd, True)):
        e = np.flatnonzero(sel)
        s = copy(src[e][None, :], ks[:, None]) if both else np.broadcast_to(new_of[src[e]], (m, len(e)))
        add(s, copy(dst[e][None, :], ks[:, None]), np.broadcast_to(out[e], (m, len(e))),
            np.broadcast_to(nbytes[e], (m, len(e))))
    to_update = gradient_edges(graph, roles)
    acc = _accumulations(graph, to_update, m, ns + m * nb, copy)
    add(acc.src, acc.dst, acc.out, acc.nbytes)
    last_src, last_out = acc.last_of_edge
    add(last_src, new_of[dst[to_update]], last_out, nbytes[to_update])

    op = np.concatenate([shared, np.tile(batch, m), acc.producer])
    micro_batch = np.concatenate([np.full(ns, -1), np.repeat(ks, nb), acc.micro_batch]).astype(np.int64)
    role = np.concatenate([roles.role[shared], np.tile(roles.role[batch], m),
                           np.full(len(acc.producer), BACKWARD, dtype=np.int8)]).astype(np.int8)
    names = ([graph.node_names[i] for i in shared]
             + [f"mb{k}/{graph.node_names[i]}" for k in range(m) for i in batch] + acc.names)
    acc_time = accumulation_time_us(graph, acc.bytes)
    unrolled = Graph.from_arrays(
        name=f"{graph.name}@{m}mb", node_names=names,
        time_us=np.concatenate([graph.time_us[op[:ns + m * nb]], acc_time]),
        memory_bytes=np.concatenate([graph.memory_bytes[op[:ns + m * nb]], acc.bytes]),
        ops=[graph.ops[i] for i in op[:ns + m * nb]] + ["AddV2"] * len(acc.producer),
        colocation=[graph.colocation[i] for i in op[:ns + m * nb]] + [None] * len(acc.producer),
        edge_src=np.concatenate(parts_src), edge_dst=np.concatenate(parts_dst),
        edge_bytes=np.concatenate(parts_bytes), edge_src_output=np.concatenate(parts_out),
        meta={**graph.meta, "micro_batches": m, "unrolled_from": graph.name},
        liveness=_unrolled_liveness(graph.liveness, op[:ns + m * nb], acc, new_of, nb, micro_batch, per_mb),
        check_acyclic=False)
    return Unrolled(unrolled, m, op, micro_batch, role, np.arange(len(op)) >= ns + m * nb,
                    np.concatenate([np.full(ns + m * nb, -1, dtype=np.int64), acc.output]),
                    np.concatenate([op[:ns + m * nb], acc.producer]))


@dataclass(frozen=True, eq=False)
class _Accumulations:
    """The accumulation ops of an unrolled step and their edges."""

    producer: np.ndarray
    output: np.ndarray
    micro_batch: np.ndarray
    bytes: np.ndarray
    names: list[str]
    src: np.ndarray
    dst: np.ndarray
    out: np.ndarray
    nbytes: np.ndarray
    last_of_edge: tuple[np.ndarray, np.ndarray]
    """Per gradient edge into an update: the node and output that carry its sum."""
    tensor_of: dict[tuple[int, int], tuple[int, int]]
    """Per accumulated (producer, output): the node and output of its final sum."""
    into: tuple[np.ndarray, np.ndarray]
    """Per accumulation: the node and output of the sum it adds to, whose buffer it reuses."""


def accumulated_gradients(graph: Graph, to_update: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tensors a pipelined step accumulates, from the edges ``to_update`` (from a per-micro-batch
    op to an op run once: a gradient into its update): producer, output and bytes (the largest
    of its edges), sorted by ``(producer, output)``."""
    producer, output, tensor_of_edge = unique_pairs(graph.edge_src[to_update],
                                                    graph.edge_src_output[to_update])
    nbytes = np.zeros(len(producer))
    np.maximum.at(nbytes, tensor_of_edge, graph.edge_bytes[to_update])
    return producer, output, nbytes


def gradient_edges(graph: Graph, roles: OpRoles) -> np.ndarray:
    """The edges from a per-micro-batch op to an op run once (a gradient into its update)."""
    per_mb = roles.per_micro_batch
    return np.flatnonzero(per_mb[graph.edge_src] & ~per_mb[graph.edge_dst])


def accumulation_time_us(graph: Graph, nbytes: np.ndarray) -> np.ndarray:
    """The time (µs) of adding a gradient of ``nbytes`` to its sum (module docstring): the per-op
    floor plus reading two tensors and writing one at the device's memory bandwidth."""
    bandwidth = float(graph.meta.get("memory_bandwidth_bytes_per_us", DEFAULT_BANDWIDTH_BYTES_PER_US))
    return op_floor_us(graph) + 3.0 * np.asarray(nbytes, dtype=np.float64) / bandwidth


def _accumulations(graph: Graph, to_update: np.ndarray, m: int, first: int,
                   copy: Callable[[np.ndarray, int], np.ndarray]) -> _Accumulations:
    """``M - 1`` additions per gradient tensor that reaches an update, numbered from ``first``."""
    producers, outputs_of, sizes = accumulated_gradients(graph, to_update)
    keys = list(zip(producers.tolist(), outputs_of.tolist(), strict=True))
    size = dict(zip(keys, sizes.tolist(), strict=True))
    producer, outputs, mb, nbytes_of, names, src, dst, out, eb = [], [], [], [], [], [], [], [], []
    into: list[tuple[int, int]] = []
    final: dict[tuple[int, int], tuple[int, int]] = {}
    node = first
    for u, o in keys:
        prev = (int(copy(np.array(u), 0)), o)
        for k in range(1, m):
            producer.append(u)
            outputs.append(o)
            mb.append(k)
            nbytes_of.append(size[(u, o)])
            names.append(f"mb{k}/{graph.node_names[u]}:{o}/accumulate")
            into.append(prev)
            for s, so in (prev, (int(copy(np.array(u), k)), o)):
                src.append(s)
                dst.append(node)
                out.append(so)
                eb.append(size[(u, o)])
            prev = (node, 0)
            node += 1
        final[(u, o)] = prev
    last = [final[(int(graph.edge_src[e]), int(graph.edge_src_output[e]))] for e in to_update]
    ints = [np.asarray(x, dtype=np.int64) for x in (producer, outputs, mb, src, dst, out)]
    return _Accumulations(ints[0], ints[1], ints[2], np.asarray(nbytes_of, dtype=np.float64), names,
                          ints[3], ints[4], ints[5], np.asarray(eb, dtype=np.float64), _pairs(last), final,
                          _pairs(into))


def _pairs(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """``(node, output)`` pairs as two int64 arrays."""
    table = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return table[:, 0].copy(), table[:, 1].copy()


def _unrolled_liveness(live: Liveness | None, op: np.ndarray, acc: _Accumulations, new_of: np.ndarray,
                       nb: int, micro_batch: np.ndarray, per_mb: np.ndarray) -> Liveness | None:
    """The liveness fields of the copies (their op's), and of the accumulations (one output)."""
    if live is None:
        return None
    counts = np.diff(live.output_ptr)
    lens = counts[op]
    starts = live.output_ptr[op]
    total = int(lens.sum())
    offsets = np.repeat(np.cumsum(lens) - lens, lens)
    gather = np.repeat(starts, lens) + (np.arange(total) - offsets)
    num_acc = len(acc.producer)
    ptr = np.zeros(len(op) + num_acc + 1, dtype=np.int64)
    np.cumsum(np.concatenate([lens, np.ones(num_acc, dtype=np.int64)]), out=ptr[1:])
    # an accumulation adds in place (TensorFlow forwards the sum's buffer): it aliases that input
    alias_node = np.concatenate([np.full(total, -1, dtype=np.int64), acc.into[0]])
    alias_output = np.concatenate([np.full(total, -1, dtype=np.int64), acc.into[1]])
    if live.alias_node is not None and live.alias_output is not None:
        alias_node[:total], alias_output[:total] = _unrolled_aliases(
            live, gather, np.repeat(np.arange(len(op)), lens), op, acc, new_of, nb, micro_batch, per_mb)
    return Liveness(
        modelled=np.concatenate([live.modelled[op], np.ones(num_acc, dtype=bool)]),
        persistent_bytes=np.concatenate([live.persistent_bytes[op], np.zeros(num_acc)]),
        scratch_bytes=np.concatenate([live.scratch_bytes[op], np.zeros(num_acc)]),
        output_ptr=ptr, output_bytes=np.concatenate([live.output_bytes[gather], acc.bytes]),
        alias_node=alias_node, alias_output=alias_output)


def _unrolled_aliases(live: Liveness, gather: np.ndarray, owner: np.ndarray, op: np.ndarray,
                      acc: _Accumulations, new_of: np.ndarray, nb: int, micro_batch: np.ndarray,
                      per_mb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each copied output's alias, moved to the aliased op's node in the same micro-batch (an
    update aliasing a gradient: the gradient's final sum)."""
    assert live.alias_node is not None and live.alias_output is not None
    target = live.alias_node[gather]
    target_out = live.alias_output[gather].copy()
    node = np.full(len(gather), -1, dtype=np.int64)
    has = target >= 0
    t_per_mb = has & per_mb[np.maximum(target, 0)]
    mine = micro_batch[owner]
    same_mb = t_per_mb & (mine >= 0)
    node[same_mb] = new_of[target[same_mb]] + mine[same_mb] * nb
    once = has & ~t_per_mb
    node[once] = new_of[target[once]]
    for j in np.flatnonzero(t_per_mb & (mine < 0)):  # an op run once aliasing a gradient
        final = acc.tensor_of.get((int(target[j]), int(target_out[j])))
        if final is None:
            target_out[j] = -1
        else:
            node[j], target_out[j] = final
    target_out[node < 0] = -1
    return node, target_out
