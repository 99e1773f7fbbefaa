"""Event-driven replay of a placement: per-device op queues and FIFO send/receive channels (µs).

The exact semantics are in ``docs/simulator.md``. In short: every device runs one op at a time
(duration ``time_us / speed``); an idle device starts the ready op with the smallest
``(ready time, topological rank)``; a tensor crossing devices is one transfer per
``(producer, src_output, destination device)`` lasting ``k·bytes + b`` µs of the link between its two
devices, and holds the sender's send channel and the receiver's receive channel (and, between
nodes of a cluster with a topology, the send side of the source node's network port and the
receive side of the destination's); transfers are reserved greedily when their producer finishes.
The setup (grouping edges into transfers, durations, per-device sums) is
vectorised numpy; the event loop (:func:`_replay`) takes only numpy arrays and scalars and keeps
its event and device queues in array-based binary heaps, so that :func:`~celeritas_core.compiled.jit.jit`
compiles it with Numba: a million-op graph replays in a fraction of a second. Without Numba
(or with ``CELERITAS_NO_JIT=1``) the same loop runs as plain Python, with identical results."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from celeritas_core.compiled.jit import jit
from celeritas_core.defaults import ALTERNATIVE_DISPATCH, DOCUMENTED_DISPATCH
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.dagloops import fifo_order, keyed_order
from celeritas_core.graphs.graph import Graph

_FINISH = 0  # event kind: an op finished (processed first at equal times)
_READY = 1  # event kind: an op's inputs are all available on its device
_KEY_LIMIT = 2**62  # combined int64 sort keys stay below this


@dataclass(frozen=True, eq=False)
class Transfers:
    """The cross-device transfers of a replay, one entry per (src_node, src_output, dst_device)."""

    src_node: np.ndarray
    src_output: np.ndarray
    src_device: np.ndarray
    dst_device: np.ndarray
    bytes: np.ndarray
    start_us: np.ndarray
    end_us: np.ndarray

    def __len__(self) -> int:
        """Number of transfers."""
        return len(self.src_node)

    @property
    def duration_us(self) -> np.ndarray:
        """Time each transfer holds its channels (µs)."""
        return self.end_us - self.start_us


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """Outcome of :func:`simulate`: step time and per-op / per-device / per-transfer timings (µs, bytes)."""

    step_time_us: float
    start_us: np.ndarray
    finish_us: np.ndarray
    device_busy_us: np.ndarray
    device_memory_bytes: np.ndarray
    transfers: Transfers
    #: The order ops started in (0 first): ops started at one instant on one device (zero-duration
    #: ops) ran in this order, which their start times cannot tell.
    start_sequence: np.ndarray | None = None

    @property
    def num_transfers(self) -> int:
        """Number of cross-device transfers (distinct tensors per destination device)."""
        return len(self.transfers)

    @property
    def comm_time_total_us(self) -> float:
        """Sum of all transfer durations (µs), overlapping or not."""
        return float(self.transfers.duration_us.sum())


_DISPATCH_ORDERS: weakref.WeakKeyDictionary[Graph, dict[str, tuple[np.ndarray, np.ndarray]]] = (
    weakref.WeakKeyDictionary())


def dispatch_order(graph: Graph, dispatch: str = DOCUMENTED_DISPATCH) -> tuple[np.ndarray, np.ndarray]:
    """(order, rank) of the topological order whose rank breaks ties between ready ops.

    ``dispatch``: ``"rank"`` (:attr:`Graph.topological_order`, the documented order), ``"fifo"``
    (Kahn's algorithm with a FIFO queue, sources in index order) or ``"random:N"`` (Kahn's
    algorithm taking the ready op with the smallest of keys drawn by ``numpy.random.default_rng(N)``,
    N ≥ 0 an integer: a random topological order, the same for the same N on every machine).
    Built once per graph and name.

    Examples
    --------
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> g = small_training_graph(0)
    >>> order, rank = dispatch_order(g, "random:1")
    >>> bool((rank[g.edge_src] < rank[g.edge_dst]).all())
    True
    """
    if dispatch == DOCUMENTED_DISPATCH:
        return graph.topological_order, graph.topological_rank
    cache = _DISPATCH_ORDERS.setdefault(graph, {})
    if dispatch not in cache:
        order = _other_order(graph, dispatch)
        rank = np.empty(graph.num_nodes, dtype=np.int64)
        rank[order] = np.arange(graph.num_nodes)
        cache[dispatch] = (order, rank)
    return cache[dispatch]


def check_dispatch(dispatch: str) -> str:
    """Return ``dispatch`` when it names a dispatch order (:func:`dispatch_order`), else raise.

    Lets a caller refuse a bad name before it reads any file or runs a placer.

    Raises
    ------
    CeleritasInputError
        One line naming the known orders: ``rank``, ``fifo``, ``random:N`` (N a non-negative
        integer of at most 9 digits).
    """
    if dispatch in (DOCUMENTED_DISPATCH, "fifo"):
        return dispatch
    kind, _, seed = dispatch.partition(":")
    if kind != "random" or not (0 < len(seed) <= 9 and all("0" <= c <= "9" for c in seed)):
        raise CeleritasInputError(f"unknown dispatch order {dispatch!r} "
                                  "(known: rank, fifo, random:N with N a non-negative integer)")
    return dispatch


def _other_order(graph: Graph, dispatch: str) -> np.ndarray:
    """The topological order named ``dispatch`` (other than the documented one)."""
    if check_dispatch(dispatch) == "fifo":
        return fifo_order(graph.succ_ptr, graph.succ_idx, graph.in_degree)
    seed = dispatch.partition(":")[2]
    keys = np.random.default_rng(int(seed)).random(graph.num_nodes)
    return keyed_order(graph.succ_ptr, graph.succ_idx, graph.in_degree, keys)


def simulate(graph: Graph, cluster: Cluster, assignment: np.ndarray, *,
             channels: bool = True, dispatch: str = DOCUMENTED_DISPATCH,
             device_order: Sequence[np.ndarray] | None = None) -> SimulationResult:
    """Replay ``assignment`` (device index per node) on ``cluster`` and return its timings (µs).

    ``channels=False`` drops channel contention: every transfer starts when its producer finishes
    (the delay model of the ``optimal`` placer's MILP and of classic list scheduling).
    ``dispatch`` names the topological order whose rank breaks ties between ready ops and
    between events at one instant (:func:`dispatch_order`; default the documented ``"rank"``).

    Parameters
    ----------
    graph : Graph
        The ops (µs at speed 1) and tensors (bytes).
    cluster : Cluster
        Device speeds and the transfer model ``k·bytes + b`` µs.
    assignment : array_like of int
        ``assignment[i]`` is the device index of node ``i``.
    channels : bool, optional
        True (default): each device has one send and one receive channel, one transfer at a time
        each; False: transfers never wait for each other.
    dispatch : str, optional
        ``"rank"`` (default), ``"fifo"`` or ``"random:N"`` (:func:`check_dispatch`).
    device_order : sequence of int arrays, optional
        The enforced order (docs/simulator.md, "Enforced order"): ``device_order[d]`` lists the
        node indices of device ``d`` in the order they must run (:func:`order_indices` checks
        one); an op then starts only after the op before it on its device has finished,
        whatever else is ready. None (default): the free order, ties broken by ``dispatch``.
        Replaying a placement with the order its own replay recorded (:func:`recorded_order`)
        gives that replay again, bit for bit.

    Returns
    -------
    SimulationResult
        The step time (the latest finish, µs), every op's start and finish (µs), each device's
        busy time (µs) and summed op memory (bytes), and every transfer: its tensor, devices,
        bytes, start and end (µs).

    Raises
    ------
    CeleritasInputError
        When ``assignment`` does not give one device of the cluster to every node, ``dispatch``
        names no order, or ``device_order`` lists a node twice, on another device than
        ``assignment``'s, misses one, or contradicts the graph's dependencies (a deadlock).

    See Also
    --------
    memory_profile : the memory of each device over this replay.
    place : places a graph and replays the placement.

    Notes
    -----
    The exact semantics (readiness, event order, transfers grouped per tensor and destination
    device, channel reservation) are in docs/simulator.md; the replay is deterministic.

    Examples
    --------
    >>> from celeritas_core import Cluster, Graph, simulate
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> cluster = Cluster.homogeneous(2, 1e9)   # a transfer of 1000 bytes: 1e-4 · 1000 + 25 µs
    >>> result = simulate(graph, cluster, [0, 0, 1, 1])
    >>> result.step_time_us, result.start_us.tolist(), result.finish_us.tolist()
    (95.1, [0.0, 10.0, 35.1, 85.1], [10.0, 60.0, 85.1, 95.1])
    >>> result.num_transfers, result.transfers.end_us.tolist()
    (2, [35.1, 85.1])
    >>> simulate(graph, cluster, [0, 0, 0, 0]).step_time_us   # one device: the sum of op times
    120.0

    The order the replay ran each device's ops, enforced, gives the same replay; another order
    that respects the dependencies gives its own:

    >>> order = recorded_order(result, [0, 0, 1, 1], 2)
    >>> [o.tolist() for o in order]
    [[0, 1], [2, 3]]
    >>> simulate(graph, cluster, [0, 0, 1, 1], device_order=order).step_time_us
    95.1
    >>> other = [np.array([0, 2, 1, 3]), np.array([])]
    >>> simulate(graph, cluster, [0, 0, 0, 0], device_order=other).step_time_us
    120.0

    Two outputs of ``a`` sent to two devices share ``a``'s send channel unless ``channels`` is off:

    >>> fan = Graph.from_arrays(name="fan", node_names=["a", "b", "c"], time_us=[10.0, 10.0, 10.0],
    ...                         memory_bytes=[1, 1, 1], edge_src=[0, 0], edge_dst=[1, 2],
    ...                         edge_bytes=[1e6, 1e6], edge_src_output=[0, 1])
    >>> three = Cluster.homogeneous(3, 1e9)
    >>> simulate(fan, three, [0, 1, 2]).step_time_us   # the second transfer waits for the first
    270.0
    >>> simulate(fan, three, [0, 1, 2], channels=False).step_time_us
    145.0
    """
    assign = _check_assignment(graph, cluster, assignment)
    n = graph.num_nodes
    num_dev = cluster.num_devices
    speed = np.asarray(cluster.speed, dtype=np.float64)
    dur = graph.time_us / speed[assign]
    groups = _transfer_groups(graph, cluster, assign)
    chain_next = np.full(n, -1, dtype=np.int64)
    if device_order is not None:
        chain_next = order_indices(graph, assign, num_dev, device_order)
    start, finish, t_start, t_end, sequence = _run_events(graph, assign, dur, groups, num_dev, channels,
                                                          dispatch, cluster.num_ports, chain_next)
    transfers = Transfers(
        src_node=groups.src,
        src_output=groups.output,
        src_device=assign[groups.src],
        dst_device=groups.dst_dev,
        bytes=groups.nbytes,
        start_us=t_start,
        end_us=t_end,
    )
    return SimulationResult(
        step_time_us=float(finish.max()) if n else 0.0,
        start_us=start,
        finish_us=finish,
        device_busy_us=np.bincount(assign, weights=dur, minlength=num_dev).astype(np.float64),
        device_memory_bytes=np.bincount(assign, weights=graph.memory_bytes, minlength=num_dev).astype(
            np.float64
        ),
        transfers=transfers,
        start_sequence=sequence,
    )


@dataclass(frozen=True)
class DispatchSpread:
    """One placement's simulated step (µs) under the documented dispatch order and under others.

    ``documented_us`` is the step under ``"rank"``; ``steps_us`` holds ``(name, step µs)`` for each
    other order, in the order they were replayed (:func:`dispatch_spread`). A placement whose
    predicted gain holds only under the documented tie-breaks shows a median above it.
    """

    documented_us: float
    steps_us: tuple[tuple[str, float], ...]

    @property
    def median_us(self) -> float:
        """Median step (µs) over the other orders."""
        return float(np.median([t for _, t in self.steps_us]))

    @property
    def min_us(self) -> float:
        """Fastest step (µs) over the other orders."""
        return min(t for _, t in self.steps_us)

    @property
    def max_us(self) -> float:
        """Slowest step (µs) over the other orders."""
        return max(t for _, t in self.steps_us)

    @property
    def ratio(self) -> float:
        """``median_us / documented_us`` (1.02: the other orders' median is 2 % slower); 1.0 when
        both are 0."""
        if self.documented_us == 0:
            return 1.0 if self.median_us == 0 else float("inf")
        return self.median_us / self.documented_us


def dispatch_spread(graph: Graph, cluster: Cluster, assignment: np.ndarray,
                    dispatches: Sequence[str] = ALTERNATIVE_DISPATCH, *,
                    documented_us: float | None = None, channels: bool = True,
                    device_order: Sequence[np.ndarray] | None = None) -> DispatchSpread:
    """Replay ``assignment`` under each order in ``dispatches`` and under the documented one.

    The runtime that executes a placement breaks ties between ready ops its own way, so a step
    that owes its speed to our tie-breaks will not be met; this measures how much it depends on
    them (docs/simulator.md, "Dispatch orders"). One replay per order: at a million ops about
    0.3 s under ``fifo`` and 0.45 s under a random order, plus building each order once per graph.

    Parameters
    ----------
    graph, cluster, assignment
        As for :func:`simulate` (``assignment[i]`` is node ``i``'s device index).
    dispatches
        The orders to replay (:func:`check_dispatch` names); at least one.
    documented_us
        The step (µs) under the documented order when the caller already has it: saves a replay.
    channels, device_order
        As for :func:`simulate`: with an enforced ``device_order`` the orders only break ties
        between events at one instant (which transfer takes a channel first).

    Returns
    -------
    DispatchSpread
        The documented step and each order's step (µs), in the order of ``dispatches``.

    Examples
    --------
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> g = small_training_graph(0)
    >>> spread = dispatch_spread(g, Cluster.homogeneous(1, 2**40), np.zeros(g.num_nodes, dtype=int))
    >>> round(spread.ratio, 12)  # one device: never idle, the same step up to float rounding
    1.0
    """
    if not dispatches:
        raise CeleritasInputError("no dispatch orders to replay")
    for name in dispatches:
        check_dispatch(name)
    if documented_us is None:
        documented_us = simulate(graph, cluster, assignment, channels=channels,
                                 device_order=device_order).step_time_us
    steps = tuple((name, simulate(graph, cluster, assignment, channels=channels, dispatch=name,
                                  device_order=device_order).step_time_us)
                  for name in dispatches)
    return DispatchSpread(float(documented_us), steps)


# ---------------------------------------------------------------------------- enforced order
def recorded_order(result: SimulationResult, assignment: np.ndarray,
                   num_devices: int) -> tuple[np.ndarray, ...]:
    """Each device's nodes in the order ``result``'s replay started them (its ``start_sequence``;
    a result without one: by start time, ties by node index).

    This is what ``place`` records in a placement (``device_order``, docs/formats.md) and what
    an enforced replay (:func:`simulate` with ``device_order``) and the runtime follow.

    Parameters
    ----------
    result : SimulationResult
        A replay of ``assignment``.
    assignment : array_like of int
        Node ``i``'s device index.
    num_devices : int
        The cluster's device count (devices without ops get an empty array).

    Returns
    -------
    tuple of numpy.ndarray
        ``order[d]``: the int64 node indices of device ``d``, first started first.

    Examples
    --------
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> from celeritas_core import Cluster
    >>> g = small_training_graph(0)
    >>> assign = np.arange(g.num_nodes) % 2
    >>> order = recorded_order(simulate(g, Cluster.homogeneous(2, 2**40), assign), assign, 2)
    >>> sum(len(o) for o in order) == g.num_nodes, bool((assign[order[1]] == 1).all())
    (True, True)
    """
    assign = np.asarray(assignment, dtype=np.int64)
    if result.start_sequence is not None:
        by_start = np.lexsort((result.start_sequence, assign))
    else:
        by_start = np.lexsort((np.arange(len(assign)), result.start_us, assign))
    bounds = np.searchsorted(assign[by_start], np.arange(num_devices + 1))
    return tuple(by_start[bounds[d]:bounds[d + 1]].astype(np.int64) for d in range(num_devices))


def order_indices(graph: Graph, assignment: np.ndarray, num_devices: int,
                  device_order: Sequence[np.ndarray]) -> np.ndarray:
    """Check an enforced order against ``assignment`` and return each node's successor on its
    device (-1: the last), the form the event loop takes.

    ``device_order[d]`` must list exactly the nodes that ``assignment`` puts on device ``d``, each
    once, and with the graph's edges it must hold no cycle (Kahn's algorithm on both: an order
    that would deadlock the replay is refused naming the op that would wait for its input).

    Raises
    ------
    CeleritasInputError
        One line naming the first node listed twice, on the wrong device or not at all, or the
        op that would wait for an input its device's order puts after it.

    Examples
    --------
    >>> from celeritas_core import Graph
    >>> g = Graph.from_arrays(name="pair", node_names=["a", "b"], time_us=[1.0, 1.0], memory_bytes=[0, 0],
    ...                       edge_src=[0], edge_dst=[1], edge_bytes=[8])
    >>> order_indices(g, np.array([0, 0]), 1, [np.array([0, 1])]).tolist()
    [1, -1]
    >>> order_indices(g, np.array([0, 1]), 2, [np.array([0, 1]), np.array([], dtype=int)])
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: device_order: op 'b' is listed on device 0, assigned to 1
    """
    n = graph.num_nodes
    if len(device_order) != num_devices:
        raise CeleritasInputError(f"device_order has {len(device_order)} entries for {num_devices} devices")
    chain_next = np.full(n, -1, dtype=np.int64)
    seen = np.zeros(n, dtype=np.int64)
    for d, ops in enumerate(device_order):
        ops = np.asarray(ops, dtype=np.int64).reshape(-1)
        if len(ops) and (ops.min() < 0 or ops.max() >= n):
            bad = int(ops[(ops < 0) | (ops >= n)][0])
            raise CeleritasInputError(f"device_order[{d}] names node index {bad}, but graph {graph.name!r} "
                                      f"has {n} nodes")
        np.add.at(seen, ops, 1)
        wrong = np.flatnonzero(assignment[ops] != d)
        if len(wrong):
            u = int(ops[wrong[0]])
            raise CeleritasInputError(f"device_order: op {graph.node_names[u]!r} is listed on device {d}, "
                                      f"assigned to {int(assignment[u])}")
        chain_next[ops[:-1]] = ops[1:]
    twice = np.flatnonzero(seen > 1)
    if len(twice):
        raise CeleritasInputError(f"device_order: op {graph.node_names[int(twice[0])]!r} is listed twice")
    missing = np.flatnonzero(seen == 0)
    if len(missing):
        raise CeleritasInputError(f"device_order: op {graph.node_names[int(missing[0])]!r} is not listed "
                                  f"({len(missing)} ops missing)")
    _check_order_dependencies(graph, assignment, chain_next)
    return chain_next


def _check_order_dependencies(graph: Graph, assignment: np.ndarray, chain_next: np.ndarray) -> None:
    """Raise when the graph's edges and the order's chains together hold a cycle (the enforced
    replay would deadlock): Kahn's algorithm on both, O(nodes + edges)."""
    n = graph.num_nodes
    has_next = chain_next >= 0
    out_degree = np.diff(graph.succ_ptr)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(out_degree + has_next, out=ptr[1:])
    successors = np.empty(ptr[-1], dtype=np.int64)
    owner = np.repeat(np.arange(n), out_degree)
    successors[ptr[owner] + np.arange(len(owner)) - graph.succ_ptr[owner]] = graph.succ_idx
    successors[ptr[1:][has_next] - 1] = chain_next[has_next]
    in_degree = graph.in_degree + np.bincount(chain_next[has_next], minlength=n)
    reached = fifo_order(ptr, successors, in_degree)
    if len(reached) < n:
        ran = np.zeros(n, dtype=bool)
        ran[reached] = True
        raise CeleritasInputError(_deadlock_message(graph, assignment, chain_next, ran))


def _deadlock_message(graph: Graph, assign: np.ndarray, chain_next: np.ndarray, ran: np.ndarray) -> str:
    """The one line for an enforced order that contradicts the dependencies (``ran``: the ops
    that can run before the deadlock): the first device whose next op waits for an input that
    its own device, or another stuck device, runs later."""
    prev = np.full(graph.num_nodes, -1, dtype=np.int64)
    has_next = chain_next >= 0
    prev[chain_next[has_next]] = np.flatnonzero(has_next)
    # a stuck device's head: not run, and its predecessor on the device (if any) ran
    heads = [int(v) for v in np.flatnonzero(~ran) if prev[v] < 0 or ran[prev[v]]]
    names = graph.node_names
    for head in heads:
        inputs = graph.edge_src[graph.edge_dst == head]
        waiting = [int(w) for w in inputs if not ran[w]]
        if not waiting:
            continue
        w, d = waiting[0], int(assign[head])
        if assign[w] == d:
            return (f"device_order contradicts the graph's dependencies: device {d} runs {names[head]!r} "
                    f"before its input {names[w]!r}")
        return (f"device_order contradicts the graph's dependencies: {names[head]!r} (next on device {d}) "
                f"waits for its input {names[w]!r}, which the order of device {int(assign[w])} holds back")
    return "device_order contradicts the graph's dependencies (the enforced replay deadlocks)"


# ---------------------------------------------------------------------------- input checks
def _check_assignment(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> np.ndarray:
    """Return ``assignment`` as an int64 vector, or raise CeleritasInputError (one line)."""
    arr = np.asarray(assignment)
    n = graph.num_nodes
    if arr.ndim != 1:
        raise CeleritasInputError(f"assignment must be a 1-D array of device indices, got shape {arr.shape}")
    if len(arr) != n:
        raise CeleritasInputError(f"assignment has {len(arr)} entries but graph {graph.name!r} has {n} nodes")
    integral = arr.dtype.kind in "iu" or (
        arr.dtype.kind == "f" and bool(np.all(np.isfinite(arr))) and bool(np.all(arr == np.round(arr)))
    )
    if not integral:
        raise CeleritasInputError("assignment must hold integer device indices")
    out = arr.astype(np.int64)
    bad = np.flatnonzero((out < 0) | (out >= cluster.num_devices))
    if len(bad):
        i = int(bad[0])
        raise CeleritasInputError(
            f"assignment: node {graph.node_names[i]!r} is on device {int(out[i])}, "
            f"but the cluster has devices 0..{cluster.num_devices - 1}"
        )
    return out


# ---------------------------------------------------------------------------- transfer groups
@dataclass(frozen=True, eq=False)
class _Groups:
    """Distinct cross-device tensors, sorted by (src node, dst device, src_output)."""

    src: np.ndarray  # producer node of each group
    output: np.ndarray  # src_output of each group
    dst_dev: np.ndarray  # destination device of each group
    nbytes: np.ndarray  # max bytes over the group's edges
    comm_us: np.ndarray  # k·bytes + b (µs) of the link between the two devices
    ptr: np.ndarray  # node u's groups are ptr[u]:ptr[u+1]
    edge_group: np.ndarray  # group id of each edge, -1 for same-device edges
    egress: np.ndarray  # shared port side held leaving the source's node or island, -1: none
    ingress: np.ndarray  # shared port side held entering the destination's, -1: none


def _transfer_groups(graph: Graph, cluster: Cluster, assign: np.ndarray) -> _Groups:
    """Group cross-device edges into transfers keyed by (src node, dst device, src_output), vectorised.

    Each edge's tensor comes from :attr:`Graph.tensors`; the sort key is (src node, dst device,
    the tensor's rank among its producer's outputs), which fits in int64 for any output ids.
    """
    n = graph.num_nodes
    src, dst = graph.edge_src, graph.edge_dst
    edge_group = np.full(len(src), -1, dtype=np.int64)
    cross = np.flatnonzero(assign[src] != assign[dst])
    if len(cross) == 0:
        empty_i = np.zeros(0, dtype=np.int64)
        empty_f = np.zeros(0, dtype=np.float64)
        return _Groups(empty_i, empty_i, empty_i, empty_f, empty_f, np.zeros(n + 1, dtype=np.int64),
                       edge_group, empty_i, empty_i)
    view = graph.tensors
    num_dev = cluster.num_devices
    width = view.max_per_producer
    src_dev = src[cross] * num_dev + assign[dst[cross]]
    local = view.local_index[view.edge_tensor[cross]]
    if n * num_dev * width < _KEY_LIMIT:
        uniq, inverse = np.unique(src_dev * width + local, return_inverse=True)
        g_src_dev = uniq // width
    else:  # dense rank of (src node, dst device) first, so the key still fits
        pairs, pair_rank = np.unique(src_dev, return_inverse=True)
        uniq, inverse = np.unique(pair_rank * width + local, return_inverse=True)
        g_src_dev = pairs[uniq // width]
    edge_group[cross] = inverse
    nbytes = np.zeros(len(uniq), dtype=np.float64)
    np.maximum.at(nbytes, inverse, graph.edge_bytes[cross])
    g_dev = g_src_dev % num_dev
    g_src = g_src_dev // num_dev
    g_out = view.output[view.producer_ptr[g_src] + uniq % width]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(g_src, minlength=n), out=ptr[1:])
    if cluster.is_flat:  # the paper's model, computed as it always was: flat replays stay bit for bit
        comm = np.asarray(cluster.comm_time_us(nbytes), dtype=np.float64)
        none = np.full(len(uniq), -1, dtype=np.int64)
        return _Groups(g_src, g_out, g_dev, nbytes, comm, ptr, edge_group, none, none)
    s_dev = assign[g_src]
    comm = np.asarray(cluster.transfer_time_us(nbytes, s_dev, g_dev), dtype=np.float64)
    return _Groups(g_src, g_out, g_dev, nbytes, comm, ptr, edge_group, cluster.pair_egress[s_dev, g_dev],
                   cluster.pair_ingress[s_dev, g_dev])


# ---------------------------------------------------------------------------- event loop
def _run_events(
    graph: Graph, assign: np.ndarray, dur: np.ndarray, groups: _Groups, num_dev: int,
    channels: bool = True, dispatch: str = DOCUMENTED_DISPATCH, num_ports: int = 0,
    chain_next: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Run the event loop with the ``dispatch`` order (:func:`dispatch_order`), ``num_ports``
    shared port sides and the enforced order ``chain_next`` (each node's successor on its device,
    -1: none; None: the free order); return op start, op finish, transfer start, transfer end (µs)
    and the order the ops started in. ``chain_next`` comes from :func:`order_indices`, which has
    checked that it cannot deadlock against the dependencies."""
    order, rank = dispatch_order(graph, dispatch)
    n = graph.num_nodes
    if chain_next is None:
        chain_next = np.full(n, -1, dtype=np.int64)
    pending = graph.in_degree.astype(np.int64, copy=True)
    pending += np.bincount(chain_next[chain_next >= 0], minlength=n)
    return _replay(
        order, rank, assign, dur, pending, graph.succ_ptr, graph.succ_idx,
        groups.edge_group[graph.succ_edge], groups.ptr, groups.dst_dev, groups.comm_us, groups.egress,
        groups.ingress, chain_next, num_dev, num_ports, channels)


@jit
def _replay(order: np.ndarray, rank: np.ndarray, dev: np.ndarray, dur: np.ndarray, pending: np.ndarray,
            succ_ptr: np.ndarray, succ_idx: np.ndarray, slot_group: np.ndarray, g_ptr: np.ndarray,
            g_dst: np.ndarray, g_comm: np.ndarray, g_egress: np.ndarray, g_ingress: np.ndarray,
            chain_next: np.ndarray, num_dev: int, num_ports: int,
            channels: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The event loop: returns op start, op finish, transfer start, transfer end (µs) and each op's
    place in the order ops started.

    Node ``u`` runs on device ``dev[u]`` for ``dur[u]`` µs; its successors are
    ``succ_idx[succ_ptr[u]:succ_ptr[u + 1]]``, each reached through transfer ``slot_group[k]``
    (-1: same device), and, in an enforced order, ``chain_next[u]`` (-1: none), the op after it on
    its device, which waits for ``u`` to finish; ``pending[v]`` counts what ``v`` waits for (its
    inputs and its predecessor on its device; consumed). Its transfers are
    ``g_ptr[u]:g_ptr[u + 1]``, to device ``g_dst`` lasting
    ``g_comm`` µs and holding the shared port sides ``g_egress``, ``g_ingress`` (ids below
    ``num_ports``, -1: none). Queues and events hold topological ranks (``order[r]`` is the node of rank
    ``r``). Time by time: phase 1 pops every event at the current time (finishes first, then by
    rank: event key ``kind * n + r``) and queues the ops that became ready; phase 2 starts, on
    every device touched in phase 1 that is idle, its queued op with the smallest (ready time, rank).
    """
    n = len(order)
    start, finish = np.zeros(n), np.zeros(n)
    sequence = np.full(n, -1, dtype=np.int64)
    g_start, g_end = np.zeros(len(g_comm)), np.zeros(len(g_comm))
    ready_at = np.zeros(n)
    send_free, recv_free, port_free = np.zeros(num_dev), np.zeros(num_dev), np.zeros(num_ports)
    busy = np.zeros(num_dev, dtype=np.bool_)
    touched, stamp = np.zeros(num_dev, dtype=np.int64), np.full(num_dev, -1, dtype=np.int64)
    heap_t, heap_k, base, size = _new_heaps(dev, num_dev)
    events = num_dev  # heaps 0..num_dev-1 are the device queues
    num_touched, step, now, started = 0, 0, 0.0, 0
    for r in range(n):  # phase 1 at time 0: the sources are ready (queued in order: no sifting)
        d = dev[order[r]]
        if pending[order[r]] == 0:
            _heap_push(heap_t, heap_k, base, size, d, 0.0, r)
            num_touched = _touch(touched, num_touched, stamp, step, d)
    while True:
        started = _dispatch(now, touched, num_touched, busy, order, dur, start, finish, sequence, started,
                            heap_t, heap_k, base, size)
        if size[events] == 0:
            return start, finish, g_start, g_end, sequence
        now, num_touched, step = heap_t[base[events]], 0, step + 1
        while size[events] > 0 and heap_t[base[events]] == now:  # phase 1
            key = _heap_pop(heap_t, heap_k, base, size, events)
            r = key - n if key >= n else key
            u = order[r]
            d = dev[u]
            num_touched = _touch(touched, num_touched, stamp, step, d)
            if key >= n:  # a ready event: queue the op on its device
                _heap_push(heap_t, heap_k, base, size, d, now, r)
                continue
            busy[d] = False
            _reserve_transfers(d, now, g_ptr[u], g_ptr[u + 1], g_dst, g_comm, g_egress, g_ingress, g_start,
                               g_end, send_free, recv_free, port_free, channels)
            for k in range(succ_ptr[u], succ_ptr[u + 1]):
                avail = now if slot_group[k] < 0 else g_end[slot_group[k]]
                num_touched = _release(succ_idx[k], avail, now, n, rank, dev, ready_at, pending, touched,
                                       num_touched, stamp, step, heap_t, heap_k, base, size)
            if chain_next[u] >= 0:  # the next op of u's device in an enforced order
                num_touched = _release(chain_next[u], now, now, n, rank, dev, ready_at, pending, touched,
                                       num_touched, stamp, step, heap_t, heap_k, base, size)


@jit
def _release(v: int, avail: float, now: float, n: int, rank: np.ndarray, dev: np.ndarray,
             ready_at: np.ndarray, pending: np.ndarray, touched: np.ndarray, num_touched: int,
             stamp: np.ndarray, step: int, heap_t: np.ndarray, heap_k: np.ndarray, base: np.ndarray,
             size: np.ndarray) -> int:
    """One thing node ``v`` waits for is available at ``avail`` µs (now ``now``): when it was the
    last, queue ``v`` on its device (ready at once) or schedule its ready event; new touched count."""
    if avail > ready_at[v]:
        ready_at[v] = avail
    pending[v] -= 1
    if pending[v] > 0:
        return num_touched
    if ready_at[v] == now:  # ready at once: straight to its device's queue
        _heap_push(heap_t, heap_k, base, size, dev[v], now, rank[v])
        return _touch(touched, num_touched, stamp, step, dev[v])
    _heap_push(heap_t, heap_k, base, size, len(size) - 1, ready_at[v], _READY * n + rank[v])
    return num_touched


@jit
def _dispatch(now: float, touched: np.ndarray, num_touched: int, busy: np.ndarray, order: np.ndarray,
              dur: np.ndarray, start: np.ndarray, finish: np.ndarray, sequence: np.ndarray, started: int,
              heap_t: np.ndarray, heap_k: np.ndarray, base: np.ndarray, size: np.ndarray) -> int:
    """Phase 2 at ``now`` µs: each device of ``touched[:num_touched]`` that is idle starts the op of
    smallest (ready time, rank) in its queue, for ``dur`` µs, numbered ``started``, ``started + 1``,
    … in ``sequence``; its finish becomes an event (last heap). Returns the ops started so far."""
    events, n = len(size) - 1, len(order)
    for d in touched[:num_touched]:
        if not busy[d] and size[d] > 0:
            r = _heap_pop(heap_t, heap_k, base, size, d)
            u = order[r]
            busy[d] = True
            start[u] = now
            finish[u] = now + dur[u]
            sequence[u] = started
            started += 1
            _heap_push(heap_t, heap_k, base, size, events, finish[u], _FINISH * n + r)
    return started


@jit
def _reserve_transfers(d: int, now: float, lo: int, hi: int, g_dst: np.ndarray, g_comm: np.ndarray,
                       g_egress: np.ndarray, g_ingress: np.ndarray, g_start: np.ndarray, g_end: np.ndarray,
                       send_free: np.ndarray, recv_free: np.ndarray, port_free: np.ndarray,
                       channels: bool) -> None:
    """Reserve transfers ``lo:hi`` (from device ``d``, whose producer finished at ``now`` µs)
    greedily, in order: each starts once, with ``channels``, the send channel of ``d``, the
    receive channel of its destination and its shared port sides (if any) are free, and holds
    them all until it ends."""
    for g in range(lo, hi):
        q = g_dst[g]
        out_port, in_port = g_egress[g], g_ingress[g]
        s = now
        if channels:
            if send_free[d] > s:
                s = send_free[d]
            if recv_free[q] > s:
                s = recv_free[q]
            if out_port >= 0 and port_free[out_port] > s:
                s = port_free[out_port]
            if in_port >= 0 and port_free[in_port] > s:
                s = port_free[in_port]
        e = s + g_comm[g]
        g_start[g] = s
        g_end[g] = e
        if channels:
            send_free[d] = e
            recv_free[q] = e
            if out_port >= 0:
                port_free[out_port] = e
            if in_port >= 0:
                port_free[in_port] = e


@jit
def _touch(touched: np.ndarray, count: int, stamp: np.ndarray, step: int, d: int) -> int:
    """Add device ``d`` to ``touched[:count]`` unless it is there already this ``step``; new count."""
    if stamp[d] == step:
        return count
    stamp[d] = step
    touched[count] = d
    return count + 1


# ---------------------------------------------------------------------------- binary heaps
# Min-heaps of (time µs, int64 key) pairs, several in one pair of arrays: heap ``h`` is
# ``heap_t/heap_k[base[h]:base[h] + size[h]]``. Keys are unique within a heap, so the order is
# total and any correct heap pops the same sequence as Python's ``heapq`` on ``(time, key)``.
@jit
def _new_heaps(dev: np.ndarray, num_dev: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Empty heaps: one per device with room for its ops, then one with room for two events per
    op (a ready and a finish). Returns ``heap_t, heap_k, base, size``."""
    base = np.zeros(num_dev + 2, dtype=np.int64)
    for u in range(len(dev)):
        base[dev[u] + 1] += 1
    base[num_dev + 1] = 2 * len(dev)
    base = np.cumsum(base)
    return np.empty(base[-1]), np.empty(base[-1], dtype=np.int64), base, np.zeros(num_dev + 1, dtype=np.int64)


@jit
def _heap_push(heap_t: np.ndarray, heap_k: np.ndarray, base: np.ndarray, size: np.ndarray, h: int,
               t: float, key: int) -> None:
    """Insert ``(t, key)`` into heap ``h`` (sifting up)."""
    b, pos = base[h], size[h]
    size[h] = pos + 1
    while pos > 0:
        parent = (pos - 1) >> 1
        if heap_t[b + parent] < t or (heap_t[b + parent] == t and heap_k[b + parent] < key):
            break
        heap_t[b + pos], heap_k[b + pos] = heap_t[b + parent], heap_k[b + parent]
        pos = parent
    heap_t[b + pos], heap_k[b + pos] = t, key


@jit
def _heap_pop(heap_t: np.ndarray, heap_k: np.ndarray, base: np.ndarray, size: np.ndarray, h: int) -> int:
    """Remove the smallest ``(t, key)`` of the non-empty heap ``h`` and return its key (the last
    entry sifts down from the root)."""
    b = base[h]
    top = heap_k[b]
    last = size[h] - 1
    size[h] = last
    t, key = heap_t[b + last], heap_k[b + last]
    pos = 0
    while 2 * pos + 1 < last:
        child = 2 * pos + 1
        right = child + 1
        if right < last and (heap_t[b + right] < heap_t[b + child] or (
                heap_t[b + right] == heap_t[b + child] and heap_k[b + right] < heap_k[b + child])):
            child = right
        if t < heap_t[b + child] or (t == heap_t[b + child] and key < heap_k[b + child]):
            break
        heap_t[b + pos], heap_k[b + pos] = heap_t[b + child], heap_k[b + child]
        pos = child
    heap_t[b + pos], heap_k[b + pos] = t, key
    return top
