"""Compiled hot loops: the Numba wrapper, its two-layer cache and the precompile command."""
