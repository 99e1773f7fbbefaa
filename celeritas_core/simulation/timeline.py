"""Busy intervals of one device, for insertion-based earliest start (µs).

Shared by Adjusting Placement and HEFT: both may put an op into an idle gap of a device after its
inputs arrive (insertion-based scheduling; Topcuoglu, Hariri and Wu, IEEE TPDS 13(3), 2002).
"""

from __future__ import annotations

from bisect import bisect_right


class DeviceTimeline:
    """Busy intervals ``[start, end)`` (µs) of one device, kept sorted by start."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def earliest_start(self, ready: float, duration: float) -> float:
        """First time >= ``ready`` with an idle gap of ``duration`` (µs) on this device."""
        starts, ends = self.starts, self.ends
        k = bisect_right(ends, ready)  # intervals ending after `ready` start at k
        t = ready
        n = len(starts)
        while k < n:
            if starts[k] - t >= duration:
                return t
            if ends[k] > t:
                t = ends[k]
            k += 1
        return t

    def insert(self, start: float, end: float) -> None:
        """Record ``[start, end)`` as busy (a zero-length interval still splits a gap)."""
        k = bisect_right(self.starts, start)
        self.starts.insert(k, start)
        self.ends.insert(k, end)
