"""The pipeline's workflow definitions (celeritas_placement.py).

A package only so that import-linter can check the layers (pyproject.toml, [tool.importlinter]):
this file defines nothing, and the scheduler's file heuristic skips it.
"""
