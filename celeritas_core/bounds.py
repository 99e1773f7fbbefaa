"""Reference step times: a lower bound no placement can beat, and the single-device time."""

from __future__ import annotations

from celeritas_core.cluster import Cluster
from celeritas_core.graph import Graph
from celeritas_core.levels import critical_path_length_us


def lower_bound_us(graph: Graph, cluster: Cluster) -> float:
    """max(longest path without communication on the fastest device, total work / total speed) (µs).

    A true bound for every placement the simulator replays, flat cluster or link topology alike
    (tests/core/test_topology.py checks it on random topologies). Proof sketch: in a replay an op
    starts no earlier than every predecessor finishes (an input on another device arrives at the
    end of a transfer that starts no earlier than its producer's finish and lasts ``k·bytes + b
    >= 0`` µs: every link has ``k, b >= 0``, and waiting for a channel or a shared network port
    only delays it further), and op ``v`` on device ``d`` lasts ``time_us[v] / speed[d] >=
    time_us[v] / max(speed)``. So along any path the last op finishes no earlier than the path's
    work over the fastest speed. And each device runs one op at a time, so by the step time ``T``
    device ``d`` has done at most ``T · speed[d]`` µs of work: all the work fits only if
    ``T >= total / sum(speed)``. Neither argument uses the transfer model, so no link topology
    or contention can break it.
    """
    fastest = float(cluster.speed.max())
    path = critical_path_length_us(graph) / fastest
    work = graph.total_time_us / float(cluster.speed.sum())
    return max(path, work)


def single_device_time_us(graph: Graph, cluster: Cluster, device: int = 0) -> float:
    """Step time (µs) with every op on ``device``: total work / that device's speed."""
    return graph.total_time_us / float(cluster.speed[device])
