"""The engine's default settings that the ``celeritas`` command shows in its help, in a module
that imports nothing: ``celeritas --help`` builds its parser without loading numpy or the engine
(tests/cli/test_startup.py). The modules that use them import them from here
(:mod:`celeritas_core.graphs.cluster`, :mod:`celeritas_core.placers.fusion`,
:mod:`celeritas_core.simulation.simulator`).
"""

from __future__ import annotations

#: Default transfer model: PCIe-class link, ~10 GB/s (1e-4 µs per byte) and 25 µs latency.
DEFAULT_SLOPE_US_PER_BYTE = 1e-4
DEFAULT_INTERCEPT_US = 25.0

#: Optimal Operation Fusion's exploration range R and per-cluster memory cap (a fraction of
#: device memory).
DEFAULT_R = 200
DEFAULT_MEMORY_FRACTION = 0.25

#: The documented dispatch order: ties between ready ops go to the smaller topological rank.
DOCUMENTED_DISPATCH = "rank"
#: Other valid dispatch orders a runtime may follow (docs/simulator.md, "Dispatch orders"): Kahn's
#: FIFO order and four seeded random topological orders. A placement whose step holds under
#: these does not owe its speed to the documented order's tie-breaks.
ALTERNATIVE_DISPATCH: tuple[str, ...] = ("fifo", "random:1", "random:2", "random:3", "random:4")

#: The links a topology preset names (``--topology 2x4:nvlink,ib``; docs/formats.md, "Topology
#: presets"): name → (nominal bandwidth per direction in GB/s, effective per-transfer latency in µs).
#: The bandwidths are the vendors' nominal figures; the latencies are ours (the hardware's is below
#: a microsecond; a framework's transfer adds the copy's launch and the hand-over to the consumer).
LINK_PRESETS: dict[str, tuple[float, float]] = {
    "nvlink3": (300.0, 10.0),  # A100 SXM: 600 GB/s both directions
    "nvlink4": (450.0, 10.0),  # H100 SXM: 900 GB/s both directions
    "pcie3": (15.75, 25.0),  # 8 GT/s x16, 128b/130b
    "pcie4": (31.5, 25.0),  # 16 GT/s x16
    "pcie5": (63.0, 25.0),  # 32 GT/s x16
    "ib-hdr": (25.0, 30.0),  # InfiniBand HDR, 200 Gb/s
    "ib-ndr": (50.0, 30.0),  # InfiniBand NDR, 400 Gb/s
    "100gbe": (12.5, 50.0),  # 100 Gigabit Ethernet
}
#: Short names of :data:`LINK_PRESETS` entries: the current generation of each kind.
LINK_ALIASES: dict[str, str] = {"nvlink": "nvlink4", "pcie": "pcie4", "ib": "ib-ndr"}

#: Execution-order modes of a placement (docs/formats.md, ``order_mode``). ``enforced``: each
#: device runs its ops in the order recorded in the placement (``device_order``), the order the
#: simulator ran them, whatever else is ready; the runtime adds control dependencies for it.
#: ``free``: the runtime picks among ready ops its own way (the simulator's dispatch orders).
ENFORCED_ORDER = "enforced"
FREE_ORDER = "free"
ORDER_MODES: tuple[str, ...] = (ENFORCED_ORDER, FREE_ORDER)
#: The mode ``place`` records and the pipeline and the consumer run by default (decided by
#: measurement: docs/tensorflow.md, "Enforced execution order").
DEFAULT_ORDER_MODE = ENFORCED_ORDER

#: Pipeline schedules of a placement with micro-batches (docs/pipelining.md): ``gpipe`` (every
#: forward, then every backward) and ``1f1b`` (one forward, one backward); ``auto`` asks for the
#: faster that fits (:mod:`celeritas_core.pipeline.schedules`).
GPIPE, ONE_F_ONE_B, AUTO_SCHEDULE = "gpipe", "1f1b", "auto"
SCHEDULES: tuple[str, ...] = (GPIPE, ONE_F_ONE_B)
