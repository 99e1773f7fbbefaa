"""Graph.with_costs: other costs on the same structure, sharing what depends on the structure."""

from __future__ import annotations

import numpy as np
import pytest

from celeritas_core import Cluster, place
from celeritas_core.errors import CeleritasInputError
from celeritas_core.generators.synthetic import small_training_graph
from celeritas_core.placers.stages import pipeline_sequences


def test_a_cost_copy_shares_the_structure_and_keeps_its_own_costs() -> None:
    g = small_training_graph(0, liveness=True)
    order, sequences = g.topological_order, pipeline_sequences(g)
    copy = g.with_costs(time_us=g.time_us * 2, edge_bytes=g.edge_bytes / 2, meta={"note": "x"})
    assert copy.topological_order is order and copy.colocation_ids is g.colocation_ids
    assert all(a is b for a, b in zip(pipeline_sequences(copy), sequences, strict=True))
    np.testing.assert_array_equal(copy.time_us, g.time_us * 2)
    np.testing.assert_array_equal(copy.memory_bytes, g.memory_bytes)
    assert copy.tensors.nbytes.sum() == pytest.approx(g.tensors.nbytes.sum() / 2)  # not shared: costs
    assert copy.meta == {"note": "x"} and g.time_us.sum() == copy.time_us.sum() / 2
    # a copy of a copy shares too, and placing on a copy gives what placing on a fresh graph gives
    again = copy.with_memory(copy.memory_bytes + 1.0)
    assert again.structure_memo is g.structure_memo
    cluster = Cluster.homogeneous(3, 1e12)
    fresh = small_training_graph(0, liveness=True)
    fresh = fresh.with_costs(time_us=fresh.time_us * 2)
    np.testing.assert_array_equal(place(copy, cluster, "gpipe-even").assignment,
                                  place(fresh, cluster, "gpipe-even").assignment)


@pytest.mark.parametrize(("field", "message"), [
    ("time_us", "node '.*': time_us must be finite and >= 0"),
    ("memory_bytes", "node '.*': memory_bytes must be finite and >= 0"),
    ("edge_bytes", "edge '.*' -> '.*': edge_bytes must be finite and >= 0"),
])
def test_bad_costs_are_refused_naming_the_place(field: str, message: str) -> None:
    g = small_training_graph(0)
    values = getattr(g, field).copy()
    values[3] = -1.0
    with pytest.raises(CeleritasInputError, match=message):
        g.with_costs(**{field: values})
    with pytest.raises(CeleritasInputError, match=f"{field} must have one value per"):
        g.with_costs(**{field: values[:-1]})
