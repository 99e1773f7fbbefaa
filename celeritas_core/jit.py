"""Compile the engine's hot loops with Numba when it is installed, run them as Python otherwise.

The loops over ops and edges (replay, levels, orders, fusion's dynamic program, partition
refinement) are written once as plain Python over numpy arrays and decorated with :func:`jit`.
With Numba (a declared dependency) they are compiled to machine code on first use and cached
on disk (``__pycache__``, or ``NUMBA_CACHE_DIR``), which is what lets a million-op graph place
in seconds; without it the same functions run unchanged, only slower, so the engine stays
correct on a machine without a compiler backend. ``CELERITAS_NO_JIT=1`` forces the Python path
(the tests use it to check that both paths agree).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

try:
    if os.environ.get("CELERITAS_NO_JIT", "") not in ("", "0"):
        raise ImportError("disabled by CELERITAS_NO_JIT")
    import numba as _numba
except ImportError:  # pragma: no cover - exercised with CELERITAS_NO_JIT=1
    _numba = None

#: True when the hot loops are compiled by Numba.
ENABLED = _numba is not None


def jit(func: F) -> F:
    """Compile ``func`` in nopython mode (cached on disk) when Numba is available, else return it."""
    if _numba is None:
        return func
    return _numba.njit(cache=True, nogil=True)(func)  # type: ignore[no-any-return]
