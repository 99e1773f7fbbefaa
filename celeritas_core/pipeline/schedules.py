"""Each device's order for a pipelined step, and its replay (µs, bytes).

Every device runs its ops in a sequence of *blocks*: the ops run once before (variables, reads)
first, then one block per micro-batch phase, then the updates. The reads that only the updates
take (each update's read of the learning rate or of another shared scalar:
:attr:`~celeritas_core.pipeline.unroll.Unrolled.update_reads`) run just after the device's first
forward block ``F_0`` instead: at the head of the step their transfers (one per update whose
shared scalar lives on another device, each paying the link's latency) held the channels that the
first micro-batch's activations need to start the pipeline; after ``F_0`` those activations leave
first, and the reads still arrive long before any update. Replayed at M = 2 under 1F1B on 4
devices with the assignment fixed: MobileNetV3 at 60 % of its one-device peak (348 such reads)
45.0 ms with them at the head, 41.6 ms after ``F_0``; NASNetMobile at 30 % (1,484 reads) 125.6
and 111.4 ms. (After ``B_0`` they would hold back the updates of the devices that finish first
until the first stage's cool-down, whose receive channel the updates' control edges then flood:
the paper-shaped transformer at 30 %, 148.3 ms at the head or after ``F_0``, 164.6 ms after
``B_0``.)

A block ``F_k`` holds the device's forward ops of micro-batch ``k``, ``B_k`` its backward ops and
the accumulations of ``k``; within a block, ops go by the original graph's topological rank. A
device with a warm-up of ``W`` micro-batches runs

    F_0 … F_{W-1}, then B_0, F_W, B_1, F_{W+1}, …, B_{M-1}

* **GPipe** (Huang et al., 2019): ``W = M`` on every device: all forwards, then all backwards.
  Every micro-batch's activations are in flight at once on every device;
* **1F1B** (PipeDream-Flush, Narayanan et al., 2021): the device that holds the ``s``-th
  forward stage of ``S`` (devices ranked by the mean topological position of their forward ops)
  warms up with ``W = min(M, S - s)`` micro-batches, then alternates one backward and one forward,
  so at most ``W`` micro-batches of activations are in flight on it.

Both sequences list a micro-batch's forward before its backward and micro-batches in order, so
each device's order agrees with the dependencies *on that device*; at op level, where forward ops
may go back and forth between devices, two devices' 1F1B orders can still wait on each other.
:func:`replay_pipeline` lets the simulator check the orders for a deadlock (before it replays
anything), and on one raises every device's warm-up by one micro-batch until none remains (``W = M`` is GPipe,
which never deadlocks); the warm-ups used are reported.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from celeritas_core.defaults import AUTO_SCHEDULE, GPIPE, SCHEDULES
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.pipeline.roles import AFTER, BACKWARD, BEFORE, FORWARD
from celeritas_core.pipeline.unroll import Unrolled
from celeritas_core.simulation.memory import memory_profile
from celeritas_core.simulation.simulator import SimulationResult, simulate


def check_schedule(schedule: str, *, auto: bool = False) -> str:
    """``schedule`` when it names a schedule (or ``auto`` when allowed), else raise in one line."""
    allowed = (*SCHEDULES, AUTO_SCHEDULE) if auto else SCHEDULES
    if schedule not in allowed:
        raise CeleritasInputError(f"unknown schedule {schedule!r} (known: {', '.join(allowed)})")
    return schedule


def stage_ranks(unrolled: Unrolled, assignment: np.ndarray, num_devices: int,
                rank: np.ndarray) -> np.ndarray:
    """Per device: its position among the devices that hold forward ops, ranked by the mean
    topological ``rank`` (of the original graph) of those ops; -1 for a device with none."""
    graph_ops = unrolled.op[(unrolled.role == FORWARD) & (unrolled.micro_batch == 0)]
    dev = np.asarray(assignment, dtype=np.int64)[graph_ops]
    counts = np.bincount(dev, minlength=num_devices)
    mean = np.bincount(dev, weights=rank[graph_ops].astype(np.float64), minlength=num_devices)
    mean = np.divide(mean, counts, out=np.full(num_devices, np.inf), where=counts > 0)
    out = np.full(num_devices, -1, dtype=np.int64)
    holders = np.flatnonzero(counts > 0)
    out[holders[np.argsort(mean[holders], kind="stable")]] = np.arange(len(holders))
    return out


def warmups(schedule: str, unrolled: Unrolled, assignment: np.ndarray, num_devices: int,
            rank: np.ndarray) -> np.ndarray:
    """Each device's warm-up ``W`` (micro-batches) under ``schedule`` (module docstring)."""
    m = unrolled.micro_batches
    if check_schedule(schedule) == GPIPE:
        return np.full(num_devices, m, dtype=np.int64)
    stage = stage_ranks(unrolled, assignment, num_devices, rank)
    num_stages = int((stage >= 0).sum())
    return np.where(stage >= 0, np.minimum(m, num_stages - stage), m).astype(np.int64)


def block_positions(unrolled: Unrolled, device_warmup: np.ndarray) -> np.ndarray:
    """Per node of the unrolled graph: its block's position in its device's sequence (module
    docstring); an update's read (:attr:`~celeritas_core.pipeline.unroll.Unrolled.update_reads`)
    goes just after ``F_0`` (position 1/2)."""
    m = unrolled.micro_batches
    k = unrolled.micro_batch
    w = device_warmup
    forward = np.where(k < w, k, w + 2 * (k - w) + 1)
    backward = w + 2 * k
    role = unrolled.role
    before = np.where(unrolled.update_reads, 0.5, -1.0)
    return np.select([role == BEFORE, role == FORWARD, role == BACKWARD, role == AFTER],
                     [before, forward, backward, np.full(len(k), 3 * m + 1)]).astype(np.float64)


def device_orders(unrolled: Unrolled, assignment: np.ndarray, num_devices: int, rank: np.ndarray,
                  warmup: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each device's node order (indices of the unrolled graph) for per-device ``warmup``."""
    node_dev = unrolled.expand(assignment)
    position = block_positions(unrolled, warmup[node_dev])
    within = 2 * rank[unrolled.op] + unrolled.accumulation
    by = np.lexsort((within, position, node_dev))
    bounds = np.searchsorted(node_dev[by], np.arange(num_devices + 1))
    return tuple(by[bounds[d]:bounds[d + 1]].astype(np.int64) for d in range(num_devices))


@dataclass(frozen=True, eq=False)
class PipelineReplay:
    """The replay of a pipelined step: step time (µs), per-device peak (bytes), the orders run.

    The peak is the liveness replay of the step's timeline, made when first asked for: a search
    that already holds a faster step that fits needs no peak of a slower one."""

    schedule: str
    micro_batches: int
    step_time_us: float
    warmup: np.ndarray
    """Per device: the micro-batches it warms up with (the most in flight on it)."""
    orders: tuple[np.ndarray, ...]
    """Per device: the unrolled graph's nodes in the order run."""
    result: SimulationResult
    unrolled: Unrolled
    node_device: np.ndarray
    """Per node of the unrolled graph: its device."""
    num_devices: int

    @functools.cached_property
    def device_peak_bytes(self) -> np.ndarray:
        """Per device: the liveness peak (bytes) with every micro-batch in flight counted."""
        return memory_profile(self.unrolled.graph, self.num_devices, self.node_device, self.result).peak_bytes

    def overflow_bytes(self, capacity: np.ndarray) -> float:
        """Bytes above capacity, summed over devices (0 when it fits)."""
        return float(np.maximum(self.device_peak_bytes - capacity, 0.0).sum())


def replay_pipeline(unrolled: Unrolled, cluster: Cluster, assignment: np.ndarray, schedule: str,
                    rank: np.ndarray) -> PipelineReplay:
    """Replay ``assignment`` (one device per op of the original graph) as a pipelined step under
    ``schedule``, each device's order enforced.

    Parameters
    ----------
    unrolled : Unrolled
        The pipelined step (:func:`~celeritas_core.pipeline.unroll.unroll`).
    cluster : Cluster
        The devices.
    assignment : numpy.ndarray of int
        The device of every op of the original graph.
    schedule : str
        ``gpipe`` or ``1f1b``.
    rank : numpy.ndarray of int
        The original graph's topological rank (:attr:`Graph.topological_rank`).

    Returns
    -------
    PipelineReplay
        The step time, the per-device liveness peak with every micro-batch in flight counted,
        the warm-ups and orders used.

    Examples
    --------
    >>> from celeritas_core import Cluster
    >>> from celeritas_core.generators.synthetic import small_training_graph
    >>> from celeritas_core.pipeline.roles import op_roles
    >>> from celeritas_core.pipeline.microbatch import microbatch_graph
    >>> from celeritas_core.pipeline.unroll import unroll
    >>> g = small_training_graph(0, liveness=True)
    >>> roles = op_roles(g)
    >>> u = unroll(microbatch_graph(g, roles, 4), roles, 4)
    >>> one = np.zeros(g.num_nodes, dtype=np.int64)
    >>> gpipe = replay_pipeline(u, Cluster.homogeneous(1, 2**40), one, "gpipe", g.topological_rank)
    >>> f1b = replay_pipeline(u, Cluster.homogeneous(1, 2**40), one, "1f1b", g.topological_rank)
    >>> bool(f1b.device_peak_bytes[0] < gpipe.device_peak_bytes[0])   # one micro-batch in flight
    True
    """
    node_dev = unrolled.expand(assignment)
    warmup = warmups(schedule, unrolled, assignment, cluster.num_devices, rank)
    while True:  # the simulator refuses an order that deadlocks: warm up by one more (module docstring)
        orders = device_orders(unrolled, assignment, cluster.num_devices, rank, warmup)
        try:
            result = simulate(unrolled.graph, cluster, node_dev, device_order=orders)
            break
        except CeleritasInputError:
            if (warmup >= unrolled.micro_batches).all():
                raise
            warmup = np.minimum(warmup + 1, unrolled.micro_batches)
    return PipelineReplay(schedule, unrolled.micro_batches, result.step_time_us, warmup, orders, result,
                          unrolled, node_dev, cluster.num_devices)

