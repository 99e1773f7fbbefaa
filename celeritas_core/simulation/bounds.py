"""Reference step times: a lower bound no placement can beat, and the single-device time."""

from __future__ import annotations

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import critical_path_length_us


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

    Parameters
    ----------
    graph : Graph
        The ops.
    cluster : Cluster
        The devices' speeds.

    Returns
    -------
    float
        A step time (µs) that no placement's replay beats.

    Examples
    --------
    >>> from celeritas_core import Cluster, Graph, lower_bound_us
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> lower_bound_us(graph, Cluster.homogeneous(2, 1e9))   # the path a, b, d: 70 µs
    70.0
    >>> lower_bound_us(graph, Cluster.build(["fast", "slow"], [1e9, 1e9], speed=[2.0, 1.0]))
    40.0
    """
    fastest = float(cluster.speed.max())
    path = critical_path_length_us(graph) / fastest
    work = graph.total_time_us / float(cluster.speed.sum())
    return max(path, work)


def single_device_time_us(graph: Graph, cluster: Cluster, device: int = 0) -> float:
    """Step time (µs) with every op on ``device``: total work / that device's speed.

    Parameters
    ----------
    graph : Graph
        The ops.
    cluster : Cluster
        The devices' speeds.
    device : int, optional
        The device's index (default 0).

    Returns
    -------
    float
        The one-device step time (µs).

    Examples
    --------
    >>> from celeritas_core import Cluster, Graph, single_device_time_us
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> fast_slow = Cluster.build(["fast", "slow"], [1e9, 1e9], speed=[2.0, 1.0])
    >>> single_device_time_us(graph, fast_slow), single_device_time_us(graph, fast_slow, 1)
    (60.0, 120.0)
    """
    return graph.total_time_us / float(cluster.speed[device])
