"""Work budgets: the same input gives the same placement on an idle machine and on a busy one.

A placer's optional stages (more candidates, list schedules) are admitted by a *work* budget:
each stage's cost is estimated from the graph's size (µs per op plus edge, measured once on the
reference machine and written down next to the stage), never read off a clock, so whether a
stage runs depends on the input alone. A wall-clock limit exists as a safety net for a machine
far slower than expected; it may only stop optional stages that would otherwise run, and the
record says which it stopped. Stages that decide feasibility (memory repair, OOM checks) never
ask this budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class StageBudget:
    """Admits optional stages against ``work_us`` (nominal µs) and records what ran.

    ``deadline`` is a ``time.perf_counter()`` instant after which optional stages are cut (the
    safety net); ``time.perf_counter`` is looked up at each reading, so a test can slow it down.

    Examples
    --------
    >>> budget = StageBudget(work_us=1000.0, deadline=float("inf"))
    >>> budget.allow("cheap", 400.0), budget.allow("dear", 700.0), budget.allow("cheap-2", 600.0)
    (True, False, True)
    >>> budget.report()["skipped_for_work"]
    ['dear']
    """

    work_us: float
    deadline: float
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)

    def allow(self, stage: str, estimate_us: float) -> bool:
        """Whether optional ``stage`` (estimated ``estimate_us`` nominal µs) runs; charges it if so."""
        if estimate_us > self.work_us:
            self.skipped.append(stage)
            return False
        if time.perf_counter() > self.deadline:
            self.cut.append(stage)
            return False
        self.work_us -= estimate_us
        self.ran.append(stage)
        return True

    def reserve(self, stage: str, estimate_us: float) -> bool:
        """Set ``estimate_us`` aside now for ``stage``, which runs later, when the whole budget
        covers it; the record lists it as run (or skipped) at once. Not subject to the clock."""
        if estimate_us > self.work_us:
            self.skipped.append(stage)
            return False
        self.work_us -= estimate_us
        self.ran.append(stage)
        return True

    def report(self) -> dict[str, list[str]]:
        """The stages that ran, those the work budget skipped and those the clock cut."""
        return {"ran": list(self.ran), "skipped_for_work": list(self.skipped), "cut_by_clock": list(self.cut)}
