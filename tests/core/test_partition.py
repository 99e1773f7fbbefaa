"""Min-cut partitioning (seed orders, splits, FM) and the celeritas placer's communication refinement."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.placers import place
from celeritas_core.placers.partition import (
    connectivity_cost,
    connectivity_refine,
    cut_weight,
    fm_refine,
    parts_needed,
    spectral_order,
    split_order,
    tensor_nets,
    undirected_weights,
)
from celeritas_core.simulation.simulator import simulate
from tests.conftest import make_graph


def _training_like(layers: int = 4, act: float = 1e6, grad: float = 1e6, small: float = 1e3):
    """Forward chain f0..fL, backward chain bL..b0; each f_i feeds its own b_i a big activation.

    Contiguous runs of the topological order put the forward and backward halves on different
    devices and pay for every activation; the min-cut split pairs f_i with b_i.
    """
    edges = [(f"f{i}", f"f{i + 1}", small) for i in range(layers - 1)]
    edges += [(f"f{layers - 1}", f"b{layers - 1}", small)]
    edges += [(f"b{i + 1}", f"b{i}", small) for i in range(layers - 1)]
    edges += [(f"f{i}", f"b{i}", act) for i in range(layers)]
    return make_graph(edges, default_time=100.0, default_memory=10.0)


def test_undirected_weights_and_cut():
    g = make_graph([("a", "b", 1.0), ("b", "c", 2.0), ("a", "c", 4.0)])
    w = undirected_weights(g, g.edge_bytes)
    assert (w != w.T).nnz == 0
    assert w[g.index["a"], g.index["c"]] == 4.0
    parts = np.array([0, 0, 1])  # a, b | c
    assert cut_weight(w, parts) == 6.0


def test_split_order_is_contiguous_and_capacity_proportional():
    memory = np.full(10, 1.0)
    order = np.arange(10)[::-1]
    parts = split_order(order, memory, np.array([6.0, 4.0]))
    assert parts[order].tolist() == [0] * 6 + [1] * 4
    # a run closes before it would exceed its capacity
    parts = split_order(np.arange(4), np.array([3.0, 3.0, 3.0, 1.0]), np.array([5.0, 10.0]))
    assert parts.tolist() == [0, 1, 1, 1]


def test_parts_needed():
    assert parts_needed(np.array([5.0, 5.0]), np.array([4.0, 4.0, 4.0])) == 3
    assert parts_needed(np.array([5.0]), np.array([2.0, 8.0])) == 1
    assert parts_needed(np.array([50.0]), np.array([2.0, 8.0])) == 2  # cannot fit: all devices


def test_fm_finds_the_min_cut_of_two_cliques():
    edges = [(f"a{i}", f"a{j}", 10.0) for i, j in itertools.combinations(range(4), 2)]
    edges += [(f"b{i}", f"b{j}", 10.0) for i, j in itertools.combinations(range(4), 2)]
    edges += [("a3", "b0", 1.0)]
    g = make_graph(edges)
    w = undirected_weights(g, g.edge_bytes)
    bad = np.array([0, 1, 0, 1, 0, 1, 0, 1])  # interleaved: cuts almost everything
    parts = fm_refine(w, g.memory_bytes, np.array([5.0, 5.0]), bad)  # one op of slack per part
    assert cut_weight(w, parts) == 1.0
    a = [g.index[f"a{i}"] for i in range(4)]
    assert len(set(parts[a].tolist())) == 1


def test_fm_never_overfills_and_never_worsens(rng):
    for _ in range(30):
        n = int(rng.integers(4, 30))
        edges = [(f"n{i}", f"n{j}", float(rng.integers(1, 100)))
                 for i in range(n) for j in range(i + 1, n) if rng.random() < 0.3]
        g = make_graph(edges, nodes=[f"n{i}" for i in range(n)],
                       memory={f"n{i}": float(rng.integers(1, 5)) for i in range(n)})
        w = undirected_weights(g, g.edge_bytes)
        k = int(rng.integers(2, 5))
        capacity = np.full(k, g.memory_bytes.sum() / k * 1.3)
        start = split_order(rng.permutation(n), g.memory_bytes, capacity)
        parts = fm_refine(w, g.memory_bytes, capacity, start)
        assert cut_weight(w, parts) <= cut_weight(w, start) + 1e-9
        used = np.bincount(parts, weights=g.memory_bytes, minlength=k)
        before = np.bincount(start, weights=g.memory_bytes, minlength=k)
        assert np.all((used <= capacity) | (used <= before))


def _fan_out_graph():
    """``p`` sends one tensor (output 0) to c0..c3 and another (output 1) to d; all else small."""
    edges = [("p", f"c{i}", 100.0) for i in range(4)] + [("p", "d", 50.0)]
    g = make_graph(edges)
    out = np.zeros(g.num_edges, dtype=np.int64)
    out[-1] = 1
    from celeritas_core.graphs.graph import Graph

    return Graph.from_arrays(name="fan", node_names=g.node_names, time_us=g.time_us,
                             memory_bytes=g.memory_bytes, edge_src=g.edge_src, edge_dst=g.edge_dst,
                             edge_bytes=g.edge_bytes, edge_src_output=out)


def test_tensor_nets_count_one_transfer_per_tensor_and_device():
    g = _fan_out_graph()
    unit_of = np.arange(g.num_nodes)
    nets, cost = tensor_nets(g, g.edge_bytes, unit_of, g.num_nodes)
    assert nets.shape[0] == 2 and sorted(cost.tolist()) == [50.0, 100.0]
    ix = g.index
    parts = np.zeros(g.num_nodes, dtype=np.int64)
    parts[[ix["c0"], ix["c1"], ix["c2"]]] = 1  # three consumers of one tensor on device 1: one transfer
    assert connectivity_cost(nets, cost, parts, 3) == 100.0
    parts[ix["c3"]] = 2
    parts[ix["d"]] = 2  # a second device for tensor 0 (+100), tensor 1 remote (+50)
    assert connectivity_cost(nets, cost, parts, 3) == 250.0
    # a unit mapping that merges p with d drops the second net (a single unit)
    merged = unit_of.copy()
    merged[ix["d"]] = ix["p"]
    nets2, cost2 = tensor_nets(g, g.edge_bytes, merged, g.num_nodes)
    assert nets2.shape[0] == 1 and cost2.tolist() == [100.0]


def test_connectivity_refine_gathers_a_fan_out_and_respects_memory(rng):
    g = _fan_out_graph()
    nets, cost = tensor_nets(g, g.edge_bytes, np.arange(g.num_nodes), g.num_nodes)
    start = np.array([0, 1, 0, 1, 0, 1])  # p, c0, c1, c2, c3, d interleaved
    roomy = connectivity_refine(nets, cost, g.memory_bytes, np.array([6.0, 6.0]), start)
    assert connectivity_cost(nets, cost, roomy, 2) == 0.0
    tight = connectivity_refine(nets, cost, g.memory_bytes, np.array([3.0, 3.0]), start)
    assert np.all(np.bincount(tight, weights=g.memory_bytes, minlength=2) <= 3.0)
    assert connectivity_cost(nets, cost, tight, 2) <= connectivity_cost(nets, cost, start, 2)
    for _ in range(20):  # random graphs: never worse, never over capacity when it started within
        n = int(rng.integers(5, 40))
        edges = [(f"n{i}", f"n{j}", float(rng.integers(1, 100)))
                 for i in range(n) for j in range(i + 1, n) if rng.random() < 0.2]
        rg = make_graph(edges, nodes=[f"n{i}" for i in range(n)],
                        memory={f"n{i}": float(rng.integers(1, 5)) for i in range(n)})
        nets, cost = tensor_nets(rg, rg.edge_bytes, np.arange(n), n)
        k = int(rng.integers(2, 5))
        capacity = np.full(k, rg.memory_bytes.sum() / k * 1.4)
        begin = split_order(rng.permutation(n), rg.memory_bytes, capacity)
        parts = connectivity_refine(nets, cost, rg.memory_bytes, capacity, begin)
        assert connectivity_cost(nets, cost, parts, k) <= connectivity_cost(nets, cost, begin, k) + 1e-9
        assert np.all(np.bincount(parts, weights=rg.memory_bytes, minlength=k) <= capacity)


def test_spectral_order_pairs_forward_and_backward_of_a_layer():
    g = _training_like(layers=6, act=1e6, small=1.0)
    w = undirected_weights(g, g.edge_bytes)
    order = spectral_order(w, g.topological_order)
    assert order is not None and sorted(order.tolist()) == list(range(g.num_nodes))
    pos = np.empty(g.num_nodes, dtype=int)
    pos[order] = np.arange(g.num_nodes)
    for i in range(6):
        assert abs(pos[g.index[f"f{i}"]] - pos[g.index[f"b{i}"]]) == 1


def test_refined_celeritas_beats_the_papers_placement_on_a_training_like_graph():
    g = _training_like(layers=8)
    cluster = Cluster.homogeneous(2, 100.0, slope_us_per_byte=1e-3, intercept_us=10.0)  # 160 B total
    paper = place(g, cluster, "celeritas", {"R": 1, "refine": 0})
    refined = place(g, cluster, "celeritas", {"R": 1})
    assert not refined.oom and not paper.oom
    assert refined.predicted_step_time_us < 0.5 * paper.predicted_step_time_us
    assert refined.extra["chosen"].startswith("min-cut")
    for i in range(8):  # each layer's forward and backward op share a device
        assert refined.device_of(f"f{i}") == refined.device_of(f"b{i}")


def test_refinement_keeps_the_step_of_adjusting_placement_when_it_is_best():
    # A fork-join with cheap transfers: Adjusting Placement's parallel split is optimal. Another
    # candidate of the same step that no dispatch order slows (t beside b: every order 107 µs,
    # against 112 µs for some orders with t beside a) may be kept instead.
    g = make_graph([("s", "a"), ("s", "b"), ("a", "t"), ("b", "t")],
                   times={"s": 1, "a": 100, "b": 100, "t": 1})
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=5.0)
    refined = place(g, cluster, "celeritas", {"R": 1})
    paper = place(g, cluster, "celeritas", {"R": 1, "refine": 0})
    assert refined.predicted_step_time_us == paper.predicted_step_time_us == 107.0
    assert refined.device_of("a") != refined.device_of("b")


@pytest.mark.parametrize("seed", range(6))
def test_refinement_is_never_slower_than_adjusting_placement(seed):
    from celeritas_core.graphs.colocation import apply_colocation
    from celeritas_core.graphs.levels import cpath, edge_comm_us
    from celeritas_core.graphs.orders import cpd_topo_order
    from celeritas_core.placers.adjusting import adjusting_placement
    from celeritas_core.placers.fusion import optimal_operation_fusion
    from celeritas_core.placers.local_search import CandidatePool
    from celeritas_core.placers.refinement import communication_refinement

    rng = np.random.default_rng(seed)
    n = 40
    edges = [(f"n{i}", f"n{j}", float(rng.integers(0, 10**6)))
             for i in range(n) for j in range(i + 1, min(n, i + 6)) if rng.random() < 0.5]
    g = make_graph(edges, nodes=[f"n{i}" for i in range(n)],
                   times={f"n{i}": float(rng.random() * 100) for i in range(n)},
                   memory={f"n{i}": float(rng.integers(1, 10)) for i in range(n)},
                   colocation={f"n{i}": "group" for i in range(0, n, 9)})
    cluster = Cluster.homogeneous(3, g.total_memory_bytes * 0.5)
    fusion = optimal_operation_fusion(g, cluster, R=3)
    coarse = fusion.coarse
    comm = edge_comm_us(coarse, cluster)
    order = cpd_topo_order(coarse, comm, cpath=cpath(coarse, comm))
    adjusted = adjusting_placement(coarse, cluster, order)
    adjusted_fine = apply_colocation(adjusted[fusion.cluster_of], fusion.anchor)
    pool = CandidatePool(g, cluster)
    pool.add("adjusting", adjusted_fine)
    communication_refinement(g, fusion, cluster, order, pool)
    assert any(c.name.endswith("+refined") for c in pool.candidates)
    refined = pool.best.assignment

    used = np.bincount(refined, weights=g.memory_bytes, minlength=3)
    assert np.all(used <= cluster.memory_bytes)
    assert colocation_respected(g, refined)
    assert simulate(g, cluster, refined).step_time_us <= simulate(g, cluster, adjusted_fine).step_time_us


# --- compiled kernels: same results as plain Python, properties on random inputs -------------------


def _pure_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run :mod:`celeritas_core.placers.partition` as plain Python: every Numba dispatcher in it (kernels
    call each other through the module) replaced by its ``py_func``. Skipped without Numba."""
    import celeritas_core.placers.partition as partition
    from celeritas_core.compiled import jit

    if not jit.ENABLED:
        pytest.skip("Numba is off (not installed, or CELERITAS_NO_JIT): there is only the Python path")
    kernels = {name: value.py_func for name, value in vars(partition).items() if hasattr(value, "py_func")}
    assert len(kernels) > 10
    for name, func in kernels.items():
        monkeypatch.setattr(partition, name, func)


def _random_weights(rng: np.random.Generator, n: int):
    """A symmetric random weight matrix; integer weights half the time, so gains tie."""
    import scipy.sparse as sp

    m = int(rng.integers(0, 4 * n + 1))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    src, dst = src[src != dst], dst[src != dst]
    weight = rng.integers(1, 5, len(src)).astype(float) if rng.random() < 0.5 else rng.random(len(src)) * 1e4
    rows, cols = np.concatenate([src, dst]), np.concatenate([dst, src])
    w = sp.csr_matrix((np.concatenate([weight, weight]), (rows, cols)), shape=(n, n))
    w.sum_duplicates()
    return w


def _random_fm_input(rng: np.random.Generator, n: int):
    """Weights, memory (bytes), capacities and a start (split of a random order, or random parts)."""
    w = _random_weights(rng, n)
    memory = np.ones(n) if rng.random() < 0.4 else rng.integers(1, 20, n).astype(float)
    k = int(rng.integers(2, 6))
    capacity = np.full(k, memory.sum() / k * rng.choice([0.8, 1.05, 1.3, 3.0])) * rng.uniform(0.8, 1.2, k)
    start = split_order(rng.permutation(n), memory, capacity) if rng.random() < 0.7 else rng.integers(0, k, n)
    return w, memory, capacity, start


def _random_nets(rng: np.random.Generator, units: int):
    """A binary nets × units incidence (every net 2+ pins), costs with ties, memory, capacities, start."""
    import scipy.sparse as sp

    rows, cols = [], []
    for net in range(int(rng.integers(1, 3 * units))):
        pins = rng.choice(units, int(min(units, 1 + rng.geometric(0.4))), replace=False)
        rows += [net] * len(pins)
        cols += pins.tolist()
    incidence = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(max(rows) + 1, units))
    incidence.sum_duplicates()
    incidence.data[:] = 1.0
    incidence = incidence[np.diff(incidence.indptr) > 1]
    cost = rng.integers(0, 6, incidence.shape[0]).astype(float)
    memory = np.ones(units) if rng.random() < 0.4 else rng.integers(1, 20, units).astype(float)
    k = int(rng.integers(2, 6))
    capacity = np.full(k, memory.sum() / k * rng.choice([0.9, 1.1, 1.4, 3.0]))
    start = split_order(rng.permutation(units), memory, capacity)
    if rng.random() < 0.3:
        start = rng.integers(0, k, units)
    return incidence, cost, memory, capacity, start


@pytest.mark.usefixtures("compiled_loops")
def test_compiled_fm_and_split_match_plain_python(rng, monkeypatch):
    cases = [_random_fm_input(rng, int(rng.integers(2, 60))) for _ in range(40)]
    compiled = [(split_order(np.arange(len(m)), m, c), fm_refine(w, m, c, s)) for w, m, c, s in cases]
    _pure_python(monkeypatch)
    for (w, m, c, s), (split, refined) in zip(cases, compiled, strict=True):
        assert np.array_equal(split_order(np.arange(len(m)), m, c), split)
        assert np.array_equal(fm_refine(w, m, c, s), refined)


@pytest.mark.usefixtures("compiled_loops")
def test_compiled_connectivity_refine_matches_plain_python(rng, monkeypatch):
    cases = [_random_nets(rng, int(rng.integers(2, 50))) for _ in range(40)]
    compiled = [connectivity_refine(*case) for case in cases]
    _pure_python(monkeypatch)
    for case, refined in zip(cases, compiled, strict=True):
        assert np.array_equal(connectivity_refine(*case), refined)


@pytest.mark.usefixtures("compiled_loops")
def test_compiled_sparse_fiedler_matches_plain_python(rng, monkeypatch):
    from celeritas_core.placers import partition

    g = _training_like(layers=130, act=1e6, small=1.0)  # 260 nodes: the sparse path
    w = undirected_weights(g, g.edge_bytes)
    rank = np.empty(g.num_nodes, dtype=np.int64)
    rank[g.topological_order] = np.arange(g.num_nodes)
    compiled = partition._sparse_fiedler(w, g.topological_order, rank)
    _pure_python(monkeypatch)
    plain = partition._sparse_fiedler(w, g.topological_order, rank)
    assert compiled is not None and plain is not None
    assert np.allclose(compiled, plain, rtol=1e-6, atol=1e-9 * np.abs(plain).max())


def test_fm_never_worsens_nor_adds_overflow_on_larger_random_graphs(rng):
    for _ in range(30):
        w, memory, capacity, start = _random_fm_input(rng, int(rng.integers(100, 400)))
        parts = fm_refine(w, memory, capacity, start)
        assert cut_weight(w, parts) <= cut_weight(w, start) + 1e-9 * (w.data.sum() + 1)
        k = len(capacity)
        used = np.bincount(parts, weights=memory, minlength=k)
        before = np.bincount(start, weights=memory, minlength=k)
        assert np.all((used <= capacity) | (used <= before))


def test_connectivity_refine_never_worsens_nor_overfills_on_larger_random_nets(rng):
    for _ in range(30):
        incidence, cost, memory, capacity, start = _random_nets(rng, int(rng.integers(100, 400)))
        parts = connectivity_refine(incidence, cost, memory, capacity, start)
        k = len(capacity)
        before_cost = connectivity_cost(incidence, cost, start, k)
        assert connectivity_cost(incidence, cost, parts, k) <= before_cost + 1e-9
        used = np.bincount(parts, weights=memory, minlength=k)
        before = np.bincount(start, weights=memory, minlength=k)
        assert np.all((used <= capacity) | (used <= before))


def test_sparse_spectral_order_pairs_forward_and_backward_of_a_layer():
    from celeritas_core.placers.partition import SPECTRAL_DENSE_MAX_NODES

    layers = 300
    g = _training_like(layers=layers, act=1e6, small=1.0)
    assert g.num_nodes > SPECTRAL_DENSE_MAX_NODES
    order = spectral_order(undirected_weights(g, g.edge_bytes), g.topological_order)
    assert order is not None and sorted(order.tolist()) == list(range(g.num_nodes))
    pos = np.empty(g.num_nodes, dtype=int)
    pos[order] = np.arange(g.num_nodes)
    assert max(abs(pos[g.index[f"f{i}"]] - pos[g.index[f"b{i}"]]) for i in range(layers)) == 1
