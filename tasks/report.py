"""What the pipeline's steps say in their task logs: plain-text tables and figures with units.

Light (no numpy, MLflow or TensorFlow): the contracts' ``summary`` methods and the CLI's tables use
it. Times are shown in ms or µs as labelled, memory in MiB, ratios as percentages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    """A plain-text table: a header, then one line per row; ``numeric`` columns right-aligned."""
    lines = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(w) if i in numeric else cell.ljust(w)
                               for i, (cell, w) in enumerate(zip(line, widths, strict=True))).rstrip()
                     for line in lines)


def number(value: float | None, spec: str = ".3f", scale: float = 1.0) -> str:
    """``value * scale`` formatted with ``spec``; "-" for None or a value that is not finite."""
    if value is None or not math.isfinite(value):
        return "-"
    return format(value * scale, spec)


def mib(value: float | None) -> str:
    """Bytes as MiB with one decimal ("-" when unknown)."""
    return number(value, ".1f", 1 / 2**20)


def percent(value: float | None) -> str:
    """A fraction as a signed percentage with one decimal ("-" when unknown)."""
    return "-" if value is None or not math.isfinite(value) else f"{value * 100:+.1f} %"
