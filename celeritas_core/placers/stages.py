"""Pipeline-stage placements: a training step cut into K contiguous stages, one per device.

A model too large for one device is most often split the way pipeline-parallel training splits it:
the layers in forward order are cut into K contiguous *stages*, and every backward and optimizer op
goes with the forward layer it differentiates or updates, so each activation kept for the
backward pass stays on the device that made it and only the tensors at the K − 1 cuts cross
devices. What decides whether such a split fits is the liveness-aware peak of each stage, not its
summed bytes: the first stages hold their activations longest.

1. **Pipeline order** (:func:`pipeline_sequences`). Placement units (co-location groups contracted,
   :func:`~celeritas_core.graphs.colocation.placement_units`) are ordered by a *layer coordinate* derived
   from the graph's structure alone (no op names): the *turning point*
   (:func:`~celeritas_core.graphs.paths.turning_point`, the loss of a training step) splits the ops; the
   forward ops are its ancestors, each at its as-late-as-possible position before it
   (so a variable read sits with the layer that uses it). Every other op takes the latest forward
   position among the computed (not source) forward tensors it reads, the activation whose
   gradient it computes; without one, the earliest position among its backward inputs (the
   gradient it refines); a co-location group takes its members' latest. A graph without such pairs
   (no forward tensor read after the turning point: inference) gets no paired order. A second
   order is the plain topological one (an inference pipeline).
2. **Stage memory** (:class:`~celeritas_core.simulation.live_estimate.SequenceMemory`). The graph is
   replayed once on one device and every buffer is split among the ops that keep it live
   (:func:`~celeritas_core.simulation.memory.owned_intervals`); a stage's estimated peak is the peak over time
   of the sum of its units' pieces plus their persistent bytes. Sliding a window along the
   pipeline order with a segment tree over time gives, for every start, the longest run of units
   whose estimated peak fits a device: O((ops + edges) log ops) per device capacity.
3. **Cuts** (:func:`split`): a dynamic program over the positions picks the K − 1 cuts that
   minimise the summed transfer time (µs) of the tensors spanning each cut, every stage fitting its
   device (Kernighan's sequential partition with a memory window; PipeDream's and Alpa's stage
   programs balance time instead, which matters for pipelined micro-batches, not for one step).
   Where no split fits, the capacities are scaled up by the least factor that admits one
   (best effort; the caller repairs). Received copies are not in the estimate, so each stage is
   replayed, and a stage whose replayed peak exceeds its device may hold at most its current
   estimate times capacity / replayed peak when the cuts are chosen again (:func:`offer_split`).

References: B. W. Kernighan, "Optimal sequential partitions of graphs", JACM 18(1), 1971;
D. Narayanan et al., "PipeDream: generalized pipeline parallelism for DNN training", SOSP 2019;
L. Zheng et al., "Alpa: automating inter- and intra-operator parallelism", OSDI 2022. Units: µs
and bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from celeritas_core.compiled.jit import jit
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import placement_units
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.paths import ancestors, turning_point
from celeritas_core.placers.base import NoParams, PlacerOutput, PlacerSpec, register_placer
from celeritas_core.placers.local_search import CandidatePool
from celeritas_core.placers.partition import topology_permutation
from celeritas_core.simulation.live_estimate import SequenceMemory
from celeritas_core.simulation.memory import memory_profile
from celeritas_core.simulation.simulator import simulate

#: Rounds of "replay, lower the capacity of the stages that overflowed, cut again" per K.
CALIBRATION_ROUNDS = 6
#: Estimated cost of one order's split onto one device count (its cut search and up to six
#: replays with their memory profiles), in µs per op plus edge: 0.1-1.3 measured on one core of
#: the 2-core build machine on the real Keras training steps (4-25k ops) and the 36k-op synthetic
#: one, with room for every calibration round.
STAGE_US_PER_SPLIT = 3.0


# ---------------------------------------------------------------------------- pipeline order
@dataclass(frozen=True, eq=False)
class UnitSequence:
    """Placement units in pipeline order: ``sequence`` lists unit ids, ``position`` inverts it;
    ``key`` (per unit) is what they were sorted by (the layer coordinate of the ``paired`` order)."""

    name: str
    unit_of: np.ndarray
    sequence: np.ndarray
    position: np.ndarray
    key: np.ndarray | None = None

    @classmethod
    def by_key(cls, name: str, unit_of: np.ndarray, unit_key: np.ndarray, tie: np.ndarray) -> UnitSequence:
        """Units sorted by ``unit_key``, then ``tie``."""
        sequence = np.lexsort((tie, unit_key)).astype(np.int64)
        position = np.empty(len(sequence), dtype=np.int64)
        position[sequence] = np.arange(len(sequence))
        return cls(name, unit_of, sequence, position, np.asarray(unit_key))

    @property
    def num_units(self) -> int:
        """Number of units."""
        return len(self.sequence)

    def assignment(self, cuts: np.ndarray, devices: np.ndarray) -> np.ndarray:
        """Device per op when positions ``[cuts[k-1], cuts[k])`` go to ``devices[k]``."""
        stage = np.searchsorted(cuts, self.position, side="right")
        return devices[stage][self.unit_of]


def pipeline_sequences(graph: Graph, *, constants_with_readers: bool = False) -> list[UnitSequence]:
    """The orders stages are cut along: ``paired`` (forward layers with their gradients, when the
    graph is a training step) and ``topo`` (topological order). See the module docstring;
    ``constants_with_readers`` as for :func:`layer_coordinate`.

    Examples
    --------
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> [s.name for s in pipeline_sequences(small_training_graph(0))]
    ['paired', 'topo']
    """
    key = ("pipeline_sequences", constants_with_readers)  # structure only: shared by cost copies
    memo = graph.structure_memo
    if key not in memo:
        memo[key] = tuple(_pipeline_sequences(graph, constants_with_readers))
    return list(memo[key])


def _pipeline_sequences(graph: Graph, constants_with_readers: bool) -> list[UnitSequence]:
    """:func:`pipeline_sequences`, computed."""
    unit_of = placement_units(graph)
    num_units = int(unit_of.max(initial=-1)) + 1
    first_rank = np.full(num_units, graph.num_nodes, dtype=np.int64)
    np.minimum.at(first_rank, unit_of, graph.topological_rank)
    out = []
    coordinate = layer_coordinate(graph, constants_with_readers=constants_with_readers)
    if coordinate is not None:
        unit_x = np.full(num_units, -1.0)
        np.maximum.at(unit_x, unit_of, coordinate)
        out.append(UnitSequence.by_key("paired", unit_of, unit_x, first_rank))
    out.append(UnitSequence.by_key("topo", unit_of, first_rank, np.arange(num_units)))
    return out


def layer_coordinate(graph: Graph, *, constants_with_readers: bool = False) -> np.ndarray | None:
    """Per op, the forward position (ops before the turning point, as late as possible) it belongs
    to; -1 where nothing says. None when no forward tensor is read after the turning point (not a
    training step).

    With ``constants_with_readers``, an op that only the backward reads and that has no input of
    its own (a gradient's shape or scale constant) takes the coordinate of its first reader instead
    of -1 (before the first layer). The pipelined stage planners ask for it: at -1 such constants
    sit on the first stage, and a split sends each to its reader's stage (745 of them in
    MobileNetV3's even split), which a pipelined step pays at its start. The single-batch stage
    splits (the ``stages`` placer, Celeritas's stage candidates) keep -1: with the new coordinates
    their cut search gave mixed results on the real-model benchmark (better on 9 instances, worse
    on 6, the transformer encoder on 2 devices at 45 % 113 -> 207 ms), so they change only with a
    cut search that gains everywhere."""
    if graph.num_nodes < 3 or graph.num_edges == 0:
        return None
    turn = turning_point(graph)
    forward = ancestors(turn, graph.pred_ptr, graph.pred_idx)
    forward[turn] = True
    read_later = forward[graph.edge_src] & ~forward[graph.edge_dst] & (graph.edge_src != turn)
    if not read_later.any():
        return None
    return _coordinates(graph.topological_order, turn, forward, graph.in_degree, graph.succ_ptr,
                        graph.succ_idx, graph.pred_ptr, graph.pred_idx, constants_with_readers)


@jit
def _coordinates(order: np.ndarray, turn: int, forward: np.ndarray, in_degree: np.ndarray,
                 succ_ptr: np.ndarray, succ_idx: np.ndarray, pred_ptr: np.ndarray,
                 pred_idx: np.ndarray, constants_with_readers: bool) -> np.ndarray:
    """Forward ops: their latest position before ``turn`` (longest path to it, counted back);
    other ops: the latest computed forward input, else the earliest backward input, else (with
    ``constants_with_readers``: a constant read only by the backward) the earliest of their
    readers; -1 if none."""
    n = len(order)
    dist = np.zeros(n)
    for j in range(n - 1, -1, -1):
        u = order[j]
        if forward[u] and u != turn:
            best = 0.0
            for k in range(succ_ptr[u], succ_ptr[u + 1]):
                s = succ_idx[k]
                if forward[s] and dist[s] + 1.0 > best:
                    best = dist[s] + 1.0
            dist[u] = best
    top = dist.max()
    x = np.full(n, -1.0)
    for j in range(n):
        u = order[j]
        if forward[u]:
            x[u] = top - dist[u]
            continue
        latest_forward, earliest_backward = -1.0, np.inf
        for k in range(pred_ptr[u], pred_ptr[u + 1]):
            w = pred_idx[k]
            if forward[w]:
                if in_degree[w] > 0 and x[w] > latest_forward:
                    latest_forward = x[w]
            elif 0.0 <= x[w] < earliest_backward:
                earliest_backward = x[w]
        if latest_forward >= 0.0:
            x[u] = latest_forward
        elif earliest_backward < np.inf:
            x[u] = earliest_backward
    if not constants_with_readers:
        return x
    for j in range(n - 1, -1, -1):  # the backward's constants: their first reader's coordinate
        u = order[j]
        if x[u] >= 0.0:
            continue
        for k in range(succ_ptr[u], succ_ptr[u + 1]):
            s = succ_idx[k]
            if x[s] >= 0.0 and (x[u] < 0.0 or x[s] < x[u]):
                x[u] = x[s]
    return x


# ---------------------------------------------------------------------------- cuts
def boundary_costs(graph: Graph, cluster: Cluster, seq: UnitSequence) -> np.ndarray:
    """``cost[c]``: transfer time (µs) of the tensors whose producer and consumers span the cut
    before position ``c`` (``c`` = 0..units; the ends cost 0), under the flat model."""
    return _spanning(graph, seq, np.asarray(cluster.comm_time_us(graph.tensors.nbytes), dtype=np.float64))


def boundary_traffic(graph: Graph, seq: UnitSequence) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes[c], tensors[c])``: the bytes and the number of the tensors spanning the cut before
    position ``c``, so that the cut costs ``k·bytes[c] + b·tensors[c]`` µs on a link ``(k, b)``."""
    view = graph.tensors
    return (_spanning(graph, seq, view.nbytes.astype(np.float64)),
            _spanning(graph, seq, np.ones(view.num_tensors)))


def link_cut_us(cluster: Cluster, devices: np.ndarray, nbytes: np.ndarray, tensors: np.ndarray) -> np.ndarray:
    """``K × len(nbytes)``: each cut (``nbytes[c]`` bytes in ``tensors[c]`` tensors, as
    :func:`boundary_traffic` gives them) priced ``k·bytes + b·tensors`` µs on the link from
    ``devices[k − 1]`` to ``devices[k]``, the boundary before stage ``k`` (row 0 zero)."""
    out = np.zeros((len(devices), len(nbytes)))
    if cluster.is_flat:
        out[1:] = cluster.slope_us_per_byte * nbytes + cluster.intercept_us * tensors
        return out
    for k in range(1, len(devices)):
        a, b = int(devices[k - 1]), int(devices[k])
        out[k] = cluster.pair_slope_us_per_byte[a, b] * nbytes + cluster.pair_intercept_us[a, b] * tensors
    return out


def _spanning(graph: Graph, seq: UnitSequence, weight: np.ndarray) -> np.ndarray:
    """Per cut position ``c`` = 0..units, the summed ``weight`` of the tensors whose producer and
    consumers lie on both sides of it."""
    tensors = graph.tensors
    lo = seq.position[seq.unit_of[tensors.producer]].copy()
    hi = lo.copy()
    at_consumer = seq.position[seq.unit_of[graph.edge_dst]]
    np.minimum.at(lo, tensors.edge_tensor, at_consumer)
    np.maximum.at(hi, tensors.edge_tensor, at_consumer)
    diff = np.zeros(seq.num_units + 2)
    np.add.at(diff, lo + 1, weight)
    np.add.at(diff, hi + 1, -weight)
    return np.cumsum(diff)[:seq.num_units + 1]


def split(ends: np.ndarray, cost: np.ndarray) -> np.ndarray | None:
    """The cuts ``0 < c_1 < … < c_{K-1} < units`` minimising ``Σ cost[c_k]`` such that stage ``k``
    (positions ``c_k..c_{k+1}-1``) ends by ``ends[k, c_k]``; None when no split fits.

    ``ends`` is K × units (:meth:`~celeritas_core.simulation.live_estimate.SequenceMemory.window_ends` for
    stage k's device), ``cost`` has units + 1 entries (:func:`boundary_costs`), or is K × (units
    + 1) when the cut before stage ``k`` costs ``cost[k, c]`` (the link between stages ``k − 1``
    and ``k``; row 0 unused).

    Examples
    --------
    >>> ends = np.array([[2, 3, 4, 4]] * 3)   # a stage starting at unit c ends by c + 2 (4 units)
    >>> split(ends, np.array([0.0, 5.0, 1.0, 2.0, 0.0])).tolist()
    [2, 3]
    >>> split(np.array([[2, 2, 3, 4]] * 2), np.zeros(5)) is None   # from unit 1 or 2, not to 4
    True
    """
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    cost = np.asarray(cost, dtype=np.float64)
    per_stage = np.ascontiguousarray(np.broadcast_to(cost, (ends.shape[0], ends.shape[1] + 1)))
    cuts = _split(ends, per_stage)
    return None if len(cuts) and cuts[0] < 0 else cuts


@jit
def _split(ends: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """:func:`split` by a sliding-window minimum per stage: O(K · units); ``cost`` is K × (units + 1)."""
    stages, units = ends.shape
    best = np.full(units + 1, np.inf)
    for c in range(1, ends[0, 0] + 1):
        best[c] = 0.0
    parent = np.full((stages, units + 1), -1, dtype=np.int64)
    window = np.empty(units + 1, dtype=np.int64)
    for k in range(1, stages):
        current = np.full(units + 1, np.inf)
        head, tail = 0, 0
        for c in range(1, units + 1):
            a = c - 1
            if best[a] < np.inf:
                value = best[a] + cost[k, a]
                while tail > head and best[window[tail - 1]] + cost[k, window[tail - 1]] >= value:
                    tail -= 1
                window[tail] = a
                tail += 1
            while tail > head and ends[k, window[head]] < c:
                head += 1
            if tail > head:
                current[c] = best[window[head]] + cost[k, window[head]]
                parent[k, c] = window[head]
        best = current
    if best[units] == np.inf:
        return np.full(max(stages - 1, 1), -1, dtype=np.int64)
    cuts = np.empty(stages - 1, dtype=np.int64)
    c = units
    for k in range(stages - 1, 0, -1):
        c = parent[k, c]
        cuts[k - 1] = c
    return cuts


# ---------------------------------------------------------------------------- candidates
@dataclass(frozen=True, eq=False)
class StagePlan:
    """One order's data for cutting stages: the order, its stage memory and cut costs (µs, flat
    model); with a link topology also the bytes and tensors spanning each cut (``traffic``, from
    which each cut is priced on the link between its two stages' devices)."""

    seq: UnitSequence
    memory: SequenceMemory
    cost: np.ndarray
    traffic: tuple[np.ndarray, np.ndarray] | None = None
    slope: np.ndarray | None = None
    intercept: np.ndarray | None = None

    @classmethod
    def build(cls, graph: Graph, cluster: Cluster, seq: UnitSequence) -> StagePlan:
        """The plan of ``seq`` on ``graph`` and ``cluster``'s transfer model."""
        memory = SequenceMemory.build(graph, seq.position[seq.unit_of], seq.num_units)
        if cluster.is_flat:
            return cls(seq, memory, boundary_costs(graph, cluster, seq))
        return cls(seq, memory, boundary_costs(graph, cluster, seq), boundary_traffic(graph, seq),
                   cluster.pair_slope_us_per_byte, cluster.pair_intercept_us)

    def stage_costs(self, devices: np.ndarray | None) -> np.ndarray:
        """The cut costs (µs) for stages on ``devices`` (in stage order): per cut position, or with
        a topology K × (units + 1), the cut before stage ``k`` priced on the link from device
        ``k − 1`` to device ``k``."""
        if self.traffic is None or devices is None or self.slope is None or self.intercept is None:
            return self.cost
        nbytes, tensors = self.traffic
        out = np.zeros((len(devices), len(nbytes)))
        for k in range(1, len(devices)):
            a, b = int(devices[k - 1]), int(devices[k])
            out[k] = self.slope[a, b] * nbytes + self.intercept[a, b] * tensors
        return out

    def cuts(self, capacity: np.ndarray, devices: np.ndarray | None = None) -> np.ndarray | None:
        """Cuts for stages whose devices have ``capacity`` (bytes each, in stage order); ``devices``
        (the stages' devices) prices each cut on its link when the cluster has a topology."""
        by_value = {float(c): self.memory.window_ends(c) for c in np.unique(capacity)}
        return split(np.stack([by_value[float(c)] for c in capacity]), self.stage_costs(devices))

    def best_effort_cuts(self, capacity: np.ndarray, devices: np.ndarray | None = None) -> np.ndarray:
        """Cuts at the least common scale-up of ``capacity`` (bisection, 10 steps: within 0.1 % of
        the least) that admits a split: what fits when nothing does."""
        whole = self.memory.peak(0, self.seq.num_units)
        low, high = 1.0, max(2.0, 2.0 * whole / float(capacity.min()))
        with np.errstate(over="ignore"):  # a device of a few bytes beside big ones: ∞ fits all
            found = self.cuts(capacity * high, devices)
        if found is None:  # one unit overflows even a whole device's share: equal runs
            units = self.seq.num_units
            return (np.arange(1, len(capacity)) * units // len(capacity)).astype(np.int64)
        for _ in range(10):
            middle = 0.5 * (low + high)
            trial = self.cuts(capacity * middle, devices)
            if trial is None:
                low = middle
            else:
                high, found = middle, trial
        return found


def stage_devices(cluster: Cluster, k: int) -> np.ndarray:
    """The ``k`` devices with the most memory (lowest index first on ties), in index order. With a
    link topology, ties go to the first devices along the hierarchy (node, island, index) and the
    stages follow it, so consecutive stages sit in one island or node where they can."""
    if cluster.is_flat:
        return np.sort(np.argsort(-cluster.memory_bytes, kind="stable")[:k])
    topology = cluster.topology
    along = np.lexsort((np.arange(cluster.num_devices), topology.island_of, topology.node_of))
    rank = np.empty(cluster.num_devices, dtype=np.int64)
    rank[along] = np.arange(cluster.num_devices)
    chosen = np.lexsort((rank, -cluster.memory_bytes))[:k]
    return chosen[np.argsort(rank[chosen], kind="stable")]


SplitRun = tuple[str, Callable[[], int]]


def stage_candidates(graph: Graph, cluster: Cluster, pool: CandidatePool, *, first_always: bool = True,
                     nearest_first: bool = False) -> tuple[list[StagePlan], list[SplitRun], list[SplitRun]]:
    """Offer ``pool`` the first order's stage split onto the fewest devices it fits (by the
    estimate; all devices when it fits none), unless ``first_always`` is false, and return the
    other splits for the caller's work budget as ``(name, run)``: first (that one and) the split
    onto all devices and the other order's first split, then every other device count, ascending
    per order, or with ``nearest_first`` the counts the estimate says fit first, nearest that
    fewest one first (the two orders alternating), then those it says do not. Each split is
    replayed and calibrated (:func:`offer_split`). Returns (the orders' plans, the paired one
    first when the graph has it; the second splits; the rest).
    """
    plans: list[StagePlan] = []
    if cluster.num_devices < 2 or graph.num_nodes < 2:
        return plans, [], []
    second: list[SplitRun] = []
    rest: list[tuple[tuple[bool, int, int], SplitRun]] = []
    for i, seq in enumerate(pipeline_sequences(graph)):
        plan = StagePlan.build(graph, cluster, seq)
        plans.append(plan)
        counts = range(2, cluster.num_devices + 1)
        fits = (k for k in counts if plan.cuts(cluster.memory_bytes[stage_devices(cluster, k)],
                                               stage_devices(cluster, k)) is not None)
        first = next(fits, cluster.num_devices)
        if i == 0 and first_always:
            offer_split(graph, cluster, pool, plan, first)
        for k in counts:
            if i == 0 and k == first and first_always:
                continue
            entry = (f"stages/{seq.name}/{k}", partial(offer_split, graph, cluster, pool, plan, k))
            if k == first or (i == 0 and k == cluster.num_devices):
                second.append(entry)
            else:
                rank = (k < first, abs(k - first), i) if nearest_first else (False, 0, 0)
                rest.append((rank, entry))
    rest.sort(key=lambda r: r[0])  # stable: without nearest_first, the order as built
    return plans, second, [entry for _, entry in rest]


def offer_split(graph: Graph, cluster: Cluster, pool: CandidatePool, plan: StagePlan, k: int) -> int:
    """Offer ``pool`` the split of ``plan`` into ``k`` stages, calibrated by replays (see
    :func:`stage_candidates`); returns the number of replays made."""
    devices = stage_devices(cluster, k)
    capacity = cluster.memory_bytes[devices].astype(np.float64)
    planned = capacity.copy()
    replays = 0
    for round_ in range(CALIBRATION_ROUNDS):
        cuts = plan.cuts(planned, devices)
        if cuts is None and round_ > 0:
            break  # the estimate admits no split any more: the repair takes over from the last one
        if cuts is None:
            cuts = plan.best_effort_cuts(planned, devices)
        assignment = plan.seq.assignment(cuts, devices)
        moved = topology_permutation(graph, cluster, assignment)  # the identity on a flat cluster
        assignment = moved[assignment]
        result = simulate(graph, cluster, assignment)
        peak = memory_profile(graph, cluster.num_devices, assignment, result).peak_bytes[moved[devices]]
        pool.add(f"stages/{plan.seq.name}/{k}" + (f"#{round_ + 1}" if round_ else ""), assignment,
                 result=result)
        replays += 1
        over = peak > capacity
        if not over.any():
            break
        bounds = np.concatenate([[0], cuts, [plan.seq.num_units]])
        estimate = np.array([plan.memory.peak(bounds[i], bounds[i + 1]) for i in range(k)])
        shrunk = estimate * capacity / np.maximum(peak, 1.0)  # what the estimate may hold there
        planned = np.where(over, np.minimum(planned, shrunk), planned)
    return replays


# ---------------------------------------------------------------------------- the placer
def stages_placer(graph: Graph, cluster: Cluster, params: NoParams) -> PlacerOutput:
    """The fastest replayed stage split that fits (else the one with the least excess), or every
    op on device 0 when that is faster.

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : NoParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``extra`` the ``chosen`` candidate and each
        candidate's replayed step (µs; None when it does not fit).

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> placement = place(graph, Cluster.homogeneous(2, 350), "stages")
    >>> placement.assignment.tolist(), placement.extra["chosen"]
    ([0, 1, 0, 1], 'stages/paired/2')
    """
    pool = CandidatePool(graph, cluster)
    pool.add("single/0", np.zeros(graph.num_nodes, dtype=np.int64))
    _, second, rest = stage_candidates(graph, cluster, pool)
    for _, run in second + rest:
        run()
    best = pool.best
    return PlacerOutput(assignment=best.assignment, extra={"chosen": best.name, "candidates": pool.summary()})


register_placer(PlacerSpec(
    "stages", stages_placer,
    "pipeline stages: the layers in forward order cut into contiguous stages, each gradient and "
    "optimizer op with its layer, cuts by a dynamic program under each stage's liveness-aware peak",
))
