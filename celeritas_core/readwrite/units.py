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
    if isinstance(text, bool):
        raise CeleritasInputError(f"{field}: expected a size in bytes, got {text!r}")
    if isinstance(text, int | float):
        value = float(text)
    else:
        match = _SIZE_RE.match(str(text))
        if not match or match.group(2).lower() not in _UNITS:
            raise CeleritasInputError(
                f"{field}: cannot read {text!r} as a size (examples: 32GiB, 500MB, 1e9)"
            )
        value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not math.isfinite(value) or value <= 0:
        raise CeleritasInputError(f"{field}: size must be positive and finite, got {text!r}")
    if value < 1:
        raise CeleritasInputError(f"{field}: size must be at least 1 byte, got {text!r}")
    return int(value)


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
