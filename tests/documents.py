"""Small valid documents of the JSON formats (docs/formats.md), shared by the reader tests
(tests/core/test_formats.py, tests/core/test_readers_fuzz.py). Each call returns a fresh copy that
a test may mutate."""

from __future__ import annotations

from typing import Any

from celeritas_core.readwrite.format_tags import CLUSTER_FORMAT, GRAPH_FORMAT, PLACEMENT_FORMAT

Doc = dict[str, Any]


def graph_doc() -> Doc:
    """A valid 4-node graph: a -> b -> c -> d, a -> c (same tensor as a -> b), b -> d (output 1)."""
    return {
        "format": GRAPH_FORMAT,
        "name": "g4",
        "meta": {"batch_size": 8, "source": "test"},
        "nodes": [
            {"name": "a", "op": "Placeholder", "time_us": 1.0, "memory_bytes": 10},
            {"name": "b", "op": "MatMul", "time_us": 2.5, "memory_bytes": 20},
            {"name": "c", "op": "Relu", "time_us": 3, "memory_bytes": 30.5, "colocation": "grp"},
            {"name": "d", "op": "Sum", "time_us": 0, "memory_bytes": 0, "colocation": "grp"},
        ],
        "edges": [
            {"src": "a", "dst": "b", "bytes": 100},
            {"src": "b", "dst": "c", "bytes": 50.5},
            {"src": "c", "dst": "d", "bytes": 0},
            {"src": "a", "dst": "c", "bytes": 100, "src_output": 0},
            {"src": "b", "dst": "d", "bytes": 7, "src_output": 1},
        ],
    }


def graph_doc_with_liveness() -> Doc:
    """:func:`graph_doc` with every optional liveness field: ``b`` has persistent, output and
    scratch bytes (its outputs the sizes of its out-edges), ``c`` one output that aliases ``b``'s
    output 0."""
    doc = graph_doc()
    doc["nodes"][1].update(persistent_bytes=4, output_bytes=[50.5, 7], scratch_bytes=0)
    doc["nodes"][2].update(output_bytes=[6], output_aliases=[{"node": "b", "output": 0}])
    return doc


def cluster_doc() -> Doc:
    """Two devices (the second with the default speed) and a transfer model."""
    return {
        "format": CLUSTER_FORMAT,
        "devices": [
            {"name": "gpu:0", "memory_bytes": 1000, "speed": 1.0},
            {"name": "gpu:1", "memory_bytes": 2000},
        ],
        "comm": {"slope_us_per_byte": 0.001, "intercept_us": 5.0},
    }


def placement_doc() -> Doc:
    """A placement of :func:`graph_doc` on the two devices of :func:`cluster_doc`."""
    return {
        "format": PLACEMENT_FORMAT,
        "graph": "g4",
        "placer": "manual",
        "params": {"R": 3},
        "devices": ["gpu:0", "gpu:1"],
        "assignment": {"a": 0, "b": 0, "c": 1, "d": 1},
        "placement_seconds": 0.25,
        "coarse_nodes": 2,
    }
