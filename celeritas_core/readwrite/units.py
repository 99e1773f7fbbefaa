"""Parsing of human-written sizes ("32GiB", "1.5e9", "512MB") into bytes."""

from __future__ import annotations

import math
import re

from celeritas_core.errors import CeleritasInputError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3, "kb": 10**3, "kib": 2**10,
    "m": 10**6, "mb": 10**6, "mib": 2**20,
    "g": 10**9, "gb": 10**9, "gib": 2**30,
    "t": 10**12, "tb": 10**12, "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


#: The least device memory a bare number (bytes: no unit) may give, 1 MiB. No accelerator has less
#: (the smallest GPUs of the last decade have hundreds of MiB), so a bare number below it is a size
#: whose unit was forgotten: ``--device-memory 600`` meant as 600MiB would place a model on
#: 600-byte devices and report peaks of millions of percent. A device that small is still given
#: with its unit (``600B``, ``60KB``), as the tests' tiny graphs do.
MIN_BARE_DEVICE_MEMORY = 2**20


def _read_size(text: str | int | float, field: str) -> tuple[int, str]:
    """``text`` in bytes (checked as :func:`parse_size` says) and the number as written when it
    has no unit (bytes implied), else ``""``."""
    if isinstance(text, bool):
        raise CeleritasInputError(f"{field}: expected a size in bytes, got {text!r}")
    if isinstance(text, int | float):
        value, bare = float(text), f"{text:g}"
    else:
        match = _SIZE_RE.match(str(text))
        if not match or match.group(2).lower() not in _UNITS:
            raise CeleritasInputError(
                f"{field}: cannot read {text!r} as a size (examples: 32GiB, 500MB, 1e9)"
            )
        value = float(match.group(1)) * _UNITS[match.group(2).lower()]
        bare = "" if match.group(2) else match.group(1)
    if not math.isfinite(value) or value <= 0:
        raise CeleritasInputError(f"{field}: size must be positive and finite, got {text!r}")
    if value < 1:
        raise CeleritasInputError(f"{field}: size must be at least 1 byte, got {text!r}")
    return int(value), bare


def parse_size(text: str | int | float, *, field: str = "size") -> int:
    """Parse a size such as ``32GiB``, ``500MB`` or ``1e9`` into a whole number of bytes.

    Parameters
    ----------
    text : str or int or float
        A number of bytes, or a number followed by a unit (any case, spaces allowed): ``B``;
        ``k``/``kB``, ``M``/``MB``, ``G``/``GB``, ``T``/``TB`` (powers of 1000); ``KiB``, ``MiB``,
        ``GiB``, ``TiB`` (powers of 1024).
    field : str, optional
        What the size is for (a flag, a field), named in the error message.

    Returns
    -------
    int
        The size in bytes, rounded down to a whole byte.

    Raises
    ------
    CeleritasInputError
        When ``text`` is not a size, or is below 1 byte or not finite.

    See Also
    --------
    parse_device_memory : the same for one device's memory, refusing a bare number that small.

    Examples
    --------
    >>> from celeritas_core import parse_size
    >>> parse_size("32GiB"), parse_size("500MB"), parse_size(1e9)
    (34359738368, 500000000, 1000000000)
    >>> parse_size("lots", field="--device-memory")
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: --device-memory: cannot read 'lots' as a size (examples: ...)
    """
    return _read_size(text, field)[0]


def parse_device_memory(text: str | int | float, *, field: str = "device memory") -> int:
    """Parse one device's memory as :func:`parse_size` does, refusing a bare number (no unit, so
    bytes) below :data:`MIN_BARE_DEVICE_MEMORY` (1 MiB): no device has so little, the unit was
    forgotten. Every device memory the CLI, the pipeline's parameters and the trigger form take
    goes through here.

    Parameters
    ----------
    text : str or int or float
        A size as :func:`parse_size` reads it; below 1 MiB only with its unit (``600B``, ``60KB``).
    field : str, optional
        What the memory is for (a flag, a field), named in the error message.

    Returns
    -------
    int
        The memory in bytes.

    Raises
    ------
    CeleritasInputError
        As :func:`parse_size`, and for a bare number below 1 MiB (the message suggests the unit).

    Examples
    --------
    >>> from celeritas_core import parse_device_memory
    >>> parse_device_memory("600MiB"), parse_device_memory("17179869184"), parse_device_memory("600B")
    (629145600, 17179869184, 600)
    >>> parse_device_memory("600", field="--device-memory")
    Traceback (most recent call last):
    ...
    celeritas_core.errors.CeleritasInputError: --device-memory: 600 bytes is too small for a device;
    did you mean 600MiB? (write the unit: ...)
    """
    value, bare = _read_size(text, field)
    if bare and value < MIN_BARE_DEVICE_MEMORY:
        raise CeleritasInputError(f"{field}: {value} bytes is too small for a device; did you mean "
                                  f"{bare}MiB? (write the unit: {bare}MiB, 16GiB; a bare number is bytes)")
    return value


def format_bytes(num: float) -> str:
    """Format a byte count with a binary unit, e.g. ``1.50 GiB``.

    Parameters
    ----------
    num : float
        A number of bytes.

    Returns
    -------
    str
        Whole bytes below 1 KiB, else two decimals of the largest binary unit up to ``TiB``.

    See Also
    --------
    parse_size : reads such sizes back (``1.50 GiB`` is ``parse_size("1.5GiB")``).

    Examples
    --------
    >>> from celeritas_core import format_bytes
    >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 2**29)
    ('512 B', '1.50 KiB', '1.50 GiB')
    """
    value = float(num)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_us(us: float) -> str:
    """Format a duration given in microseconds with a readable unit.

    Parameters
    ----------
    us : float
        A duration in µs.

    Returns
    -------
    str
        One decimal of µs below 1 ms, three decimals of ms below 1 s, else three decimals of
        seconds; a value that is not finite as ``str`` writes it.

    Examples
    --------
    >>> from celeritas_core import format_us
    >>> format_us(12.34), format_us(2500), format_us(3e6), format_us(float("nan"))
    ('12.3 µs', '2.500 ms', '3.000 s', 'nan')
    """
    if not math.isfinite(us):
        return str(us)
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.1f} µs"


def format_change(ratio: float) -> str:
    """Format ``ratio`` (new / old) as a signed change with one decimal, e.g. ``+2.1%``.

    A change that rounds to zero prints ``+0.0%`` whichever its sign (floating-point noise, such
    as one device summing the same op times in another order, is no change); a ratio that is not
    finite prints ``-``.

    Parameters
    ----------
    ratio : float
        New value / old value (1.0: no change).

    Returns
    -------
    str
        The change in percent with its sign and one decimal, or ``-``.

    Examples
    --------
    >>> from celeritas_core import format_change
    >>> format_change(1.021), format_change(0.9999999999999998), format_change(float("inf"))
    ('+2.1%', '+0.0%', '-')
    """
    if not math.isfinite(ratio):
        return "-"
    return f"{round((ratio - 1.0) * 100, 1) + 0.0:+.1f}%"
