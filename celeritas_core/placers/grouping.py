"""Baechi's co-placement grouping and operator fusion (Jeon et al., "Baechi: fast device placement
of machine learning graphs", SoCC 2020, §4; its ``--grouper=coplace --placer_type=fusion`` mode).

Two pure functions over the graph's arrays; units: µs and bytes.

1. :func:`coplacement_groups` (Baechi's ``CoplacementGrouper``). Start from the graph's
   co-location groups (``graph.colocation_ids``). An op whose output goes to exactly one distinct
   consumer op joins that consumer's group. Baechi repeats this to a fixpoint; the fixpoint is the
   set of connected components of the undirected graph whose edges are (op, its only consumer) and
   (member, first member of its co-location group), which we compute in one pass with
   :func:`scipy.sparse.csgraph.connected_components` (linear time; equivalent to union-find).
2. :func:`fuse_groups` (Baechi's ``FusedOpPlacer._generate_fused_op_graph``). Inside each group,
   contract a direct edge ``u -> v`` (both in the group) unless ``u`` has more than one distinct
   successor *and* ``v`` more than one distinct predecessor, degrees taken on the graph contracted
   so far. Contracting ``u -> v`` closes a cycle only through a second path ``u -> … -> v``, which
   needs both degrees above one, so the fused graph stays acyclic. A fused op's time and memory are
   the sums of its members'. Groups that do not contract to one node keep their members
   (fused nodes) on one device through the fused graph's co-location names.

Deviations from Baechi, all deliberate:

* **Degrees count distinct neighbour ops.** Baechi's op graph is a ``networkx.DiGraph``, so its
  ``out_edges`` already count distinct consumers; we count distinct ``(src, dst)`` pairs the same
  way, so several tensors (or outputs) from ``u`` to one consumer still make ``u`` single-consumer.
  Control edges count like data edges, as with Baechi's default; its ``ignore_control_edges``
  option is ``coplacement_groups(..., ignore_control_edges=True)``, where a pair whose edges all
  carry 0 bytes is a control edge (we have no control flag). Caveat: when every optimizer update
  feeds one ``NoOp`` through a single control edge (as in ``synthetic.paper_shaped_graph``), the
  default rule links all variables' co-location groups into one group, which may not fit a device.
* **No optimiser-cycle special case.** Baechi's ``fusion_allow_cycle`` / disjoint-path check and
  its placer's ``_should_ignore`` handling of cycles are not needed: we only contract edges that
  the degree test proves safe, and the result is checked acyclic when the fused graph is built.
* **Edge processing order.** All groups share one work list, ordered by (group, topological rank of
  the source, of the destination); Baechi walks groups in dictionary order and edges in networkx
  insertion order. A queued edge whose end was fused meanwhile is resolved to the current fused
  nodes (union-find) and tested again, and an edge created by a fusion is appended, as in Baechi.
  The contraction merges the node with fewer neighbours into the other (O(E log E) set moves).
* **Memory is summed.** Baechi sums persistent memory and takes the max of temporary memory; we
  have one ``memory_bytes`` per op and sum it, as the simulator and every placer do.
* **Tensors stay tensors.** Baechi's fused edge carries the sum of its distinct tensors' bytes. Our
  fused graph keeps one edge per (distinct tensor, consumer fused node), with ``src_output``
  numbering the tensors leaving a fused node, so a tensor sent to two fused consumers on one
  device is shipped once, as the simulator does on the ops; collapsing parallel edges (m-SCT's LP)
  then sums the distinct tensors' transfer times like Baechi's summed edge weight.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from celeritas_core.graphs.graph import Graph


@dataclass(frozen=True, eq=False)
class FusedGraph:
    """A fused op graph and the way back to the ops: fused node and group of every op."""

    graph: Graph
    """The fused graph: summed time (µs) and memory (bytes); co-location name = the group."""
    fused_of: np.ndarray
    """Fused node index of every op."""
    groups: np.ndarray
    """Co-placement group id of every op (``0..num_groups-1``)."""

    @property
    def num_groups(self) -> int:
        """Number of co-placement groups."""
        return int(self.groups.max()) + 1 if len(self.groups) else 0

    def to_ops(self, fused_assignment: np.ndarray) -> np.ndarray:
        """Device per op from a device per fused node."""
        return np.asarray(fused_assignment, dtype=np.int64)[self.fused_of]


def distinct_pairs(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``(src, dst)`` op pairs joined by at least one edge, sorted by (src, dst)."""
    if graph.num_edges == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    key = np.unique(graph.edge_src * graph.num_nodes + graph.edge_dst)
    return key // graph.num_nodes, key % graph.num_nodes


def _first_occurrence_labels(labels: np.ndarray) -> np.ndarray:
    """Relabel so that ids 0, 1, … follow the lowest node index of each label."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def coplacement_groups(graph: Graph, *, ignore_control_edges: bool = False) -> np.ndarray:
    """Baechi's co-placement group id per op: co-location groups, plus single-consumer ops joined to
    their consumer, to a fixpoint. Ids are ``0..g-1`` in order of each group's lowest op index.

    ``ignore_control_edges`` is Baechi's option of that name (off by default there and here): an op
    whose only consumer is reached by control edges alone (every edge of the pair 0 bytes) does
    not join it.
    """
    n = graph.num_nodes
    src, dst = distinct_pairs(graph)
    single = np.bincount(src, minlength=n)[src] == 1  # the op's only distinct consumer
    if ignore_control_edges and len(src):
        key = graph.edge_src * n + graph.edge_dst
        carries = np.zeros(len(src), dtype=bool)
        carries[np.searchsorted(src * n + dst, key[graph.edge_bytes > 0])] = True
        single &= carries
    a, b = [src[single]], [dst[single]]
    gid = graph.colocation_ids
    members = np.flatnonzero(gid >= 0)
    if len(members):
        ids, at = np.unique(gid[members], return_index=True)  # members ascend: lowest index first
        first = np.zeros(int(gid.max()) + 1, dtype=np.int64)
        first[ids] = members[at]
        a.append(members)
        b.append(first[gid[members]])
    rows, cols = np.concatenate(a), np.concatenate(b)
    adjacency = sparse.coo_matrix((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(n, n))
    _, labels = connected_components(adjacency, directed=False)
    return _first_occurrence_labels(labels)


class _Contraction:
    """Adjacency sets of the graph being contracted, with union-find from ops to fused nodes."""

    __slots__ = ("group", "parent", "pred", "queue", "succ")

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray, group: list[int]) -> None:
        self.group = group
        self.parent = list(range(n))
        self.succ: list[set[int]] = [set() for _ in range(n)]
        self.pred: list[set[int]] = [set() for _ in range(n)]
        for u, v in zip(src.tolist(), dst.tolist(), strict=True):
            self.succ[u].add(v)
            self.pred[v].add(u)
        self.queue: deque[tuple[int, int]] = deque()

    def find(self, x: int) -> int:
        """Fused node currently holding op ``x`` (path compression)."""
        parent = self.parent
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def try_fuse(self, u0: int, v0: int) -> None:
        """Contract the (current) edge ``u -> v`` unless out(u) > 1 and in(v) > 1 (cycle risk)."""
        u, v = self.find(u0), self.find(v0)
        if u == v or (len(self.succ[u]) > 1 and len(self.pred[v]) > 1):
            return
        self.succ[u].discard(v)
        self.pred[v].discard(u)
        size_u = len(self.succ[u]) + len(self.pred[u])
        keep, gone = (u, v) if size_u >= len(self.succ[v]) + len(self.pred[v]) else (v, u)
        self._move(gone, keep, self.succ, self.pred, outgoing=True)
        self._move(gone, keep, self.pred, self.succ, outgoing=False)
        self.parent[gone] = keep
        self.succ[gone] = self.pred[gone] = set()

    def _move(self, gone: int, keep: int, mine: list[set[int]], theirs: list[set[int]],
              *, outgoing: bool) -> None:
        """Re-attach ``gone``'s neighbours (one direction) to ``keep``; queue new in-group edges."""
        kept = mine[keep]
        g = self.group[keep]
        for w in mine[gone]:
            back = theirs[w]
            back.discard(gone)
            back.add(keep)
            if w not in kept:
                kept.add(w)
                if self.group[w] == g:
                    self.queue.append((keep, w) if outgoing else (w, keep))

    def run(self) -> np.ndarray:
        """Process the work list; return the representative (root) op of every op."""
        while self.queue:
            u, v = self.queue.popleft()
            self.try_fuse(u, v)
        root = np.asarray(self.parent, dtype=np.int64)
        while True:  # pointer jumping to the roots
            nxt = root[root]
            if np.array_equal(nxt, root):
                return root
            root = nxt


def contract_groups(graph: Graph, groups: np.ndarray) -> np.ndarray:
    """Fused node per op (ids in topological order of each node's first op) by Baechi's rule."""
    src, dst = distinct_pairs(graph)
    groups = np.asarray(groups, dtype=np.int64)
    inside = groups[src] == groups[dst]
    s, d = src[inside], dst[inside]
    rank = graph.topological_rank
    order = np.lexsort((rank[d], rank[s], groups[s]))
    work = _Contraction(graph.num_nodes, src, dst, groups.tolist())
    work.queue.extend(zip(s[order].tolist(), d[order].tolist(), strict=True))
    root = work.run()
    first_rank = np.full(graph.num_nodes, np.iinfo(np.int64).max)
    np.minimum.at(first_rank, root, rank)
    roots = np.unique(root)
    ordered = roots[np.argsort(first_rank[roots], kind="stable")]
    label = np.empty(graph.num_nodes, dtype=np.int64)
    label[ordered] = np.arange(len(ordered))
    return label[root]


def _fused_edges(graph: Graph, fused_of: np.ndarray, num_fused: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One edge per (distinct tensor, consumer fused node): src, dst, bytes (max), src_output."""
    fs, fd = fused_of[graph.edge_src], fused_of[graph.edge_dst]
    cross = fs != fd
    if not np.any(cross):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0), empty
    # one edge per (tensor, consumer fused node), in (producer, output, fused node) order
    key, inv = np.unique(graph.tensors.edge_tensor[cross] * num_fused + fd[cross], return_inverse=True)
    nbytes = np.zeros(len(key))
    np.maximum.at(nbytes, inv.reshape(-1), graph.edge_bytes[cross])
    tensors, t_of_edge = np.unique(key // num_fused, return_inverse=True)  # the crossing tensors
    e_dst = key % num_fused
    t_src = fused_of[graph.tensors.producer[tensors]]
    # number the tensors leaving each fused node 0, 1, … (in tensor-id order)
    by_src = np.lexsort((np.arange(len(tensors)), t_src))
    local = np.empty(len(tensors), dtype=np.int64)
    sorted_src = t_src[by_src]
    starts = np.flatnonzero(np.r_[True, sorted_src[1:] != sorted_src[:-1]])
    local[by_src] = np.arange(len(tensors)) - np.repeat(starts, np.diff(np.r_[starts, len(tensors)]))
    return t_src[t_of_edge], e_dst, nbytes, local[t_of_edge]


def fuse_groups(graph: Graph, groups: np.ndarray) -> FusedGraph:
    """Baechi's operator fusion inside ``groups`` (group id per op): the fused graph (summed time µs
    and memory bytes, one edge per distinct tensor and consumer) and op -> fused node."""
    groups = np.asarray(groups, dtype=np.int64)
    fused_of = contract_groups(graph, groups)
    k = int(fused_of.max()) + 1
    order = graph.topological_order
    _, at = np.unique(fused_of[order], return_index=True)
    first = order[at]  # each fused node's first op in topological order
    size = np.bincount(fused_of, minlength=k)
    e_src, e_dst, e_bytes, e_out = _fused_edges(graph, fused_of, k)
    fused = Graph.from_arrays(
        name=f"{graph.name}.fused",
        node_names=[graph.node_names[i] for i in first.tolist()],
        ops=[graph.ops[i] if size[j] == 1 else "Fused" for j, i in enumerate(first.tolist())],
        time_us=np.bincount(fused_of, weights=graph.time_us, minlength=k),
        memory_bytes=np.bincount(fused_of, weights=graph.memory_bytes, minlength=k),
        colocation=[f"coplace-{g}" for g in groups[first].tolist()],
        edge_src=e_src, edge_dst=e_dst, edge_bytes=e_bytes, edge_src_output=e_out,
        meta={"source": "baechi-fusion", "fine_graph": graph.name, "fine_nodes": graph.num_nodes},
    )
    return FusedGraph(graph=fused, fused_of=fused_of, groups=groups)


def baechi_fusion(graph: Graph, *, ignore_control_edges: bool = False) -> FusedGraph:
    """Co-placement grouping then operator fusion: Baechi's ``--grouper=coplace`` fused graph."""
    return fuse_groups(graph, coplacement_groups(graph, ignore_control_edges=ignore_control_edges))
