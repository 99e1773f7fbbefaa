"""Plain-text tables of tracked runs (``celeritas runs compare``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tasks.report import format_table


def _fmt(value: object, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def format_runs_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text table of :func:`recent_runs` rows: a header, then one line per run."""
    if not rows:
        return "no runs"
    header = ("started (UTC)", "run_id", "status", "batch", "devices", "placer", "measured_ms",
              "simulated_ms", "speedup", "placement_s", "prod", "decision")
    lines = [header]
    for r in rows:
        started = (r.get("start_time") or "-").replace("T", " ").rstrip("Z")
        lines.append((started, str(r.get("run_id")), str(r.get("status")), _fmt(r.get("batch_size"), ""),
                      _fmt(r.get("devices"), ""), _fmt(r.get("placer"), ""),
                      _fmt(r.get("best_measured_step_time_ms"), ".3f"),
                      _fmt(r.get("best_simulated_step_time_ms"), ".3f"),
                      _fmt(r.get("speedup_vs_single"), ".2f"), _fmt(r.get("placement_time_s"), ".2f"),
                      "*" if r.get("production") else "", _fmt(r.get("decision"), "")))
    return format_table(lines[0], lines[1:], {6, 7, 8, 9})
