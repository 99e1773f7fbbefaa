"""The engine's default settings that the ``celeritas`` command shows in its help, in a module
that imports nothing: ``celeritas --help`` builds its parser without loading numpy or the engine
(tests/cli/test_startup.py). The modules that use them import them from here
(:mod:`celeritas_core.cluster`, :mod:`celeritas_core.fusion`, :mod:`celeritas_core.simulator`).
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
