"""The exact reference placer ``optimal`` (MILP, HiGHS) against brute force and the other placers."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.placers import optimal, place
from celeritas_core.placers.optimal import MILP_MODELS, channel_schedule, model_schedule
from celeritas_core.readwrite.formats import save_graph
from celeritas_core.simulation.simulator import simulate
from tests.conftest import make_graph

FAST = {"time_limit": 20.0}
CHANNELS = {"time_limit": 20.0, "channels": 1}


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


# ---------------------------------------------------------------------------- channel model
def channel_brute_force(graph: Graph, cluster: Cluster) -> float:
    """Minimum makespan under the channel model (µs), by enumeration.

    Jobs: the ops, and one transfer per (producer, src_output, destination device) lasting
    ``k·bytes + b`` for its largest edge, holding its sender's send and its receiver's receive
    channel. Any schedule runs each resource's jobs (a device's ops, a channel's transfers) in
    some sequence, and the earliest-start schedule of those sequences (longest paths through the
    precedences and sequence arcs, skipped when they form a cycle) is feasible and no later. So
    the minimum over every feasible assignment and every sequence per resource is the optimum.
    On 2 devices the send channel of ``p`` and the receive channel of the other device carry the
    same transfers: one sequence per direction.
    """
    num_dev = cluster.num_devices
    n = graph.num_nodes
    edges = list(zip(graph.edge_src.tolist(), graph.edge_src_output.tolist(), graph.edge_dst.tolist(),
                     graph.edge_bytes.tolist(), strict=True))
    reach: list[set[int]] = [set() for _ in range(n)]
    for u in reversed(graph.topological_order.tolist()):
        for v in (e[2] for e in edges if e[0] == u):
            reach[u] |= reach[v] | {v}

    def sequences(jobs: list[int], ops: bool) -> list[tuple[int, ...]]:
        perms = itertools.permutations(jobs)
        return [p for p in perms if not ops or all(p[i] not in reach[p[j]] for j in range(len(p))
                                                   for i in range(j))]

    gid = graph.colocation_ids
    best = np.inf
    for assign in itertools.product(range(num_dev), repeat=n):
        a = np.asarray(assign)
        if any(len(set(a[gid == g].tolist())) > 1 for g in set(gid.tolist()) - {-1}):
            continue
        if np.any(np.bincount(a, weights=graph.memory_bytes, minlength=num_dev) > cluster.memory_bytes):
            continue
        size: dict[tuple[int, int, int], float] = {}
        for u, o, v, b in edges:
            if assign[u] != assign[v]:
                size[(u, o, assign[v])] = max(size.get((u, o, assign[v]), 0.0), b)
        transfers = sorted(size)
        job = {t: n + k for k, t in enumerate(transfers)}
        dur = [float(graph.time_us[v] / cluster.speed[assign[v]]) for v in range(n)]
        dur += [float(cluster.comm_time_us(size[t])) for t in transfers]
        preds: list[set[int]] = [set() for _ in dur]
        for u, o, v, _ in edges:
            preds[v].add(u if assign[u] == assign[v] else job[(u, o, assign[v])])
        for t in transfers:
            preds[job[t]].add(t[0])
        per_resource = [sequences([v for v in range(n) if assign[v] == d], True) for d in range(num_dev)]
        per_resource += [sequences([job[t] for t in transfers if assign[t[0]] == d], False)
                         for d in range(num_dev)]  # send channels
        if num_dev > 2:
            per_resource += [sequences([job[t] for t in transfers if t[2] == d], False)
                             for d in range(num_dev)]  # receive channels
        for combo in itertools.product(*per_resource):
            full = [set(p) for p in preds]
            for seq in combo:
                for x, y in itertools.pairwise(seq):
                    full[y].add(x)
            finish: list[float | None] = [None] * len(dur)
            left = list(range(len(dur)))
            while left:
                done = [j for j in left if all(finish[i] is not None for i in full[j])]
                if not done:
                    break  # the sequences contradict the precedences
                for j in done:
                    finish[j] = max((finish[i] for i in full[j]), default=0.0) + dur[j]  # type: ignore[type-var]
                left = [j for j in left if finish[j] is None]
            if not left:
                best = min(best, max(finish[:n]))  # type: ignore[type-var]
    return float(best)


def _outputs_graph(name: str, edges: list[tuple[str, str, float, int]], times: dict[str, float],
                   memory: dict[str, float], groups: dict[str, str]) -> Graph:
    """A graph from (src, dst, bytes, src_output) edges."""
    names = list(dict.fromkeys([e[0] for e in edges] + [e[1] for e in edges] + list(times)))
    index = {v: i for i, v in enumerate(names)}
    return Graph.from_arrays(
        name=name, node_names=names, time_us=[times[v] for v in names],
        memory_bytes=[memory.get(v, 1.0) for v in names], colocation=[groups.get(v) for v in names],
        edge_src=[index[e[0]] for e in edges], edge_dst=[index[e[1]] for e in edges],
        edge_bytes=[e[2] for e in edges], edge_src_output=[e[3] for e in edges])


def _fan_out_in() -> Graph:
    """Co-location and memory (8 bytes per device) put c and d on one device, s, b and t on the
    other: s's tensor reaches c and d as one transfer sized 2e5 bytes (25 µs, not 15 + 25), and
    the tensors of c and d compete for the channel back to t."""
    return _outputs_graph(
        "fan-out-in", [("s", "b", 1e5, 0), ("s", "c", 1e5, 0), ("s", "d", 2e5, 0), ("c", "t", 1e5, 0),
                       ("d", "t", 1e5, 1), ("b", "t", 0.0, 0)],
        {"s": 5, "b": 20, "c": 30, "d": 10, "t": 5}, {"s": 2, "b": 2, "t": 2, "c": 4, "d": 4},
        {"s": "g", "b": "g", "t": "g", "c": "h", "d": "h"})


def _two_tensors() -> Graph:
    """s's two outputs go to a and b, which co-location and memory put on the other device: the
    two transfers take one channel in turn (optimum 45 µs; 40 µs without channel contention)."""
    return _outputs_graph("two-tensors", [("s", "a", 1e5, 0), ("s", "b", 1e5, 1)],
                          {"s": 5, "a": 10, "b": 10, "x": 30}, {"a": 4, "b": 4}, {"a": "g", "b": "g"})


def _broadcast() -> Graph:
    """3 devices: memory puts s, a and b on one device each; s's two tensors leave on its one send
    channel in turn (optimum 5 + 15 + 15 + 10 = 45 µs; 30 µs without channel contention)."""
    return _outputs_graph("broadcast", [("s", "a", 1e5, 0), ("s", "b", 1e5, 1)],
                          {"s": 5, "a": 10, "b": 10}, {"s": 4, "a": 4, "b": 4}, {})


def _two_senders() -> Graph:
    """3 devices: p and q share a device (co-location), a and b one device each; the transfers
    p→a and q→b go to different devices but share the sender's send channel (45 µs; 35 µs
    without channel contention)."""
    return _outputs_graph("two-senders", [("p", "a", 1e5, 0), ("q", "b", 1e5, 0)],
                          {"p": 5, "q": 5, "a": 10, "b": 10}, {"p": 2, "q": 2, "a": 4, "b": 4},
                          {"p": "g", "q": "g"})


#: graph name: devices, channel-model optimum (µs), memory per device
_HAND_MADE = {"fan-out-in": (2, 90.0, 8.0), "two-tensors": (2, 45.0, 8.0),
              "broadcast": (3, 45.0, 4.0), "two-senders": (3, 45.0, 4.0)}


@pytest.mark.parametrize("graph", [_fan_out_in(), _two_tensors(), _broadcast(), _two_senders(),
                                   *(random_graph(s, 4 + s % 2, density=0.5) for s in (1, 11, 17, 20))],
                         ids=lambda g: g.name)
def test_channel_milp_optimum_equals_brute_force(graph: Graph) -> None:
    devices, _, memory = _HAND_MADE.get(graph.name, (2, None, 1e9))
    cluster = Cluster.homogeneous(devices, memory, slope_us_per_byte=1e-4,
                                  intercept_us=5.0 if graph.name in _HAND_MADE else 12.0)
    p = place(graph, cluster, "optimal", CHANNELS)
    expected = channel_brute_force(graph, cluster)
    # the channel MILP alone (not seeded by the no-channel solve) reaches the same optimum
    alone = optimal.solve_milp(optimal.build_problem(graph, cluster, channels=True), 20.0)
    assert alone.status == "optimal" and alone.assignment is not None
    retimed = channel_schedule(graph, cluster, alone.assignment, alone.start_us, alone.transfer_start_us)
    assert retimed[1].max() == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert alone.objective_us == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert p.extra["milp_model"] == MILP_MODELS[1]
    assert p.extra["milp_status"] == "optimal"
    assert p.extra["milp_makespan_us"] == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert p.extra["milp_bound_us"] <= p.extra["milp_makespan_us"] + 1e-9
    # the channel model's optimum is at least the optimum without contention, at most the replay
    assert expected >= brute_force_optimum(graph, cluster) - 1e-9
    assert expected <= p.predicted_step_time_us + 1e-9 and not p.oom
    _, finish = channel_schedule(graph, cluster, p.assignment)
    assert finish.max() >= expected - 1e-6
    if graph.name in _HAND_MADE:
        assert expected == pytest.approx(_HAND_MADE[graph.name][1])
    if graph.name == "fan-out-in":  # s, one 25 µs transfer, d, c; d's tensor back during c; c's; t
        assert p.device_of("c") == p.device_of("d") != p.device_of("s")
        assert simulate(graph, cluster, p.assignment).num_transfers == 3
    elif graph.name in _HAND_MADE:
        assert brute_force_optimum(graph, cluster) < expected  # contention matters here


def test_channel_schedule_follows_the_simulator_on_fifo_orders() -> None:
    # the worked example of docs/simulator.md: 53 µs with channels, in the simulator's order
    g = make_graph([("a", "b", 100.0), ("a", "c", 100.0), ("a", "d", 300.0), ("b", "d", 200.0)],
                   times={"a": 10, "b": 20, "c": 30, "d": 5})
    cluster = Cluster.homogeneous(2, 1e9, slope_us_per_byte=0.01, intercept_us=5.0)
    a = np.array([0, 0, 1, 1])
    start, finish = channel_schedule(g, cluster, a, simulate(g, cluster, a).start_us)
    assert finish.max() == pytest.approx(53.0)
    assert start.tolist() == pytest.approx(simulate(g, cluster, a).start_us.tolist())


# (seed, ops, devices): in each, contention raises the optimum above the no-channel one
@pytest.mark.parametrize(("seed", "ops", "devices"),
                         [(20, 6, 2), (70, 6, 3), (38, 8, 2), (21, 9, 3), (52, 10, 2), (51, 10, 3)])
def test_channel_optimum_bounds_every_placers_simulated_step(seed: int, ops: int, devices: int) -> None:
    graph = random_graph(seed, ops, density=0.4)
    tight = max(np.ceil(0.7 * graph.total_memory_bytes), float(graph.memory_bytes.max()))
    cluster = Cluster.homogeneous(devices, tight, slope_us_per_byte=1e-4, intercept_us=8.0)
    best = place(graph, cluster, "optimal", CHANNELS)
    assert best.extra["milp_status"] == "optimal"
    optimum = best.extra["milp_makespan_us"]
    nochan = place(graph, cluster, "optimal", FAST).extra["milp_makespan_us"]
    assert optimum > nochan * (1 + 1e-9)
    assert optimum <= best.predicted_step_time_us * (1 + 1e-9)
    checked = 0
    for name in ("single", "m-etf", "heft", "celeritas", "metis"):
        other = place(graph, cluster, name)
        if other.oom:
            continue  # the MILP respects memory; a best-effort placement is no feasible competitor
        checked += 1
        assert optimum <= simulate(graph, cluster, other.assignment).step_time_us * (1 + 1e-9), name
    assert checked >= 3
    if graph.num_nodes <= 6:  # every assignment that fits
        for assign in itertools.product(range(devices), repeat=graph.num_nodes):
            a = np.asarray(assign)
            if np.all(np.bincount(a, weights=graph.memory_bytes, minlength=devices) <= cluster.memory_bytes):
                assert optimum <= simulate(graph, cluster, a).step_time_us * (1 + 1e-9)


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
    with pytest.raises(CeleritasInputError, match="'channels': expected true or false"):
        place(chain, cluster, "optimal", {"channels": 2})


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


@pytest.mark.parametrize("channels", [0, 1])
def test_tiny_time_limit_reports_a_status_and_a_gap_or_the_fallback(channels: int) -> None:
    g = random_graph(7, 16, density=0.2)
    cluster = Cluster.homogeneous(4, 1e9, slope_us_per_byte=1e-4, intercept_us=5.0)
    p = place(g, cluster, "optimal", {"time_limit": 0.01, "channels": channels})
    extra = p.extra
    assert extra["milp_model"] == MILP_MODELS[channels]
    assert extra["milp_status"] in {"optimal", "time_limit"}
    if "fallback" in extra:
        assert p.assignment.tolist() == [0] * g.num_nodes and extra["milp_makespan_us"] is None
    else:
        assert extra["milp_gap"] is not None and 0.0 <= extra["milp_gap"] < 1.0
        assert extra["milp_makespan_us"] >= extra["milp_bound_us"]
        if channels:  # a schedule under channels: no shorter than the simulator's replay allows
            assert extra["milp_makespan_us"] >= extra["milp_no_channel_bound_us"] * (1 - 1e-9)
            assert extra["milp_bound_us"] <= simulate(g, cluster, p.assignment).step_time_us * (1 + 1e-9)


def test_channels_skip_the_channel_milp_when_the_no_channel_optimum_holds() -> None:
    # a chain: everything on one device, no transfer, so contention cannot matter
    g = make_graph([("a", "b", 1e6), ("b", "c", 1e6)], times={"a": 10, "b": 10, "c": 10})
    p = place(g, Cluster.homogeneous(2, 1e9, slope_us_per_byte=1e-4, intercept_us=5.0), "optimal", CHANNELS)
    assert p.extra["milp_status"] == "optimal" and p.extra["milp_makespan_us"] == pytest.approx(30.0)
    assert "no-channel bound" in p.extra["milp_channel_skipped"]
    assert p.extra["milp_model"].startswith("channel contention")


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
    assert doc["placer"] == "optimal" and doc["params"] == {"time_limit": 20.0, "max_ops": 40, "channels": 0}
    assert doc["extra"]["milp_status"] == "optimal" and doc["extra"]["milp_model"] == "no channel contention"
    big = tmp_path / "big.json"
    save_graph(make_graph([(f"n{i}", f"n{i + 1}") for i in range(45)]), big)
    code = main(["place", str(big), "--placer", "optimal", "--devices", "2", "--device-memory", "1GiB",
                 "--out", str(tmp_path / "q.json")])
    _, err = capsys.readouterr()
    assert code == 2 and "graph has 46 ops, more than max_ops=40" in err and err.count("\n") == 1
    assert not (tmp_path / "q.json").exists()
