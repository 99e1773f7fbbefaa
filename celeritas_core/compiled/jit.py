"""Compile the engine's hot loops with Numba, from a cache built at install time; run them as
Python when Numba is missing or not worth loading yet.

The loops over ops and edges (replay, levels, orders, fusion's dynamic program, partition
refinement) are written once as plain Python over numpy arrays and decorated with :func:`jit`,
which returns a :class:`Loop`. What a call runs:

- **Compiled** (Numba, ``nopython``, ``nogil``) once Numba is loaded in the process. It loads on
  the first call whose largest array has :data:`SMALL_CALL` elements or more, once the process has
  run :data:`PYTHON_WORK` elements of loop work as Python, or when :func:`load_numba` is called
  (every placement calls it before its clock starts: :func:`celeritas_core.placers.place`).
  Loading Numba costs about 0.7 s even when nothing compiles (0.2 s to import it, 0.5 s to set up
  its compiler on the first loop), more than ``celeritas info`` on a thousand-op graph takes in
  Python, so the small commands never pay it.
- **As Python** before that, and always without Numba or with ``CELERITAS_NO_JIT=1``. Both paths
  return the same results (tests/core/test_*jit*.py compare them loop by loop).

Where the machine code comes from (:mod:`celeritas_core.compiled.jitcache`). Numba's own ``cache=True``
writes next to the source or under the user's home and *needs* one of them writable even to read;
as a user who can write neither (``nobody``, a pod with a read-only root file system) every
command ended in ``RuntimeError: cannot cache function …: no locator available``, and a new user
over a read-only install compiled for about 30 s, counted as placement time. Instead every loop
has two cache layers:

1. the **prebuilt cache**, ``celeritas_core/compiled/_jitcache/`` inside the installed package, filled at
   install time by ``python -m celeritas_core.install.precompile`` (``make setup``, and the Docker images'
   build), which runs a workload that calls every loop with the argument types the commands use.
   It is read even when nobody can write it. It moves with the package: Numba (0.68, pinned) keys
   an entry by the SHA-256 of the source file's *content* (not its path or modification time),
   the function's bytecode and first line, the Python and Numba versions and the CPU
   (``NUMBA_CPU_NAME=generic`` makes entries any x86-64 CPU loads; the Docker images use it);
2. the **user's cache**, ``NUMBA_CACHE_DIR`` or Numba's per-user folder (``~/.cache/numba``), only
   when it is writable (Numba's rule).

A loop is loaded from the first layer that has it; one compiled at run time (a source edited
since, another CPU, argument types the workload missed) is saved to the first writable layer, or
kept in memory for the life of the process when there is none: never an error. A cache file that
cannot be read or rebuilt counts as a miss. Loading and compiling are never placement time:
:func:`compile_clock` measures the seconds Numba holds its compiler lock during a placement, and
``placement_seconds`` leaves them out. :func:`cache_stats` says, per loop, how many signatures
were loaded from a cache and how many compiled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from celeritas_core.compiled import CACHE_DIR as CACHE_DIR  # re-exported: the prebuilt cache

F = TypeVar("F", bound=Callable[..., Any])

#: True when the hot loops are compiled by Numba (installed and not disabled). Found without
#: importing Numba, which loads only when a loop is worth compiling (module docstring).
ENABLED = (os.environ.get("CELERITAS_NO_JIT", "") in ("", "0")
           and importlib.util.find_spec("numba") is not None)


#: A call whose largest array has this many elements or more loads Numba.
SMALL_CALL = 20_000
#: Elements of loop work (the sum over calls of each call's largest array) a process runs as
#: Python before it loads Numba: a few tenths of a second at most, less than loading Numba.
PYTHON_WORK = 200_000

#: Every loop, by ``module.qualname``.
LOOPS: dict[str, Loop] = {}

_lock = threading.RLock()
_python = threading.local()  # depth: how many loops this thread is running as Python


@dataclasses.dataclass
class _State:
    numba: bool = False  # Numba is imported: every loop runs compiled
    python_work: int = 0  # elements of loop work run as Python so far


_state = _State()


class Loop:
    """A hot loop: compiled by Numba or run as Python (the module docstring says which, when).

    Call it as the function. ``py_func`` is the Python function; :attr:`dispatcher` the Numba
    dispatcher (it loads Numba). A compiled loop may call another: Numba types a :class:`Loop`
    through ``_numba_type_``.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        functools.update_wrapper(self, func)
        self.py_func = func
        self.key = f"{func.__module__}.{func.__qualname__}"
        self._dispatcher: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        dispatcher = self._dispatcher
        if dispatcher is None:
            if getattr(_python, "depth", 0) or (not _state.numba and _run_as_python(args, kwargs)):
                return _as_python(self.py_func, args, kwargs)
            dispatcher = self.dispatcher
        return dispatcher(*args, **kwargs)

    @property
    def dispatcher(self) -> Any:
        """The Numba dispatcher of this loop, made on first use with its cache layers."""
        if self._dispatcher is None:
            with _lock:
                if self._dispatcher is None:
                    load_numba()
                    self._dispatcher = _make_dispatcher(self.py_func)
        return self._dispatcher

    @property
    def _numba_type_(self) -> Any:
        return self.dispatcher._numba_type_

    def __repr__(self) -> str:
        return f"<compiled loop {self.key}>"


def jit(func: F) -> F:
    """Make ``func`` a :class:`Loop` (compiled when Numba is available), else return it.

    Parameters
    ----------
    func
        A function of numpy arrays and numbers that Numba compiles in ``nopython`` mode.

    Returns
    -------
    Callable
        A :class:`Loop` that calls the same way, or ``func`` itself without Numba.
    """
    if not ENABLED:
        return func
    loop = Loop(func)
    LOOPS[loop.key] = loop
    return loop  # type: ignore[return-value]


def _run_as_python(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call before Numba loads runs as Python (and counts its work), or loads Numba."""
    size = max(_largest(args), _largest(tuple(kwargs.values())))
    if size >= SMALL_CALL or _state.python_work + size > PYTHON_WORK:
        return False
    _state.python_work += size  # racy between threads: only a heuristic
    return True


def _as_python(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` as Python; the loops it calls run as Python too (their work is
    part of this call's)."""
    _python.depth = getattr(_python, "depth", 0) + 1
    try:
        return func(*args, **kwargs)
    finally:
        _python.depth -= 1


def _largest(args: tuple[Any, ...]) -> int:
    """The element count of the largest array in ``args`` (tuples of arrays included)."""
    largest = 0
    for arg in args:
        size = _largest(arg) if isinstance(arg, tuple) else getattr(arg, "size", 0)
        largest = max(largest, int(size))
    return largest


def load_numba() -> None:
    """Import Numba: from now on every loop runs compiled (a no-op without Numba)."""
    if not ENABLED or _state.numba:
        return
    with _lock:
        import numba  # noqa: F401  # lazy: about 0.2 s, only once a loop runs compiled

        _state.numba = True


def numba_loaded() -> bool:
    """Whether the loops run compiled in this process now."""
    return _state.numba


def _make_dispatcher(func: Callable[..., Any]) -> Any:
    """A Numba dispatcher for ``func`` whose cache is
    :class:`~celeritas_core.compiled.jitcache.LayeredCache`."""
    import numba  # lazy: as above, Numba loads only once a loop runs compiled

    from celeritas_core.compiled.jitcache import LayeredCache  # lazy: it imports Numba

    dispatcher = numba.njit(nogil=True)(func)
    # what Dispatcher.enable_caching() does with Numba's FunctionCache, with our layers instead
    dispatcher._cache = LayeredCache(func)
    return dispatcher


class CompileClock:
    """Seconds Numba spent loading or compiling loops (:func:`compile_clock`)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def add(self, seconds: float) -> None:
        """Count ``seconds`` more."""
        self.seconds += seconds


@contextlib.contextmanager
def compile_clock() -> Iterator[CompileClock]:
    """Measure the seconds Numba holds its compiler lock inside the block: loading loops from a
    cache layer and compiling them (any thread). Counts nothing when Numba is not loaded at entry."""
    clock = CompileClock()
    if not _state.numba:
        yield clock
        return
    from numba.core import event  # lazy: as above (loaded already)

    with event.install_timer("numba:compiler_lock", clock.add):
        yield clock


def cache_stats() -> dict[str, dict[str, Any]]:
    """Per loop made compiled in this process: signatures ``loaded`` from a cache layer and
    ``compiled`` here (counts), and the prebuilt ``cache_path``."""
    stats = {}
    for key, loop in sorted(LOOPS.items()):
        if loop._dispatcher is None:
            continue
        s = loop._dispatcher.stats
        stats[key] = {"loaded": sum(s.cache_hits.values()), "compiled": sum(s.cache_misses.values()),
                      "cache_path": s.cache_path}
    return stats
