"""Compiled hot loops: the Numba wrapper and its two-layer cache, the lowest layer of the engine (the
precompile command that fills the cache exercises every layer, so it sits on top:
:mod:`celeritas_core.install.precompile`)."""

from __future__ import annotations

from pathlib import Path

#: The prebuilt cache, ``compiled/_jitcache/`` inside the installed package
#: (``python -m celeritas_core.install.precompile`` fills it): declared here, where both
#: :mod:`~celeritas_core.compiled.jit` (which must not load Numba) and
#: :mod:`~celeritas_core.compiled.jitcache` (which does) read it without importing each other.
CACHE_DIR = Path(__file__).resolve().parent / "_jitcache"
