"""The optional ``pipeline`` object of a ``celeritas-placement/1`` document (docs/formats.md,
"Pipelined placements"): how the placement runs as a pipelined step of micro-batches.

A reader that does not know the object ignores it: the document's other fields describe the same
assignment run as one batch per step, as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from celeritas_core.defaults import SCHEDULES
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.placement import PipelinePlan
from celeritas_core.limits import as_float, is_number, short_repr

_MAX_MICRO_BATCHES = 1 << 20


def pipeline_to_json(plan: PipelinePlan, node_names: tuple[str, ...]) -> dict[str, Any]:
    """The ``pipeline`` object of ``plan``; ``node_names`` name the placement's ops."""
    def entry(row: np.ndarray) -> list[Any]:
        op, k, out = (int(x) for x in row)
        return [node_names[op], k] if out < 0 else [node_names[op], k, out]

    doc: dict[str, Any] = {
        "micro_batches": plan.micro_batches,
        "schedule": plan.schedule,
        "predicted_step_time_us": _number_or_none(plan.predicted_step_time_us),
        "single_batch_step_time_us": _number_or_none(plan.single_batch_step_time_us),
        "device_peak_memory_bytes": [int(x) for x in plan.device_peak_memory_bytes],
        "oom": plan.oom,
        "oom_devices": list(plan.oom_devices),
        "warmup": [int(x) for x in plan.warmup],
        "cost_source": plan.cost_source,
        "op_floor_us": _number_or_none(plan.op_floor_us),
        "device_order": [[entry(row) for row in rows] for rows in plan.device_order],
    }
    if plan.batch_size is not None:
        doc["batch_size"] = plan.batch_size
    return doc


def _number_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def pipeline_from_json(doc: Any, index: Mapping[str, int], devices: list[str]) -> PipelinePlan | None:
    """The document's ``pipeline`` object checked against the placement's ops (``index``: name to
    index) and ``devices``; None when the document has none.

    Raises
    ------
    CeleritasInputError
        One line naming the field: a count, schedule or number out of range, an order entry that
        names an op the placement does not have or a micro-batch outside ``[-1, M)``.

    Examples
    --------
    >>> plan = pipeline_from_json({"pipeline": {"micro_batches": 2, "schedule": "gpipe",
    ...     "predicted_step_time_us": 10.0, "device_peak_memory_bytes": [5], "warmup": [2],
    ...     "device_order": [[["w", -1], ["x", 0], ["x", 1], ["x", 1, 0]]]}}, {"w": 0, "x": 1}, ["gpu:0"])
    >>> plan.micro_batches, plan.device_order[0].tolist()
    (2, [[0, -1, -1], [1, 0, -1], [1, 1, -1], [1, 1, 0]])
    """
    raw = doc.get("pipeline") if isinstance(doc, dict) else None
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise CeleritasInputError("field 'pipeline' must be an object")
    m = raw.get("micro_batches")
    if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= _MAX_MICRO_BATCHES:
        raise CeleritasInputError(f"field 'pipeline.micro_batches' must be an integer from 1 to "
                                  f"{_MAX_MICRO_BATCHES:,}, got {short_repr(m)}")
    schedule = raw.get("schedule")
    if schedule not in SCHEDULES:
        raise CeleritasInputError(f"field 'pipeline.schedule' must be one of {', '.join(SCHEDULES)}, "
                                  f"got {short_repr(schedule)}")
    peaks = _numbers(raw, "device_peak_memory_bytes", len(devices))
    warmup = _numbers(raw, "warmup", len(devices))
    return PipelinePlan(
        micro_batches=m, schedule=schedule,
        predicted_step_time_us=_optional_number(raw, "predicted_step_time_us"),
        device_peak_memory_bytes=peaks, warmup=warmup.astype(np.int64),
        device_order=_order(raw.get("device_order"), index, len(devices), m),
        batch_size=raw.get("batch_size") if isinstance(raw.get("batch_size"), int) else None,
        oom_devices=tuple(str(d) for d in raw.get("oom_devices", []) if d in devices),
        single_batch_step_time_us=_optional_number(raw, "single_batch_step_time_us"),
        cost_source=str(raw.get("cost_source", "scaled")),
        op_floor_us=_optional_number(raw, "op_floor_us"))


def _optional_number(raw: Mapping[str, Any], name: str) -> float:
    value = raw.get(name)
    if value is None:
        return math.nan
    if not is_number(value) or not math.isfinite(as_float(value)) or value < 0:
        raise CeleritasInputError(f"field 'pipeline.{name}' must be a number >= 0, got {short_repr(value)}")
    return float(value)


def _numbers(raw: Mapping[str, Any], name: str, count: int) -> np.ndarray:
    values = raw.get(name)
    if not isinstance(values, list) or len(values) != count or not all(
            is_number(v) and math.isfinite(as_float(v)) and v >= 0 for v in values):
        raise CeleritasInputError(f"field 'pipeline.{name}' must be an array of {count} numbers >= 0 "
                                  f"(one per device), got {short_repr(values)}")
    return np.asarray(values, dtype=np.float64)


def _order(order: Any, index: Mapping[str, int], num_devices: int, m: int) -> tuple[np.ndarray, ...]:
    """``device_order`` as per-device rows ``(op, micro_batch, accumulated_output)``."""
    if not isinstance(order, list) or len(order) != num_devices:
        raise CeleritasInputError(f"field 'pipeline.device_order' must be an array of {num_devices} arrays "
                                  "(one per device)")
    out = []
    for d, entries in enumerate(order):
        if not isinstance(entries, list):
            raise CeleritasInputError(f"field 'pipeline.device_order[{d}]' must be an array")
        rows = np.empty((len(entries), 3), dtype=np.int64)
        for j, entry in enumerate(entries):
            rows[j] = _row(entry, index, m, f"pipeline.device_order[{d}][{j}]")
        out.append(rows)
    return tuple(out)


def _row(entry: Any, index: Mapping[str, int], m: int, where: str) -> tuple[int, int, int]:
    ok = isinstance(entry, list) and len(entry) in (2, 3) and isinstance(entry[0], str)
    ints = ok and all(isinstance(x, int) and not isinstance(x, bool) for x in entry[1:])
    if not ints:
        raise CeleritasInputError(f"field '{where}' must be [op name, micro-batch] or [op name, micro-batch, "
                                  f"output], got {short_repr(entry)}")
    name, k = entry[0], entry[1]
    if name not in index:
        raise CeleritasInputError(f"field '{where}': op {name!r} is not an op of the placement")
    if not -1 <= k < m:
        raise CeleritasInputError(f"field '{where}': micro-batch {k} is outside -1 .. {m - 1}")
    out = entry[2] if len(entry) == 3 else -1
    if len(entry) == 3 and (out < 0 or k < 1):
        raise CeleritasInputError(f"field '{where}': an accumulation needs an output >= 0 and a "
                                  "micro-batch >= 1")
    return index[name], k, out
