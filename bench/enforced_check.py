"""The check every placing benchmark makes of each placement: replayed with its recorded order
enforced (``device_order``, docs/simulator.md "Enforced order"), is the step the one predicted, bit
for bit? The prediction comes from the free replay under the documented dispatch order; the
enforced replay is what a runtime that follows the order runs, so any difference is a prediction
the runtime would not meet."""

from __future__ import annotations

from dataclasses import dataclass, field

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.placement import Placement
from celeritas_core.simulation.simulator import simulate


@dataclass
class EnforcedReplayCheck:
    """Counts the placements checked and names those whose enforced replay differs."""

    checked: int = 0
    differing: list[str] = field(default_factory=list)

    def check(self, graph: Graph, cluster: Cluster, placement: Placement, label: str) -> None:
        """Replay ``placement`` (evaluated on ``cluster``) with its recorded order enforced."""
        if placement.device_order is None:
            self.differing.append(f"{label}: no recorded order")
            return
        order = placement.device_order
        step = simulate(graph, cluster, placement.assignment, device_order=order).step_time_us
        self.checked += 1
        if step != placement.predicted_step_time_us:
            self.differing.append(f"{label}: enforced {step!r} µs, predicted "
                                  f"{placement.predicted_step_time_us!r} µs")

    def line(self) -> str:
        """The target's PASS/MISS line, with the first placements that differ."""
        unrecorded = sum(1 for d in self.differing if d.endswith("no recorded order"))
        total = self.checked + unrecorded
        same = total - len(self.differing)
        verdict = "PASS" if not self.differing and self.checked else "MISS"
        shown = "; ".join(self.differing[:3])
        return (f"{verdict} every placement's replay with its recorded order enforced is its predicted step, "
                f"bit for bit ({same} of {total} placements)" + (f": {shown}" if shown else ""))
