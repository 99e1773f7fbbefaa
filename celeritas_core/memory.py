"""Per-device memory over time during a replay, and its peak (bytes), from tensor lifetimes.

TensorFlow frees a tensor after its last consumer has run, so a device's memory is not the sum of
its ops' outputs. For the ops a graph models with :class:`~celeritas_core.graph.Liveness`:

* ``persistent_bytes`` are live on the op's device for the whole step;
* ``scratch_bytes`` are live while the op runs, ``[start, finish)``;
* each output tensor is live on the producer's device from the producer's start until its last
  consumer on that device has finished, and at least until the producer finishes and every
  transfer of it has left; a copy sent to another device is live there from the transfer's start
  until its last consumer there has finished.

Ops the graph does not model keep the sum model: their ``memory_bytes`` is live for the whole
step, so a graph without liveness fields has peak = sum, exactly as before. At equal times frees
come before allocations (an op's inputs are released when it finishes, the next op allocates when
it starts), except at the instant a 0-µs op runs: its inputs, outputs and scratch all count then
(frees at that device and time come after allocations). Units: µs and bytes.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace

import numpy as np

from celeritas_core.cluster import Cluster
from celeritas_core.colocation import placement_units
from celeritas_core.graph import Graph, Liveness, TensorView, unique_pairs
from celeritas_core.paths import crossing_spans, crossing_totals, longest_path
from celeritas_core.simulator import SimulationResult, simulate


@dataclass(frozen=True, eq=False)
class MemoryProfile:
    """Memory of every device over one replay (µs, bytes)."""

    baseline_bytes: np.ndarray
    """Per device: bytes live for the whole step (persistent bytes and ops without liveness)."""
    times_us: tuple[np.ndarray, ...]
    """Per device: the times at which its usage changes, ascending."""
    usage_bytes: tuple[np.ndarray, ...]
    """Per device: bytes in use just after each of ``times_us``."""
    peak_bytes: np.ndarray
    """Per device: the largest usage over the step."""


def memory_profile(graph: Graph, num_devices: int, assignment: np.ndarray,
                   result: SimulationResult) -> MemoryProfile:
    """Replay ``result`` of ``assignment`` into per-device memory over time (see module docstring).

    Parameters
    ----------
    graph : Graph
        The graph replayed; ops with :class:`~celeritas_core.graph.Liveness` fields are modelled
        over time, the others by their ``memory_bytes`` for the whole step.
    num_devices : int
        How many devices the cluster has.
    assignment : numpy.ndarray of int
        ``assignment[i]`` is the device index of node ``i``, as given to the replay.
    result : SimulationResult
        The replay of ``assignment`` (:func:`~celeritas_core.simulator.simulate`): its op and
        transfer times say when each buffer is live.

    Returns
    -------
    MemoryProfile
        Per device: the bytes live for the whole step, the times (µs) at which its usage changes
        with the bytes in use just after each, and the peak (bytes).

    See Also
    --------
    one_device_peak_bytes : the peak with every op on one device.
    peak_lower_bound : what every placement needs.

    Notes
    -----
    At equal times frees come before allocations, except at the instant a 0-µs op runs
    (docs/simulator.md, "Memory").

    Examples
    --------
    >>> import numpy as np
    >>> from celeritas_core import Cluster, Graph, Liveness, simulate
    >>> live = Liveness.from_lists(persistent=[500, 0, 0], scratch=[0, 100, 0],
    ...                            outputs=[[1000], [2000], [3000]])
    >>> graph = Graph.from_arrays(name="chain", node_names=["a", "b", "c"], time_us=[10.0, 20.0, 30.0],
    ...                           memory_bytes=[1500, 2100, 3000], edge_src=[0, 1], edge_dst=[1, 2],
    ...                           edge_bytes=[1000, 2000], liveness=live)
    >>> from celeritas_core import memory_profile
    >>> cluster = Cluster.homogeneous(2, 1e9)
    >>> one = np.array([0, 0, 0])
    >>> profile = memory_profile(graph, 2, one, simulate(graph, cluster, one))
    >>> profile.peak_bytes.tolist(), graph.total_memory_bytes   # a's output is freed when b ends
    ([5500.0, 0.0], 6600.0)
    >>> split = np.array([0, 0, 1])   # c, and a copy of b's output, on device 1
    >>> profile = memory_profile(graph, 2, split, simulate(graph, cluster, split))
    >>> profile.peak_bytes.tolist(), profile.times_us[1].tolist(), profile.usage_bytes[1].tolist()
    ([3600.0, 5000.0], [30.0, 55.2, 85.2, 85.2], [2000.0, 5000.0, 2000.0, 0.0])
    """
    live = graph.liveness
    modelled = live.modelled if live is not None else np.zeros(graph.num_nodes, dtype=bool)
    static = np.where(modelled, live.persistent_bytes if live is not None else 0.0, graph.memory_bytes)
    baseline = np.bincount(assignment, weights=static, minlength=num_devices).astype(np.float64)
    if live is None or not modelled.any():
        empty = tuple(np.zeros(0) for _ in range(num_devices))
        return MemoryProfile(baseline, empty, empty, baseline.copy())
    dev, start, end, size = _intervals(graph, live, assignment, result)
    instant = result.finish_us <= result.start_us  # 0-µs ops: nothing they read is freed before them
    late = _at_instants(dev, end, assignment[instant], result.start_us[instant], num_devices)
    return _step_functions(baseline, dev, start, end, size, late | (end <= start))


def _at_instants(dev: np.ndarray, when: np.ndarray, instant_dev: np.ndarray, instant_us: np.ndarray,
                 num_devices: int) -> np.ndarray:
    """True for each (device, time) that equals the run time of a 0-µs op on that device."""
    out = np.zeros(len(dev), dtype=bool)
    for d in np.unique(instant_dev).tolist():
        here = dev == d
        out[here] = np.isin(when[here], instant_us[instant_dev == d])
    return out


def _intervals(graph: Graph, live: Liveness, assignment: np.ndarray,
               result: SimulationResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(device, start µs, end µs, bytes) of every scratch buffer, tensor and received copy."""
    start, finish = result.start_us, result.finish_us
    scratch = np.flatnonzero(live.modelled & (live.scratch_bytes > 0))
    parts = [(assignment[scratch], start[scratch], finish[scratch], live.scratch_bytes[scratch])]
    tensors = _tensors(graph, live)
    if len(tensors.producer):
        parts.extend(_tensor_intervals(graph, tensors, assignment, result))
    return tuple(np.concatenate(cols) for cols in zip(*parts, strict=True))  # type: ignore[return-value]


@dataclass(frozen=True, eq=False)
class _TensorTable:
    """Output tensors of modelled ops: producer, output index, bytes; edge and tensor maps.

    Tensors are numbered in ``(producer, output)`` order: the graph's tensors
    (:attr:`Graph.tensors`) of modelled producers merged with their declared outputs."""

    producer: np.ndarray
    output: np.ndarray
    size: np.ndarray
    edge: np.ndarray  # edges whose producer is modelled
    edge_tensor: np.ndarray  # tensor id of each of those edges
    of_graph_tensor: np.ndarray  # table id of each of the graph's tensors (-1: producer not modelled)
    graph_tensors: TensorView
    alias_of: np.ndarray | None = None
    """Per tensor: the tensor whose buffer it shares (-1: its own buffer; -2: a buffer outside the
    model, e.g. of an op without liveness fields); None when no output aliases."""

    def ids(self, producer: np.ndarray, output: np.ndarray) -> np.ndarray:
        """Table id of each (producer, output) pair with an edge, -1 when it is not in the table."""
        found = self.graph_tensors.ids(producer, output)
        return np.where(found >= 0, self.of_graph_tensor[found], -1)


_TENSOR_TABLES: weakref.WeakKeyDictionary[Graph, _TensorTable] = weakref.WeakKeyDictionary()


def _tensors(graph: Graph, live: Liveness) -> _TensorTable:
    """Every declared output and every (producer, ``src_output``) with an edge, of modelled ops.

    A property of the graph (``live`` is its liveness), built once per graph: every replay's
    memory profile reads it, and on a million-op graph it takes about 0.1 s to build."""
    if graph not in _TENSOR_TABLES:
        _TENSOR_TABLES[graph] = _build_tensors(graph, live)
    return _TENSOR_TABLES[graph]


def _build_tensors(graph: Graph, live: Liveness) -> _TensorTable:
    """The :func:`_tensors` table of ``graph``."""
    view = graph.tensors
    declared_count = np.diff(live.output_ptr)
    owners = np.flatnonzero(live.modelled)
    d_prod = np.repeat(owners, declared_count[owners])
    d_out = _output_index(live, owners)
    with_edges = np.flatnonzero(live.modelled[view.producer])
    producer, output, inverse = unique_pairs(np.concatenate([d_prod, view.producer[with_edges]]),
                                               np.concatenate([d_out, view.output[with_edges]]))
    table_id = inverse[len(d_prod):]
    of_graph_tensor = np.full(view.num_tensors, -1, dtype=np.int64)
    of_graph_tensor[with_edges] = table_id
    edge = np.flatnonzero(live.modelled[graph.edge_src])
    size = np.zeros(len(producer))
    size[table_id] = view.nbytes[with_edges]
    declared = inverse[:len(d_prod)]
    size[declared] = live.output_bytes[_flat_positions(live, owners)]
    table = _TensorTable(producer, output, size, edge, of_graph_tensor[view.edge_tensor[edge]],
                         of_graph_tensor, view)
    if live.alias_node is None or live.alias_output is None:
        return table
    flat = _flat_positions(live, owners)
    aliased = live.alias_node[flat] >= 0
    alias_of = np.full(len(size), -1, dtype=np.int64)
    target = table.ids(live.alias_node[flat][aliased], live.alias_output[flat][aliased])
    alias_of[declared[aliased]] = np.where(target >= 0, target, -2)
    return replace(table, alias_of=alias_of)


def _output_index(live: Liveness, owners: np.ndarray) -> np.ndarray:
    """Output index 0..k-1 of every declared output of ``owners``, in declaration order."""
    counts = np.diff(live.output_ptr)[owners]
    firsts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(int(counts.sum())) - firsts


def _flat_positions(live: Liveness, owners: np.ndarray) -> np.ndarray:
    """Positions in ``live.output_bytes`` of the declared outputs of ``owners``, in order."""
    counts = np.diff(live.output_ptr)[owners]
    return np.repeat(live.output_ptr[owners], counts) + _output_index(live, owners)


def _tensor_intervals(graph: Graph, t: _TensorTable, assignment: np.ndarray,
                      result: SimulationResult) -> list[tuple[np.ndarray, ...]]:
    """Lifetimes of each tensor on its producer's device and of each copy sent elsewhere."""
    start, finish = result.start_us, result.finish_us
    home = assignment[t.producer]
    local_end = finish[t.producer].copy()
    src, dst = graph.edge_src[t.edge], graph.edge_dst[t.edge]
    local = assignment[dst] == assignment[src]
    np.maximum.at(local_end, t.edge_tensor[local], finish[dst[local]])
    tr = result.transfers
    tid = t.ids(tr.src_node, tr.src_output)
    sent = tid >= 0
    np.maximum.at(local_end, tid[sent], tr.end_us[sent])
    home_size = t.size
    if t.alias_of is not None:
        home_size = np.where(t.alias_of == -1, t.size, 0.0)  # an alias adds no bytes of its own
        local_end = _extend_alias_roots(t.alias_of, home, local_end)
    parts = [(home, start[t.producer], local_end, home_size)]
    if sent.any():
        num_dev = int(max(assignment.max(initial=0), tr.dst_device.max(initial=0))) + 1
        copy_keys = tid[sent] * num_dev + tr.dst_device[sent]
        order = np.argsort(copy_keys)
        remote_end = tr.start_us[sent][order].copy()
        edge_keys = t.edge_tensor[~local] * num_dev + assignment[dst[~local]]
        pos = np.searchsorted(copy_keys[order], edge_keys)
        np.maximum.at(remote_end, pos, finish[dst[~local]])
        if t.alias_of is not None:
            _extend_received_copies(t.alias_of, home, local_end, copy_keys[order], remote_end, num_dev)
        parts.append((tr.dst_device[sent][order], tr.start_us[sent][order], remote_end,
                      t.size[tid[sent][order]]))
    return parts


def _alias_parents(alias_of: np.ndarray, home: np.ndarray) -> np.ndarray:
    """Per tensor: the tensor that owns its buffer on its device, following aliases between tensors
    on one device (pointer jumping); a tensor that owns a buffer is its own parent."""
    parent = np.arange(len(alias_of))
    linked = np.flatnonzero(alias_of >= 0)
    linked = linked[home[alias_of[linked]] == home[linked]]
    parent[linked] = alias_of[linked]
    while True:
        jumped = parent[parent]
        if np.array_equal(jumped, parent):
            return parent
        parent = jumped


def _extend_alias_roots(alias_of: np.ndarray, home: np.ndarray, local_end: np.ndarray) -> np.ndarray:
    """Keep each buffer live until every tensor sharing it on its device is done with (µs)."""
    root = _alias_parents(alias_of, home)
    out = local_end.copy()
    np.maximum.at(out, root, local_end)
    return out


def _extend_received_copies(alias_of: np.ndarray, home: np.ndarray, local_end: np.ndarray,
                            copy_keys: np.ndarray, remote_end: np.ndarray, num_dev: int) -> None:
    """An alias of a tensor received from another device shares the received copy: keep the copy
    live until the alias's buffer is done with (``local_end`` already covers its same-device
    aliases). ``copy_keys`` (sorted, tensor * num_dev + device) index ``remote_end``."""
    cross = np.flatnonzero(alias_of >= 0)
    cross = cross[home[alias_of[cross]] != home[cross]]
    if not len(cross) or not len(copy_keys):
        return
    keys = alias_of[cross] * num_dev + home[cross]
    pos = np.minimum(np.searchsorted(copy_keys, keys), len(copy_keys) - 1)
    found = copy_keys[pos] == keys
    np.maximum.at(remote_end, pos[found], local_end[cross[found]])


def _step_functions(baseline: np.ndarray, dev: np.ndarray, start: np.ndarray, end: np.ndarray,
                    size: np.ndarray, free_late: np.ndarray) -> MemoryProfile:
    """Sum intervals into per-device step functions over the baseline. At equal times: frees, then
    allocations, then the ``free_late`` frees (zero-length lifetimes, and lifetimes ending when a
    0-µs op runs, whose inputs and outputs must exist for that instant)."""
    num_dev = len(baseline)
    when = np.concatenate([start, end])
    delta = np.concatenate([size, -size])
    where = np.concatenate([dev, dev])
    phase = np.concatenate([np.ones(len(start)), np.where(free_late, 2.0, 0.0)])
    order = np.lexsort((phase, when, where))
    when, delta, where = when[order], delta[order], where[order]
    bounds = np.searchsorted(where, np.arange(num_dev + 1))
    times, usage = [], []
    peak = baseline.copy()
    for d in range(num_dev):
        lo, hi = bounds[d], bounds[d + 1]
        level = baseline[d] + np.cumsum(delta[lo:hi])
        times.append(when[lo:hi])
        usage.append(level)
        if hi > lo:
            peak[d] = max(peak[d], float(level.max()))
    return MemoryProfile(baseline, tuple(times), tuple(usage), peak)


_ONE_DEVICE_PEAK: weakref.WeakKeyDictionary[Graph, float] = weakref.WeakKeyDictionary()


def one_device_peak_bytes(graph: Graph) -> float:
    """Liveness-aware peak (bytes) with every op on one device (the sum without liveness fields).

    On one device the replay's order does not depend on the device's speed, so the peak is a
    property of the graph; it is computed once per graph (placing with several placers asks for it
    once each to plan and to evaluate).

    Parameters
    ----------
    graph : Graph
        Any graph, with or without liveness fields.

    Returns
    -------
    float
        The peak (bytes) of the whole graph replayed on one device.

    Examples
    --------
    >>> import numpy as np
    >>> from celeritas_core import Cluster, Graph, Liveness, simulate
    >>> live = Liveness.from_lists(persistent=[500, 0, 0], scratch=[0, 100, 0],
    ...                            outputs=[[1000], [2000], [3000]])
    >>> graph = Graph.from_arrays(name="chain", node_names=["a", "b", "c"], time_us=[10.0, 20.0, 30.0],
    ...                           memory_bytes=[1500, 2100, 3000], edge_src=[0, 1], edge_dst=[1, 2],
    ...                           edge_bytes=[1000, 2000], liveness=live)
    >>> from celeritas_core import one_device_peak_bytes
    >>> one_device_peak_bytes(graph), graph.total_memory_bytes
    (5500.0, 6600.0)
    """
    if graph.liveness is None:
        return graph.total_memory_bytes
    if graph not in _ONE_DEVICE_PEAK:
        one = np.zeros(graph.num_nodes, dtype=np.int64)
        result = simulate(graph, Cluster.homogeneous(1, 1.0), one)
        _ONE_DEVICE_PEAK[graph] = float(memory_profile(graph, 1, one, result).peak_bytes[0])
    return _ONE_DEVICE_PEAK[graph]


def planning_memory_bytes(graph: Graph) -> np.ndarray:
    """Per-op bytes for the placers' capacity checks, which add bytes per device (sum model).

    Without liveness fields this is ``memory_bytes``. Otherwise the transient part of each
    modelled op (``memory_bytes − persistent_bytes``: outputs and scratch) is scaled by one factor
    so that the ops add up to the liveness-aware peak of the whole graph replayed on one device;
    persistent bytes and unmodelled ops count in full. A split adds received copies that this
    estimate does not see, which is what the placers' ``headroom`` is for.
    """
    live = graph.liveness
    if live is None or not live.modelled.any():
        return graph.memory_bytes
    persistent = np.where(live.modelled, np.minimum(live.persistent_bytes, graph.memory_bytes),
                          graph.memory_bytes)
    transient = graph.memory_bytes - persistent
    peak = one_device_peak_bytes(graph)
    total = float(transient.sum())
    scale = min(max((peak - float(persistent.sum())) / total, 0.0), 1.0) if total > 0 else 0.0
    return persistent + scale * transient


def live_bytes_by_op(graph: Graph, assignment: np.ndarray, result: SimulationResult, device: int,
                     time_us: float) -> np.ndarray:
    """Per op: bytes live on ``device`` just after ``time_us`` (µs) of the replay ``result`` that
    moving the op off ``device`` could free.

    An op on ``device`` holds its persistent bytes (all of ``memory_bytes`` without liveness
    fields), its scratch while it runs and its outputs while they are kept there; a tensor live
    there (an output or a received copy) is also charged in full to each of its consumers there
    that has not finished by ``time_us``, since they keep it live. An interval ``[start, end)``
    counts when ``start <= time_us < end`` (or it has zero length and starts by then). Shares add
    up to more than the device's usage: they rank ops for moves, they do not account.
    """
    live = graph.liveness
    modelled = live.modelled if live is not None else np.zeros(graph.num_nodes, dtype=bool)
    here = assignment == device
    static = np.where(modelled, live.persistent_bytes if live is not None else 0.0, graph.memory_bytes)
    out = np.where(here, static, 0.0)
    if live is None or not modelled.any():
        return out
    start, finish = result.start_us, result.finish_us
    running = here & modelled & _alive(start, finish, time_us)
    out[running] += live.scratch_bytes[running]
    tensors = _tensors(graph, live)
    if len(tensors.producer):
        home = _tensor_intervals(graph, tensors, assignment, result)[0]
        kept = (home[0] == device) & _alive(home[1], home[2], time_us)
        np.add.at(out, tensors.producer[kept], home[3][kept])
        copies = _received_copy_alive(graph, tensors, assignment, result, device, time_us)
        size = np.where(kept, home[3], tensors.size)
        _charge_pending_consumers(graph, tensors, assignment, result, device, time_us, kept | copies, size,
                                  out)
    return out


def _alive(start: np.ndarray, end: np.ndarray, time_us: float) -> np.ndarray:
    """True where ``[start, end)`` holds ``time_us`` (a zero-length interval: from its start on)."""
    return (start <= time_us) & ((end > time_us) | (end <= start))


def _received_copy_alive(graph: Graph, t: _TensorTable, assignment: np.ndarray, result: SimulationResult,
                         device: int, time_us: float) -> np.ndarray:
    """Per tensor: True when a copy of it received on ``device`` is live at ``time_us`` (from its
    transfer's start until its last consumer there has finished, µs)."""
    tr = result.transfers
    tid = t.ids(tr.src_node, tr.src_output)
    mine = (tid >= 0) & (tr.dst_device == device)
    begin = np.full(len(t.producer), np.inf)  # no copy: never live
    begin[tid[mine]] = tr.start_us[mine]
    end = begin.copy()
    dst = graph.edge_dst[t.edge]
    there = assignment[dst] == device
    np.maximum.at(end, t.edge_tensor[there], result.finish_us[dst[there]])
    return _alive(begin, end, time_us)


def _charge_pending_consumers(graph: Graph, t: _TensorTable, assignment: np.ndarray, result: SimulationResult,
                              device: int, time_us: float, alive: np.ndarray, size: np.ndarray,
                              out: np.ndarray) -> None:
    """Add ``size[k]`` (bytes) to ``out`` for every consumer on ``device`` of a tensor ``k`` that is
    ``alive`` there, when the consumer finishes after ``time_us`` (µs); once per consumer and tensor."""
    dst = graph.edge_dst[t.edge]
    pending = (assignment[dst] == device) & (result.finish_us[dst] > time_us)
    pairs = np.unique(np.stack([dst[pending], t.edge_tensor[pending]]), axis=1)
    pairs = pairs[:, alive[pairs[1]]]
    np.add.at(out, pairs[0], size[pairs[1]])


@dataclass(frozen=True, eq=False)
class OwnedIntervals:
    """The buffers of a one-device replay, each piece charged to an op that keeps it live (µs, bytes).

    ``owner[i]`` is charged ``size_bytes[i]`` from ``start_us[i]`` until ``end_us[i]``.
    ``static_bytes`` per op is live for the whole step (persistent bytes; all of ``memory_bytes``
    for ops without liveness fields). See :func:`owned_intervals`.
    """

    owner: np.ndarray
    start_us: np.ndarray
    end_us: np.ndarray
    size_bytes: np.ndarray
    static_bytes: np.ndarray


def owned_intervals(graph: Graph, result: SimulationResult | None) -> OwnedIntervals:
    """The buffers of ``result``, a replay with every op on one device, split among the ops that
    keep them live, so that a placer grouping ops can estimate what a group holds over time by
    adding its ops' pieces, without replaying each grouping.

    An op owns its scratch while it runs and each of its outputs while it runs. A tensor's further
    lifetime is cut at its consumers' finishes, in order: the consumer that finishes first owns it
    from the producer's finish to its own finish, the next from there to its finish, and so on, so
    a group holding all the consumers that finish by some time holds the tensor exactly until then
    (a group holding a later consumer alone is charged from the earlier consumer's finish on). An
    alias (a view) adds no bytes; its consumers extend the buffer it shares. Summed over all ops the
    pieces give :func:`memory_profile`'s usage on one device (but for the instants of 0-µs ops).
    Without liveness fields (or without ``result``) there are no pieces, only ``static_bytes``.
    """
    live = graph.liveness
    modelled = live.modelled if live is not None else np.zeros(graph.num_nodes, dtype=bool)
    static = np.where(modelled, live.persistent_bytes if live is not None else 0.0, graph.memory_bytes)
    empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0)
    if live is None or not modelled.any() or result is None:
        return OwnedIntervals(empty_i, empty_f, empty_f, empty_f, static.astype(np.float64))
    start, finish = result.start_us, result.finish_us
    scratch = np.flatnonzero(live.modelled & (live.scratch_bytes > 0))
    pieces = [(scratch, start[scratch], finish[scratch], live.scratch_bytes[scratch])]
    tensors = _tensors(graph, live)
    if len(tensors.producer):
        pieces.extend(_tensor_pieces(graph, tensors, start, finish))
    owner, begin, end, size = (np.concatenate(cols) for cols in zip(*pieces, strict=True))
    return OwnedIntervals(owner.astype(np.int64), begin, end, size.astype(np.float64),
                          static.astype(np.float64))


def _tensor_pieces(graph: Graph, t: _TensorTable, start: np.ndarray,
                   finish: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """The producer's piece and the consumers' pieces of every tensor (see :func:`owned_intervals`)."""
    size, root = _buffer_roots(t)
    prod_finish = finish[t.producer][root]
    consumer = graph.edge_dst[t.edge]
    pair = np.unique(np.stack([root[t.edge_tensor], consumer]), axis=1)
    tensor, consumer = pair[0], pair[1]
    order = np.lexsort((finish[consumer], tensor))
    tensor, consumer = tensor[order], consumer[order]
    until = finish[consumer]
    since = np.empty(len(until))
    if len(until):
        since[0] = -np.inf
        since[1:] = np.where(tensor[1:] == tensor[:-1], until[:-1], -np.inf)
    since = np.maximum(since, prod_finish[tensor])
    keep = until > since
    return [(t.producer, start[t.producer], finish[t.producer], size),
            (consumer[keep], since[keep], until[keep], size[tensor[keep]])]


@dataclass(frozen=True)
class PeakLowerBound:
    """What every placement needs, whatever the devices and the runtime's order (bytes).

    ``largest_unit_bytes``: the largest working set of one op plus the persistent bytes of its
    co-location group (its device holds at least that); ``live_total_bytes``: the most bytes live
    at one instant across all devices (:func:`peak_lower_bound`); ``op``: the op at which
    ``live_total_bytes`` is reached.
    """

    largest_unit_bytes: float
    live_total_bytes: float
    op: int

    def fullest_device_bytes(self, num_devices: int) -> float:
        """A lower bound on the fullest device's peak on ``num_devices`` devices (bytes)."""
        return max(self.largest_unit_bytes, self.live_total_bytes / max(num_devices, 1))

    def cannot_fit(self, capacity: np.ndarray) -> bool:
        """True when no placement on devices of ``capacity`` (bytes each) can fit: one group's working
        set exceeds the largest device, or what is live at once exceeds them all together."""
        return bool(self.largest_unit_bytes > float(np.max(capacity)) or
                    self.live_total_bytes > float(np.sum(capacity)))


_PEAK_BOUNDS: weakref.WeakKeyDictionary[Graph, PeakLowerBound] = weakref.WeakKeyDictionary()


def peak_lower_bound(graph: Graph) -> PeakLowerBound:
    """Lower bounds (bytes) on what the devices hold, valid for every placement and dispatch order.

    * While op ``v`` runs its device holds its scratch, its outputs, every tensor it reads (or a
      copy) and the persistent bytes of its co-location group (all of ``memory_bytes`` for ops
      without liveness fields): the largest such working set is held by some device.
    * While an op ``p`` of a longest path runs, every tensor made by ``p`` or an ancestor and read
      by a descendant is live on some device (:mod:`celeritas_core.paths`), and so are ``p``'s
      scratch and every persistent byte: their largest total is live across the devices at once.

    Parameters
    ----------
    graph : Graph
        Any graph, with or without liveness fields.

    Returns
    -------
    PeakLowerBound
        The largest working set of one op (bytes; its device holds at least that), the most bytes
        live at once across the devices, and methods to bound the fullest device
        (``fullest_device_bytes``) and to tell when no placement fits (``cannot_fit``).

    See Also
    --------
    one_device_peak_bytes : an upper bound on ``live_total_bytes``.

    Examples
    --------
    >>> import numpy as np
    >>> from celeritas_core import Cluster, Graph, Liveness, simulate
    >>> live = Liveness.from_lists(persistent=[500, 0, 0], scratch=[0, 100, 0],
    ...                            outputs=[[1000], [2000], [3000]])
    >>> graph = Graph.from_arrays(name="chain", node_names=["a", "b", "c"], time_us=[10.0, 20.0, 30.0],
    ...                           memory_bytes=[1500, 2100, 3000], edge_src=[0, 1], edge_dst=[1, 2],
    ...                           edge_bytes=[1000, 2000], liveness=live)
    >>> from celeritas_core import peak_lower_bound
    >>> bound = peak_lower_bound(graph)   # c holds its 3000-byte output and b's 2000 it reads
    >>> bound.largest_unit_bytes, bound.fullest_device_bytes(2)
    (5000.0, 5000.0)
    >>> bound.cannot_fit(np.array([4000.0, 4000.0])), bound.cannot_fit(np.array([8000.0, 8000.0]))
    (True, False)
    >>> from celeritas_core.synthetic import small_training_graph
    >>> training = small_training_graph(0, liveness=True)
    >>> peak_lower_bound(training).live_total_bytes <= one_device_peak_bytes(training)
    True
    """
    if graph not in _PEAK_BOUNDS:  # a property of the graph: the placer and the evaluation ask
        _PEAK_BOUNDS[graph] = _peak_lower_bound(graph)
    return _PEAK_BOUNDS[graph]


def _peak_lower_bound(graph: Graph) -> PeakLowerBound:
    """:func:`peak_lower_bound`, computed."""
    live = graph.liveness
    modelled = live.modelled if live is not None else np.zeros(graph.num_nodes, dtype=bool)
    static = np.where(modelled, live.persistent_bytes if live is not None else 0.0, graph.memory_bytes)
    unit_of = placement_units(graph)
    unit_static = np.bincount(unit_of, weights=static)
    working = unit_static[unit_of].copy()
    if live is None or not modelled.any() or graph.num_nodes == 0:
        return PeakLowerBound(float(working.max(initial=0.0)), float(static.sum()), 0)
    tensors = _tensors(graph, live)
    size, root = _buffer_roots(tensors)
    own = np.bincount(tensors.producer, weights=size, minlength=graph.num_nodes)
    reads = np.unique(np.stack([graph.edge_dst[tensors.edge], root[tensors.edge_tensor]]), axis=1)
    read_bytes = np.bincount(reads[0], weights=size[reads[1]], minlength=graph.num_nodes)
    working += np.where(modelled, live.scratch_bytes + own + read_bytes, 0.0)
    path = longest_path(graph)
    first, last = crossing_spans(graph, path, tensors.producer, graph.edge_dst[tensors.edge],
                                 root[tensors.edge_tensor])
    across = crossing_totals(len(path), first, last, size)
    at_op = across + np.where(modelled[path], live.scratch_bytes[path], 0.0)  # its outputs are in ``across``
    j = int(np.argmax(at_op)) if len(at_op) else 0
    total = float(static.sum() + (at_op[j] if len(at_op) else 0.0))
    return PeakLowerBound(float(working.max(initial=0.0)), total, int(path[j]) if len(path) else 0)


def _buffer_roots(t: _TensorTable) -> tuple[np.ndarray, np.ndarray]:
    """Per tensor of the table: its own bytes (0 for an alias) and the tensor owning its buffer."""
    if t.alias_of is None:
        return t.size, np.arange(len(t.size))
    size = np.where(t.alias_of == -1, t.size, 0.0)
    return size, _alias_parents(t.alias_of, np.zeros(len(t.size), dtype=np.int64))
