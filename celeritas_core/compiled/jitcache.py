"""The cache layers of the compiled loops: the prebuilt cache inside the package, read even when
read-only, then the user's Numba cache when it is writable (design: :mod:`celeritas_core.compiled.jit`).

Built on Numba's caching classes (``numba.core.caching``; Numba is pinned in constraints.txt):
a *locator* says where a function's index (``.nbi``) and data (``.nbc``) files live. Numba's
own locators all refuse a folder they cannot write (``ensure_cache_path``), even to read it;
:class:`PrebuiltLocator` does not. :class:`LayeredCache` reads from each layer in turn and
saves to the first that takes the write. :mod:`celeritas_core.compiled.jit` imports this module when it
makes a loop's dispatcher, that is once Numba is loaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from numba.core import caching

from celeritas_core.compiled import CACHE_DIR as CACHE_DIR  # re-exported: the prebuilt cache

_log = logging.getLogger(__name__)

#: The package whose loops the prebuilt cache holds (``celeritas_core``, above this subpackage).
PACKAGE_DIR = Path(__file__).resolve().parent.parent


class PrebuiltLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """``celeritas_core/compiled/_jitcache/<sub-package>/``, for a loop defined in the package.

    Accepted whether or not the folder exists or is writable (loading finds no index in a
    missing one; saving raises ``OSError`` in a read-only one, and the next layer is tried).
    The source stamp and disambiguator are Numba's: the SHA-256 of the source file's content
    and the function's first line, so a copy of the package elsewhere loads the same entries.
    """

    def __init__(self, py_func: Any, py_file: str, cache_dir: Path = CACHE_DIR) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        sub = Path(py_file).resolve().parent.relative_to(PACKAGE_DIR)
        self._cache_path = str(cache_dir / sub)

    def get_cache_path(self) -> str:
        return self._cache_path

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> PrebuiltLocator | None:
        try:
            return cls(py_func, py_file)
        except (ValueError, OSError):  # not a file of this package
            return None


class _PrebuiltImpl(caching.CompileResultCacheImpl):
    _locator_classes = [PrebuiltLocator]  # noqa: RUF012  # overrides Numba's class attribute


class _UserImpl(caching.CompileResultCacheImpl):
    # NUMBA_CACHE_DIR, else the per-user folder; each only when writable (Numba's rule)
    _locator_classes = [caching.UserProvidedCacheLocator, caching.UserWideCacheLocator]  # noqa: RUF012


class PrebuiltCache(caching.FunctionCache):
    """Numba's per-function cache in the prebuilt layer."""

    _impl_class = _PrebuiltImpl


class UserCache(caching.FunctionCache):
    """Numba's per-function cache in the user's layer."""

    _impl_class = _UserImpl


class LayeredCache(caching._Cache):
    """The cache of one loop: load from the first layer that has an entry, save to the first
    layer that can be written; with neither, the compiled code stays in memory."""

    def __init__(self, py_func: Any) -> None:
        self._name = f"{py_func.__module__}.{py_func.__qualname__}"
        self._layers: list[caching.Cache] = []
        for layer in (PrebuiltCache, UserCache):
            try:
                self._layers.append(layer(py_func))
            except (RuntimeError, OSError):  # "no locator available" (e.g. no writable user
                continue                     # cache folder), or an unreadable source file

    @property
    def layers(self) -> list[caching.Cache]:
        """The layers, in the order they are read and written."""
        return list(self._layers)

    @property
    def cache_path(self) -> str:
        return self._layers[0].cache_path if self._layers else ""

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        for layer in self._layers:
            try:
                data = layer.load_overload(sig, target_context)
            except Exception as exc:  # unreadable or stale file: a miss in this layer
                _log.debug("cannot load %s from %s: %s", self._name, layer.cache_path, exc)
                continue
            if data is not None:
                return data
        return None

    def save_overload(self, sig: Any, data: Any) -> None:
        for layer in self._layers:
            try:
                layer.save_overload(sig, data)
            except OSError as exc:  # read-only layer: try the next
                _log.debug("cannot save %s to %s: %s", self._name, layer.cache_path, exc)
                continue
            return
        _log.info("%s: no writable cache folder, the compiled code is kept in memory", self._name)

    def enable(self) -> None:
        for layer in self._layers:
            layer.enable()

    def disable(self) -> None:
        for layer in self._layers:
            layer.disable()

    def flush(self) -> None:
        for layer in self._layers:
            layer.flush()
