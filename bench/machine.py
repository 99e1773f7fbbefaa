"""Where and when a benchmark ran: the date, the machine and how busy it was.

Every figures JSON that ``bench/report.py`` turns into the results page carries this record under
``measured_on``, so the page states the date and machine its numbers came from. Step times in the
benches are simulated and do not depend on the machine; placement seconds do, and so does the
celeritas placer's optional quality work, which a wall-clock safety net may cut on a busy machine:
the load average says how busy it was.
"""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path


def _cpu_model() -> str:
    """The processor's model name from /proc/cpuinfo (Linux), else :func:`platform.processor`."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown processor"


def _memory_gib() -> float | None:
    """Physical memory in GiB from /proc/meminfo (Linux), else None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / 2**30
    except (OSError, ValueError, IndexError):
        pass
    return None


def measured_on() -> dict[str, object]:
    """The record of this run: UTC date (YYYY-MM-DD), machine in words, cores, memory, 1-minute load.

    Examples
    --------
    >>> sorted(measured_on())
    ['cores', 'date', 'load_average', 'machine', 'memory_gib']
    """
    memory = _memory_gib()
    cores = os.cpu_count() or 1
    words = f"{cores}-core {_cpu_model()}" + (f", {memory:.0f} GiB" if memory is not None else "")
    return {
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "machine": f"{words}, {platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "cores": cores,
        "memory_gib": round(memory, 1) if memory is not None else None,
        "load_average": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
