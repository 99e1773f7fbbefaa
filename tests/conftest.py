"""Shared helpers for building small hand-made graphs in tests."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pytest

from celeritas_core.compiled import jit
from celeritas_core.graphs.graph import Graph

# Test modules import TensorFlow (pytest.importorskip) before celeritas_tf can turn its oneDNN
# rewrites off; on CPUs with AVX-512 VNNI TensorFlow turns them on, and profiled memory changes.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


def make_graph(
    edges: Sequence[tuple[str, str] | tuple[str, str, float]],
    *,
    times: dict[str, float] | None = None,
    memory: dict[str, float] | None = None,
    nodes: Sequence[str] | None = None,
    colocation: dict[str, str] | None = None,
    default_time: float = 1.0,
    default_memory: float = 1.0,
    default_bytes: float = 0.0,
    name: str = "test",
) -> Graph:
    """Graph from (src, dst[, bytes]) name pairs; nodes appear in first-mention order."""
    order: dict[str, None] = {}
    for node in nodes or ():
        order.setdefault(node, None)
    for e in edges:
        order.setdefault(e[0], None)
        order.setdefault(e[1], None)
    names = list(order)
    index = {n: i for i, n in enumerate(names)}
    times = times or {}
    memory = memory or {}
    colocation = colocation or {}
    return Graph.from_arrays(
        name=name,
        node_names=names,
        ops=["Op"] * len(names),
        time_us=[times.get(n, default_time) for n in names],
        memory_bytes=[memory.get(n, default_memory) for n in names],
        colocation=[colocation.get(n) for n in names],
        edge_src=[index[e[0]] for e in edges],
        edge_dst=[index[e[1]] for e in edges],
        edge_bytes=[e[2] if len(e) > 2 else default_bytes for e in edges],  # type: ignore[misc]
    )


@pytest.fixture
def compiled_loops() -> None:
    """Load Numba, so that every compiled loop runs compiled however small its input (until
    Numba loads, small calls run as Python: celeritas_core.compiled.jit). A no-op without Numba."""
    jit.load_numba()
    assert jit.numba_loaded() or not jit.ENABLED


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded random generator."""
    return np.random.default_rng(1234)


#: Test folders that mirror the layers, and the marker each folder's tests get: the slow tiers
#: (TensorFlow runs, real Airflow/MLflow/S3) can be left out with ``-m "not tf and not pipeline"``.
LAYER_MARKERS = {"tf": "tf", "pipeline": "pipeline", "integration": "integration"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/tf, tests/pipeline and tests/integration with its tier's marker
    (`make test` leaves the integration tier out: pyproject.toml addopts)."""
    for item in items:
        parts = item.path.parts
        if "tests" in parts:
            layer = parts[parts.index("tests") + 1] if len(parts) > parts.index("tests") + 1 else ""
            marker = LAYER_MARKERS.get(layer)
            if marker is not None:
                item.add_marker(getattr(pytest.mark, marker))
