"""The dataflow graph: ops with costs and tensor edges, stored as arrays for 36k-node hot paths.

A :class:`Graph` is immutable. Nodes are addressed by index ``0..n-1``; ``node_names`` maps
index to the unique op name. Adjacency is kept in CSR form (``succ_ptr``/``succ_idx`` and
``pred_ptr``/``pred_idx``), built once and cached, as is :attr:`Graph.tensors`, the grouping of
edges into tensors (one per producer output) that the simulator, fusion, the list schedulers, the
partitioners and the memory model share. Units: time in µs, memory and tensor sizes in bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.dagloops import stack_order


@dataclass(frozen=True, eq=False)
class Liveness:
    """Time-dependent memory of the ops (bytes), for the liveness-aware peak of a replay.

    ``modelled[i]`` marks the ops that gave any of these fields; the other ops keep the sum model
    (their ``memory_bytes`` is live on their device for the whole step). For a modelled op:
    ``persistent_bytes`` (variables, optimizer slots) is live for the whole step,
    ``scratch_bytes`` while it runs, and output ``o`` of op ``i`` holds
    ``output_bytes[output_ptr[i] + o]`` bytes (outputs past the list are sized by their largest
    edge) from the op's start until its last consumer on each device has finished. An output may
    *alias* one of the op's inputs (``alias_node``/``alias_output`` at the same position, -1 for
    none): it shares that tensor's buffer (a view, or TensorFlow forwarding the input buffer), so
    it adds no bytes on its device and keeps the shared buffer live until its own consumers finish.

    Build one with :meth:`from_lists` and give it to :meth:`Graph.from_arrays`; graph files carry
    the same fields per node (docs/formats.md).

    Examples
    --------
    >>> from celeritas_core import Liveness
    >>> live = Liveness.from_lists(persistent=[4096, None, 0], scratch=[0, None, 256],
    ...                            outputs=[[1024], None, [1024]], aliases=[None, None, [(0, 0)]])
    >>> live.modelled.tolist(), live.aliases(2)   # op 2's output is a view of op 0's output 0
    ([True, False, True], [(0, 0)])
    """

    modelled: np.ndarray
    persistent_bytes: np.ndarray
    scratch_bytes: np.ndarray
    output_ptr: np.ndarray
    output_bytes: np.ndarray
    alias_node: np.ndarray | None = None
    """Per declared output: the producer whose tensor it aliases (-1: its own buffer); None: no
    output aliases anything."""
    alias_output: np.ndarray | None = None
    """Per declared output: the output index of the aliased tensor (-1: none)."""

    @classmethod
    def from_lists(cls, persistent: Sequence[float | None], scratch: Sequence[float | None],
                   outputs: Sequence[Sequence[float] | None],
                   aliases: Sequence[Sequence[tuple[int, int] | None] | None] | None = None) -> Liveness:
        """Build from per-op values; an op whose three entries are all None is not modelled.
        ``aliases[i][o]`` is the ``(producer index, output index)`` whose buffer output ``o`` of op
        ``i`` shares, or None.

        Parameters
        ----------
        persistent : sequence of float or None
            Per op: bytes live on its device for the whole step (variables, optimizer slots).
        scratch : sequence of float or None
            Per op: bytes live while it runs.
        outputs : sequence of (sequence of float) or None
            Per op: the size (bytes) of each of its outputs, by output index.
        aliases : sequence of (sequence of (int, int) or None) or None, optional
            Per op and output: the input tensor ``(producer, output)`` whose buffer it shares.

        Returns
        -------
        Liveness
            The fields, to pass to :meth:`Graph.from_arrays` (which checks them against the graph).

        Examples
        --------
        >>> from celeritas_core import Graph, Liveness, one_device_peak_bytes
        >>> live = Liveness.from_lists(persistent=[500, None], scratch=[0, None], outputs=[[1000], None])
        >>> live.modelled.tolist(), live.outputs(0).tolist()
        ([True, False], [1000.0])
        >>> graph = Graph.from_arrays(name="pair", node_names=["a", "b"], time_us=[10.0, 20.0],
        ...                           memory_bytes=[1500, 700], edge_src=[0], edge_dst=[1],
        ...                           edge_bytes=[1000], liveness=live)
        >>> one_device_peak_bytes(graph)   # a: 500 + its output 1000; b (not modelled): 700
        2200.0
        """
        n = len(persistent)
        modelled = np.array([persistent[i] is not None or scratch[i] is not None or outputs[i] is not None
                             for i in range(n)], dtype=bool)
        sizes = [list(o) if o is not None else [] for o in outputs]
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(s) for s in sizes], out=ptr[1:])
        flat = np.asarray([x for s in sizes for x in s], dtype=np.float64)
        alias_node = alias_output = None
        if aliases is not None and any(a for a in aliases):
            alias_node = np.full(len(flat), -1, dtype=np.int64)
            alias_output = np.full(len(flat), -1, dtype=np.int64)
            for i, entries in enumerate(aliases):
                for o, target in enumerate(entries or ()):
                    if target is not None and o < len(sizes[i]):
                        alias_node[ptr[i] + o], alias_output[ptr[i] + o] = target
        return cls(modelled, np.asarray([p or 0.0 for p in persistent], dtype=np.float64),
                   np.asarray([s or 0.0 for s in scratch], dtype=np.float64), ptr, flat,
                   alias_node, alias_output)

    def check(self, names: Sequence[str]) -> None:
        """Raise CeleritasInputError naming the first op with a bad value (one per op, >= 0, finite)."""
        n = len(names)
        if not (len(self.modelled) == len(self.persistent_bytes) == len(self.scratch_bytes) == n
                and len(self.output_ptr) == n + 1 and self.output_ptr[-1] == len(self.output_bytes)):
            raise CeleritasInputError("liveness fields must have one entry per node")
        for field_name, values in (("persistent_bytes", self.persistent_bytes),
                                   ("scratch_bytes", self.scratch_bytes)):
            _check_costs(values, tuple(names), field_name)
        bad = np.flatnonzero(~np.isfinite(self.output_bytes) | (self.output_bytes < 0))
        if len(bad):
            owner = int(np.searchsorted(self.output_ptr, bad[0], side="right") - 1)
            raise CeleritasInputError(f"node {names[owner]!r}: output_bytes must be finite and >= 0, "
                                      f"got {self.output_bytes[bad[0]]!r}")

    def outputs(self, i: int) -> np.ndarray:
        """Declared output sizes (bytes) of op ``i``, by output index."""
        return self.output_bytes[self.output_ptr[i]:self.output_ptr[i + 1]]

    def aliases(self, i: int) -> list[tuple[int, int] | None]:
        """Per declared output of op ``i``: the ``(producer, output)`` it aliases, or None."""
        lo, hi = int(self.output_ptr[i]), int(self.output_ptr[i + 1])
        if self.alias_node is None or self.alias_output is None:
            return [None] * (hi - lo)
        return [(int(self.alias_node[k]), int(self.alias_output[k])) if self.alias_node[k] >= 0 else None
                for k in range(lo, hi)]

    def check_aliases(self, names: Sequence[str], edge_src: np.ndarray, edge_dst: np.ndarray,
                      edge_src_output: np.ndarray) -> None:
        """Raise CeleritasInputError naming the first output that aliases a tensor which is not an
        input of its op (an edge ``producer -> op`` with that ``src_output``)."""
        if self.alias_node is None or self.alias_output is None:
            return
        flat = np.flatnonzero(self.alias_node >= 0)
        if not len(flat):
            return
        owner = np.searchsorted(self.output_ptr, flat, side="right") - 1
        n = len(names)
        into = np.isin(edge_dst, owner)
        inputs = set(zip(edge_dst[into].tolist(), edge_src[into].tolist(), edge_src_output[into].tolist(),
                         strict=True))
        wanted = zip(owner.tolist(), self.alias_node[flat].tolist(), self.alias_output[flat].tolist(),
                     strict=True)
        bad = [k for k, key in enumerate(wanted) if key not in inputs]
        if len(bad):
            k = int(bad[0])
            i, o = int(owner[k]), int(flat[k] - self.output_ptr[owner[k]])
            target = int(self.alias_node[flat[k]])
            shown = repr(names[target]) if target < n else f"node index {target}"
            raise CeleritasInputError(f"node {names[i]!r}: output_aliases[{o}] names {shown} output "
                                      f"{int(self.alias_output[flat[k]])}, which is not an input of the node")


@dataclass(frozen=True, eq=False)
class TensorView:
    """The graph's tensors: one per distinct ``(producer, src_output)`` with an edge (bytes).

    Edges from one producer output carry *the same tensor*, sized by its largest edge (formats
    ask them to agree). Tensors are numbered in ``(producer, src_output)`` order, so producer
    ``u``'s tensors are ``producer_ptr[u]:producer_ptr[u + 1]``, by output. Built once per graph
    (:attr:`Graph.tensors`) from a lexicographic sort of the edges; the consumer and input CSR
    arrays are built on first use. Combined sort keys multiply counts (nodes, tensors, distinct
    outputs), never ``src_output`` values, so any int64 output index works.
    """

    producer: np.ndarray
    """Producer node of each tensor."""
    output: np.ndarray
    """``src_output`` of each tensor."""
    nbytes: np.ndarray
    """Size of each tensor (bytes): the largest of its edges."""
    edge_tensor: np.ndarray
    """Tensor id of each edge."""
    producer_ptr: np.ndarray
    """Node ``u``'s tensors are ``producer_ptr[u]:producer_ptr[u + 1]`` (CSR over nodes)."""
    num_nodes: int
    """Nodes of the graph (the length of ``producer_ptr`` minus one)."""
    edge_dst: np.ndarray = field(repr=False)
    """The graph's ``edge_dst`` (for the consumer CSR)."""
    edge_bytes: np.ndarray = field(repr=False)
    """The graph's ``edge_bytes`` (for the consumer sizes)."""

    @classmethod
    def build(cls, edge_src: np.ndarray, edge_src_output: np.ndarray, edge_dst: np.ndarray,
              edge_bytes: np.ndarray, num_nodes: int) -> TensorView:
        """Group edges into tensors by ``(src, src_output)``."""
        producer, output, edge_tensor = unique_pairs(edge_src, edge_src_output)
        nbytes = np.zeros(len(producer))
        np.maximum.at(nbytes, edge_tensor, edge_bytes)
        ptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(producer, minlength=num_nodes), out=ptr[1:])
        return cls(producer, output, nbytes, edge_tensor, ptr, num_nodes, edge_dst, edge_bytes)

    @property
    def num_tensors(self) -> int:
        """Number of distinct tensors."""
        return len(self.producer)

    @cached_property
    def local_index(self) -> np.ndarray:
        """Position of each tensor among its producer's tensors (0, 1, … by output)."""
        return np.arange(self.num_tensors, dtype=np.int64) - self.producer_ptr[self.producer]

    @cached_property
    def max_per_producer(self) -> int:
        """The most tensors any one node produces (at least 1)."""
        return max(int(np.diff(self.producer_ptr).max(initial=0)), 1)

    @cached_property
    def _consumer_pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Distinct (tensor, consumer) pairs sorted by (tensor, consumer), with the largest bytes
        of their edges, and the pair of each edge."""
        key = self.edge_tensor * self.num_nodes + self.edge_dst
        uniq, pair_of_edge = np.unique(key, return_inverse=True)
        pair_of_edge = pair_of_edge.reshape(-1).astype(np.int64)
        pair_bytes = np.zeros(len(uniq))
        np.maximum.at(pair_bytes, pair_of_edge, self.edge_bytes)
        return uniq // self.num_nodes, uniq % self.num_nodes, pair_bytes, pair_of_edge

    @cached_property
    def consumer_ptr(self) -> np.ndarray:
        """Tensor ``t``'s distinct consumers are ``consumer[consumer_ptr[t]:consumer_ptr[t + 1]]``."""
        ptr = np.zeros(self.num_tensors + 1, dtype=np.int64)
        np.cumsum(np.bincount(self._consumer_pairs[0], minlength=self.num_tensors), out=ptr[1:])
        return ptr

    @property
    def consumer_tensor(self) -> np.ndarray:
        """The tensor of each consumer slot (slots are sorted by tensor, then consumer)."""
        return self._consumer_pairs[0]

    @property
    def consumer(self) -> np.ndarray:
        """Distinct consumer nodes of each tensor, ascending (CSR slots of :attr:`consumer_ptr`)."""
        return self._consumer_pairs[1]

    @property
    def consumer_bytes(self) -> np.ndarray:
        """Per consumer slot: the largest edge bytes of the tensor into that consumer."""
        return self._consumer_pairs[2]

    @property
    def edge_consumer_slot(self) -> np.ndarray:
        """Consumer slot (its tensor and destination node) of each edge."""
        return self._consumer_pairs[3]

    @cached_property
    def _inputs(self) -> tuple[np.ndarray, np.ndarray]:
        tensor, consumer = self._consumer_pairs[:2]
        by_consumer = np.lexsort((tensor, consumer))
        ptr = np.zeros(self.num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(consumer, minlength=self.num_nodes), out=ptr[1:])
        return ptr, tensor[by_consumer]

    @property
    def input_ptr(self) -> np.ndarray:
        """Node ``v``'s distinct input tensors are ``input_tensor[input_ptr[v]:input_ptr[v + 1]]``."""
        return self._inputs[0]

    @property
    def input_tensor(self) -> np.ndarray:
        """Distinct input tensors of each node, ascending (CSR slots of :attr:`input_ptr`)."""
        return self._inputs[1]

    @cached_property
    def _output_values(self) -> np.ndarray:
        return np.unique(self.output)

    @cached_property
    def _keys(self) -> np.ndarray:
        """Ascending int64 key per tensor: producer × (distinct outputs) + rank of its output."""
        values = self._output_values
        return self.producer * len(values) + np.searchsorted(values, self.output)

    def ids(self, producer: np.ndarray, output: np.ndarray) -> np.ndarray:
        """Tensor id of each ``(producer, output)`` pair, -1 where the graph has no such tensor."""
        producer = np.asarray(producer, dtype=np.int64)
        output = np.asarray(output, dtype=np.int64)
        values, keys = self._output_values, self._keys
        if not len(keys):
            return np.full(producer.shape, -1, dtype=np.int64)
        rank = np.minimum(np.searchsorted(values, output), len(values) - 1)
        known = (values[rank] == output) & (producer >= 0) & (producer < self.num_nodes)
        want = np.where(known, producer, 0) * len(values) + rank
        pos = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
        return np.where(known & (keys[pos] == want), pos, -1)


@dataclass(frozen=True, eq=False)
class Graph:
    """A DAG of ops: per-node time (µs) and memory (bytes), per-edge tensor size (bytes).

    Build one with :meth:`from_arrays` (which validates it), read one with
    :func:`~celeritas_core.readwrite.formats.load_graph`, or generate one
    (:func:`~celeritas_core.generators.synthetic.training_step_graph`,
    :func:`~celeritas_core.generators.families.benchmark_instances`). Nodes are addressed by index; edge
    ``e`` carries ``edge_bytes[e]`` bytes of output ``edge_src_output[e]`` of node
    ``edge_src[e]`` to node ``edge_dst[e]``.

    See Also
    --------
    Cluster : the devices a graph is placed on.
    place : places a graph on a cluster.

    Examples
    --------
    >>> from celeritas_core import Graph
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> graph.num_nodes, graph.num_edges, graph.total_time_us, graph.total_memory_bytes
    (4, 4, 120.0, 600.0)
    >>> graph.index["c"], graph.in_degree.tolist()
    (2, [0, 1, 1, 2])
    """

    name: str
    node_names: tuple[str, ...]
    ops: tuple[str, ...]
    time_us: np.ndarray
    memory_bytes: np.ndarray
    colocation: tuple[str | None, ...]
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    edge_src_output: np.ndarray
    meta: Mapping[str, Any] = field(default_factory=dict)
    liveness: Liveness | None = None
    """Per-op persistent, output and scratch bytes for the time-dependent memory model; None when
    no op gives them (then every op's ``memory_bytes`` is live for the whole step)."""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        *,
        name: str,
        node_names: Sequence[str],
        time_us: Sequence[float] | np.ndarray,
        memory_bytes: Sequence[float] | np.ndarray,
        edge_src: Sequence[int] | np.ndarray,
        edge_dst: Sequence[int] | np.ndarray,
        edge_bytes: Sequence[float] | np.ndarray,
        ops: Sequence[str] | None = None,
        colocation: Sequence[str | None] | None = None,
        edge_src_output: Sequence[int] | np.ndarray | None = None,
        meta: Mapping[str, Any] | None = None,
        liveness: Liveness | None = None,
        check_acyclic: bool = True,
    ) -> Graph:
        """Build and validate a graph from index-based arrays.

        Parameters
        ----------
        name : str
            The graph's name (a placement records it).
        node_names : sequence of str
            Unique op names; node ``i`` is ``node_names[i]``. At least one.
        time_us : array_like of float
            Run time of each op on a device of speed 1 (µs), finite and >= 0.
        memory_bytes : array_like of float
            Memory of each op (bytes), finite and >= 0: what the sum model counts on its device
            for the whole step (ops with ``liveness`` fields are replayed over time instead).
        edge_src, edge_dst : array_like of int
            Producer and consumer node index of each edge (no self-loops).
        edge_bytes : array_like of float
            Size of the tensor each edge carries (bytes), finite and >= 0 (0: a control edge).
        ops : sequence of str, optional
            The op type of each node (``"MatMul"``…); default empty strings.
        colocation : sequence of str or None, optional
            Co-location group of each node (None: none); a group's nodes share a device.
        edge_src_output : array_like of int, optional
            Which output of the producer each edge carries (default 0); edges of one
            ``(producer, output)`` are one tensor, sent once per destination device.
        meta : mapping, optional
            Free-form metadata (source, model, seed…), kept with the graph.
        liveness : Liveness, optional
            Per-op persistent, scratch and output bytes for the time-dependent memory model
            (docs/formats.md); None: the sum model for every op.
        check_acyclic : bool, optional
            Check for a cycle now (default True); a cycle is found later otherwise.

        Returns
        -------
        Graph
            The validated graph (immutable; costs as float64 arrays, node indices as int64).

        Raises
        ------
        CeleritasInputError
            Naming the first problem: no nodes, a duplicate name, a cost that is negative or not
            finite, arrays of different lengths, an edge to an unknown node or a self-loop, a bad
            liveness field, or a cycle (naming its nodes).

        Examples
        --------
        >>> from celeritas_core import Graph
        >>> graph = Graph.from_arrays(name="chain", node_names=["a", "b", "c"],
        ...                           time_us=[10.0, 20.0, 30.0], memory_bytes=[100, 200, 300],
        ...                           edge_src=[0, 1], edge_dst=[1, 2], edge_bytes=[1000, 2000])
        >>> graph.topological_order.tolist()
        [0, 1, 2]
        >>> Graph.from_arrays(name="loop", node_names=["a", "b"], time_us=[1, 1], memory_bytes=[1, 1],
        ...                   edge_src=[0, 1], edge_dst=[1, 0], edge_bytes=[0, 0])
        Traceback (most recent call last):
        ...
        celeritas_core.errors.CeleritasInputError: graph has a cycle through 'a' -> 'b' -> 'a'
        """
        names = _checked_names(node_names)
        n = len(names)
        t = np.asarray(time_us, dtype=np.float64).reshape(-1)
        m = np.asarray(memory_bytes, dtype=np.float64).reshape(-1)
        src, dst, nbytes, out = _edge_arrays(edge_src, edge_dst, edge_bytes, edge_src_output)
        if len(t) != n or len(m) != n:
            raise CeleritasInputError("time_us and memory_bytes must have one value per node")
        if not (len(src) == len(dst) == len(nbytes) == len(out)):
            raise CeleritasInputError("edge arrays must have equal length")
        _check_costs(t, names, "time_us")
        _check_costs(m, names, "memory_bytes")
        _check_edges(names, src, dst, nbytes)
        op_names = tuple(ops) if ops is not None else tuple("" for _ in range(n))
        groups = tuple(colocation) if colocation is not None else tuple(None for _ in range(n))
        if len(op_names) != n or len(groups) != n:
            raise CeleritasInputError("ops and colocation must have one value per node")
        if liveness is not None:
            liveness.check(names)
            liveness.check_aliases(names, src, dst, out)
        graph = cls(
            name=name,
            node_names=names,
            ops=op_names,
            time_us=t,
            memory_bytes=m,
            colocation=groups,
            edge_src=src,
            edge_dst=dst,
            edge_bytes=nbytes,
            edge_src_output=out,
            meta=dict(meta or {}),
            liveness=liveness,
        )
        if check_acyclic:
            graph.topological_order  # noqa: B018  (raises on a cycle)
        return graph

    # ------------------------------------------------------------------ sizes
    @property
    def num_nodes(self) -> int:
        """Number of ops."""
        return len(self.node_names)

    @property
    def num_edges(self) -> int:
        """Number of tensor edges."""
        return len(self.edge_src)

    @cached_property
    def index(self) -> dict[str, int]:
        """Map from node name to node index."""
        return {node: i for i, node in enumerate(self.node_names)}

    # ------------------------------------------------------------------ adjacency (CSR)
    @cached_property
    def _succ_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _csr(self.edge_src, self.edge_dst, self.num_nodes)

    @cached_property
    def _pred_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _csr(self.edge_dst, self.edge_src, self.num_nodes)

    @property
    def succ_ptr(self) -> np.ndarray:
        """CSR row pointers of out-edges: node i's out-edges are ``succ_edge[ptr[i]:ptr[i+1]]``."""
        return self._succ_csr[0]

    @property
    def succ_idx(self) -> np.ndarray:
        """CSR successor node of each out-edge slot."""
        return self._succ_csr[1]

    @property
    def succ_edge(self) -> np.ndarray:
        """CSR edge id of each out-edge slot."""
        return self._succ_csr[2]

    @property
    def pred_ptr(self) -> np.ndarray:
        """CSR row pointers of in-edges."""
        return self._pred_csr[0]

    @property
    def pred_idx(self) -> np.ndarray:
        """CSR predecessor node of each in-edge slot."""
        return self._pred_csr[1]

    @property
    def pred_edge(self) -> np.ndarray:
        """CSR edge id of each in-edge slot."""
        return self._pred_csr[2]

    @cached_property
    def in_degree(self) -> np.ndarray:
        """Number of in-edges of each node."""
        return np.diff(self.pred_ptr)

    @cached_property
    def out_degree(self) -> np.ndarray:
        """Number of out-edges of each node."""
        return np.diff(self.succ_ptr)

    @cached_property
    def topological_order(self) -> np.ndarray:
        """A deterministic topological order; raises naming nodes on a cycle.

        Kahn's algorithm with a LIFO stack of ready nodes: the sources are pushed so that the
        smallest index is popped first, and each node's newly ready successors are popped before
        older ready nodes (depth-first), so this is *not* the lexicographically smallest order.
        """
        n = self.num_nodes
        sources = np.flatnonzero(self.in_degree == 0).astype(np.int64)
        order = stack_order(self.succ_ptr, self.succ_idx, self.in_degree, sources)
        if len(order) != n:
            raise CeleritasInputError(f"graph has a cycle through {self._describe_cycle(order)}")
        return order

    @cached_property
    def topological_rank(self) -> np.ndarray:
        """Position of each node in :attr:`topological_order`."""
        rank = np.empty(self.num_nodes, dtype=np.int64)
        rank[self.topological_order] = np.arange(self.num_nodes)
        return rank

    def _describe_cycle(self, acyclic_part: np.ndarray) -> str:
        # lazy: networkx takes about 0.2 s to import; only these conversions use it (celeritas info does not)
        import networkx as nx

        done = np.zeros(self.num_nodes, dtype=bool)
        done[acyclic_part] = True
        rest = ~done[self.edge_src] & ~done[self.edge_dst]
        g = nx.DiGraph()
        g.add_edges_from(zip(self.edge_src[rest].tolist(), self.edge_dst[rest].tolist(), strict=True))
        cycle = nx.find_cycle(g)
        names = [self.node_names[u] for u, _ in cycle]
        shown = names[:8]
        more = f" (+{len(names) - 8} more)" if len(names) > 8 else ""
        return " -> ".join(repr(x) for x in [*shown, names[0]]) + more

    # ------------------------------------------------------------------ tensors
    @cached_property
    def tensors(self) -> TensorView:
        """The distinct tensors ``(producer, src_output)``, their sizes and consumers (built once)."""
        return TensorView.build(self.edge_src, self.edge_src_output, self.edge_dst, self.edge_bytes,
                                self.num_nodes)

    # ------------------------------------------------------------------ co-location
    @cached_property
    def colocation_ids(self) -> np.ndarray:
        """Group id per node (``-1`` when the node has no co-location group)."""
        ids: dict[str, int] = {}
        out = np.full(self.num_nodes, -1, dtype=np.int64)
        for i, group in enumerate(self.colocation):
            if group is not None:
                out[i] = ids.setdefault(group, len(ids))
        return out

    @cached_property
    def colocation_names(self) -> tuple[str, ...]:
        """Group names, indexed by the ids of :attr:`colocation_ids`."""
        names: dict[str, None] = {}
        for group in self.colocation:
            if group is not None:
                names.setdefault(group, None)
        return tuple(names)

    # ------------------------------------------------------------------ totals
    @property
    def total_time_us(self) -> float:
        """Sum of all op times (µs)."""
        return float(self.time_us.sum())

    @property
    def total_memory_bytes(self) -> float:
        """Sum of all op memory (bytes)."""
        return float(self.memory_bytes.sum())

    def with_memory(self, memory_bytes: np.ndarray) -> Graph:
        """The same graph with other per-op ``memory_bytes`` (e.g. the placers' planning bytes)."""
        return self.with_costs(memory_bytes=memory_bytes)

    def with_costs(self, *, time_us: np.ndarray | None = None, memory_bytes: np.ndarray | None = None,
                   edge_bytes: np.ndarray | None = None, liveness: Liveness | None = None,
                   meta: Mapping[str, Any] | None = None) -> Graph:
        """The same ops and edges with other costs (the ones given; the others kept), sharing what
        depends on the structure alone: the adjacency, the topological order, the co-location
        groups and :attr:`structure_memo`, computed once instead of once per derived graph (the
        placers plan on a copy with planning bytes; a pipelined step on copies at micro-batch
        costs). ``liveness`` replaces the liveness fields (checked like :meth:`from_arrays` checks
        them; its aliases are taken as they are).

        Examples
        --------
        >>> from celeritas_core.generators.synthetic import small_training_graph
        >>> g = small_training_graph(0)
        >>> half = g.with_costs(time_us=g.time_us / 2)
        >>> half.topological_order is g.topological_order, half.total_time_us == g.total_time_us / 2
        (True, True)
        """
        changes: dict[str, Any] = {}
        for field_name, values in (("time_us", time_us), ("memory_bytes", memory_bytes),
                                   ("edge_bytes", edge_bytes)):
            if values is None:
                continue
            array = np.asarray(values, dtype=np.float64)
            if array.shape != getattr(self, field_name).shape:
                raise CeleritasInputError(f"{field_name} must have one value per "
                                          f"{'edge' if field_name == 'edge_bytes' else 'node'}")
            if field_name == "edge_bytes":
                bad = np.flatnonzero(~np.isfinite(array) | (array < 0))
                if len(bad):
                    e = int(bad[0])
                    raise CeleritasInputError(f"edge {self.node_names[self.edge_src[e]]!r} -> "
                                              f"{self.node_names[self.edge_dst[e]]!r}: edge_bytes must be "
                                              f"finite and >= 0, got {array[e]!r}")
            else:
                _check_costs(array, self.node_names, field_name)
            changes[field_name] = array
        if liveness is not None:
            liveness.check(self.node_names)
            changes["liveness"] = liveness
        if meta is not None:
            changes["meta"] = dict(meta)
        self.structure_memo  # noqa: B018  (made now, so that the copy shares it)
        derived = replace(self, **changes)
        for name in _STRUCTURAL:
            if name in self.__dict__:
                derived.__dict__[name] = self.__dict__[name]
        return derived

    @cached_property
    def structure_memo(self) -> dict[Any, Any]:
        """Values other layers compute from the structure alone (nodes, edges, co-location), by a
        key of their own: one dict shared by every graph :meth:`with_costs` derives from this one,
        so such a value is computed once for all of them (e.g. the stage planners' unit
        sequences)."""
        return {}

    def to_networkx(self) -> Any:
        """Return a networkx MultiDiGraph with the same names, costs and edges (for inspection)."""
        # lazy: networkx takes about 0.2 s to import; only these conversions use it (celeritas info does not)
        import networkx as nx

        g = nx.MultiDiGraph(name=self.name)
        for i, node in enumerate(self.node_names):
            g.add_node(
                node,
                op=self.ops[i],
                time_us=float(self.time_us[i]),
                memory_bytes=float(self.memory_bytes[i]),
                colocation=self.colocation[i],
            )
        for s, d, b in zip(self.edge_src.tolist(), self.edge_dst.tolist(), self.edge_bytes.tolist(),
                           strict=True):
            g.add_edge(self.node_names[s], self.node_names[d], bytes=b)
        return g


#: The cached properties of a :class:`Graph` that depend on its structure alone (nodes, edges,
#: co-location), which :meth:`Graph.with_costs` shares with the graphs it derives.
_STRUCTURAL = ("index", "_succ_csr", "_pred_csr", "in_degree", "out_degree", "topological_order",
               "topological_rank", "colocation_ids", "colocation_names", "structure_memo")


def _check_costs(values: np.ndarray, names: tuple[str, ...], field_name: str) -> None:
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if len(bad):
        i = int(bad[0])
        raise CeleritasInputError(
            f"node {names[i]!r}: {field_name} must be finite and >= 0, got {values[i]!r}"
        )


def unique_pairs(major: np.ndarray, minor: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct ``(major, minor)`` rows in lexicographic order, and the index of each input
    row among them. A sort, no arithmetic on the values, so any int64 values work."""
    order = np.lexsort((minor, major))
    a, b = major[order], minor[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    group = np.empty(len(order), dtype=np.int64)
    group[order] = np.cumsum(first) - 1
    return a[first], b[first], group


def _checked_names(node_names: Sequence[str]) -> tuple[str, ...]:
    """The node names as a tuple; raise on an empty graph or the first duplicate name."""
    names = tuple(node_names)
    if not names:
        raise CeleritasInputError("graph has no nodes")
    if len(set(names)) != len(names):
        seen: set[str] = set()
        for node in names:
            if node in seen:
                raise CeleritasInputError(f"duplicate node name {node!r}")
            seen.add(node)
    return names


def _edge_arrays(
    edge_src: Sequence[int] | np.ndarray, edge_dst: Sequence[int] | np.ndarray,
    edge_bytes: Sequence[float] | np.ndarray, edge_src_output: Sequence[int] | np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The edge arrays as flat int64 / float64 vectors (``src_output`` defaults to 0)."""
    src = np.asarray(edge_src, dtype=np.int64).reshape(-1)
    dst = np.asarray(edge_dst, dtype=np.int64).reshape(-1)
    nbytes = np.asarray(edge_bytes, dtype=np.float64).reshape(-1)
    out = (
        np.zeros(len(src), dtype=np.int64)
        if edge_src_output is None
        else np.asarray(edge_src_output, dtype=np.int64).reshape(-1)
    )
    return src, dst, nbytes, out


def _check_edges(names: tuple[str, ...], src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> None:
    """Raise naming the first edge with an unknown node, a self-loop or bad bytes."""
    if not len(src):
        return
    n = len(names)
    bad = np.flatnonzero((src < 0) | (src >= n) | (dst < 0) | (dst >= n))
    if len(bad):
        raise CeleritasInputError(f"edge {int(bad[0])} refers to an unknown node index")
    loops = np.flatnonzero(src == dst)
    if len(loops):
        raise CeleritasInputError(
            f"edge {int(loops[0])}: self-loop on node {names[int(src[loops[0]])]!r}"
        )
    bad_bytes = np.flatnonzero(~np.isfinite(nbytes) | (nbytes < 0))
    if len(bad_bytes):
        e = int(bad_bytes[0])
        raise CeleritasInputError(
            f"edge {e} ({names[int(src[e])]!r} -> {names[int(dst[e])]!r}): "
            f"bytes must be finite and >= 0, got {nbytes[e]!r}"
        )


def _csr(rows: np.ndarray, cols: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.argsort(rows, kind="stable")
    counts = np.bincount(rows, minlength=n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, cols[order], order.astype(np.int64)
