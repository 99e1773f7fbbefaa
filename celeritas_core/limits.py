"""The limits on every magnitude Celeritas accepts (docs/formats.md, "Limits"), and the small
checks the readers and the command line share.

Values enter through the readers (:mod:`celeritas_core.readwrite.formats`,
:class:`~celeritas_core.graphs.cluster.Cluster`) and the command line (:mod:`celeritas_cli.flags`);
each checks them against these constants, so the algorithms never see a number whose sums, products
or integer conversions overflow. The limits are far beyond any real model or cluster: with them
every per-op time, transfer time and memory sum stays below ``2**63`` and every float sum finite. A
value out of range is a one-line :class:`CeleritasInputError` naming the field."""

from __future__ import annotations

import math
from typing import Any

from celeritas_core.errors import CeleritasInputError

#: Largest file a reader opens (bytes): 2 GiB. Inputs must be regular files.
MAX_INPUT_FILE_BYTES = 2 * 2**30
#: Largest byte count anywhere (a tensor, an op's memory, a device's memory) and largest total
#: (the graph's total memory, total edge bytes, each liveness total): 1e18 bytes (1 EB), below
#: ``2**63`` (9.2e18) so byte counts and their sums fit a signed 64-bit integer.
MAX_BYTES = 10**18
#: Longest time anywhere (an op's ``time_us``, the graph's total time, the transfer latency):
#: 1e15 µs (about 31.7 years).
MAX_TIME_US = 1e15
#: Largest transfer slope ``k`` (µs per byte): 1 µs/B, i.e. 1 MB/s. With :data:`MAX_BYTES` the
#: longest transfer is ``k·d + b <= 1.000001e18`` µs.
MAX_SLOPE_US_PER_BYTE = 1.0
#: Relative device speeds lie in ``[MIN_SPEED, MAX_SPEED]``.
MIN_SPEED = 1e-6
MAX_SPEED = 1e6
#: Most devices in a cluster (the TensorFlow commands allow at most 64 logical devices).
MAX_DEVICES = 1024
#: ``src_output`` (and an output alias's output index) must be below this: 2**31.
MAX_SRC_OUTPUT = 2**31
#: Largest batch size (profiles, fits, ``--batch``); batch sizes are integers ``>= 1``.
MAX_BATCH_SIZE = 1_000_000
#: Most steps, warm-up steps or repeats a TensorFlow command runs.
MAX_STEPS = 100_000


def is_number(x: Any) -> bool:
    """A JSON number: an int or float, never a bool."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def as_float(x: int | float) -> float:
    """``float(x)``, with integers beyond the float range read as infinity."""
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def check_int(value: Any, field: str, *, low: int, high: int) -> int:
    """An integer (not a bool, not a float) with ``low <= value <= high``."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise CeleritasInputError(
            f"{field}: must be an integer from {low:,} to {high:,}, got {short_repr(value)}")
    return value


def check_total(total: float, limit: float, what: str, unit: str) -> None:
    """Raise when a sum over the graph exceeds its limit (or is not finite)."""
    if not math.isfinite(total) or total > limit:
        shown = _fmt(total) if _fmt(total) != _fmt(limit) else repr(total)
        raise CeleritasInputError(f"{what} is {shown}{unit}, above the limit {_fmt(limit)}{unit}")


def check_cost(value: Any, where: str, field_name: str, *, limit: float = MAX_BYTES,
               unit: str = " bytes") -> float:
    """A cost field of a document: a finite number ``>= 0`` and at most ``limit`` (docs/formats.md,
    "Limits"); ``where`` and ``field_name`` name it in the one-line error."""
    if not is_number(value):
        raise CeleritasInputError(f"{where}: field '{field_name}' must be a number, got {short_repr(value)}")
    v = as_float(value)
    if not math.isfinite(v) or v < 0:
        raise CeleritasInputError(
            f"{where}: field '{field_name}' must be finite and >= 0, got {short_repr(value)}")
    if v > limit:
        raise CeleritasInputError(f"{where}: field '{field_name}' must be at most {limit:g}{unit} "
                                  f"(the limit), got {short_repr(value)}")
    return v


def short_repr(value: Any) -> str:
    """``repr(value)``, cut to 60 characters (a huge integer or string stays readable)."""
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else f"an integer of " \
        f"{value.bit_length()} bits"
    return text if len(text) <= 60 else text[:57] + "..."
