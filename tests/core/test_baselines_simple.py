"""The baseline placers ``single``, ``m-topo`` and ``metis`` on hand-made graphs with known answers."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

import celeritas_core.placers.simple  # noqa: F401  (registers single and m-topo)
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers import place
from celeritas_core.placers.metis import WEIGHT_SCALE, map_parts_to_devices, metis_weights, unit_graph
from tests.conftest import make_graph

BASELINES = ("single", "m-topo", "metis")


def _chain(memory: list[float]) -> Graph:
    names = [f"n{i}" for i in range(len(memory))]
    return make_graph([(a, b, 1e3) for a, b in itertools.pairwise(names)], nodes=names,
                      memory=dict(zip(names, memory, strict=True)))


# ------------------------------------------------------------------ single
def test_single_puts_everything_on_device_0_and_reports_oom_when_too_big():
    g = _chain([1.0, 1.0, 1.0])
    roomy = place(g, Cluster.build(["x", "y"], [3.0, 10.0]), "single")
    assert roomy.assignment.tolist() == [0, 0, 0] and not roomy.oom
    assert roomy.predicted_step_time_us == pytest.approx(3.0)
    tight = place(g, Cluster.build(["x", "y"], [2.0, 10.0]), "single")
    assert tight.assignment.tolist() == [0, 0, 0]
    assert tight.oom_devices == ("x",)


# ------------------------------------------------------------------ m-topo
def _two_branches() -> Graph:
    # M-TOPO order is s, a1, b1, a2, b2 (breadth first); index order is s, a1, a2, b1, b2
    return make_graph([("s", "a1"), ("a1", "a2"), ("s", "b1"), ("b1", "b2")], default_memory=2.0)


def test_m_topo_fills_even_share_plus_largest_op_in_m_topo_order():
    g = _two_branches()
    by_name = lambda p: {n: p.device_of(n) for n in g.node_names}  # noqa: E731
    # total 10, k = 2, largest 2: cap 7, so s, a1, b1 (6 bytes) on device 0, then a2, b2
    p = place(g, Cluster.homogeneous(2, 100.0), "m-topo")
    assert by_name(p) == {"s": 0, "a1": 0, "b1": 0, "a2": 1, "b2": 1}
    assert p.extra["cap_bytes"] == [7.0, 100.0]
    # k = 3: cap 10/3 + 2 = 5.33 bytes
    p = place(g, Cluster.homogeneous(3, 100.0), "m-topo")
    assert by_name(p) == {"s": 0, "a1": 0, "b1": 1, "a2": 1, "b2": 2}
    # a smaller first device caps at its memory (5 bytes): s, a1 there, the rest on the big one
    p = place(g, Cluster.build(["small", "big"], [5.0, 100.0]), "m-topo")
    assert by_name(p) == {"s": 0, "a1": 0, "b1": 1, "a2": 1, "b2": 1}
    assert not p.oom


def test_m_topo_charges_the_whole_colocation_group_at_its_first_member():
    names = ["x0", "x1", "x2", "x3", "x4"]
    edges = [("v", "x0")] + [(a, b) for a, b in itertools.pairwise(names)] + [("x4", "u")]
    g = make_graph(edges, memory={"v": 3, "u": 3, **dict.fromkeys(names, 4)},
                   colocation={"v": "g", "u": "g"})
    # total 26, largest unit the group (6): cap min(13 + 6, 17) = 17. v is charged 6, so x2 no longer
    # fits on device 0 (6 + 4 + 4 + 4 = 18); charging v alone (3) would keep x2 there and u would then
    # overflow device 0 (3 + 12 + 3 = 18 bytes)
    p = place(g, Cluster.homogeneous(2, 17.0), "m-topo")
    assert p.assignment.tolist() == [0, 0, 0, 1, 1, 1, 0]
    assert p.device_memory_bytes.tolist() == [14.0, 12.0]
    assert not p.oom and colocation_respected(g, p.assignment)


def test_m_topo_best_effort_reports_oom_on_the_device_with_most_free_memory():
    g = _chain([3.0, 2.0, 5.0])
    p = place(g, Cluster.build(["x", "y"], [3.0, 4.0]), "m-topo")
    assert p.assignment.tolist() == [0, 1, 1]  # n2 fits nowhere: y has 2 bytes free, x none
    assert p.oom_devices == ("y",)
    # a big first device and a tiny last one: the overflow goes back to the big one, which fits it
    p = place(_chain([2.0, 2.0, 2.0, 2.0]), Cluster.build(["big", "tiny"], [10.0, 1.0]), "m-topo")
    assert p.assignment.tolist() == [0, 0, 0, 0] and not p.oom


# ------------------------------------------------------------------ metis
def _cliques(count: int, colocation: dict[str, str] | None = None) -> Graph:
    """``count`` 4-op cliques (1 MB edges) in a row, each joined to the next by one 1-byte edge."""
    cliques = [[f"{'abcd'[c]}{i}" for i in range(4)] for c in range(count)]
    edges = [(x[i], x[j], 1e6) for x in cliques for i in range(4) for j in range(i + 1, 4)]
    edges += [(cliques[c][-1], cliques[c + 1][0], 1.0) for c in range(count - 1)]
    return make_graph(edges, nodes=[n for x in cliques for n in x], colocation=colocation)


def _two_cliques(colocation: dict[str, str] | None = None) -> Graph:
    return _cliques(2, colocation)


@pytest.mark.parametrize("count", [2, 4])
def test_metis_puts_each_clique_on_its_own_device_in_graph_order(count):
    g = _cliques(count)
    cluster = Cluster.homogeneous(count, 100.0)
    expected = [c for c in range(count) for _ in range(4)]  # the earliest clique on device 0, ...
    for seed in range(4):  # METIS numbers the parts differently per seed; the mapping does not
        p = place(g, cluster, "metis", {"seed": seed})
        assert p.assignment.tolist() == expected, seed
        assert p.extra["cut_bytes"] == count - 1 and p.extra["repair_moves"] == 0
    assert place(g, cluster, "metis", {"seed": 3}).assignment.tolist() == expected  # deterministic


def test_metis_repair_moves_units_off_an_over_full_device():
    # balancing time cuts the chain in the middle: 40 bytes on device 0, which holds 30
    g = _chain([10.0] * 4 + [1.0] * 4)
    p = place(g, Cluster.homogeneous(2, 30.0), "metis", {"balance_time": 1})
    assert p.extra["repair_moves"] == 1
    assert p.assignment.tolist() == [0, 0, 0, 1, 1, 1, 1, 1]  # the boundary op moves: no extra cut
    assert p.device_memory_bytes.tolist() == [30.0, 14.0] and not p.oom
    assert p.extra["cut_bytes"] == p.extra["cut_bytes_before_repair"] == 1e3
    # balancing memory (the default) needs no repair
    p = place(g, Cluster.homogeneous(2, 30.0), "metis")
    assert p.extra["repair_moves"] == 0 and not p.oom


def test_metis_infeasible_is_best_effort_and_reported():
    g = _chain([10.0] * 4)
    p = place(g, Cluster.homogeneous(2, 15.0), "metis")
    assert p.oom_devices == ("gpu:0", "gpu:1")
    assert p.device_memory_bytes.tolist() == [20.0, 20.0]


def test_metis_keeps_colocation_groups_whole():
    g = _two_cliques({"a0": "g", "b3": "g", "a1": "h", "a2": "h"})
    units = unit_graph(g)
    assert units.num_units == 6
    assert units.unit_of[g.index["a0"]] == units.unit_of[g.index["b3"]]
    p = place(g, Cluster.homogeneous(2, 100.0), "metis")
    assert colocation_respected(g, p.assignment)
    assert p.device_of("a0") == p.device_of("b3")


def test_unit_graph_counts_one_producer_output_once_per_unit():
    g = make_graph([("p", "x", 5.0), ("p", "y", 5.0), ("p", "z", 5.0)], colocation={"x": "g", "y": "g"})
    units = unit_graph(g)
    assert units.num_units == 3
    assert sorted(units.weight_bytes.tolist()) == [5.0, 5.0, 5.0, 5.0]  # p-{x,y} once, p-z, both ways


def test_metis_weights_are_positive_scaled_integers():
    assert metis_weights(np.array([0.0, 1.0, 3.0])).tolist() == [1, WEIGHT_SCALE // 4, 3 * WEIGHT_SCALE // 4]
    assert metis_weights(np.zeros(3)).tolist() == [1, 1, 1]
    assert metis_weights(np.array([1e30, 1e30])).max() < 2**31


def test_parts_go_to_larger_devices_then_in_topological_order():
    sizes, first = np.array([5.0, 10.0, 10.0]), np.array([0, 3, 1])
    assert map_parts_to_devices(sizes, np.array([10.0, 20.0, 20.0]), first).tolist() == [0, 2, 1]
    assert map_parts_to_devices(sizes, np.array([30.0, 20.0, 10.0]), first).tolist() == [2, 1, 0]
    assert map_parts_to_devices(sizes, np.full(3, 7.0), np.array([2, 0, 1])).tolist() == [2, 0, 1]


def test_metis_edge_cases_one_device_no_edges_fewer_ops_than_devices():
    g = _two_cliques()
    assert place(g, Cluster.homogeneous(1, 100.0), "metis").assignment.tolist() == [0] * 8
    isolated = make_graph([], nodes=[f"n{i}" for i in range(6)])
    p = place(isolated, Cluster.homogeneous(2, 3.0), "metis")
    assert p.device_memory_bytes.tolist() == [3.0, 3.0] and not p.oom
    p = place(_chain([1.0, 1.0]), Cluster.homogeneous(4, 1.0), "metis")
    assert sorted(p.assignment.tolist()) == [0, 1] and not p.oom


def test_metis_parameters_and_missing_pymetis(monkeypatch):
    g = _two_cliques()
    cluster = Cluster.homogeneous(2, 100.0)
    with pytest.raises(CeleritasInputError, match="balance_time"):
        place(g, cluster, "metis", {"balance_time": 2})
    monkeypatch.setitem(sys.modules, "pymetis", None)  # makes `import pymetis` raise ImportError
    with pytest.raises(CeleritasInputError, match="needs the pymetis package"):
        place(g, cluster, "metis")


# ------------------------------------------------------------------ all three on random DAGs
def _random_dag(seed: int) -> Graph:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.15]
    perm = rng.permutation(n)
    colocation: list[str | None] = [None] * n
    for g in range(2):
        for node in rng.choice(n, size=min(n, 2), replace=False):
            colocation[int(perm[node])] = f"group{g}"
    return Graph.from_arrays(
        name="random", node_names=[f"op{i}" for i in range(n)], time_us=rng.lognormal(2.0, 1.0, n),
        memory_bytes=rng.integers(0, 100, n).astype(float), colocation=colocation,
        edge_src=[int(perm[i]) for i, _ in pairs], edge_dst=[int(perm[j]) for _, j in pairs],
        edge_bytes=rng.integers(0, 10**6, len(pairs)).astype(float),
        edge_src_output=rng.integers(0, 2, len(pairs)))


@pytest.mark.parametrize("seed", range(6))
def test_baselines_on_random_dags_are_valid_and_above_the_lower_bound(seed):
    g = _random_dag(seed)
    devices = 1 + seed % 5
    total = g.total_memory_bytes
    memories = [max(total * (0.3 + 0.2 * d), 200.0) for d in range(devices)]  # uneven, fits groups
    cluster = Cluster.build([f"d{d}" for d in range(devices)], memories, slope_us_per_byte=1e-5)
    for name in BASELINES:
        p = place(g, cluster, name)
        assert p.assignment.shape == (g.num_nodes,)
        assert p.assignment.min() >= 0 and p.assignment.max() < devices
        assert colocation_respected(g, p.assignment), name
        assert p.predicted_step_time_us >= p.lower_bound_us * (1 - 1e-9), name
        if name != "single" and sum(memories) >= 2 * total:  # room to spare: the splitters fit
            assert not p.oom, name


def test_metis_warnings_never_reach_standard_output_or_error(capfd):
    """A few units outweighing the rest make METIS's recursive bisection print ``***`` warnings
    (with printf, to file descriptor 1, where a command may be printing JSON); they are dropped,
    and what else is written meanwhile still comes through."""
    memory = [100.0] * 70
    memory[5] = memory[40] = 1e9
    graph = _chain(memory)
    from celeritas_core.placers.metis import metis_warnings_dropped

    p = place(graph, Cluster.homogeneous(16, 2e9), "metis")
    assert not p.oom
    out, err = capfd.readouterr()
    assert "***" not in out + err
    with metis_warnings_dropped():
        print("kept line", flush=True)
        print("kept on error", file=sys.stderr, flush=True)
    assert capfd.readouterr() == ("kept line\n", "kept on error\n")


def test_m_topo_nonuniform_fills_each_device_to_its_memory_like_baechis_m_topo_nonuniform():
    from celeritas_core.graphs.cluster import Cluster
    from celeritas_core.graphs.graph import Graph
    from celeritas_core.placers import place

    graph = Graph.from_arrays(name="chain", node_names=list("abcd"), time_us=[1.0] * 4,
                              memory_bytes=[100] * 4, edge_src=[0, 1, 2], edge_dst=[1, 2, 3],
                              edge_bytes=[10] * 3)
    cluster = Cluster.homogeneous(2, 1000)
    # uniform: caps of 400 / 2 + 100 = 300 bytes split the chain; non-uniform: one device holds it
    assert place(graph, cluster, "m-topo").assignment.tolist() == [0, 0, 0, 1]
    nonuniform = place(graph, cluster, "m-topo", {"uniform": 0})
    assert nonuniform.assignment.tolist() == [0, 0, 0, 0]
    assert nonuniform.extra["cap_bytes"] == [1000.0, 1000.0]
