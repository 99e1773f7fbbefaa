"""Stage-level pipeline baselines for pipelined micro-batch training: GPipe, Alpa and PipeDream.

With ``M`` micro-batches pipelined over ``S`` stages (one device each), the planners of the
literature cut the layers, in forward order, into contiguous stages. The graph these placers get
is one micro-batch's training step when the caller pipelines: ``time_us`` and the activation bytes
are **per micro-batch**; ``micro_batches`` (``M``) enters the objective and the memory model only.

* **Layers** (:func:`pipeline_layers`). The units are the layers of the ``paired`` order of
  :func:`~celeritas_core.placers.stages.pipeline_sequences`: placement units (co-location groups
  contracted, so a group never spans two stages) of one
  :func:`~celeritas_core.placers.stages.layer_coordinate` form one layer, with every backward and
  optimizer op beside the forward op it belongs to. A graph without that structure (no forward
  tensor read after the turning point: inference) falls back, as the ``stages`` placer does, to
  the topological order, one unit a layer. A layer's time is the summed ``time_us`` of its ops
  (forward, backward and update of one micro-batch). Above :data:`MAX_LAYERS` layers the dynamic
  programs run on that many runs of consecutive layers (equal counts).
* **Cuts.** Cutting before layer ``c`` sends the tensors whose producer and consumers lie on both
  sides of it (activations forward, gradients backward, both summed), priced on the link between
  the two stages' devices: ``cut_us``, per micro-batch
  (:func:`~celeritas_core.placers.stages.boundary_traffic`).
* **Memory model.** Stage ``s`` holds its layers' persistent bytes (weights, optimizer slots) once
  and ``m_s`` micro-batches of their activation bytes: ``m_s = M`` for GPipe and Alpa (all
  forwards before the backwards), ``m_s = min(M, S − s)`` for PipeDream's 1F1B (stage ``s`` of
  ``S``, 0-based). Per op, the persistent bytes are the liveness field ``persistent_bytes`` where
  the graph models the op, and otherwise all of its bytes if it is a source (a variable, a slot, a
  constant) or in a co-location group (a variable with its reads and update), none if not. The
  activation bytes are the rest of the op's planning memory
  (:func:`~celeritas_core.simulation.memory.planning_memory_bytes`, what
  :func:`~celeritas_core.placers.place` passes): each op's outputs and scratch scaled so that the
  graph adds up to its liveness-aware peak on one device. That is an approximation: a layer's
  real share of the in-flight activations is the part kept for its backward pass, which the graph
  does not split out. Each stage must fit its device; when no split does, the split is the one
  of least overflow, the least factor by which every device's memory would have to grow
  (:func:`least_overflow`), planned with the memory so grown (best effort, never an error).
* **gpipe-even** (GPipe, Huang et al., NeurIPS 2019): ``S`` stages of equal numbers of layers
  (±1), whatever the memory: the baseline.
* **alpa-stages** (Alpa's inter-operator pass, Zheng et al., OSDI 2022): the contiguous stages,
  at most ``S``, minimising the pipeline latency :func:`alpa_objective`
  ``Σ_s t_s + Σ_c cut_c + (M − 1)·max(max_s t_s, max_c cut_c)``, where ``t_s`` is the stage's
  time for one micro-batch on its device (``time / speed``) and the cuts are the transfers
  between stages, which run beside the stages like stages of their own. As in Alpa, the
  bottleneck ``B`` is enumerated and a dynamic program minimises the sum with every stage and cut
  at most ``B`` (:func:`alpa_split`).
* **pipedream** (PipeDream's planner without data-parallel replication, Narayanan et al., SOSP
  2019): the contiguous stages, at most ``S``, minimising the slowest stage or cut,
  :func:`pipedream_objective`, each stage fitting with 1F1B's in-flight activations; among the
  splits of that bottleneck, the one of least summed cut time (:func:`pipedream_split`).

The stage programs are Kernighan's sequential partition (:func:`~celeritas_core.placers.stages.split`,
a sliding-window minimum, O(K · layers)) with every stage's window bounded by its memory and by
``B``: a cut dearer than ``B`` is forbidden. The feasible splits only grow with ``B``, so the
least sum at ``B`` falls as ``B`` grows; Alpa's enumeration of ``B`` is a bisection over real
values snapped to the bottleneck each solution really has, dividing an interval only while the
least sum differs at its ends and the interval can still beat the best objective (the sum at its
top plus ``(M − 1)`` times its bottom): exact to :data:`TOLERANCE` (relative). PipeDream's is one
bisection. Every stage count from 1 to ``S`` is tried on the devices of
:func:`~celeritas_core.placers.stages.stage_devices` (the largest, in order; along the hierarchy
on a link topology), and the best objective wins.

References: Y. Huang et al., "GPipe: efficient training of giant neural networks using pipeline
parallelism", NeurIPS 2019; L. Zheng et al., "Alpa: automating inter- and intra-operator
parallelism for distributed deep learning", OSDI 2022; D. Narayanan et al., "PipeDream:
generalized pipeline parallelism for DNN training", SOSP 2019; B. W. Kernighan, "Optimal
sequential partitions of graphs", JACM 18(1), 1971. Units: µs and bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers.base import PlacerOutput, PlacerSpec, param, register_placer
from celeritas_core.placers.stages import (
    UnitSequence,
    boundary_traffic,
    link_cut_us,
    pipeline_sequences,
    split,
    stage_devices,
)

#: Relative resolution of the bottleneck and overflow bisections (and slack of their comparisons).
TOLERANCE = 1e-9
#: Above this many layers the dynamic programs cut runs of consecutive layers (this many).
MAX_LAYERS = 4096
#: Slack of the prefix-sum comparisons (relative), so that a stage fitting exactly is not lost to
#: rounding.
_SLACK = 1e-12

METHODS = ("gpipe-even", "alpa-stages", "pipedream")


# ---------------------------------------------------------------------------- objectives
def alpa_objective(stage_times: Sequence[float] | np.ndarray, micro_batches: int,
                   cut_times: Sequence[float] | np.ndarray = ()) -> float:
    """Alpa's pipeline latency of ``M`` micro-batches: ``Σ t + Σ cut + (M − 1)·max(t, cut)`` (µs).

    Parameters
    ----------
    stage_times : sequence of float
        Each stage's forward plus backward time for one micro-batch (µs).
    micro_batches : int
        ``M``, the micro-batches pipelined.
    cut_times : sequence of float, optional
        The transfer time of each boundary between stages for one micro-batch (µs); a boundary
        works beside the stages like a stage of its own.

    Returns
    -------
    float
        The latency (µs); 0 without stages.

    Examples
    --------
    >>> alpa_objective([10.0, 30.0, 20.0], 4)      # 60 + 3 · 30
    150.0
    >>> alpa_objective([10.0, 30.0], 4, [40.0])    # the link is the bottleneck
    200.0
    """
    values = np.concatenate([np.asarray(stage_times, dtype=np.float64),
                             np.asarray(cut_times, dtype=np.float64)])
    if not len(values):
        return 0.0
    return float(values.sum() + (micro_batches - 1) * values.max())


def pipedream_objective(stage_times: Sequence[float] | np.ndarray,
                        cut_times: Sequence[float] | np.ndarray = ()) -> float:
    """PipeDream's bottleneck: the slowest stage or boundary transfer per micro-batch (µs).

    Parameters
    ----------
    stage_times : sequence of float
        Each stage's forward plus backward time for one micro-batch (µs).
    cut_times : sequence of float, optional
        The transfer time of each boundary between stages for one micro-batch (µs).

    Returns
    -------
    float
        The largest of them (µs): the steady state's time per micro-batch; 0 without stages.

    Examples
    --------
    >>> pipedream_objective([10.0, 30.0, 20.0], [5.0, 35.0])
    35.0
    """
    values = np.concatenate([np.asarray(stage_times, dtype=np.float64),
                             np.asarray(cut_times, dtype=np.float64)])
    return float(values.max()) if len(values) else 0.0


def in_flight(method: str, num_stages: int, micro_batches: int) -> np.ndarray:
    """Micro-batches of activations each stage holds: ``M`` each (GPipe, Alpa: all forwards
    first), or 1F1B's ``min(M, S − s)`` for stage ``s`` of ``S`` (PipeDream).

    Parameters
    ----------
    method : str
        ``"gpipe-even"``, ``"alpa-stages"`` or ``"pipedream"``.
    num_stages : int
        ``S``.
    micro_batches : int
        ``M``.

    Returns
    -------
    numpy.ndarray
        int64, one count per stage.

    Examples
    --------
    >>> in_flight("pipedream", 4, 3).tolist(), in_flight("alpa-stages", 2, 3).tolist()
    ([3, 3, 2, 1], [3, 3])
    """
    if method == "pipedream":
        return np.minimum(micro_batches, num_stages - np.arange(num_stages)).astype(np.int64)
    return np.full(num_stages, micro_batches, dtype=np.int64)


# ---------------------------------------------------------------------------- one stage count
@dataclass(frozen=True, eq=False)
class StageProblem:
    """Cutting ``L`` layers into exactly ``K`` contiguous, non-empty stages, stage ``k`` on a
    device of ``capacity[k]`` bytes and relative ``speed[k]``.

    ``time_us``, ``persistent_bytes`` and ``activation_bytes`` have one entry per layer (one
    micro-batch's time and activations); stage ``k`` holds ``persistent + in_flight[k] ·
    activation`` bytes of its layers. ``cut_us`` is ``K × (L + 1)``: ``cut_us[k, c]`` is the
    transfer time of cutting before layer ``c`` between stages ``k − 1`` and ``k`` (row 0 and
    columns 0 and ``L`` unused). Build one with :meth:`of`.
    """

    time_us: np.ndarray
    persistent_bytes: np.ndarray
    activation_bytes: np.ndarray
    capacity: np.ndarray
    in_flight: np.ndarray
    cut_us: np.ndarray
    speed: np.ndarray

    @classmethod
    def of(cls, time_us: Sequence[float] | np.ndarray, persistent_bytes: Sequence[float] | np.ndarray,
           activation_bytes: Sequence[float] | np.ndarray, capacity: Sequence[float] | np.ndarray,
           in_flight: Sequence[int] | np.ndarray, cut_us: Sequence[float] | np.ndarray | None = None,
           speed: Sequence[float] | np.ndarray | None = None) -> StageProblem:
        """A problem from per-layer and per-stage arrays (float64).

        Parameters
        ----------
        time_us : sequence of float
            Per layer, one micro-batch's forward plus backward time (µs).
        persistent_bytes : sequence of float
            Per layer, the bytes held once (weights, optimizer slots).
        activation_bytes : sequence of float
            Per layer, one micro-batch's activation bytes.
        capacity : sequence of float
            Per stage, its device's memory (bytes); its length is the number of stages ``K``.
        in_flight : sequence of int
            Per stage, the micro-batches of activations it holds (:func:`in_flight`).
        cut_us : array_like, optional
            Transfer time of the cut before each layer (``L + 1`` values, or ``K × (L + 1)``
            per stage boundary); default none.
        speed : sequence of float, optional
            Per stage, its device's relative speed (a stage lasts ``time / speed``); default 1.

        Returns
        -------
        StageProblem
            The problem.

        Examples
        --------
        >>> p = StageProblem.of([1.0, 2.0, 3.0], [0, 0, 0], [5, 5, 5], [10, 10], [2, 1])
        >>> p.num_layers, p.num_stages, p.memory(np.array([1])).tolist()
        (3, 2, [10.0, 10.0])
        """
        time = np.asarray(time_us, dtype=np.float64)
        num_layers, stages = len(time), len(capacity)
        cut = np.zeros(num_layers + 1) if cut_us is None else np.asarray(cut_us, dtype=np.float64)
        cut = np.array(np.broadcast_to(cut, (stages, num_layers + 1)), dtype=np.float64)
        cut[:, 0] = 0.0
        cut[:, num_layers] = 0.0
        return cls(time, np.asarray(persistent_bytes, dtype=np.float64),
                   np.asarray(activation_bytes, dtype=np.float64), np.asarray(capacity, dtype=np.float64),
                   np.asarray(in_flight, dtype=np.float64), cut,
                   np.ones(stages) if speed is None else np.asarray(speed, dtype=np.float64))

    @property
    def num_layers(self) -> int:
        """``L``."""
        return len(self.time_us)

    @property
    def num_stages(self) -> int:
        """``K``."""
        return len(self.capacity)

    def scaled(self, factor: float) -> StageProblem:
        """The same problem on devices of ``factor`` times the memory."""
        return StageProblem(self.time_us, self.persistent_bytes, self.activation_bytes,
                            self.capacity * factor, self.in_flight, self.cut_us, self.speed)

    def bounds(self, cuts: np.ndarray) -> np.ndarray:
        """``[0, c_1, …, c_{K−1}, L]``."""
        return np.concatenate([[0], np.asarray(cuts, dtype=np.int64), [self.num_layers]]).astype(np.int64)

    def stage_times(self, cuts: np.ndarray) -> np.ndarray:
        """Each stage's time for one micro-batch on its device (µs)."""
        prefix = self._time_prefix
        bounds = self.bounds(cuts)
        return (prefix[bounds[1:]] - prefix[bounds[:-1]]) / self.speed

    def cut_times(self, cuts: np.ndarray) -> np.ndarray:
        """Each boundary's transfer time for one micro-batch (µs)."""
        cuts = np.asarray(cuts, dtype=np.int64)
        return self.cut_us[np.arange(1, self.num_stages), cuts]

    def memory(self, cuts: np.ndarray) -> np.ndarray:
        """Each stage's bytes: persistent plus its in-flight micro-batches of activations."""
        bounds = self.bounds(cuts)
        persistent = np.add.reduceat(np.append(self.persistent_bytes, 0.0), bounds[:-1])
        activation = np.add.reduceat(np.append(self.activation_bytes, 0.0), bounds[:-1])
        return persistent + self.in_flight * activation

    def overflow(self, cuts: np.ndarray) -> float:
        """The largest ratio of a stage's bytes to its device's (at most 1: it fits)."""
        return float(np.max(self.memory(cuts) / self.capacity, initial=0.0))

    def fits(self, cuts: np.ndarray) -> bool:
        """Whether every stage fits its device."""
        return bool(np.all(self.memory(cuts) <= self.capacity * (1 + _SLACK)))

    def bottleneck(self, cuts: np.ndarray) -> float:
        """:func:`pipedream_objective` of the split."""
        return pipedream_objective(self.stage_times(cuts), self.cut_times(cuts))

    def latency(self, cuts: np.ndarray, micro_batches: int) -> float:
        """:func:`alpa_objective` of the split."""
        return alpa_objective(self.stage_times(cuts), micro_batches, self.cut_times(cuts))

    # -------------------------------------------------------------- the dynamic program
    @functools.cached_property
    def _time_prefix(self) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(self.time_us)])

    @functools.cached_property
    def _memory_prefix(self) -> dict[float, np.ndarray]:
        held = self.persistent_bytes
        return {float(m): np.concatenate([[0.0], np.cumsum(held + m * self.activation_bytes)])
                for m in np.unique(self.in_flight)}

    def memory_ends(self, scale: float = 1.0) -> np.ndarray:
        """``K × L``: for stage ``k`` starting at layer ``a``, the end (exclusive) of the longest
        run that fits its device (of ``scale`` times its memory)."""
        out = np.empty((self.num_stages, self.num_layers), dtype=np.int64)
        done: dict[tuple[float, float], np.ndarray] = {}
        for k in range(self.num_stages):
            key = (float(self.in_flight[k]), float(self.capacity[k]))
            if key not in done:
                prefix = self._memory_prefix[key[0]]
                limit = prefix[:-1] + key[1] * scale * (1 + _SLACK)
                done[key] = np.searchsorted(prefix, limit, side="right") - 1
            out[k] = done[key]
        return out

    def time_ends(self, bottleneck: float) -> np.ndarray:
        """``K × L``: for stage ``k`` starting at layer ``a``, the end (exclusive) of the longest
        run whose time on its device is at most ``bottleneck``."""
        prefix = self._time_prefix
        out = np.empty((self.num_stages, self.num_layers), dtype=np.int64)
        done: dict[float, np.ndarray] = {}
        for k in range(self.num_stages):
            speed = float(self.speed[k])
            if speed not in done:
                limit = prefix[:-1] + bottleneck * speed * (1 + _SLACK)
                done[speed] = np.searchsorted(prefix, limit, side="right") - 1
            out[k] = done[speed]
        return out

    def cheapest(self, memory_ends: np.ndarray, bottleneck: float, cost: np.ndarray) -> np.ndarray | None:
        """The split minimising ``Σ cost[k, c_k]`` with every stage fitting (``memory_ends``) and
        every stage and cut at most ``bottleneck`` µs; None when none does."""
        ends = memory_ends if bottleneck == np.inf else np.minimum(memory_ends, self.time_ends(bottleneck))
        if bottleneck != np.inf:
            cost = np.where(self.cut_us <= bottleneck * (1 + _SLACK), cost, np.inf)
        return split(ends, cost)

    def sum_cost(self) -> np.ndarray:
        """``K × (L + 1)``: the cut costs whose sum along a split is its ``Σ t + Σ cut`` less a
        constant (a stage from ``a`` to ``b`` lasts ``(T_b − T_a) / speed``, so each cut adds
        ``T_c · (1/speed_{k−1} − 1/speed_k)``)."""
        prefix = self._time_prefix
        out = self.cut_us.copy()
        inverse = 1.0 / self.speed
        out[1:] += prefix[None, :] * (inverse[:-1] - inverse[1:])[:, None]
        return out

    def bottleneck_floor(self) -> float:
        """A lower bound on any split's bottleneck: the largest layer on the fastest device, and
        the whole time over the summed speeds."""
        if not self.num_layers:
            return 0.0
        return float(max(self.time_us.max() / self.speed.max(), self.time_us.sum() / self.speed.sum()))


#: A split, its ``Σ t + Σ cut`` and its bottleneck (µs).
_Solution = tuple[np.ndarray, float, float]


def _exact_stage_count(problem: StageProblem) -> bool:
    return 1 <= problem.num_stages <= problem.num_layers


def alpa_split(problem: StageProblem, micro_batches: int, bound: float = np.inf) -> np.ndarray | None:
    """Alpa's stage program: the split of least :func:`alpa_objective` among those that fit.

    The bottleneck ``B`` is searched (see the module docstring) and, for each, the split of least
    ``Σ t + Σ cut`` with every stage and cut at most ``B`` is a sequential-partition program
    (:func:`~celeritas_core.placers.stages.split`): O(K · L) per ``B``.

    Parameters
    ----------
    problem : StageProblem
        The layers, the stages' devices and what each holds.
    micro_batches : int
        ``M``.
    bound : float, optional
        An objective already reached (µs): only a split strictly below it is returned.

    Returns
    -------
    numpy.ndarray or None
        The ``K − 1`` cuts (layer indices), or None when no split fits (or beats ``bound``).

    Examples
    --------
    >>> p = StageProblem.of([4.0, 1.0, 1.0, 4.0], [0] * 4, [1] * 4, [10.0] * 3, [1] * 3)
    >>> cuts = alpa_split(p, 8)
    >>> cuts.tolist(), p.latency(cuts, 8)                    # stages 4 | 2 | 4
    ([1, 3], 38.0)
    >>> alpa_split(p.scaled(0.1), 8) is None                 # a layer alone overflows
    True
    """
    if not _exact_stage_count(problem):
        return None
    memory_ends = problem.memory_ends()
    cost = problem.sum_cost()
    m = micro_batches - 1

    def solve(limit: float) -> _Solution | None:
        cuts = problem.cheapest(memory_ends, limit, cost)
        if cuts is None:
            return None
        times, cut = problem.stage_times(cuts), problem.cut_times(cuts)
        return cuts, float(times.sum() + cut.sum()), pipedream_objective(times, cut)

    top = solve(np.inf)
    if top is None:
        return None
    best_cuts, best = None, bound
    if top[1] + m * top[2] < best:
        best_cuts, best = top[0], top[1] + m * top[2]
    stack: list[tuple[float, _Solution | None, _Solution]] = [(problem.bottleneck_floor(), None, top)]
    while stack:
        lo, low, high = stack.pop()
        hi = high[2]
        total_hi = high[1]
        if m == 0 or total_hi + m * lo >= best * (1 - TOLERANCE) or hi - lo <= TOLERANCE * hi:
            continue
        if low is not None and low[1] <= total_hi + TOLERANCE * abs(total_hi):
            continue  # the least sum is the same over [lo, hi]: lo's split is the best there
        mid = 0.5 * (lo + hi)
        found = solve(mid)
        if found is None:
            stack.append((mid, None, high))
            continue
        value = found[1] + m * found[2]
        if value < best:
            best_cuts, best = found[0], value
        stack.append((mid, found, high))
        if found[2] > lo:
            stack.append((lo, low, found))
    return best_cuts


def pipedream_split(problem: StageProblem) -> np.ndarray | None:
    """PipeDream's stage program: the split of least :func:`pipedream_objective` among those
    that fit, and of those the least summed cut time.

    Feasibility at a bottleneck ``B`` is the sequential-partition program with every stage and
    cut at most ``B``; ``B`` is bisected, snapped to the bottleneck each split really has.

    Parameters
    ----------
    problem : StageProblem
        The layers, the stages' devices and what each holds (1F1B: :func:`in_flight`).

    Returns
    -------
    numpy.ndarray or None
        The ``K − 1`` cuts (layer indices), or None when no split fits.

    Examples
    --------
    >>> p = StageProblem.of([4.0, 1.0, 1.0, 4.0], [0] * 4, [1] * 4, [10.0] * 2, [2, 1])
    >>> cuts = pipedream_split(p)
    >>> cuts.tolist(), p.bottleneck(cuts)
    ([2], 5.0)
    """
    if not _exact_stage_count(problem):
        return None
    memory_ends = problem.memory_ends()
    best = problem.cheapest(memory_ends, np.inf, problem.cut_us)
    if best is None:
        return None
    hi, lo = problem.bottleneck(best), problem.bottleneck_floor()
    while hi - lo > TOLERANCE * hi:
        mid = 0.5 * (lo + hi)
        found = problem.cheapest(memory_ends, mid, problem.cut_us)
        if found is None:
            lo = mid
        else:
            best, hi = found, problem.bottleneck(found)
    return best


def least_overflow(problem: StageProblem) -> tuple[float, np.ndarray]:
    """The split whose fullest stage, relative to its device, is least: the least factor ``α``
    by which every device's memory must grow for a split to fit (bisection, within
    :data:`TOLERANCE`; 1 or less when one fits).

    Parameters
    ----------
    problem : StageProblem
        The layers and the stages' devices (``K <= L``).

    Returns
    -------
    tuple of (float, numpy.ndarray)
        ``α`` and a split that fits on devices ``α`` times as large.

    Examples
    --------
    >>> p = StageProblem.of([1.0] * 4, [0] * 4, [6, 2, 2, 2], [4.0, 4.0], [1, 1])
    >>> alpha, cuts = least_overflow(p)
    >>> round(alpha, 6), cuts.tolist()
    (1.5, [1])
    """
    zero = np.zeros_like(problem.cut_us)
    lo = 0.0
    whole = problem.persistent_bytes.sum() + problem.in_flight * problem.activation_bytes.sum()
    hi = max(float(np.max(whole / problem.capacity, initial=0.0)), 1e-300) * (1 + 1e-9)
    best = problem.cheapest(problem.memory_ends(hi), np.inf, zero)
    if best is None:  # cannot happen for K <= L; equal runs all the same
        return hi, gpipe_cuts(problem.num_layers, problem.num_stages)
    hi = problem.overflow(best)
    while hi - lo > TOLERANCE * hi:
        mid = 0.5 * (lo + hi)
        found = problem.cheapest(problem.memory_ends(mid), np.inf, zero)
        if found is None:
            lo = mid
        else:
            best, hi = found, min(problem.overflow(found), mid)
    return hi, best


def gpipe_cuts(num_layers: int, num_stages: int) -> np.ndarray:
    """GPipe's even split: ``num_stages`` stages of equal numbers of layers (±1).

    Parameters
    ----------
    num_layers : int
        ``L``.
    num_stages : int
        ``K`` (at most ``L``).

    Returns
    -------
    numpy.ndarray
        The ``K − 1`` cuts (layer indices).

    Examples
    --------
    >>> gpipe_cuts(10, 4).tolist()
    [2, 5, 7]
    """
    return (np.arange(1, num_stages) * num_layers // num_stages).astype(np.int64)


# ---------------------------------------------------------------------------- a graph's layers
@dataclass(frozen=True, eq=False)
class PipelineLayers:
    """A graph's layers in pipeline order (see the module docstring): layer ``l`` is the units at
    positions ``start[l]..start[l+1]-1`` of ``seq``; per layer its time (µs), persistent and
    activation bytes; per cut position ``c`` (before layer ``c``, ``0..L``) the bytes and number
    of the tensors spanning it."""

    seq: UnitSequence
    start: np.ndarray
    time_us: np.ndarray
    persistent_bytes: np.ndarray
    activation_bytes: np.ndarray
    cut_bytes: np.ndarray
    cut_tensors: np.ndarray

    @property
    def num_layers(self) -> int:
        """``L``."""
        return len(self.time_us)

    def cut_us(self, cluster: Cluster, devices: np.ndarray) -> np.ndarray:
        """``K × (L + 1)``: the cut before layer ``c`` priced on the link from ``devices[k − 1]``
        to ``devices[k]`` (row 0 zero)."""
        return link_cut_us(cluster, devices, self.cut_bytes, self.cut_tensors)

    def problem(self, cluster: Cluster, devices: np.ndarray, counts: np.ndarray) -> StageProblem:
        """The stage problem on ``devices`` (in stage order), stage ``k`` holding ``counts[k]``
        micro-batches of activations."""
        return StageProblem.of(self.time_us, self.persistent_bytes, self.activation_bytes,
                               cluster.memory_bytes[devices], counts, self.cut_us(cluster, devices),
                               cluster.speed[devices])

    def merged(self, max_layers: int) -> tuple[PipelineLayers, np.ndarray]:
        """At most ``max_layers`` runs of consecutive layers (equal counts), and the first layer
        of each run."""
        if self.num_layers <= max_layers:
            return self, np.arange(self.num_layers + 1, dtype=np.int64)
        first = np.unique(np.arange(max_layers + 1) * self.num_layers // max_layers).astype(np.int64)
        head = first[:-1]
        return PipelineLayers(self.seq, self.start[first], np.add.reduceat(self.time_us, head),
                              np.add.reduceat(self.persistent_bytes, head),
                              np.add.reduceat(self.activation_bytes, head),
                              self.cut_bytes[first], self.cut_tensors[first]), first

    def assignment(self, cuts: np.ndarray, devices: np.ndarray) -> np.ndarray:
        """Device per op when layers ``cuts[k-1]..cuts[k]-1`` go to ``devices[k]``."""
        return self.seq.assignment(self.start[np.asarray(cuts, dtype=np.int64)], devices)


def op_persistent_bytes(graph: Graph) -> np.ndarray:
    """Per op, the bytes a stage holds once however many micro-batches are in flight: the
    liveness field ``persistent_bytes`` (at most ``memory_bytes``) where the graph models the op;
    otherwise all of ``memory_bytes`` for a source (variable, slot, constant) or a member of a
    co-location group (a variable with its reads and update), 0 for the others.

    Parameters
    ----------
    graph : Graph
        The ops (``memory_bytes``: the planning bytes when called through ``place``).

    Returns
    -------
    numpy.ndarray
        float64 bytes per op; ``memory_bytes`` less it is the op's activation bytes.

    Examples
    --------
    >>> from celeritas_core import Graph
    >>> g = Graph.from_arrays(name="g", node_names=["w", "x", "y"], time_us=[1.0, 1.0, 1.0],
    ...                       memory_bytes=[8.0, 4.0, 4.0], edge_src=[0, 1], edge_dst=[1, 2],
    ...                       edge_bytes=[8.0, 4.0])
    >>> op_persistent_bytes(g).tolist()
    [8.0, 0.0, 0.0]
    """
    memory = graph.memory_bytes.astype(np.float64)
    held = (graph.in_degree == 0) | (graph.colocation_ids >= 0)
    persistent = np.where(held, memory, 0.0)
    live = graph.liveness
    if live is not None:
        persistent = np.where(live.modelled, np.minimum(live.persistent_bytes, memory), persistent)
    return persistent


def pipeline_layers(graph: Graph) -> PipelineLayers:
    """The layers of ``graph`` along its first pipeline order (``paired``, else ``topo``).

    Parameters
    ----------
    graph : Graph
        The ops of one micro-batch's step (``memory_bytes``: the planning bytes).

    Returns
    -------
    PipelineLayers
        The layers, their costs and the traffic of each cut between them.

    Examples
    --------
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> layers = pipeline_layers(small_training_graph(0))
    >>> layers.seq.name, layers.num_layers
    ('paired', 35)
    """
    seq = pipeline_sequences(graph, constants_with_readers=True)[0]
    units = seq.num_units
    key = seq.key[seq.sequence] if seq.key is not None else np.arange(units, dtype=np.float64)
    start = np.concatenate([[0], np.flatnonzero(key[1:] != key[:-1]) + 1, [units]]).astype(np.int64)
    if units == 0:
        start = np.zeros(1, dtype=np.int64)
    num_layers = len(start) - 1
    layer_at = np.repeat(np.arange(num_layers), np.diff(start))
    layer_of_op = layer_at[seq.position[seq.unit_of]]
    persistent = op_persistent_bytes(graph)
    activation = np.maximum(graph.memory_bytes - persistent, 0.0)
    nbytes, tensors = boundary_traffic(graph, seq)
    return PipelineLayers(
        seq, start,
        np.bincount(layer_of_op, weights=graph.time_us, minlength=num_layers),
        np.bincount(layer_of_op, weights=persistent, minlength=num_layers),
        np.bincount(layer_of_op, weights=activation, minlength=num_layers),
        nbytes[start], tensors[start])


# ---------------------------------------------------------------------------- the plan
@dataclass(frozen=True, eq=False)
class StageSplit:
    """A chosen split: the stage devices, the cuts (layer indices), whether it fits (else its
    ``overflow`` is the least factor of memory it needs) and its problem."""

    method: str
    devices: np.ndarray
    cuts: np.ndarray
    problem: StageProblem
    micro_batches: int
    fits: bool
    overflow: float

    def extra(self, layers: PipelineLayers) -> dict[str, Any]:
        """The plan's figures for :attr:`PlacerOutput.extra` (JSON types)."""
        p, cuts = self.problem, self.cuts
        return {
            "order": layers.seq.name, "layers": layers.num_layers, "micro_batches": self.micro_batches,
            "num_stages": p.num_stages, "stage_devices": [int(d) for d in self.devices],
            "stage_layers": np.diff(p.bounds(cuts)).tolist(),
            "stage_time_us": [float(x) for x in p.stage_times(cuts)],
            "cut_us": [float(x) for x in p.cut_times(cuts)],
            "stage_memory_bytes": [float(x) for x in p.memory(cuts)],
            "in_flight": [int(x) for x in p.in_flight],
            "fits": self.fits, "overflow": float(self.overflow),
            "latency_us": p.latency(cuts, self.micro_batches), "bottleneck_us": p.bottleneck(cuts),
        }


def _objective(method: str, problem: StageProblem, cuts: np.ndarray, micro_batches: int) -> float:
    if method == "pipedream":
        return problem.bottleneck(cuts)
    return problem.latency(cuts, micro_batches)


def plan_stages(layers: PipelineLayers, cluster: Cluster, method: str, micro_batches: int,
                stages: int = 0) -> StageSplit:
    """The split of ``layers`` onto ``cluster`` by ``method`` (see the module docstring): every
    stage count ``K`` from 1 to ``min(devices, layers)`` on the ``K`` stage devices (GPipe: that
    largest count only), the best objective among the splits that fit, else among those of least
    overflow.

    Parameters
    ----------
    layers : PipelineLayers
        The graph's layers (:func:`pipeline_layers`).
    cluster : Cluster
        The devices (memory: what the placer may fill).
    method : str
        ``"gpipe-even"``, ``"alpa-stages"`` or ``"pipedream"``.
    micro_batches : int
        ``M``.
    stages : int, optional
        The number of stages (capped at the devices and layers); 0 (default): every count, the
        best kept (GPipe: one stage per device).

    Returns
    -------
    StageSplit
        The split, in the layers of ``layers``.

    Examples
    --------
    >>> from celeritas_core import Cluster
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> layers = pipeline_layers(small_training_graph(0))
    >>> plan = plan_stages(layers, Cluster.homogeneous(4, 1e12), "gpipe-even", 4)
    >>> plan.problem.num_stages, np.diff(plan.problem.bounds(plan.cuts)).tolist()
    (4, [8, 9, 9, 9])
    """
    most = max(1, min(cluster.num_devices, layers.num_layers))
    counts = range(1, most + 1) if stages <= 0 else [min(stages, most)]
    stages = most if stages <= 0 else min(stages, most)
    if method == "gpipe-even":
        devices = stage_devices(cluster, stages)
        problem = layers.problem(cluster, devices, in_flight(method, stages, micro_batches))
        cuts = gpipe_cuts(layers.num_layers, stages)
        overflow = problem.overflow(cuts)
        return StageSplit(method, devices, cuts, problem, micro_batches, problem.fits(cuts), overflow)
    coarse, first = layers.merged(MAX_LAYERS)
    solver: Callable[[StageProblem, float], np.ndarray | None]
    if method == "alpa-stages":
        def solver(p: StageProblem, bound: float) -> np.ndarray | None:
            return alpa_split(p, micro_batches, bound)
    else:
        def solver(p: StageProblem, bound: float) -> np.ndarray | None:
            return pipedream_split(p)
    problems = []
    for k in counts:
        devices = stage_devices(cluster, k)
        problems.append((devices, coarse.problem(cluster, devices, in_flight(method, k, micro_batches))))
    best: tuple[float, int, np.ndarray] | None = None
    for i in range(len(problems) - 1, -1, -1):  # most stages first: their objective prunes the others
        cuts = solver(problems[i][1], best[0] if best is not None else np.inf)
        if cuts is not None:
            value = _objective(method, problems[i][1], cuts, micro_batches)
            if best is None or value < best[0] * (1 - TOLERANCE):
                best = (value, i, cuts)
    if best is None:  # nothing fits: the least overflow, then the objective at that memory
        alphas = [least_overflow(p) for _, p in problems]
        overflow = min(a for a, _ in alphas)
        for i, (alpha, fallback) in enumerate(alphas):
            if alpha > overflow * (1 + 1e-6):
                continue
            scaled = problems[i][1].scaled(alpha)
            cuts = solver(scaled, np.inf)
            cuts = fallback if cuts is None else cuts
            value = _objective(method, scaled, cuts, micro_batches)
            if best is None or value < best[0] * (1 - TOLERANCE):
                best = (value, i, cuts)
    assert best is not None
    _, i, cuts = best
    devices = problems[i][0]
    fine = layers.problem(cluster, devices, in_flight(method, len(devices), micro_batches))
    cuts = first[cuts]
    return StageSplit(method, devices, cuts, fine, micro_batches, fine.fits(cuts), fine.overflow(cuts))


# ---------------------------------------------------------------------------- the placers
@dataclass(frozen=True)
class StagePlannerParams:
    """The fields every stage planner takes (its own parameter class documents their meaning)."""

    micro_batches: int = param(4, "micro-batches pipelined per step (the graph's costs are per micro-batch)",
                               minimum=1, maximum=4096)
    stages: int = param(0, "pipeline stages (one device each); 0: every count up to the devices, the best "
                           "kept (gpipe-even: every device)", minimum=0, maximum=4096)


@dataclass(frozen=True)
class GPipeParams(StagePlannerParams):
    """The gpipe-even placer's parameters.

    Parameters
    ----------
    micro_batches : int
        ``M``, the micro-batches pipelined per step (default 4): the graph's ``time_us`` and
        activation bytes are one micro-batch's; each stage holds ``M`` micro-batches of
        activations.
    stages : int
        The number of stages; 0 (default): one per device.

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("gpipe-even").typed_params({"micro_batches": 8})
    GPipeParams(micro_batches=8, stages=0)
    """


@dataclass(frozen=True)
class AlpaParams(StagePlannerParams):
    """The alpa-stages placer's parameters.

    Parameters
    ----------
    micro_batches : int
        ``M``, the micro-batches pipelined per step (default 4): the graph's ``time_us`` and
        activation bytes are one micro-batch's; the objective is ``Σ t + (M − 1)·max t`` and each
        stage holds ``M`` micro-batches of activations.
    stages : int
        The number of stages; 0 (default): every count up to the devices, the best kept.

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("alpa-stages").typed_params({"micro_batches": 16})
    AlpaParams(micro_batches=16, stages=0)
    """


@dataclass(frozen=True)
class PipeDreamParams(StagePlannerParams):
    """The pipedream placer's parameters.

    Parameters
    ----------
    micro_batches : int
        ``M``, the micro-batches pipelined per step (default 4): the graph's ``time_us`` and
        activation bytes are one micro-batch's; stage ``s`` of ``S`` holds ``min(M, S − s)``
        micro-batches of activations (1F1B).
    stages : int
        The number of stages; 0 (default): every count up to the devices, the best kept.

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("pipedream").typed_params({"micro_batches": 2})
    PipeDreamParams(micro_batches=2, stages=0)
    """


def _place(graph: Graph, cluster: Cluster, method: str, micro_batches: int, stages: int = 0) -> PlacerOutput:
    """The plan of ``method`` as a placement (every op on the largest device when the graph is
    empty of layers or the cluster has one device)."""
    if graph.num_nodes == 0:
        return PlacerOutput(assignment=np.zeros(0, dtype=np.int64))
    layers = pipeline_layers(graph)
    plan = plan_stages(layers, cluster, method, micro_batches, stages)
    return PlacerOutput(assignment=layers.assignment(plan.cuts, plan.devices), extra=plan.extra(layers))


def gpipe_even_placer(graph: Graph, cluster: Cluster, params: GPipeParams) -> PlacerOutput:
    """GPipe's stages: the layers cut into one stage per device, equal numbers of layers (±1).

    Parameters
    ----------
    graph : Graph
        One micro-batch's training step (:func:`~celeritas_core.placers.place` passes the
        planning bytes as ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : GPipeParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``extra`` the stages (devices, layers, time, cut time, memory
        with ``M`` micro-batches in flight), whether they fit and the pipeline's latency
        (:func:`alpa_objective`) and bottleneck.

    Examples
    --------
    >>> from celeritas_core import Cluster, place
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> p = place(small_training_graph(0), Cluster.homogeneous(3, 1e12), "gpipe-even")
    >>> p.extra["stage_layers"], p.extra["fits"]
    ([11, 12, 12], True)
    """
    return _place(graph, cluster, "gpipe-even", params.micro_batches, params.stages)


def alpa_stages_placer(graph: Graph, cluster: Cluster, params: AlpaParams) -> PlacerOutput:
    """Alpa's inter-operator stages: the contiguous split of least ``Σ t + (M − 1)·max t``.

    Parameters
    ----------
    graph : Graph
        One micro-batch's training step (:func:`~celeritas_core.placers.place` passes the
        planning bytes as ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : AlpaParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``extra`` as for ``gpipe-even``, the stages chosen by
        :func:`alpa_split` (at most one per device).

    Examples
    --------
    >>> from celeritas_core import Cluster, place
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> g = small_training_graph(0)
    >>> alpa = place(g, Cluster.homogeneous(3, 1e12), "alpa-stages", {"micro_batches": 8})
    >>> even = place(g, Cluster.homogeneous(3, 1e12), "gpipe-even", {"micro_batches": 8})
    >>> alpa.extra["latency_us"] <= even.extra["latency_us"]
    True
    """
    return _place(graph, cluster, "alpa-stages", params.micro_batches, params.stages)


def pipedream_placer(graph: Graph, cluster: Cluster, params: PipeDreamParams) -> PlacerOutput:
    """PipeDream's stages: the contiguous split of least bottleneck under 1F1B's memory.

    Parameters
    ----------
    graph : Graph
        One micro-batch's training step (:func:`~celeritas_core.placers.place` passes the
        planning bytes as ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : PipeDreamParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``extra`` as for ``gpipe-even``, the stages chosen by
        :func:`pipedream_split` (at most one per device), stage ``s`` holding ``min(M, S − s)``
        micro-batches of activations.

    Examples
    --------
    >>> from celeritas_core import Cluster, place
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> p = place(small_training_graph(0), Cluster.homogeneous(4, 1e12), "pipedream")
    >>> p.extra["in_flight"]
    [4, 3, 2, 1]
    """
    return _place(graph, cluster, "pipedream", params.micro_batches, params.stages)


register_placer(PlacerSpec(
    "gpipe-even", gpipe_even_placer,
    "GPipe pipeline stages: the layers in forward order cut into one stage per device, equal numbers of "
    "layers each (gradients and updates with their layer)",
    GPipeParams,
))
register_placer(PlacerSpec(
    "alpa-stages", alpa_stages_placer,
    "Alpa's inter-operator pass: contiguous stages minimising sum + (M - 1) x slowest stage time per "
    "micro-batch, each fitting with M micro-batches of activations",
    AlpaParams,
))
register_placer(PlacerSpec(
    "pipedream", pipedream_placer,
    "PipeDream's planner (no replication): contiguous stages minimising the slowest stage or transfer, "
    "each fitting with 1F1B's in-flight activations",
    PipeDreamParams,
))
