"""Baseline placers without fusion: ``single`` (everything on device 0) and Baechi's ``m-topo``.

``m-topo`` follows Baechi (Jeon et al., SoCC 2020): walk the M-TOPO order and fill each device up
to an even share of the model's memory plus the largest placement unit (``uniform``, Baechi's
``m_topo``), or up to its memory (``uniform=0``, Baechi's ``m_topo_nonuniform``), then move on. Neither
placer raises when the model does not fit: the placement is best effort and :func:`place`
reports the over-full devices as OOM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import anchored_memory, apply_colocation, colocation_anchor
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.orders import m_topo_order
from celeritas_core.placers.base import NoParams, PlacerOutput, PlacerSpec, param, register_placer


def single_placer(graph: Graph, cluster: Cluster, params: NoParams) -> PlacerOutput:
    """Every op on device 0: the one-device reference (OOM when the model exceeds its bytes).

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
        Device 0 for every op.

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> place(graph, Cluster.homogeneous(2, 350), "single").oom_devices   # 600 bytes on 350
    ('gpu:0',)
    """
    return PlacerOutput(assignment=np.zeros(graph.num_nodes, dtype=np.int64))


@dataclass(frozen=True)
class TopoParams:
    """m-TOPO's parameters.

    Parameters
    ----------
    uniform : bool
        True (default, Baechi's ``m_topo``): fill each device up to ``total / k + largest`` bytes;
        False (Baechi's ``m_topo_nonuniform``): up to its memory, so the fewest devices are used.

    Examples
    --------
    >>> from celeritas_core import get_placer
    >>> get_placer("m-topo").typed_params({"uniform": "0"})
    TopoParams(uniform=False)
    """

    uniform: bool = param(True, "true: fill each device up to total/k + largest op bytes (Baechi's "
                                "m_topo); false: up to its memory (Baechi's m_topo_nonuniform)")


def m_topo_caps(total_bytes: float, largest_bytes: float, cluster: Cluster,
                uniform: bool = True) -> np.ndarray:
    """Per-device fill cap (bytes): ``min(total / k + largest, memory)``, the last device its memory;
    every device's memory when not ``uniform``."""
    if not uniform:
        return cluster.memory_bytes.astype(np.float64).copy()
    k = cluster.num_devices
    caps = np.minimum(total_bytes / k + largest_bytes, cluster.memory_bytes.astype(np.float64))
    caps[-1] = float(cluster.memory_bytes[-1])
    return caps


def m_topo_place(graph: Graph, cluster: Cluster, order: np.ndarray,
                 node_memory: np.ndarray, uniform: bool = True) -> np.ndarray:
    """Fill devices in ``order`` up to :func:`m_topo_caps` of ``node_memory`` (bytes); device per node.

    A node that fits under the cap of neither the current nor any later device goes to the device
    with the most free physical memory (best effort; evaluation flags the OOM).
    """
    mem = node_memory.tolist()
    largest = max(mem, default=0.0)
    caps = m_topo_caps(float(node_memory.sum()), largest, cluster, uniform).tolist()
    capacity = cluster.memory_bytes.astype(np.float64).tolist()
    used = [0.0] * cluster.num_devices
    device = np.zeros(graph.num_nodes, dtype=np.int64)
    current = 0
    last = cluster.num_devices - 1
    for v in order.tolist():
        m = mem[v]
        while current < last and used[current] + m > caps[current]:
            current += 1
        if used[current] + m <= caps[current]:
            d = current
        else:  # no cap has room: best effort on the device with the most free memory
            d = max(range(last + 1), key=lambda i: capacity[i] - used[i])
        device[v] = d
        used[d] += m
    return device


def m_topo_placer(graph: Graph, cluster: Cluster, params: TopoParams) -> PlacerOutput:
    """Baechi's m-TOPO: fill devices in M-TOPO order up to an even memory share (bytes) each, or
    (``uniform`` false) up to each one's memory.

    Parameters
    ----------
    graph : Graph
        The ops to place (:func:`~celeritas_core.placers.place` passes the planning bytes as
        ``memory_bytes``).
    cluster : Cluster
        The devices, with the memory the placer may fill (bytes).
    params : TopoParams
        The placer's parameters.

    Returns
    -------
    PlacerOutput
        The device of every op; ``extra`` each device's fill cap (bytes).

    Examples
    --------
    Placers are called through :func:`~celeritas_core.placers.place` by name:

    >>> from celeritas_core import Cluster, Graph, place
    >>> graph = Graph.from_arrays(
    ...     name="diamond", node_names=["a", "b", "c", "d"], time_us=[10.0, 50.0, 50.0, 10.0],
    ...     memory_bytes=[100, 200, 200, 100], edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3],
    ...     edge_bytes=[1000, 1000, 1000, 1000])
    >>> placement = place(graph, Cluster.homogeneous(2, 1e9), "m-topo")
    >>> placement.assignment.tolist(), placement.extra["cap_bytes"]   # cap: 600 / 2 + 200 bytes
    ([0, 0, 0, 1], [500.0, 1000000000.0])
    """
    order = m_topo_order(graph)
    anchor = colocation_anchor(graph, order)
    memory = anchored_memory(graph, anchor)
    device = m_topo_place(graph, cluster, order, memory, params.uniform)
    caps = m_topo_caps(float(memory.sum()), float(memory.max(initial=0.0)), cluster, params.uniform)
    return PlacerOutput(assignment=apply_colocation(device, anchor),
                        extra={"cap_bytes": [float(c) for c in caps]})


register_placer(PlacerSpec(
    "single", single_placer,
    "every op on device 0 (the one-device reference every split must beat)",
))
register_placer(PlacerSpec(
    "m-topo", m_topo_placer,
    "Baechi m-TOPO: fill devices in M-TOPO order up to total/k + largest op bytes each",
    TopoParams,
))
