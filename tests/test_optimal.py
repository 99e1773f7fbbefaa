"""The exact reference placer ``optimal`` (MILP, HiGHS) against brute force and the other placers."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from celeritas_core.cli import main
from celeritas_core.cluster import Cluster
from celeritas_core.errors import CeleritasInputError
from celeritas_core.formats import save_graph
from celeritas_core.graph import Graph
from celeritas_core.placers import optimal, place
from celeritas_core.placers.optimal import model_schedule
from celeritas_core.simulator import simulate
from tests.conftest import make_graph

FAST = {"time_limit": 20.0}


def random_graph(seed: int, n: int, density: float = 0.35, colocate: bool = False) -> Graph:
    """A random DAG with two outputs per op and unequal bytes on the edges of one tensor."""
    rng = np.random.default_rng(seed)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < density]
    perm = rng.permutation(n)
    colocation: list[str | None] = [None] * n
    if colocate:
        for v in rng.choice(n, size=2, replace=False):
            colocation[int(v)] = "g"
    return Graph.from_arrays(
        name=f"random{seed}", node_names=[f"op{i}" for i in range(n)],
        time_us=rng.integers(1, 40, n).astype(float), memory_bytes=rng.integers(1, 10, n).astype(float),
        colocation=colocation,
        edge_src=[int(perm[i]) for i, _ in pairs], edge_dst=[int(perm[j]) for _, j in pairs],
        edge_bytes=rng.integers(0, 3, len(pairs)) * 1e5, edge_src_output=rng.integers(0, 2, len(pairs)),
    )


# ---------------------------------------------------------------------------- brute force
def linear_extensions(graph: Graph) -> Iterator[list[int]]:
    """Every topological order of ``graph``."""
    preds = [set() for _ in range(graph.num_nodes)]
    for u, v in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True):
        preds[v].add(u)

    def extend(prefix: list[int], done: set[int]) -> Iterator[list[int]]:
        if len(prefix) == graph.num_nodes:
            yield list(prefix)
            return
        for v in range(graph.num_nodes):
            if v not in done and preds[v] <= done:
                prefix.append(v)
                done.add(v)
                yield from extend(prefix, done)
                prefix.pop()
                done.remove(v)

    return extend([], set())


def semi_active_makespan(graph: Graph, cluster: Cluster, assign: tuple[int, ...], order: list[int]) -> float:
    """Each op in ``order`` starts at max(its device's free time, arrival of its inputs) (µs)."""
    largest: dict[tuple[int, int, int], float] = {}  # (producer, output, device) -> bytes
    for u, o, v, b in zip(graph.edge_src.tolist(), graph.edge_src_output.tolist(),
                          graph.edge_dst.tolist(), graph.edge_bytes.tolist(), strict=True):
        largest[(u, o, assign[v])] = max(largest.get((u, o, assign[v]), 0.0), b)
    finish = [0.0] * graph.num_nodes
    free = [0.0] * cluster.num_devices
    for v in order:
        ready = 0.0
        for k in np.flatnonzero(graph.edge_dst == v).tolist():
            u, o = int(graph.edge_src[k]), int(graph.edge_src_output[k])
            delay = 0.0 if assign[u] == assign[v] else cluster.comm_time_us(largest[(u, o, assign[v])])
            ready = max(ready, finish[u] + delay)
        d = assign[v]
        finish[v] = free[d] = max(free[d], ready) + graph.time_us[v] / cluster.speed[d]
    return max(finish)


def brute_force_optimum(graph: Graph, cluster: Cluster) -> float:
    """Minimum makespan over every feasible assignment and every topological order (µs)."""
    orders = list(linear_extensions(graph))
    gid = graph.colocation_ids
    best = np.inf
    for assign in itertools.product(range(cluster.num_devices), repeat=graph.num_nodes):
        a = np.asarray(assign)
        if any(len(set(a[gid == g].tolist())) > 1 for g in set(gid.tolist()) - {-1}):
            continue
        if np.any(np.bincount(a, weights=graph.memory_bytes, minlength=cluster.num_devices)
                  > cluster.memory_bytes):
            continue
        best = min(best, *(semi_active_makespan(graph, cluster, assign, o) for o in orders))
    return float(best)


def _hand_made() -> list[Graph]:
    fork_join = make_graph([("s", "a", 1e5), ("s", "b", 2e5), ("a", "t", 1e5), ("b", "t", 0.0)],
                           times={"s": 5, "a": 30, "b": 25, "t": 5}, default_memory=4)
    two_chains = make_graph([("a", "b", 1e5), ("c", "d", 3e5), ("b", "e", 1e5), ("d", "e", 0.0)],
                            times={"a": 10, "b": 20, "c": 15, "d": 10, "e": 3}, default_memory=3)
    independent = make_graph([], nodes=["p", "q", "r", "s"], times={"p": 7, "q": 7, "r": 9, "s": 3})
    grouped = make_graph([("a", "b", 1e5), ("a", "c", 1e5), ("b", "d", 1e5), ("c", "d", 1e5)],
                         times={"a": 1, "b": 20, "c": 20, "d": 1}, colocation={"b": "g", "c": "g"})
    return [fork_join, two_chains, independent, grouped]


def _clusters(graph: Graph) -> list[Cluster]:
    """A memory-tight pair of devices (about 60 % of the model each), three roomy ones, two speeds."""
    tight = max(np.ceil(0.6 * graph.total_memory_bytes), float(graph.memory_bytes.max()))
    return [
        Cluster.homogeneous(2, tight, slope_us_per_byte=1e-4, intercept_us=5.0),
        Cluster.homogeneous(3, 1e9, slope_us_per_byte=5e-5, intercept_us=2.0),
        Cluster.build(["fast", "slow"], [1e9, 1e9], [2.0, 1.0], slope_us_per_byte=1e-4, intercept_us=3.0),
    ]


@pytest.mark.parametrize("graph", [*_hand_made(), *(random_graph(s, 5 + s % 2, colocate=s == 3)
                                                    for s in range(5))], ids=lambda g: g.name)
def test_milp_optimum_equals_brute_force(graph: Graph) -> None:
    for cluster in _clusters(graph):
        if cluster.num_devices == 3 and graph.num_nodes > 5:
            continue  # 3^6 assignments × orders: keep the test fast
        p = place(graph, cluster, "optimal", FAST)
        expected = brute_force_optimum(graph, cluster)
        assert np.isfinite(expected)  # some assignment fits memory
        assert p.extra["milp_status"] == "optimal"
        assert p.extra["milp_makespan_us"] == pytest.approx(expected, rel=1e-6, abs=1e-6)
        assert p.extra["milp_bound_us"] <= p.extra["milp_makespan_us"] + 1e-9
        assert p.extra["milp_gap"] <= 1e-5
        # the returned assignment achieves the optimum under the model in some order
        _, finish = model_schedule(graph, cluster, p.assignment)
        assert finish.max() >= expected - 1e-6
        assert not p.oom


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_milp_optimum_is_at_most_every_placer_under_the_model(seed: int) -> None:
    graph = random_graph(seed, 9, density=0.3, colocate=True)
    cluster = Cluster.homogeneous(2 + seed % 2, 30.0, slope_us_per_byte=1e-4, intercept_us=5.0)
    best = place(graph, cluster, "optimal", FAST)
    assert best.extra["milp_status"] == "optimal"
    optimum = best.extra["milp_makespan_us"]
    assert optimum >= best.lower_bound_us * (1 - 1e-9)
    assert optimum <= simulate(graph, cluster, best.assignment, channels=False).step_time_us * (1 + 1e-9)
    for name in ("single", "m-etf", "m-topo", "celeritas"):
        other = place(graph, cluster, name)
        if other.oom:
            continue  # the MILP respects memory; a best-effort placement is no feasible competitor
        replay = simulate(graph, cluster, other.assignment, channels=False).step_time_us
        assert optimum <= replay * (1 + 1e-9), name


# ---------------------------------------------------------------------------- behaviour
def test_refuses_graphs_above_max_ops_and_too_many_devices() -> None:
    chain = make_graph([(f"n{i}", f"n{i + 1}") for i in range(40)])  # 41 ops
    cluster = Cluster.homogeneous(2, 1e9)
    with pytest.raises(CeleritasInputError) as info:
        place(chain, cluster, "optimal")
    assert str(info.value) == ("placer 'optimal': graph has 41 ops, more than max_ops=40 "
                               "(the MILP grows quadratically; use a heuristic placer)")
    with pytest.raises(CeleritasInputError, match="more than max_ops=3"):
        place(make_graph([("a", "b"), ("b", "c"), ("c", "d")]), cluster, "optimal", {"max_ops": 3})
    with pytest.raises(CeleritasInputError, match="cluster has 9 devices, more than 8"):
        place(make_graph([("a", "b")]), Cluster.homogeneous(9, 1e9), "optimal")
    with pytest.raises(CeleritasInputError, match="'max_ops': must be <= 200"):
        place(chain, cluster, "optimal", {"max_ops": 201})
    with pytest.raises(CeleritasInputError, match="'time_limit': must be > 0"):
        place(chain, cluster, "optimal", {"time_limit": 0})


def test_memory_forces_a_split_despite_expensive_transfers() -> None:
    g = make_graph([("a", "b", 1e6)], times={"a": 10, "b": 10}, memory={"a": 6, "b": 6})
    cluster = Cluster.homogeneous(2, 10.0, slope_us_per_byte=1e-4, intercept_us=5.0)
    p = place(g, cluster, "optimal", FAST)
    assert p.device_of("a") != p.device_of("b") and not p.oom
    assert p.extra["milp_status"] == "optimal"
    assert p.extra["milp_makespan_us"] == pytest.approx(10 + 105 + 10)
    roomy = place(g, cluster.with_memory(12.0), "optimal", FAST)
    assert roomy.device_of("a") == roomy.device_of("b")
    assert roomy.extra["milp_makespan_us"] == pytest.approx(20.0)


def test_colocation_group_stays_together() -> None:
    # Split, b runs on the other device 6..56 and t follows it there: 57; together: 102.
    edges = [("s", "a", 0.0), ("s", "b", 0.0), ("a", "t", 0.0), ("b", "t", 0.0)]
    times = {"s": 1, "a": 50, "b": 50, "t": 1}
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.0, intercept_us=5.0)
    free = place(make_graph(edges, times=times), cluster, "optimal", FAST)
    assert free.device_of("a") != free.device_of("b")
    assert free.extra["milp_makespan_us"] == pytest.approx(57.0)
    grouped = place(make_graph(edges, times=times, colocation={"a": "g", "b": "g"}), cluster, "optimal", FAST)
    assert grouped.device_of("a") == grouped.device_of("b")
    assert grouped.extra["milp_makespan_us"] == pytest.approx(102.0)


def test_memory_that_fits_nowhere_drops_the_constraint_and_reports_oom() -> None:
    g = make_graph([("a", "b", 1e5), ("b", "c", 1e5)], memory={"a": 8, "b": 8, "c": 8})
    cluster = Cluster.homogeneous(2, 10.0)
    p = place(g, cluster, "optimal", FAST)
    assert p.extra["milp_status"] == "infeasible_memory"
    assert "memory constraint dropped" in p.extra["memory"]
    assert p.oom and p.extra["milp_makespan_us"] == pytest.approx(3.0)  # all on one device


def test_tiny_time_limit_reports_a_status_and_a_gap_or_the_fallback() -> None:
    g = random_graph(7, 16, density=0.2)
    cluster = Cluster.homogeneous(4, 1e9, slope_us_per_byte=1e-4, intercept_us=5.0)
    p = place(g, cluster, "optimal", {"time_limit": 0.01})
    extra = p.extra
    assert extra["milp_model"] == "no channel contention"
    assert extra["milp_status"] in {"optimal", "time_limit"}
    if "fallback" in extra:
        assert p.assignment.tolist() == [0] * g.num_nodes and extra["milp_makespan_us"] is None
    else:
        assert extra["milp_gap"] is not None and 0.0 <= extra["milp_gap"] < 1.0
        assert extra["milp_makespan_us"] >= extra["milp_bound_us"]


def test_no_solution_within_the_time_limit_falls_back_to_device_0(monkeypatch) -> None:
    def no_solution(problem: optimal.MilpProblem, time_limit_s: float) -> optimal.MilpResult:
        return optimal.MilpResult("no_solution", None, None, None, 5.0, time_limit_s, 10, 20)

    monkeypatch.setattr(optimal, "solve_milp", no_solution)
    g = random_graph(3, 6)
    p = place(g, Cluster.homogeneous(2, 1e9), "optimal", {"time_limit": 1.0})
    assert p.assignment.tolist() == [0] * 6
    assert p.extra["milp_status"] == "time_limit" and p.extra["milp_makespan_us"] is None
    assert "all ops on device 0" in p.extra["fallback"]
    assert p.predicted_step_time_us == pytest.approx(g.total_time_us)


def test_cli_place_with_the_optimal_placer(tmp_path: Path, capsys) -> None:
    graph_file = tmp_path / "G.json"
    save_graph(random_graph(5, 8, density=0.3), graph_file)
    out_file = tmp_path / "p.json"
    code = main(["place", str(graph_file), "--placer", "optimal", "--devices", "2",
                 "--device-memory", "1GiB", "--param", "time_limit=20", "--out", str(out_file)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "placer      optimal" in out and "OOM: none" in out
    doc = json.loads(out_file.read_text())
    assert doc["placer"] == "optimal" and doc["params"] == {"time_limit": 20.0, "max_ops": 40}
    assert doc["extra"]["milp_status"] == "optimal" and doc["extra"]["milp_model"] == "no channel contention"
    big = tmp_path / "big.json"
    save_graph(make_graph([(f"n{i}", f"n{i + 1}") for i in range(45)]), big)
    code = main(["place", str(big), "--placer", "optimal", "--devices", "2", "--device-memory", "1GiB",
                 "--out", str(tmp_path / "q.json")])
    _, err = capsys.readouterr()
    assert code == 2 and "graph has 46 ops, more than max_ops=40" in err and err.count("\n") == 1
    assert not (tmp_path / "q.json").exists()
