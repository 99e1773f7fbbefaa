"""Order-Place and Adjusting Placement on hand-made graphs with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.placers import PLACERS, get_placer, place
from celeritas_core.placers.adjusting import adjusting_placement, order_place
from celeritas_core.placers.compare import params_for
from celeritas_core.readwrite.formats import placement_to_json
from celeritas_core.simulation.timeline import DeviceTimeline
from tests.conftest import make_graph


def _fork_join(branch_time: float):
    return make_graph([("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")],
                      times={"s": 1, "a": branch_time, "b": branch_time, "t": 1})


def test_adjusting_moves_a_branch_when_the_gain_beats_back_cost():
    g = _fork_join(100.0)
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=5.0)
    dev = adjusting_placement(g, cluster)
    assert dev[g.index["s"]] == 0
    assert dev[g.index["a"]] != dev[g.index["b"]]


def test_adjusting_stays_when_transfers_cost_more_than_the_wait():
    g = _fork_join(100.0)
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=80.0)
    dev = adjusting_placement(g, cluster)
    assert dev.tolist() == [0, 0, 0, 0]


def test_adjusting_moves_on_when_the_device_is_full():
    g = make_graph([("a", "b"), ("b", "c")], memory={"a": 1, "b": 1, "c": 1})
    cluster = Cluster.homogeneous(2, 2.0, slope_us_per_byte=0.0, intercept_us=1000.0)
    assert adjusting_placement(g, cluster).tolist() == [0, 0, 1]


def test_adjusting_best_effort_goes_to_most_free_memory_and_is_flagged():
    g = make_graph([("a", "b"), ("b", "c")], memory={"a": 3, "b": 2, "c": 5})
    cluster = Cluster.build(["x", "y"], [3.0, 4.0], slope_us_per_byte=0.0, intercept_us=1.0)
    dev = adjusting_placement(g, cluster)
    assert dev.tolist() == [0, 1, 1]  # c fits nowhere: y has 2 free bytes, x has 0
    placement = place(g, cluster, "celeritas", {"R": 1})
    assert placement.oom and placement.oom_devices == ("y",)


def test_order_place_fills_devices_in_order_then_best_effort():
    g = make_graph([("a", "b"), ("b", "c"), ("c", "d")], memory={"a": 2, "b": 2, "c": 2, "d": 2})
    cluster = Cluster.homogeneous(2, 4.0)
    assert order_place(g, cluster, g.topological_order).tolist() == [0, 0, 1, 1]
    small = Cluster.build(["x", "y"], [2.0, 3.0])
    assert order_place(g, small, g.topological_order).tolist() == [0, 1, 1, 0]


def test_device_timeline_inserts_into_gaps():
    tl = DeviceTimeline()
    tl.insert(0.0, 10.0)
    tl.insert(20.0, 30.0)
    assert tl.earliest_start(0.0, 5.0) == 10.0
    assert tl.earliest_start(0.0, 10.0) == 10.0
    assert tl.earliest_start(0.0, 11.0) == 30.0
    assert tl.earliest_start(12.0, 8.0) == 12.0
    assert tl.earliest_start(35.0, 100.0) == 35.0


def test_every_placer_keeps_colocation_groups_together():
    edges = [(f"x{i}", f"x{i + 1}", 1e6) for i in range(40)]
    edges += [("v0", "x0"), ("v1", "x20"), ("x39", "u0"), ("x39", "u1"), ("v0", "u0"), ("v1", "u1")]
    colocation = {"v0": "g0", "u0": "g0", "v1": "g1", "u1": "g1"}
    g = make_graph(edges, colocation=colocation, memory={"v0": 5, "v1": 5})
    cluster = Cluster.homogeneous(4, 15.0)
    for name in sorted(set(PLACERS) - {"optimal"}):  # 45 ops: above the MILP's size limit
        placement = place(g, cluster, name, params_for(name, {"R": 4}))
        assert colocation_respected(g, placement.assignment), name
        assert placement.device_of("u0") == placement.device_of("v0")


@pytest.mark.parametrize("name", sorted(set(PLACERS) - {"optimal"}))
def test_colocation_group_too_big_for_any_device_is_placed_best_effort_and_said_to_not_fit(name):
    g = make_graph([("v", "u")], memory={"v": 10, "u": 10}, colocation={"v": "g", "u": "g"})
    p = place(g, Cluster.homogeneous(2, 15.0), name)
    assert p.oom and p.cannot_fit and p.memory_lower_bound_bytes == 20.0
    assert p.device_of("v") == p.device_of("u")


def test_unknown_placer_and_bad_params_are_input_errors():
    g = make_graph([("a", "b")])
    cluster = Cluster.homogeneous(2, 10.0)
    with pytest.raises(CeleritasInputError, match="unknown placer 'nope'"):
        place(g, cluster, "nope")
    with pytest.raises(CeleritasInputError, match="unknown parameter 'X'"):
        place(g, cluster, "celeritas", {"X": 1})
    with pytest.raises(CeleritasInputError, match="'R': must be >= 1"):
        place(g, cluster, "celeritas", {"R": 0})
    with pytest.raises(CeleritasInputError, match="'memory_fraction': must be > 0"):
        place(g, cluster, "celeritas", {"memory_fraction": 0})
    assert get_placer("order-place").params[0].name == "R"


def test_placement_reports_figures_consistently(rng):
    edges = [(f"n{i}", f"n{j}", float(rng.integers(1, 10**6)))
             for i in range(60) for j in range(i + 1, min(60, i + 6)) if rng.random() < 0.5]
    g = make_graph(edges, times={f"n{i}": float(rng.integers(1, 100)) for i in range(60)})
    cluster = Cluster.homogeneous(3, 30.0)
    p = place(g, cluster, "celeritas", {"R": 10})
    assert p.single_device_time_us == pytest.approx(g.total_time_us)
    assert p.predicted_step_time_us >= p.lower_bound_us - 1e-9
    assert np.bincount(p.assignment, minlength=3).sum() == g.num_nodes
    assert p.device_memory_bytes.sum() == pytest.approx(g.total_memory_bytes)
    doc = placement_to_json(p)
    assert set(doc["assignment"]) == set(g.node_names)
    assert doc["coarse_nodes"] == p.coarse_nodes and doc["oom"] is False


def test_a_graph_without_op_times_places_and_reports_finite_figures(tmp_path):
    # static-cost graphs (``celeritas graph --costs static``) have time 0 everywhere
    from celeritas_core.readwrite.formats import save_placement

    g = make_graph([("a", "b", 100.0), ("b", "c", 100.0)], default_time=0.0)
    cluster = Cluster.homogeneous(2, 10.0, slope_us_per_byte=0.0, intercept_us=0.0)
    for name in ("single", "celeritas"):
        p = place(g, cluster, name)
        assert p.predicted_step_time_us == 0.0 and p.lower_bound_us == 0.0
        assert p.gap_to_lower_bound == 0.0 and p.speedup_vs_single == 1.0
        save_placement(p, tmp_path / f"{name}.json")


def test_device_timeline_fills_gaps_between_touching_and_zero_length_intervals():
    tl = DeviceTimeline()
    for start, end in ((0.0, 10.0), (20.0, 30.0), (10.0, 15.0)):
        tl.insert(start, end)
    assert tl.earliest_start(0.0, 5.0) == 15.0
    assert tl.earliest_start(0.0, 6.0) == 30.0
    assert tl.earliest_start(16.0, 4.0) == 16.0
    assert tl.earliest_start(5.0, 0.0) == 10.0  # a zero-length op fits where two intervals touch
    tl.insert(17.0, 17.0)  # a zero-length interval splits the gap [15, 20)
    assert tl.earliest_start(15.0, 4.0) == 30.0


def test_evaluation_is_a_separate_result_and_placements_stay_as_made():
    """``evaluate_placement`` returns a new placement carrying its evaluation; the placement it
    was given, its assignment and the evaluation itself cannot be changed afterwards."""
    import dataclasses
    import math

    from celeritas_core.placers import evaluate_placement

    g = _fork_join(100.0)
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=5.0)
    made = place(g, cluster, "celeritas", evaluate=False)
    assert made.evaluation is None and math.isnan(made.predicted_step_time_us) and not made.oom
    evaluated = evaluate_placement(g, cluster, made)
    assert evaluated is not made and made.evaluation is None
    assert evaluated.predicted_step_time_us == place(g, cluster, "celeritas").predicted_step_time_us
    assert evaluated.assignment.tolist() == made.assignment.tolist()
    assert placement_to_json(evaluated)["extra"]["device_busy_us"] == evaluated.device_busy_us.tolist()
    with pytest.raises(dataclasses.FrozenInstanceError):
        evaluated.placer = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        evaluated.evaluation.predicted_step_time_us = 0.0  # type: ignore[misc,union-attr]
    for frozen in (evaluated.assignment, evaluated.device_peak_memory_bytes):
        with pytest.raises(ValueError):
            frozen[0] = 1


def test_placer_parameters_are_typed_dataclasses_and_the_specs_come_from_their_fields():
    import dataclasses

    from celeritas_core.placers.celeritas import CeleritasParams

    spec = get_placer("celeritas")
    assert spec.params_type is CeleritasParams
    assert [p.name for p in spec.params] == [f.name for f in dataclasses.fields(CeleritasParams)]
    assert {p.name: p.kind for p in spec.params}["refine"] is bool
    typed = spec.typed_params({"refine": "false", "R": "7"})
    assert typed == CeleritasParams(R=7, refine=False) and typed.refine is False and typed.R == 7
    for spelt, value in ((1, True), (0, False), ("TRUE", True), ("0", False), (True, True)):
        assert spec.resolve_params({"refine": spelt})["refine"] is value
    for bad in (2, "yes", 0.5, None):
        with pytest.raises(CeleritasInputError, match="'refine': expected true or false"):
            spec.resolve_params({"refine": bad})
    with pytest.raises(CeleritasInputError, match=r"'R': must be <= 2,147,483,647"):
        spec.resolve_params({"R": 2**31})
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.R = 3  # type: ignore[misc]
    every_int_has_a_maximum = [(s.name, p.name) for s in PLACERS.values() for p in s.params
                               if p.kind is int and p.maximum is None]
    assert every_int_has_a_maximum == []


@pytest.mark.parametrize("tiny", [1e-40, 1e-300, 5e-324])
def test_metis_places_on_a_cluster_with_a_tiny_device(tiny: float) -> None:
    """A device whose memory is a tiny fraction of another's: its METIS target share used to round
    to 0 as a 32-bit float, which METIS refuses (pymetis: "Caught an unknown exception!")."""
    from celeritas_core.placers.metis import MIN_TARGET_SHARE, metis_target_shares

    shares = metis_target_shares(np.array([tiny, 2e5, 2e5]))
    assert shares is not None and min(np.float32(s) for s in shares) >= np.float32(MIN_TARGET_SHARE) * 0.99
    assert math.isclose(sum(shares), 1.0) and shares[1] == shares[2]
    assert metis_target_shares(np.array([3.0, 3.0])) is None
    g = make_graph([("a", "b"), ("b", "c"), ("c", "d"), ("a", "e"), ("e", "d")], default_bytes=10.0,
                   memory={"a": 100, "b": 200, "c": 300, "d": 50, "e": 70})
    cluster = Cluster.build(["tiny", "big"], [tiny, 2e5])
    for placer in ("metis", "celeritas"):
        placement = place(g, cluster, placer)
        assert placement.assignment.tolist() == [1] * 5 and not placement.oom, placer
