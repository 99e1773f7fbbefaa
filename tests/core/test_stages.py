"""Pipeline-stage placements: the layer coordinate, the stage-memory window, the cut DP, and a
training step where only a stage split fits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph, Liveness
from celeritas_core.graphs.paths import turning_point
from celeritas_core.placers import place
from celeritas_core.placers.stages import (
    layer_coordinate,
    pipeline_sequences,
    split,
)
from celeritas_core.simulation.live_estimate import SequenceMemory
from celeritas_core.simulation.memory import memory_profile, one_device_peak_bytes, owned_intervals
from celeritas_core.simulation.simulator import simulate

MB = 1e6


def training_step(layers: int, *, activation: float = 10 * MB, weight: float = 1 * MB,
                  name: str = "train") -> Graph:
    """A hand-made training step: input → f1 … fL → loss → gL … g1; g_i reads f_{i-1}'s activation
    (x for g1) and g_{i+1}'s gradient; variable w_i (persistent, co-located with its update u_i)
    feeds f_i and g_i; u_i reads g_i. Ops in backward-first index order, so index order is not
    the layer order. Every op 100 µs (backward 200 µs)."""
    names = ["x", "loss"] + [f"g{i}" for i in range(layers, 0, -1)] + [f"f{i}" for i in range(1, layers + 1)]
    names += [f"w{i}" for i in range(1, layers + 1)] + [f"u{i}" for i in range(1, layers + 1)]
    index = {n: i for i, n in enumerate(names)}
    edges = [("x", "f1"), (f"f{layers}", "loss"), ("loss", f"g{layers}"), ("x", "g1")]
    edges += [(f"f{i}", f"f{i + 1}") for i in range(1, layers)]
    edges += [(f"g{i + 1}", f"g{i}") for i in range(1, layers)]
    edges += [(f"f{i - 1}", f"g{i}") for i in range(2, layers + 1)]
    for i in range(1, layers + 1):
        edges += [(f"w{i}", f"f{i}"), (f"w{i}", f"g{i}"), (f"w{i}", f"u{i}"), (f"g{i}", f"u{i}")]
    persistent = {f"w{i}": weight for i in range(1, layers + 1)}
    outputs = {n: (0.0 if n.startswith(("w", "u")) or n == "loss" else activation) for n in names}
    live = Liveness.from_lists([persistent.get(n, 0.0) for n in names], [0.0] * len(names),
                               [[outputs[n]] for n in names])
    nbytes = [outputs[a] if not a.startswith("w") else weight for a, _ in edges]
    return Graph.from_arrays(
        name=name, node_names=names,
        time_us=[200.0 if n.startswith("g") else 100.0 for n in names],
        memory_bytes=[persistent.get(n, 0.0) + outputs[n] for n in names],
        edge_src=[index[a] for a, _ in edges], edge_dst=[index[b] for _, b in edges], edge_bytes=nbytes,
        colocation=[f"layer{n[1:]}" if n[0] in "wu" else None for n in names], liveness=live)


def test_the_turning_point_is_the_loss_and_each_gradient_sits_with_its_layer():
    g = training_step(8)
    assert g.node_names[turning_point(g)] == "loss"
    x = layer_coordinate(g)
    assert x is not None
    at = {n: x[g.index[n]] for n in g.node_names}
    forward = [at[f"f{i}"] for i in range(1, 9)]
    assert forward == sorted(forward) and len(set(forward)) == 8
    for i in range(2, 8):  # g_i reads f_{i-1}: it sits with layer i-1's output (g8 reads the loss)
        assert at[f"g{i}"] == at[f"f{i - 1}"]
    assert at["g8"] == at["loss"] == max(at.values())
    paired = pipeline_sequences(g)[0]
    assert paired.name == "paired"
    position = {n: paired.position[paired.unit_of[g.index[n]]] for n in g.node_names}
    for i in range(3, 8):  # layer i's forward op, gradient and variable group: between layers i-2 and i+1
        assert position[f"f{i - 2}"] < position[f"g{i}"] < position[f"f{i + 1}"]
        assert position[f"u{i}"] == position[f"w{i}"]


def test_an_inference_chain_has_no_paired_order():
    names = [f"x{i}" for i in range(6)]
    g = Graph.from_arrays(name="chain", node_names=names, time_us=[1.0] * 6, memory_bytes=[1.0] * 6,
                          edge_src=list(range(5)), edge_dst=list(range(1, 6)), edge_bytes=[1.0] * 5)
    assert layer_coordinate(g) is None
    assert [s.name for s in pipeline_sequences(g)] == ["topo"]


def _brute_force_cuts(ends: np.ndarray, cost: np.ndarray) -> float | None:
    stages, units = ends.shape
    best = None
    for cuts in itertools.combinations(range(1, units), stages - 1):
        bounds = (0, *cuts, units)
        if all(bounds[k + 1] <= ends[k, bounds[k]] for k in range(stages)):
            total = float(sum(cost[c] for c in cuts))
            best = total if best is None else min(best, total)
    return best


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 4), st.integers(2, 9), st.data())
def test_the_cut_dp_is_optimal(stages: int, units: int, data: st.DataObject) -> None:
    # window ends: non-decreasing, each at least its start (a unit that alone fits nothing: e == a)
    ends = np.zeros((stages, units), dtype=np.int64)
    for k in range(stages):
        previous = 0
        for a in range(units):
            previous = max(previous, a, data.draw(st.integers(a, units)))
            ends[k, a] = previous
    cost = np.array([0.0] + [data.draw(st.integers(0, 20)) for _ in range(units - 1)] + [0.0])
    want = _brute_force_cuts(ends, cost)
    got = split(ends, cost)
    if want is None:
        assert got is None
    else:
        assert got is not None and len(got) == stages - 1 and list(got) == sorted(set(got.tolist()))
        bounds = (0, *got.tolist(), units)
        assert all(bounds[k + 1] <= ends[k, bounds[k]] for k in range(stages))
        assert float(cost[got].sum()) == want


@pytest.mark.parametrize("layers", [4, 9])
def test_the_window_ends_match_the_estimated_peak_of_every_run(layers: int) -> None:
    g = training_step(layers)
    seq = pipeline_sequences(g)[0]
    memory = SequenceMemory.build(g, seq.position[seq.unit_of], seq.num_units)
    for capacity in (15 * MB, 40 * MB, 1e12):
        ends = memory.window_ends(capacity)
        assert (np.diff(ends) >= 0).all()
        for a in range(seq.num_units):
            for e in range(a + 1, seq.num_units + 1):
                fits = memory.peak(a, e) <= capacity * (1 + 1e-12)
                if e <= ends[a]:
                    assert fits, (a, e)  # everything the window admits fits ...
            assert ends[a] == seq.num_units or memory.peak(a, ends[a] + 1) > capacity  # ... and no more


def test_owned_pieces_add_up_to_the_one_device_usage() -> None:
    g = training_step(6)
    one = np.zeros(g.num_nodes, dtype=np.int64)
    result = simulate(g, Cluster.homogeneous(1, 1.0), one)
    owned = owned_intervals(g, result)
    points = np.unique(np.concatenate([owned.start_us, owned.end_us]))
    usage = [owned.static_bytes.sum() + owned.size_bytes[(owned.start_us <= t) & (t < owned.end_us)].sum()
             for t in points]
    assert max(usage) == pytest.approx(memory_profile(g, 1, one, result).peak_bytes[0])
    assert max(usage) == pytest.approx(one_device_peak_bytes(g))


def test_only_a_stage_split_fits_and_celeritas_finds_it() -> None:
    g = training_step(8)
    peak = one_device_peak_bytes(g)
    cluster = Cluster.homogeneous(2, 0.62 * peak, slope_us_per_byte=1e-5, intercept_us=5.0)
    stages = place(g, cluster, "stages")  # here the split between forward and backward fits
    assert not stages.oom and stages.extra["chosen"].startswith("stages/")
    for name in ("metis", "m-topo", "heft", "m-etf"):  # summed planning bytes: over by replay
        assert place(g, cluster, name).oom, name
    # Order-Place fills devices by the same liveness-aware estimate, along CPD-TOPO: it fits too
    assert not place(g, cluster, "order-place").oom
    celeritas = place(g, cluster, "celeritas")
    assert not celeritas.oom and not celeritas.cannot_fit
    assert celeritas.predicted_step_time_us <= stages.predicted_step_time_us * (1 + 1e-9)
    # each layer's gradient and variable group stay with its forward op
    for i in range(2, 9):
        assert celeritas.device_of(f"u{i}") == celeritas.device_of(f"w{i}")


def test_the_stage_split_of_the_sequence_is_contiguous() -> None:
    g = training_step(6)
    seq = pipeline_sequences(g)[0]
    assignment = seq.assignment(np.array([3, 7]), np.array([2, 0, 1]))
    stage_of_unit = np.empty(seq.num_units, dtype=np.int64)
    stage_of_unit[seq.unit_of] = assignment
    assert stage_of_unit[seq.sequence].tolist() == [2] * 3 + [0] * 4 + [1] * (seq.num_units - 7)


def test_a_constant_only_the_backward_reads_sits_with_its_first_reader():
    """For the pipelined planners, a source that feeds only backward ops (a shape or a scale of a
    gradient) takes the layer of the earliest one, so a stage split keeps it with its readers
    instead of sending it from the first stage; the single-batch splits keep it first."""
    layers = 6
    numbers = range(1, layers + 1)
    names = ["x", "loss", "c", *(f"f{i}" for i in numbers), *(f"g{i}" for i in numbers)]
    index = {n: i for i, n in enumerate(names)}
    edges = [("x", "f1"), (f"f{layers}", "loss"), ("loss", f"g{layers}"), ("x", "g1"), ("c", "g5"),
             ("c", "g3")]
    edges += [(f"f{i}", f"f{i + 1}") for i in range(1, layers)]
    edges += [(f"g{i + 1}", f"g{i}") for i in range(1, layers)]
    edges += [(f"f{i - 1}", f"g{i}") for i in range(2, layers + 1)]
    g = Graph.from_arrays(name="consts", node_names=names, time_us=[1.0] * len(names),
                          memory_bytes=[1.0] * len(names), edge_src=[index[a] for a, _ in edges],
                          edge_dst=[index[b] for _, b in edges], edge_bytes=[1.0] * len(edges))
    x = layer_coordinate(g, constants_with_readers=True)
    assert x is not None
    assert g.node_names[turning_point(g)] == "loss"
    assert x[index["g3"]] == x[index["f2"]] < x[index["g5"]]
    assert x[index["c"]] == x[index["g3"]]
    before = layer_coordinate(g)  # the single-batch splits' order: before the first layer
    assert before is not None and before[index["c"]] == -1
    assert np.array_equal(np.delete(before, index["c"]), np.delete(x, index["c"]))
