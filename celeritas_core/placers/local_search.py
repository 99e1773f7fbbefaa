"""Candidate placements judged by the simulator, and a simulator-guided local search over them.

The ``celeritas`` placer builds several complete placements (Adjusting Placement, min-cut
partitions, list schedules, one device) and keeps the one whose replay is fastest
(:class:`CandidatePool`). :func:`critical_path_search` then improves the winner by hill climbing:
it replays the placement, walks back the chain of ops and transfers that decides the step time
(:func:`critical_chain`), and tries moving each placement unit on that chain (an op, or a whole
co-location group) to every other device with room, keeping the first move the replay finds
faster. Every trial is a full replay (``docs/simulator.md``), so the search is exact with respect
to the simulator and stops at a local optimum or when its wall-clock budget runs out. On graphs
with liveness fields, :func:`peak_memory_repair` first moves units off devices whose replayed peak
exceeds their capacity, and the search keeps no move that raises that excess. Units: µs
and bytes. Reference for the neighbourhood: Y.-K. Kwok and I. Ahmad, "Static scheduling
algorithms for allocating directed task graphs to multiprocessors", ACM Computing Surveys 31(4),
1999 (critical-path based improvement of list schedules).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeritas_core.compiled.jit import jit
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import placement_units
from celeritas_core.graphs.graph import Graph
from celeritas_core.simulation.memory import MemoryProfile, live_bytes_by_op, memory_profile
from celeritas_core.simulation.simulator import DOCUMENTED_DISPATCH, SimulationResult, simulate

__all__ = ["Candidate", "CandidatePool", "critical_chain", "critical_path_search", "excess_bytes",
           "peak_memory_repair", "placement_units"]

#: Relative step-time gain (µs/µs) below which a move or a candidate counts as no better.
IMPROVEMENT_TOLERANCE = 1e-9

#: The dispatch orders the search judges a placement over (:func:`robust_step_us`): the documented
#: one and three seeded random topological orders of the search's own (seeds disjoint from the
#: orders :data:`~celeritas_core.simulation.simulator.ALTERNATIVE_DISPATCH` reports with), so a move that
#: only wins by the documented order's tie-breaks is not kept, and the reported figures under other
#: orders are measured on orders the search never saw.
ROBUST_DISPATCH: tuple[str, ...] = (DOCUMENTED_DISPATCH, "random:1001", "random:1002", "random:1003")


def robust_step_us(graph: Graph, cluster: Cluster, assignment: np.ndarray, result: SimulationResult,
                   dispatch: tuple[str, ...] = ROBUST_DISPATCH) -> float:
    """The step (µs) a placement is judged by: the larger of its documented step (``result``, its
    replay under the documented order) and its mean step over the ``dispatch`` orders. Never
    below the documented step, so a placement judged faster than another is faster as predicted
    too; above it when other orders are slower on average, so a gain that rests on the documented
    order's tie-breaks does not count. On one device every order gives the same step: no replay."""
    if len(assignment) == 0 or np.all(assignment == assignment[0]):
        return result.step_time_us
    return _robust(dispatch_steps_us(graph, cluster, assignment, result, dispatch), result.step_time_us)


def _robust(steps: list[float], documented: float) -> float:
    """max(documented step, mean of ``steps``) (µs)."""
    return max(documented, float(np.mean(steps)))


def dispatch_steps_us(graph: Graph, cluster: Cluster, assignment: np.ndarray, result: SimulationResult,
                      dispatch: tuple[str, ...]) -> list[float]:
    """The step (µs) of ``assignment`` under each of the ``dispatch`` orders (``result``: its
    documented replay)."""
    return [result.step_time_us if name == DOCUMENTED_DISPATCH else
            simulate(graph, cluster, assignment, dispatch=name).step_time_us for name in dispatch]


@dataclass(frozen=True, eq=False)
class Candidate:
    """One complete placement with its replayed figures (µs, bytes)."""

    name: str
    assignment: np.ndarray
    step_time_us: float
    excess_bytes: float
    """Total bytes by which devices exceed their capacity (0 when the placement fits)."""

    @property
    def fits(self) -> bool:
        """True when no device holds more memory than it has."""
        return self.excess_bytes <= 0.0

    @property
    def key(self) -> tuple[bool, float, float]:
        """Sort key: placements that fit first, then less excess memory, then the faster step."""
        return (not self.fits, self.excess_bytes, self.step_time_us)


def excess_bytes(graph: Graph, cluster: Cluster, assignment: np.ndarray,
                 result: SimulationResult | None = None) -> float:
    """Bytes above capacity summed over devices: of the replayed liveness-aware peak when the graph
    has liveness fields and ``result`` is given, else of the op memory sums (bytes)."""
    if graph.liveness is not None and result is not None:
        used = memory_profile(graph, cluster.num_devices, assignment, result).peak_bytes
    else:
        used = np.bincount(assignment, weights=graph.memory_bytes, minlength=cluster.num_devices)
    return float(np.maximum(used - cluster.memory_bytes, 0.0).sum())


class CandidatePool:
    """Replays every offered placement once and keeps them ranked by :attr:`Candidate.key`."""

    def __init__(self, graph: Graph, cluster: Cluster) -> None:
        self.graph = graph
        self.cluster = cluster
        self.candidates: list[Candidate] = []
        self._seen: dict[bytes, tuple[float, float]] = {}
        self._best_replay: tuple[np.ndarray, SimulationResult] | None = None
        self.replay_seconds = 0.0
        """Wall time (s) of the slowest replay so far: what one more trial costs."""

    def add(self, name: str, assignment: np.ndarray, *, step_time_us: float | None = None,
            result: SimulationResult | None = None) -> Candidate:
        """Replay ``assignment`` (unless its step time is known exactly, its replay ``result`` is
        given, or the same assignment was offered before) and record it."""
        assignment = np.asarray(assignment, dtype=np.int64)
        key = assignment.tobytes()
        if result is not None and key not in self._seen:
            step_time_us = result.step_time_us
        if key in self._seen:
            step_time_us, excess = self._seen[key]
        else:
            if result is None and (step_time_us is None or self.graph.liveness is not None):
                start = time.perf_counter()
                result = simulate(self.graph, self.cluster, assignment)
                self.replay_seconds = max(self.replay_seconds, time.perf_counter() - start)
                step_time_us = result.step_time_us if step_time_us is None else step_time_us
            excess = excess_bytes(self.graph, self.cluster, assignment, result)
        self._seen[key] = (float(step_time_us), excess)
        candidate = Candidate(name, assignment, float(step_time_us), excess)
        if result is not None and (not self.candidates or candidate.key < self.best.key):
            self._best_replay = (assignment, result)
        self.candidates.append(candidate)
        return candidate

    def best_replay(self) -> SimulationResult | None:
        """The replay of :attr:`best` when this pool made it (so a search need not redo it)."""
        if self._best_replay is None or not np.array_equal(self._best_replay[0], self.best.assignment):
            return None
        return self._best_replay[1]

    def add_candidate(self, candidate: Candidate) -> Candidate:
        """Record a candidate whose figures were replayed on this pool's graph and cluster."""
        figures = (candidate.step_time_us, candidate.excess_bytes)
        self._seen.setdefault(candidate.assignment.tobytes(), figures)
        self.candidates.append(candidate)
        return candidate

    @property
    def best(self) -> Candidate:
        """The best candidate so far (the first offered wins ties)."""
        return min(self.candidates, key=lambda c: c.key)

    def summary(self) -> dict[str, float | None]:
        """Step time (µs) of every candidate by name; None for a placement that does not fit."""
        return {c.name: (c.step_time_us if c.fits else None) for c in self.candidates}


def critical_chain(graph: Graph, assignment: np.ndarray, result: SimulationResult) -> list[int]:
    """Ops on the chain that decides the step time, last first (µs timings of ``result``).

    Starting from the op that finishes last, each op's start is explained either by an input that
    arrived exactly then (its producer, through a transfer when devices differ) or by the op that
    ran just before it on the same device; the walk follows that cause back to time 0.
    """
    start, finish = result.start_us, result.finish_us
    assignment = np.asarray(assignment, dtype=np.int64)
    by_device = np.lexsort((finish, start, assignment))
    previous_on_device = np.full(graph.num_nodes, -1, dtype=np.int64)
    same = assignment[by_device[1:]] == assignment[by_device[:-1]]
    previous_on_device[by_device[1:][same]] = by_device[:-1][same]
    tolerance = 1e-9 * (float(finish.max(initial=0.0)) + 1.0)
    last = int(np.argmax(finish)) if graph.num_nodes else -1
    keys, ends, num_keys = _arrival_table(graph, assignment, result)
    chain = _walk_causes(last, start, finish, assignment, previous_on_device, graph.pred_ptr, graph.pred_idx,
                         graph.tensors.edge_tensor[graph.pred_edge], keys, ends, num_keys, tolerance)
    return chain.tolist()  # type: ignore[no-any-return]


def _arrival_table(graph: Graph, assignment: np.ndarray,
                   result: SimulationResult) -> tuple[np.ndarray, np.ndarray, int]:
    """The transfers of ``result`` as a lookup table: ascending keys ``tensor * num_keys +
    destination device`` (tensor ids of :attr:`Graph.tensors`) and the end of each (µs). Of
    transfers with the same key the last one listed is kept; ones of no graph tensor are dropped."""
    tr = result.transfers
    num_keys = int(max(assignment.max(initial=0), tr.dst_device.max(initial=0))) + 1
    tensor = graph.tensors.ids(tr.src_node, tr.src_output)
    known = np.flatnonzero(tensor >= 0)
    keys = tensor[known] * num_keys + tr.dst_device[known]
    order = np.argsort(keys, kind="stable")
    keys, ends = keys[order], tr.end_us[known][order]
    last = np.ones(len(keys), dtype=bool)
    last[:-1] = keys[1:] != keys[:-1]
    return keys[last], ends[last].astype(np.float64), num_keys


@jit
def _walk_causes(
    v: int, start: np.ndarray, finish: np.ndarray, assignment: np.ndarray, previous_on_device: np.ndarray,
    pred_ptr: np.ndarray, pred_idx: np.ndarray, pred_tensor: np.ndarray,
    keys: np.ndarray, ends: np.ndarray, num_keys: int, tolerance: float,
) -> np.ndarray:
    """The chain from op ``v`` back through :func:`_cause_of_start` until an op starts by
    ``tolerance`` µs, has no cause or is met again."""
    chain = np.empty(len(start), dtype=np.int64)
    seen = np.zeros(len(start), dtype=np.bool_)
    length = 0
    while v >= 0 and not seen[v]:
        chain[length] = v
        length += 1
        seen[v] = True
        if start[v] <= tolerance:
            break
        v = _cause_of_start(v, start, finish, assignment, previous_on_device, pred_ptr, pred_idx, pred_tensor,
                            keys, ends, num_keys, tolerance)
    return chain[:length]


@jit
def _cause_of_start(
    v: int, start: np.ndarray, finish: np.ndarray, assignment: np.ndarray, previous_on_device: np.ndarray,
    pred_ptr: np.ndarray, pred_idx: np.ndarray, pred_tensor: np.ndarray,
    keys: np.ndarray, ends: np.ndarray, num_keys: int, tolerance: float,
) -> int:
    """The op whose finish (or whose tensor's arrival, :func:`_arrival_table`) released ``v`` at
    its start, else the op before it on its device if that finished then; -1 if none. Inputs
    come by predecessor slot (:attr:`Graph.pred_ptr`): producer ``pred_idx``, tensor ``pred_tensor``."""
    d = assignment[v]
    best, best_time = -1, -np.inf
    for k in range(pred_ptr[v], pred_ptr[v + 1]):
        u = pred_idx[k]
        t = finish[u]
        if assignment[u] != d:  # the transfer's end, if the replay has one
            key = pred_tensor[k] * num_keys + d
            i = np.searchsorted(keys, key)
            if i < len(keys) and keys[i] == key:
                t = ends[i]
        if t > best_time:
            best, best_time = u, t
    if best >= 0 and best_time >= start[v] - tolerance:
        return best
    w = previous_on_device[v]
    return w if w >= 0 and finish[w] >= start[v] - tolerance else best


def _objective(steps: list[float], result: SimulationResult) -> tuple[float, float]:
    """What the search lowers: the robust step of ``steps`` (µs, one per dispatch order;
    :func:`robust_step_us`), then the mean op finish time of the documented replay ``result`` (µs)
    on plateaus."""
    mean_finish = float(result.finish_us.mean()) if len(result.finish_us) else 0.0
    return _robust(steps, result.step_time_us), mean_finish


def _better(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """``a`` beats ``b``: a shorter step, or the same step (within tolerance) with earlier finishes."""
    tol_step = IMPROVEMENT_TOLERANCE * max(b[0], 1e-300)
    if a[0] < b[0] - tol_step:
        return True
    return a[0] <= b[0] + tol_step and a[1] < b[1] - IMPROVEMENT_TOLERANCE * max(b[1], 1e-300)


def critical_path_search(graph: Graph, cluster: Cluster, start: Candidate, *, deadline: float,
                         replay_seconds: float = 0.0, max_replays: int = 10_000,
                         start_replay: SimulationResult | None = None,
                         dispatch: tuple[str, ...] = ROBUST_DISPATCH,
                         stats: dict[str, Any] | None = None) -> Candidate:
    """Hill climbing from ``start``: move critical-chain units while the robust step over the
    ``dispatch`` orders (:func:`robust_step_us`) gets shorter.

    A move puts every op of one unit (:func:`placement_units`) on another device. Without liveness
    fields the device needs room for the unit (sum model, bytes); with them any device is tried and
    a faster trial is kept only if its replayed peak exceeds capacity by no more bytes in total
    than the current placement's (:func:`excess_bytes`), so a placement that fits keeps fitting.
    Moves are tried along :func:`critical_chain` of the documented replay, last op first, and the
    first that lowers the robust step over ``dispatch`` (:func:`robust_step_us`) is kept; the chain
    is then recomputed. Stops at a local optimum, after ``max_replays`` replays (every order's
    replay counts), or when ``time.perf_counter()`` would pass ``deadline`` (seconds, a safety
    net) with one more replay of ``replay_seconds``. ``start_replay``: the documented replay of
    ``start``, when the caller has it. ``stats``, if given, gets ``moves``, ``replays`` and why it
    ``stopped`` (``local optimum``, ``budget`` or ``clock``).
    """
    report: dict[str, Any] = {"moves": 0, "replays": 0, "stopped": "budget"}
    if stats is not None:
        stats.update(report)
    others = len(dispatch) - (DOCUMENTED_DISPATCH in dispatch)
    if max_replays < others + len(dispatch):  # not even one trial after judging the start
        return start
    if time.perf_counter() + 2 * replay_seconds > deadline:
        if stats is not None:
            stats["stopped"] = "clock"
        return start
    unit_of = placement_units(graph)
    num_units = int(unit_of.max(initial=-1)) + 1
    members = UnitMembers(unit_of)
    unit_mem = np.bincount(unit_of, weights=graph.memory_bytes, minlength=num_units)
    capacity = cluster.memory_bytes.astype(np.float64)
    best = start.assignment.copy()
    result = simulate(graph, cluster, best) if start_replay is None else start_replay
    used = np.bincount(best, weights=graph.memory_bytes, minlength=cluster.num_devices)
    max_excess = None if graph.liveness is None else excess_bytes(graph, cluster, best, result)
    if max_excess is not None:
        capacity = np.full(cluster.num_devices, np.inf)  # the replayed peak decides instead
    search = _Search(graph, cluster, dispatch, deadline, replay_seconds, max_replays)
    current = search.objective(best, result)
    start_objective = current
    while True:
        move = _first_improving_move(search, best, result, current, unit_of, members, unit_mem,
                                     capacity - used, max_excess)
        if move is None:
            break
        unit, device, result, current, max_excess = move
        source = int(best[members[unit][0]])
        used[source] -= unit_mem[unit]
        used[device] += unit_mem[unit]
        best[members[unit]] = device
        report["moves"] += 1
    report.update(replays=search.used, stopped=search.stopped)
    if stats is not None:
        stats.update(report)
    if not _better(current, start_objective):
        return start
    excess = excess_bytes(graph, cluster, best, result)
    return Candidate(start.name + "+search", best, result.step_time_us, excess)


class _Search:
    """The search's replays: its orders, clock and budget (``stopped`` says which ended it)."""

    def __init__(self, graph: Graph, cluster: Cluster, dispatch: tuple[str, ...], deadline: float,
                 replay_seconds: float, max_replays: int) -> None:
        self.graph, self.cluster, self.dispatch = graph, cluster, dispatch
        self.deadline, self.replay_seconds = deadline, replay_seconds
        self.left, self.used, self.stopped = max_replays, 0, "local optimum"

    def can_try(self) -> bool:
        """Whether one more trial (one replay per order) fits the budget and the clock."""
        if self.left < len(self.dispatch):
            self.stopped = "budget"
            return False
        if time.perf_counter() + self.replay_seconds > self.deadline:
            self.stopped = "clock"
            return False
        return True

    def replay(self, assignment: np.ndarray) -> SimulationResult:
        """The documented replay of a trial (one replay of the budget)."""
        self.left -= 1
        self.used += 1
        return simulate(self.graph, self.cluster, assignment)

    def objective(self, assignment: np.ndarray, result: SimulationResult) -> tuple[float, float]:
        """:func:`_objective` of a replayed assignment (the other orders' replays are counted)."""
        others = len(self.dispatch) - (DOCUMENTED_DISPATCH in self.dispatch)
        self.left -= others
        self.used += others
        return _objective(dispatch_steps_us(self.graph, self.cluster, assignment, result, self.dispatch),
                          result)


class UnitMembers:
    """The ops of every placement unit, as one array sorted by unit and row pointers (CSR), so a
    million-unit graph costs two arrays, not a million small ones."""

    def __init__(self, unit_of: np.ndarray) -> None:
        self.ops = np.argsort(unit_of, kind="stable")
        self.ptr = np.zeros(int(unit_of.max(initial=-1)) + 2, dtype=np.int64)
        np.cumsum(np.bincount(unit_of), out=self.ptr[1:])

    def __getitem__(self, unit: int) -> np.ndarray:
        """Op indices of ``unit``, ascending."""
        return self.ops[self.ptr[unit]:self.ptr[unit + 1]]


def _first_improving_move(search: _Search, assignment: np.ndarray, result: SimulationResult,
                          current: tuple[float, float], unit_of: np.ndarray, members: UnitMembers,
                          unit_mem: np.ndarray, room: np.ndarray, max_excess: float | None,
                          ) -> tuple[int, int, SimulationResult, tuple[float, float], float | None] | None:
    """(unit, device, documented replay, objective, excess ceiling) of the first move that lowers
    the ``current`` objective (:func:`_objective`), or None (also when the search's budget or clock
    runs out). With ``max_excess`` (bytes) a faster move counts only if its replayed peak exceeds
    capacity by no more than that in total, and the ceiling returned for the next move is the
    lower of the two; without it, the ceiling stays None.

    Units on the critical chain come first, each trying the device of the op that released it
    (joining its cause saves the transfer), then the other devices from the least busy; then
    every other unit, latest finish first, so the search can also cross plateaus of equal step.
    A trial whose documented step exceeds the current robust step is dropped after that one
    replay: its robust step cannot be lower.
    """
    graph, cluster = search.graph, search.cluster
    by_load = np.argsort(result.device_busy_us, kind="stable").tolist()
    tried: set[int] = set()
    for v, preferred in _move_order(graph, assignment, result):
        unit = int(unit_of[v])
        if unit in tried:
            continue
        tried.add(unit)
        source = int(assignment[v])
        for device in dict.fromkeys(preferred + by_load):
            if device == source or unit_mem[unit] > room[device]:
                continue
            if not search.can_try():
                return None
            trial = assignment.copy()
            trial[members[unit]] = device
            replay = search.replay(trial)
            if replay.step_time_us > current[0] * (1.0 + IMPROVEMENT_TOLERANCE):
                continue  # the robust step is never below the documented one: it cannot win
            objective = search.objective(trial, replay)
            if not _better(objective, current):
                continue
            if max_excess is None:
                return unit, device, replay, objective, None
            excess = excess_bytes(graph, cluster, trial, replay)
            if excess <= max_excess * (1.0 + IMPROVEMENT_TOLERANCE):
                return unit, device, replay, objective, min(excess, max_excess)
    return None


def _move_order(graph: Graph, assignment: np.ndarray,
                result: SimulationResult) -> Iterator[tuple[int, list[int]]]:
    """Ops to try moving, each with its preferred devices: the critical chain (with the device of
    the op that released it), then every op by decreasing finish time (µs)."""
    chain = critical_chain(graph, assignment, result)
    for i, v in enumerate(chain):
        yield v, ([int(assignment[chain[i + 1]])] if i + 1 < len(chain) else [])
    for v in np.argsort(-result.finish_us, kind="stable").tolist():
        yield v, []


@dataclass(frozen=True, eq=False)
class _Replayed:
    """An assignment with its replay, memory profile and total excess over capacity (µs, bytes)."""

    assignment: np.ndarray
    result: SimulationResult
    profile: MemoryProfile
    excess: float

    @property
    def key(self) -> tuple[float, float]:
        """Less excess first, then the shorter step."""
        return self.excess, self.result.step_time_us


def _replay(graph: Graph, cluster: Cluster, assignment: np.ndarray) -> _Replayed:
    """Replay ``assignment`` and measure its liveness-aware peaks against capacity."""
    result = simulate(graph, cluster, assignment)
    profile = memory_profile(graph, cluster.num_devices, assignment, result)
    excess = float(np.maximum(profile.peak_bytes - cluster.memory_bytes, 0.0).sum())
    return _Replayed(assignment, result, profile, excess)


def peak_memory_repair(graph: Graph, cluster: Cluster, start: Candidate, *, budget: int,
                       unit_rank: np.ndarray | None = None, stats: dict[str, Any] | None = None) -> Candidate:
    """Trade units between devices until no device's replayed peak exceeds its capacity.

    Only for graphs with liveness fields whose ``start`` does not fit (else ``start`` comes back).
    Hill climbing on the total excess (bytes, summed over devices of ``max(0, peak − capacity)``;
    ties: the shorter step, µs); each round walks the over-full devices, most excess first, and
    keeps the first improving trial of three neighbourhoods, in this order:

    1. **runs**: the units (:func:`placement_units`) lie along ``unit_rank`` (default: their first
       op's topological rank; a pipeline order keeps a layer's backward ops beside it); a maximal
       run of consecutive units on the device gives 1, 2, 4, … of its units at either end to the
       device of the neighbouring run, the least excess of those sizes kept (a stage boundary moves);
    2. **moves**: its units by the bytes they keep live there at the device's peak instant
       (:func:`~celeritas_core.simulation.memory.live_bytes_by_op`; then the others by memory), each to every
       other device, the first unit with an improving move taking its best device;
    3. **swaps**: its four units holding most at its peak, each swapped with each of the four
       units of another device holding least at this device's peak.

    A trial is kept only if the total excess strictly falls. Stops when the placement fits, when
    no trial improves, or after ``budget`` replayed ops (``ceil(budget / ops)`` trial replays);
    never on a clock, so the result is the same on any machine. Returns ``START+repair``
    (``start`` when nothing was kept); ``stats``, if given, gets ``moves`` (kept trials),
    ``replays`` and why it ``stopped``.
    """
    report: dict[str, Any] = {"moves": 0, "replays": 0, "stopped": "fits"}
    if stats is not None:
        stats.update(report)
    if graph.liveness is None or start.fits:
        return start
    max_replays = -(-max(int(budget), 0) // max(graph.num_nodes, 1))
    trials = _Trials(graph, cluster, max_replays)
    unit_of = placement_units(graph)
    members = UnitMembers(unit_of)
    if unit_rank is None:
        unit_rank = np.full(len(members.ptr) - 1, graph.num_nodes, dtype=np.int64)
        np.minimum.at(unit_rank, unit_of, graph.topological_rank)
    along = np.argsort(unit_rank, kind="stable")
    current = trials.replay(start.assignment.copy(), count=False)
    while current.excess > 0.0 and not trials.exhausted:
        moved = _repair_round(graph, cluster, current, unit_of, members, along, trials)
        if moved is None:
            break
        current = moved
        report["moves"] += 1
    stopped = "fits" if current.excess <= 0.0 else ("budget" if trials.exhausted else "no improving move")
    report.update(replays=trials.used, stopped=stopped)
    if stats is not None:
        stats.update(report)
    if report["moves"] == 0:
        return start
    return Candidate(start.name + "+repair", current.assignment, current.result.step_time_us, current.excess)


class _Trials:
    """Replays trial assignments for the repair within a budget of ``max_replays``."""

    def __init__(self, graph: Graph, cluster: Cluster, max_replays: int) -> None:
        self.graph, self.cluster = graph, cluster
        self.left, self.used = max_replays, 0

    @property
    def exhausted(self) -> bool:
        """True when no trial replay is left."""
        return self.left <= 0

    def replay(self, assignment: np.ndarray, *, count: bool = True) -> _Replayed:
        """Replay ``assignment`` (counted against the budget unless ``count`` is false)."""
        if count:
            self.left -= 1
            self.used += 1
        return _replay(self.graph, self.cluster, assignment)

    def best_of(self, current: _Replayed, assignments: Iterator[np.ndarray]) -> _Replayed | None:
        """The trial of ``assignments`` with the least :attr:`_Replayed.key` that lowers the excess
        of ``current``, or None; stops early when a trial fits or the budget runs out."""
        best: _Replayed | None = None
        for trial in assignments:
            if self.exhausted:
                break
            replayed = self.replay(trial)
            if replayed.excess < current.excess * (1.0 - IMPROVEMENT_TOLERANCE) and (
                    best is None or replayed.key < best.key):
                best = replayed
                if best.excess <= 0.0:
                    break
        return best


def _repair_round(graph: Graph, cluster: Cluster, current: _Replayed, unit_of: np.ndarray,
                  members: UnitMembers, along: np.ndarray, trials: _Trials) -> _Replayed | None:
    """One round of :func:`peak_memory_repair`: the first improving trial, or None."""
    capacity = cluster.memory_bytes
    peak = current.profile.peak_bytes
    over = np.flatnonzero(peak > capacity)
    targets = np.argsort(peak - capacity, kind="stable").tolist()
    sources = over[np.argsort(capacity[over] - peak[over], kind="stable")].tolist()
    unit_device = current.assignment[members.ops[members.ptr[:-1]]]
    for source in sources:
        found = trials.best_of(current, _run_trials(current.assignment, unit_device, members, along, source))
        if found is not None:
            return found
    for source in sources:
        ranked = _units_at_peak(graph, current, source, unit_of)
        for unit in ranked:
            found = trials.best_of(current, _move_trials(current.assignment, members, unit, source, targets))
            if found is not None:
                return found
            if trials.exhausted:
                return None
        found = trials.best_of(current, _swap_trials(graph, current, unit_of, members, ranked, source,
                                                     targets))
        if found is not None:
            return found
    return None


def _move_trials(assignment: np.ndarray, members: UnitMembers, unit: int, source: int,
                 targets: list[int]) -> Iterator[np.ndarray]:
    """``unit`` on each device of ``targets`` but ``source``."""
    for device in targets:
        if device != source:
            trial = assignment.copy()
            trial[members[unit]] = device
            yield trial


def _run_trials(assignment: np.ndarray, unit_device: np.ndarray, members: UnitMembers, along: np.ndarray,
                source: int) -> Iterator[np.ndarray]:
    """For every maximal run of ``source``'s units along ``along``: 1, 2, 4, … (up to half the run)
    of its units at either end moved to the device of the run beside that end."""
    devices = unit_device[along]
    mine = np.flatnonzero(devices == source)
    if not len(mine):
        return
    breaks = np.flatnonzero(np.diff(mine) > 1)
    for lo, hi in zip(np.r_[mine[0], mine[breaks + 1]], np.r_[mine[breaks], mine[-1]] + 1, strict=True):
        length = int(hi - lo)
        for end, neighbour in ((hi, hi), (lo, lo - 1)):
            if not 0 <= neighbour < len(along):
                continue
            size = 1
            while size <= max(length // 2, 1):
                span = along[end - size:end] if end == hi else along[lo:lo + size]
                trial = assignment.copy()
                trial[np.concatenate([members[int(u)] for u in span])] = devices[neighbour]
                yield trial
                size *= 2


def _swap_trials(graph: Graph, current: _Replayed, unit_of: np.ndarray, members: UnitMembers,
                 ranked: list[int], source: int, targets: list[int], width: int = 4) -> Iterator[np.ndarray]:
    """The ``width`` units of ``source`` that hold most at its peak, each swapped with each of the
    ``width`` units of every other device that hold least there at ``source``'s peak instant."""
    share = _unit_share_at_peak(graph, current, source, unit_of)
    unit_device = current.assignment[members.ops[members.ptr[:-1]]]
    for device in targets:
        if device == source:
            continue
        theirs = np.flatnonzero(unit_device == device)
        theirs = theirs[np.argsort(share[theirs], kind="stable")][:width]
        for mine in ranked[:width]:
            for other in theirs.tolist():
                trial = current.assignment.copy()
                trial[members[mine]] = device
                trial[members[other]] = source
                yield trial


def _unit_share_at_peak(graph: Graph, current: _Replayed, device: int, unit_of: np.ndarray) -> np.ndarray:
    """Per unit: bytes it keeps live on ``device`` at that device's peak instant
    (:func:`~celeritas_core.simulation.memory.live_bytes_by_op`, summed over the unit's ops)."""
    times, usage = current.profile.times_us[device], current.profile.usage_bytes[device]
    when = float(times[int(np.argmax(usage))]) if len(usage) else 0.0
    share = live_bytes_by_op(graph, current.assignment, current.result, device, when)
    return np.bincount(unit_of, weights=share, minlength=int(unit_of.max(initial=-1)) + 1)


def _units_at_peak(graph: Graph, current: _Replayed, device: int, unit_of: np.ndarray) -> list[int]:
    """Units on ``device``: those holding bytes there at its peak instant, most bytes first, then
    the others by decreasing memory (bytes)."""
    unit_share = _unit_share_at_peak(graph, current, device, unit_of)
    unit_mem = np.bincount(unit_of, weights=graph.memory_bytes, minlength=len(unit_share))
    here = np.unique(unit_of[current.assignment == device])
    order = np.lexsort((-unit_mem[here], -unit_share[here]))
    return here[order].tolist()  # type: ignore[no-any-return]
