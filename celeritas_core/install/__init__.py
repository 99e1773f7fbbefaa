"""Building the install: the top layer of celeritas_core, above everything it exercises.

:mod:`~celeritas_core.install.precompile` (``python -m celeritas_core.install.precompile``, which
``make setup`` and the Docker images run) fills the compiled loops' prebuilt cache
(:mod:`celeritas_core.compiled.jit`) by calling every loop through the placers, the pipeline
planner, the readers and the simulator; nothing in the engine imports this package.
"""
