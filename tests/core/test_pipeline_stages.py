"""The stage-level pipeline baselines (celeritas_core/placers/pipeline_stages.py): Alpa's and
PipeDream's stage programs against brute force over every contiguous split, GPipe's even split,
the memory model, valid placements and the programs' speed."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import numpy as np
import pytest

from celeritas_core.generators.synthetic import small_training_graph, training_step_graph
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers import PLACERS, place
from celeritas_core.placers.pipeline_stages import (
    METHODS,
    StageProblem,
    alpa_objective,
    alpa_split,
    gpipe_cuts,
    in_flight,
    least_overflow,
    op_persistent_bytes,
    pipedream_objective,
    pipedream_split,
    pipeline_layers,
    plan_stages,
)
from celeritas_core.placers.stages import stage_devices
from celeritas_core.simulation.memory import planning_memory_bytes
from tests.conftest import make_graph
from tests.core.test_stages import training_step

REL = 1e-6


# ---------------------------------------------------------------------------- brute force
def _figures(p: StageProblem, cuts: tuple[int, ...]) -> tuple[list[float], list[float], list[float]]:
    """Stage times, cut times and stage bytes of a split, summed from the raw arrays."""
    bounds = (0, *cuts, p.num_layers)
    times = [float(np.sum(p.time_us[bounds[k]:bounds[k + 1]])) / p.speed[k] for k in range(p.num_stages)]
    cut = [float(p.cut_us[k, bounds[k]]) for k in range(1, p.num_stages)]
    memory = [float(np.sum(p.persistent_bytes[bounds[k]:bounds[k + 1]])
                    + p.in_flight[k] * np.sum(p.activation_bytes[bounds[k]:bounds[k + 1]]))
              for k in range(p.num_stages)]
    return times, cut, memory


def _splits(p: StageProblem) -> list[tuple[int, ...]]:
    return list(itertools.combinations(range(1, p.num_layers), p.num_stages - 1))


def _overflow(p: StageProblem, cuts: tuple[int, ...]) -> float:
    return max(m / c for m, c in zip(_figures(p, cuts)[2], p.capacity, strict=True))


def _brute(p: StageProblem, score: Callable[[list[float], list[float]], float],
           limit: float = 1.0) -> float | None:
    """The least score among the splits whose bytes fit ``limit`` times each device."""
    best = None
    for cuts in _splits(p):
        times, cut, memory = _figures(p, cuts)
        if all(m <= limit * c * (1 + 1e-12) for m, c in zip(memory, p.capacity, strict=True)):
            value = score(times, cut)
            best = value if best is None else min(best, value)
    return best


def _random_problem(rng: np.random.Generator, method: str, micro_batches: int) -> StageProblem:
    """6-9 layers, 2-4 stages, random times, bytes (integers: sums are exact), capacities from
    tight (often no split fits) to ample, cut costs (sometimes none) and speeds (sometimes mixed)."""
    layers = int(rng.integers(6, 10))
    stages = int(rng.integers(2, 5))
    time_us = rng.exponential(10.0, layers) * (rng.random(layers) < 0.9)
    persistent = rng.integers(0, 20, layers).astype(float)
    activation = rng.integers(0, 10, layers).astype(float)
    counts = in_flight(method, stages, micro_batches)
    whole = persistent.sum() + counts.max() * activation.sum()
    capacity = np.round(whole / stages * rng.uniform(0.6, 2.5, stages))
    cut = rng.exponential(8.0, (stages, layers + 1)) if rng.random() < 0.8 else None
    speed = rng.choice([0.5, 1.0, 2.0], stages) if rng.random() < 0.3 else None
    return StageProblem.of(time_us, persistent, activation, capacity, counts, cut, speed)


# ---------------------------------------------------------------------------- the programs
@pytest.mark.parametrize("micro_batches", [1, 2, 8])
def test_alpa_split_matches_brute_force(micro_batches: int) -> None:
    rng = np.random.default_rng(100 + micro_batches)
    infeasible = 0
    for _ in range(120):
        p = _random_problem(rng, "alpa-stages", micro_batches)

        def score(times: list[float], cut: list[float]) -> float:
            return alpa_objective(times, micro_batches, cut)

        want = _brute(p, score)
        got = alpa_split(p, micro_batches)
        if want is None:
            infeasible += 1
            assert got is None
            alpha, cuts = least_overflow(p)  # best effort: the least overflow, then the objective
            assert alpha == pytest.approx(min(_overflow(p, c) for c in _splits(p)), rel=REL)
            assert _overflow(p, tuple(cuts.tolist())) <= alpha * (1 + REL)
            got = alpa_split(p.scaled(alpha), micro_batches)
            want = _brute(p, score, alpha)
        assert got is not None and want is not None
        assert len(got) == p.num_stages - 1 and np.all(np.diff(np.r_[0, got, p.num_layers]) > 0)
        times, cut, _ = _figures(p, tuple(got.tolist()))
        assert score(times, cut) == pytest.approx(want, rel=REL)
        assert p.latency(got, micro_batches) == pytest.approx(want, rel=REL)
    assert 5 <= infeasible <= 100  # both kinds of instance were drawn


@pytest.mark.parametrize("micro_batches", [1, 3, 8])
def test_pipedream_split_matches_brute_force(micro_batches: int) -> None:
    rng = np.random.default_rng(200 + micro_batches)
    infeasible = 0
    for _ in range(120):
        p = _random_problem(rng, "pipedream", micro_batches)
        want = _brute(p, pipedream_objective)
        got = pipedream_split(p)
        if want is None:
            infeasible += 1
            assert got is None
            alpha, _ = least_overflow(p)
            got = pipedream_split(p.scaled(alpha))
            want = _brute(p, pipedream_objective, alpha)
        assert got is not None and want is not None
        times, cut, _ = _figures(p, tuple(got.tolist()))
        assert pipedream_objective(times, cut) == pytest.approx(want, rel=REL)
        # among the splits of that bottleneck, the least summed cut time
        least_cut = min(sum(_figures(p, c)[1]) for c in _splits(p)
                        if pipedream_objective(*_figures(p, c)[:2]) <= want * (1 + REL)
                        and _overflow(p, c) <= max(1.0, _overflow(p, tuple(got.tolist()))) * (1 + 1e-12))
        assert sum(cut) == pytest.approx(least_cut, rel=REL, abs=1e-9)
    assert 5 <= infeasible <= 100


def test_a_stage_count_above_the_layers_or_a_layer_too_big_has_no_split() -> None:
    p = StageProblem.of([1.0, 2.0], [0, 0], [1, 1], [10, 10, 10], [1, 1, 1])
    assert alpa_split(p, 4) is None and pipedream_split(p) is None
    one = StageProblem.of([1.0, 2.0, 3.0], [0, 50, 0], [0, 0, 0], [10, 10], [1, 1])
    assert alpa_split(one, 4) is None
    alpha, cuts = least_overflow(one)
    assert alpha == pytest.approx(5.0) and one.overflow(cuts) == pytest.approx(5.0)


def test_the_objectives_and_in_flight_counts() -> None:
    assert alpa_objective([10.0, 30.0, 20.0], 1) == 60.0
    assert alpa_objective([10.0, 30.0, 20.0], 5, [1.0, 2.0]) == 63.0 + 4 * 30.0
    assert alpa_objective([], 3) == 0.0 and pipedream_objective([]) == 0.0
    assert pipedream_objective([10.0, 30.0], [31.0]) == 31.0
    assert in_flight("pipedream", 5, 2).tolist() == [2, 2, 2, 2, 1]
    assert in_flight("gpipe-even", 3, 6).tolist() == [6, 6, 6]


def test_gpipe_cuts_give_equal_layer_counts() -> None:
    for layers in range(1, 40):
        for stages in range(1, min(layers, 9) + 1):
            counts = np.diff(np.r_[0, gpipe_cuts(layers, stages), layers])
            assert len(counts) == stages and counts.min() >= 1 and counts.max() - counts.min() <= 1


def test_the_programs_are_fast_on_a_thousand_layers() -> None:
    rng = np.random.default_rng(7)
    layers, stages, micro_batches = 1000, 8, 16
    time_us = rng.exponential(50.0, layers)
    persistent, activation = rng.integers(0, 100, layers) * 1.0, rng.integers(0, 40, layers) * 1.0
    cut = rng.exponential(20.0, layers + 1)
    tight = (persistent.sum() + micro_batches * activation.sum()) / stages * 1.3
    solvers = (("alpa-stages", lambda p: alpa_split(p, micro_batches)), ("pipedream", pipedream_split))
    for method, solve in solvers:
        p = StageProblem.of(time_us, persistent, activation, [tight] * stages,
                            in_flight(method, stages, micro_batches), cut)
        solve(p)  # the sequential-partition loop compiled or loaded
        start = time.perf_counter()
        for k in range(1, stages + 1):  # what a placer does: every stage count
            sub = StageProblem.of(time_us, persistent, activation, [tight] * k,
                                  in_flight(method, k, micro_batches), cut)
            solve(sub)
            least_overflow(sub)
        assert time.perf_counter() - start < 1.0, method


# ---------------------------------------------------------------------------- on graphs
def _brute_plan(graph: Graph, cluster: Cluster, method: str, micro_batches: int) -> tuple[bool, float]:
    """Over every stage count and every split: (some split fits, least objective of the splits
    that fit, else of those of least overflow)."""
    layers = pipeline_layers(graph)
    candidates = []
    for k in range(1, min(cluster.num_devices, layers.num_layers) + 1):
        p = layers.problem(cluster, stage_devices(cluster, k), in_flight(method, k, micro_batches))
        for cuts in _splits(p):
            times, cut, _ = _figures(p, cuts)
            value = (alpa_objective(times, micro_batches, cut) if method == "alpa-stages"
                     else pipedream_objective(times, cut))
            candidates.append((_overflow(p, cuts), value))
    if any(o <= 1 + 1e-12 for o, _ in candidates):
        return True, min(v for o, v in candidates if o <= 1 + 1e-12)
    least = min(o for o, _ in candidates)
    return False, min(v for o, v in candidates if o <= least * (1 + 1e-6))


@pytest.mark.parametrize("method", ["alpa-stages", "pipedream"])
@pytest.mark.parametrize("micro_batches", [1, 4])
@pytest.mark.parametrize("fraction", [0.2, 0.45, 0.7, 1.2, 2.0])
def test_the_placer_takes_the_best_stage_count(method: str, micro_batches: int, fraction: float) -> None:
    g = training_step(7)  # 7 layers with their gradients and variable groups: 8 pipeline layers
    g = g.with_memory(planning_memory_bytes(g))
    cluster = Cluster.build(["a", "b", "c"], [fraction * g.total_memory_bytes * s for s in (1.0, 0.8, 1.2)],
                            slope_us_per_byte=2e-6, intercept_us=5.0)
    fits, want = _brute_plan(g, cluster, method, micro_batches)
    plan = plan_stages(pipeline_layers(g), cluster, method, micro_batches)
    extra = plan.extra(pipeline_layers(g))
    assert extra["fits"] is fits
    got = extra["latency_us"] if method == "alpa-stages" else extra["bottleneck_us"]
    assert got == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("method", METHODS)
def test_every_placement_is_valid_and_contiguous(method: str) -> None:
    edges = [(f"x{i}", f"x{i + 1}", 1e6) for i in range(30)]
    edges += [("v0", "x0"), ("v1", "x20"), ("x29", "u0"), ("x29", "u1"), ("v0", "u0"), ("v1", "u1")]
    grouped = make_graph(edges, colocation={"v0": "g0", "u0": "g0", "v1": "g1", "u1": "g1"},
                         memory={"v0": 5, "v1": 5})
    tiny = make_graph([("a", "b", 1.0)])
    graphs = [small_training_graph(0), small_training_graph(1, liveness=True), training_step(6), grouped,
              tiny, make_graph([], nodes=["only"])]
    for graph in graphs:
        for devices, memory in ((1, 1e12), (3, 1e12), (4, 0.1 * graph.total_memory_bytes + 1.0)):
            cluster = Cluster.homogeneous(devices, memory)
            p = place(graph, cluster, method, {"micro_batches": 4})
            assert p.assignment.shape == (graph.num_nodes,)
            assert p.assignment.min() >= 0 and p.assignment.max() < devices
            assert colocation_respected(graph, p.assignment)
            layers = pipeline_layers(graph.with_memory(planning_memory_bytes(graph)))
            at_position = np.empty(layers.seq.num_units, dtype=np.int64)
            at_position[layers.seq.position[layers.seq.unit_of]] = p.assignment
            runs = at_position[np.r_[0, np.flatnonzero(np.diff(at_position)) + 1]]
            assert len(runs) == len(set(runs.tolist())) == p.extra["num_stages"]  # contiguous stages
            assert p.extra["stage_devices"] == runs.tolist()
            if method == "gpipe-even":
                assert p.extra["num_stages"] == min(devices, layers.num_layers)
                assert max(p.extra["stage_layers"]) - min(p.extra["stage_layers"]) <= 1


def test_a_graph_without_layers_falls_back_to_the_topological_order() -> None:
    chain = make_graph([(f"x{i}", f"x{i + 1}", 10.0) for i in range(11)], default_memory=10.0)
    layers = pipeline_layers(chain)
    assert layers.seq.name == "topo" and layers.num_layers == 12
    p = place(chain, Cluster.homogeneous(3, 100.0), "alpa-stages", {"micro_batches": 2})  # 230 B in all
    assert p.extra["order"] == "topo" and p.extra["fits"] and not p.oom
    assert p.assignment.tolist() == sorted(p.assignment.tolist())


def test_alpa_is_never_worse_than_gpipe_on_a_generated_step() -> None:
    g = training_step_graph(layers=12, width=256, branches=2, residual=True, liveness=True, seed=3)
    cluster = Cluster.homogeneous(4, 1e12, slope_us_per_byte=1e-5, intercept_us=10.0)
    for micro_batches in (1, 4, 16):
        params = {"micro_batches": micro_batches}
        even = place(g, cluster, "gpipe-even", params)
        alpa = place(g, cluster, "alpa-stages", params)
        pipedream = place(g, cluster, "pipedream", params)
        assert even.extra["fits"] and alpa.extra["fits"] and pipedream.extra["fits"]
        assert alpa.extra["latency_us"] <= even.extra["latency_us"] * (1 + 1e-12)
        assert pipedream.extra["bottleneck_us"] <= even.extra["bottleneck_us"] * (1 + 1e-12)
    assert alpa.extra["latency_us"] < even.extra["latency_us"]  # and strictly better here


def test_the_memory_model_counts_micro_batches_in_flight() -> None:
    g = small_training_graph(0, liveness=True)
    planning = g.with_memory(planning_memory_bytes(g))
    persistent = op_persistent_bytes(planning)
    live = g.liveness
    assert live is not None
    assert persistent.sum() == pytest.approx(np.minimum(live.persistent_bytes, planning.memory_bytes).sum())
    layers = pipeline_layers(planning)
    assert layers.persistent_bytes.sum() + layers.activation_bytes.sum() == pytest.approx(
        planning.memory_bytes.sum())
    cluster = Cluster.homogeneous(4, 1e12)
    for method, micro_batches in (("gpipe-even", 3), ("alpa-stages", 3), ("pipedream", 6)):
        plan = plan_stages(layers, cluster, method, micro_batches)
        bounds = plan.problem.bounds(plan.cuts)
        counts = in_flight(method, plan.problem.num_stages, micro_batches)
        want = [layers.persistent_bytes[a:b].sum() + n * layers.activation_bytes[a:b].sum()
                for a, b, n in zip(bounds[:-1], bounds[1:], counts, strict=True)]
        assert plan.extra(layers)["stage_memory_bytes"] == pytest.approx(want)
    # without liveness fields: sources and co-location groups are held once, the rest per micro-batch
    plain = small_training_graph(0)
    held = (plain.in_degree == 0) | (plain.colocation_ids >= 0)
    assert np.array_equal(op_persistent_bytes(plain), np.where(held, plain.memory_bytes, 0.0))


def test_more_micro_batches_need_more_memory_and_nothing_that_does_not_fit_raises() -> None:
    g = small_training_graph(0, liveness=True)
    cluster = Cluster.homogeneous(4, 0.3 * planning_memory_bytes(g).sum())
    for method in METHODS:
        few = place(g, cluster, method, {"micro_batches": 1})
        many = place(g, cluster, method, {"micro_batches": 64})
        assert max(many.extra["stage_memory_bytes"]) > max(few.extra["stage_memory_bytes"])
        assert not many.extra["fits"] and many.extra["overflow"] > 1.0
    assert place(g, cluster, "alpa-stages", {"micro_batches": 64}).extra["overflow"] <= place(
        g, cluster, "gpipe-even", {"micro_batches": 64}).extra["overflow"] * (1 + 1e-9)


def test_the_placers_are_registered_with_their_parameter() -> None:
    from celeritas_core.errors import CeleritasInputError

    for name in METHODS:
        spec = PLACERS[name]
        assert [p.name for p in spec.params] == ["micro_batches", "stages"] and spec.resolve_params(None) == {
            "micro_batches": 4, "stages": 0}
        for bad in (0, 4097, 2.5):
            with pytest.raises(CeleritasInputError, match="micro_batches"):
                spec.resolve_params({"micro_batches": bad})
        with pytest.raises(CeleritasInputError, match="stages"):
            spec.resolve_params({"stages": -1})


@pytest.mark.parametrize("method", METHODS)
def test_a_stage_count_asked_for_is_the_count_used(method: str) -> None:
    g = training_step_graph(layers=8, width=64, seed=2)
    cluster = Cluster.homogeneous(4, 1e12)
    for stages in (1, 2, 3, 4):
        p = place(g, cluster, method, {"micro_batches": 4, "stages": stages}, evaluate=False)
        assert p.extra["num_stages"] == stages and len(set(p.assignment.tolist())) == stages


def test_on_a_link_topology_each_cut_is_priced_on_its_link() -> None:
    from celeritas_core.graphs.topology import parse_preset

    flat = Cluster.homogeneous(4, 1e12)
    linked = flat.with_topology(parse_preset("2x2:nvlink,ib").topology(flat.device_names))
    g = small_training_graph(0)
    layers = pipeline_layers(g)
    devices = stage_devices(linked, 4)
    cut = layers.cut_us(linked, devices)
    for k in range(1, 4):
        a, b = int(devices[k - 1]), int(devices[k])
        one_each = linked.transfer_time_us(layers.cut_bytes / np.maximum(layers.cut_tensors, 1), a, b)
        assert cut[k] == pytest.approx(layers.cut_tensors * one_each)  # k·bytes + b·tensors on a → b
    assert layers.cut_us(flat, np.arange(4))[1] == pytest.approx(
        flat.slope_us_per_byte * layers.cut_bytes + flat.intercept_us * layers.cut_tensors)
    for method in METHODS:
        p = place(g, linked, method, {"micro_batches": 4})
        assert p.extra["stage_devices"] == stage_devices(linked, p.extra["num_stages"]).tolist()


def test_past_max_layers_the_programs_cut_runs_of_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    import celeritas_core.placers.pipeline_stages as module

    g = small_training_graph(0)
    layers = pipeline_layers(g)
    cluster = Cluster.homogeneous(3, 1e12, slope_us_per_byte=1e-6, intercept_us=2.0)
    exact = plan_stages(layers, cluster, "alpa-stages", 4)
    monkeypatch.setattr(module, "MAX_LAYERS", 6)  # six runs of about num_layers / 6
    coarse = plan_stages(layers, cluster, "alpa-stages", 4)
    runs = set((np.arange(7) * layers.num_layers // 6).tolist())
    assert layers.num_layers > 6 and set(coarse.cuts.tolist()) <= runs
    assert coarse.problem.num_layers == layers.num_layers  # reported in the layers themselves
    assert exact.problem.latency(exact.cuts, 4) <= coarse.problem.latency(coarse.cuts, 4) * (1 + 1e-12)
