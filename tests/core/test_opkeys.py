"""Op keys in the documents: profiles record them in every profile or none, fits carry them through
JSON, placements carry the digest, and pairing by key reports what it did not pair."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.opkeys import KeyedFits, fits_op_keys, keys_digest, match_op_keys, with_op_keys
from celeritas_core.graphs.placement import Placement
from celeritas_core.readwrite.formats import (
    check_profile_document,
    fits_from_json,
    fits_to_json,
    placement_from_json,
    placement_op_keys_digest,
    placement_to_json,
)
from celeritas_core.statistics.regression import fit_costs
from tests.conftest import make_graph


def _profile(keys: dict[str, str] | None) -> dict[str, Any]:
    profiles = []
    for b in (2, 4):
        p: dict[str, Any] = {"batch_size": b, "time_us": {"a": 1.0 * b, "b": 2.0 * b},
                             "memory_bytes": {"a": 10.0 * b, "b": 20.0 * b}}
        if keys is not None:
            p["op_keys"] = dict(keys)
        profiles.append(p)
    return {"format": "celeritas-profile/1", "model": "m", "model_config": {}, "profiles": profiles}


def test_a_profile_records_op_keys_in_every_profile_or_none() -> None:
    check_profile_document(_profile(None))
    check_profile_document(_profile({"a": "k1", "b": "k2"}))
    doc = _profile({"a": "k1"})
    del doc["profiles"][1]["op_keys"]
    with pytest.raises(CeleritasInputError, match=r"profiles\[1\]: field 'op_keys' missing"):
        check_profile_document(doc, "p.json")
    for bad in ([], {"a": 3}, {"a": ""}, {"a": "x" * 65}):
        doc = _profile(None)
        doc["profiles"][0]["op_keys"] = bad
        with pytest.raises(CeleritasInputError, match="op_keys") as info:
            check_profile_document(doc, "p.json")
        assert "\n" not in str(info.value)


def test_fits_carry_their_keys_through_json() -> None:
    fits = with_op_keys(fit_costs([(2, {"a": 2.0, "b": 4.0}, {}), (4, {"a": 4.0, "b": 8.0}, {})]),
                        {"a": "k1", "b": "k2", "gone": "k3"})
    doc = fits_to_json(fits)
    assert doc["op_keys"] == {"a": "k1", "b": "k2"}  # only fitted ops
    back = fits_from_json(doc)
    assert isinstance(back, KeyedFits) and fits_op_keys(back) == {"a": "k1", "b": "k2"}
    np.testing.assert_allclose(back.time_slope, fits.time_slope)
    assert fits_op_keys(back.with_aliases({"a": ["external"]})) == {"a": "k1", "b": "k2"}
    del doc["op_keys"]
    assert fits_op_keys(fits_from_json(doc)) == {}
    doc["op_keys"] = {"a": None}
    with pytest.raises(CeleritasInputError, match="op_keys of op 'a'"):
        fits_from_json(doc, "f.json")


def test_pairing_by_key() -> None:
    step = {"a": "k1", "b": "k2", "c": "k3"}
    match = match_op_keys({"a": "k1", "b": "other"}, step)
    assert match.matched == {"a"} and match.differing == ("b",) and match.missing == 1 and match.checked
    assert match.note("fits") == (
        "1 of this step's 3 ops is built differently (another type or inputs) than the op of the same "
        "name in the fits, so the fits do not apply to it ('b'), as TensorFlow does for some ops at another "
        "batch size (a small tf.zeros is a Const, a large one a Fill)")
    assert not match.needs_action  # expected: said at info level
    many = match_op_keys({n: "old" for n in "abcde"}, {n: "new" for n in "abcdef"})
    assert many.note("fits").startswith("5 of this step's 6 ops are built differently ")
    assert "do not apply to them ('a', 'b', 'c', …), as TensorFlow" in many.note("fits")
    assert match_op_keys({"a": "k1"}, step).note("fits") is None
    unkeyed = match_op_keys({}, step, names=["a", "c", "z"])
    assert unkeyed.matched == {"a", "c"} and not unkeyed.checked and "by name only" in unkeyed.note("fits")
    assert unkeyed.needs_action  # profile again: a warning


def test_a_digest_depends_on_every_pair_and_not_on_order() -> None:
    keys = {"a": "k1", "b": "k2"}
    assert keys_digest(keys) == keys_digest(dict(reversed(keys.items())))
    assert keys_digest(keys) != keys_digest({"a": "k2", "b": "k1"})
    assert keys_digest(keys) != keys_digest({"a": "k1"})


def test_a_placement_carries_the_digest_of_its_graph() -> None:
    graph = make_graph([("a", "b")])
    placement = Placement("single", {}, ("d0",), graph.node_names, np.zeros(2, dtype=np.int64))
    assert "op_keys_digest" not in placement_to_json(placement)
    doc = placement_to_json(placement, op_keys_digest="abc")
    assert placement_op_keys_digest(doc) == "abc"
    placement_from_json(doc, graph)
    doc["op_keys_digest"] = 12
    with pytest.raises(CeleritasInputError, match="op_keys_digest"):
        placement_from_json(doc, graph)
    with pytest.raises(CeleritasInputError, match="op_keys_digest") as info:
        placement_op_keys_digest(doc, "p.json")
    assert "p.json" in str(info.value)
