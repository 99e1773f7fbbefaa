"""Reference step times: a lower bound no placement can beat, and the single-device time."""

from __future__ import annotations

from celeritas_core.cluster import Cluster
from celeritas_core.graph import Graph
from celeritas_core.levels import critical_path_length_us


def lower_bound_us(graph: Graph, cluster: Cluster) -> float:
    """max(longest path without communication on the fastest device, total work / total speed) (µs)."""
    fastest = float(cluster.speed.max())
    path = critical_path_length_us(graph) / fastest
    work = graph.total_time_us / float(cluster.speed.sum())
    return max(path, work)


def single_device_time_us(graph: Graph, cluster: Cluster, device: int = 0) -> float:
    """Step time (µs) with every op on ``device``: total work / that device's speed."""
    return graph.total_time_us / float(cluster.speed[device])
