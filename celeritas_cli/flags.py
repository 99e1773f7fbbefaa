"""Checks of the commands' numeric flags: every count, batch size, size and constant is validated
when the command starts, before any file is read or TensorFlow loads; a bad value is a one-line
error naming the flag (exit 2). The limits are :mod:`celeritas_core.limits` (docs/formats.md,
"Limits").
"""

from __future__ import annotations

import math
import sys
from typing import Any

from celeritas_core.errors import CeleritasInputError
from celeritas_core.limits import (
    MAX_BATCH_SIZE,
    MAX_BYTES,
    MAX_DEVICES,
    MAX_STEPS,
    check_int,
    short_repr,
)
from celeritas_core.readwrite.units import parse_device_memory, parse_size

#: Largest tensor ``calibrate-comm --sizes`` allocates (bytes): 1 GiB.
MAX_CALIBRATION_BYTES = 2**30
#: Most runs ``runs compare --last`` lists.
MAX_LAST_RUNS = 10_000


def count(value: Any, flag: str, *, low: int = 1, high: int = MAX_STEPS) -> int:
    """An integer flag from ``low`` to ``high``."""
    return check_int(value, flag, low=low, high=high)


def devices(value: int, flag: str = "--devices") -> int:
    """A number of devices to build a cluster of: from 1 to
    :data:`~celeritas_core.limits.MAX_DEVICES`."""
    if value <= 0:
        raise CeleritasInputError(f"{flag}: need at least one device, got {value}")
    return count(value, flag, high=MAX_DEVICES)


def batch(value: Any, flag: str = "--batch") -> int:
    """A batch size: an integer from 1 to :data:`~celeritas_core.limits.MAX_BATCH_SIZE`."""
    return check_int(value, flag, low=1, high=MAX_BATCH_SIZE)


def batch_list(text: str, flag: str = "--batch-sizes") -> list[int]:
    """Comma-separated batch sizes: at least two different integers from 1 to the limit."""
    parts = [x.strip() for x in str(text).split(",") if x.strip()]
    try:
        sizes = [int(x) for x in parts]
    except ValueError:
        raise CeleritasInputError(
            f"{flag}: expected comma-separated integers, got {short_repr(text)}") from None
    for value in sizes:
        batch(value, flag)
    if len(set(sizes)) < 2:
        raise CeleritasInputError(f"{flag}: need at least two positive batch sizes (different ones), "
                                  f"got {short_repr(text)}")
    return sizes


def size(text: str, flag: str, *, high: float = MAX_BYTES) -> int:
    """A size such as ``32GiB`` (:func:`~celeritas_core.readwrite.units.parse_size`), at most ``high``
    bytes."""
    return _at_most(parse_size(text, field=flag), text, flag, high)


def device_memory(text: str, flag: str = "--device-memory") -> int:
    """One device's memory (:func:`~celeritas_core.readwrite.units.parse_device_memory`: a bare number
    below 1 MiB is a forgotten unit), at most :data:`~celeritas_core.limits.MAX_BYTES`."""
    return _at_most(parse_device_memory(text, field=flag), text, flag, MAX_BYTES)


def _at_most(value: int, text: str, flag: str, high: float) -> int:
    if value > high:
        raise CeleritasInputError(f"{flag}: {short_repr(text)} is above the limit of {high:g} bytes")
    return value


def number(value: Any, flag: str, *, low: float = 0.0, high: float) -> float:
    """A finite float flag with ``low <= value <= high``."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) \
            or not low <= value <= high:
        raise CeleritasInputError(f"{flag}: must be a finite number from {low:g} to {high:g}, "
                                  f"got {short_repr(value)}")
    return float(value)


def say(message: str) -> None:
    """A progress line of a long command, on standard error (standard output keeps the result)."""
    print(f"  {message}", file=sys.stderr, flush=True)


def model_knobs(pairs: list[str] | None) -> dict[str, Any]:
    """``--set KNOB=VALUE`` pairs of the model commands: an integer where the value reads as one,
    else a number, else the text (the model checks its own knobs)."""
    knobs: dict[str, Any] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise CeleritasInputError(f"--set: expected KNOB=VALUE, got {pair!r}")
        text = value.strip()
        try:
            knobs[name.strip()] = int(text)
        except ValueError:
            try:
                knobs[name.strip()] = float(text)
            except ValueError:
                knobs[name.strip()] = text
    return knobs
