"""The compiled replay (simulator._replay) gives bit-for-bit the timings of the same loop run as
Python, and of the original ``heapq`` event loop kept here as the reference, on random inputs
full of ties (integer and zero durations, zero-byte edges, shared outputs, 1-6 devices of mixed
speeds, flat or with a link topology whose nodes share network ports, channels on and off)."""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np
import pytest

from celeritas_core.compiled import jit
from celeritas_core.generators.families import layered_dag
from celeritas_core.generators.synthetic import training_step_graph
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.topology import Link, NodeSpec, build_topology
from celeritas_core.simulation import simulator


# ---------------------------------------------------------------------------- reference
def reference_events(graph: Graph, assign: np.ndarray, dur: np.ndarray, groups: simulator._Groups,
                     num_dev: int, channels: bool, num_ports: int = 0) -> tuple[np.ndarray, ...]:
    """The replay's event loop as it was on Python lists and ``heapq`` tuples ``(time, kind, rank)``,
    with the shared ports of a topology added: op start, op finish, transfer start, transfer end (µs)
    and the order the ops started in."""
    finish_kind, ready_kind = 0, 1
    rank, node_of_rank = graph.topological_rank.tolist(), graph.topological_order.tolist()
    dev, dur_l = assign.tolist(), dur.tolist()
    succ_ptr, succ_idx = graph.succ_ptr.tolist(), graph.succ_idx.tolist()
    slot_group = groups.edge_group[graph.succ_edge].tolist()
    g_ptr, g_comm, g_dst = groups.ptr.tolist(), groups.comm_us.tolist(), groups.dst_dev.tolist()
    g_ports = list(zip(groups.egress.tolist(), groups.ingress.tolist(), strict=True))
    port_free = [0.0] * num_ports
    g_start, g_end = [0.0] * len(g_comm), [0.0] * len(g_comm)
    n = graph.num_nodes
    pending, ready_at, start, finish = graph.in_degree.tolist(), [0.0] * n, [0.0] * n, [0.0] * n
    sequence: list[int] = [-1] * n
    send_free, recv_free, idle = [0.0] * num_dev, [0.0] * num_dev, [True] * num_dev
    queues: list[list[tuple[float, int]]] = [[] for _ in range(num_dev)]
    events = [(0.0, ready_kind, r) for r in sorted(graph.topological_rank[graph.in_degree == 0].tolist())]
    heapq.heapify(events)
    while events:
        now = events[0][0]
        touched = []
        while events and events[0][0] == now:
            _, kind, r = heapq.heappop(events)
            u = node_of_rank[r]
            d = dev[u]
            touched.append(d)
            if kind == ready_kind:
                heapq.heappush(queues[d], (now, r))
                continue
            idle[d] = True
            for g in range(g_ptr[u], g_ptr[u + 1]):
                dd, s = g_dst[g], now
                ports = [x for x in g_ports[g] if x >= 0]
                if channels:
                    s = max(s, send_free[d], recv_free[dd], *(port_free[x] for x in ports))
                g_start[g], g_end[g] = s, s + g_comm[g]
                if channels:
                    send_free[d] = recv_free[dd] = g_end[g]
                    for x in ports:
                        port_free[x] = g_end[g]
            for k in range(succ_ptr[u], succ_ptr[u + 1]):
                v, g = succ_idx[k], slot_group[k]
                ready_at[v] = max(ready_at[v], now if g < 0 else g_end[g])
                pending[v] -= 1
                if pending[v] == 0:
                    if ready_at[v] == now:
                        heapq.heappush(queues[dev[v]], (now, rank[v]))
                        touched.append(dev[v])
                    else:
                        heapq.heappush(events, (ready_at[v], ready_kind, rank[v]))
        for d in touched:
            if idle[d] and queues[d]:
                _, r = heapq.heappop(queues[d])
                u = node_of_rank[r]
                idle[d] = False
                start[u], finish[u] = now, now + dur_l[u]
                sequence[u] = max(sequence) + 1
                heapq.heappush(events, (finish[u], finish_kind, r))
    times = tuple(np.asarray(x, dtype=np.float64) for x in (start, finish, g_start, g_end))
    return (*times, np.asarray(sequence, dtype=np.int64))


# ---------------------------------------------------------------------------- random inputs
def tie_heavy_graph(rng: np.random.Generator) -> Graph:
    """Up to 80 ops in shuffled index order, durations mostly in {0, 1, 2, 3, 10} µs, up to three
    outputs per op with some large output ids, a tenth of the edges of 0 bytes."""
    n = int(rng.integers(1, 80))
    pairs = np.array([(i, j) for i in range(n) for j in range(i + 1, n)], dtype=np.int64).reshape(-1, 2)
    pairs = pairs[rng.random(len(pairs)) < rng.choice([0.02, 0.1, 0.3])]
    perm = rng.permutation(n)
    outputs = rng.integers(1, 4, n)
    src_output = rng.integers(0, outputs[pairs[:, 0]]) if len(pairs) else np.zeros(0, dtype=np.int64)
    nbytes = rng.integers(0, 1000, len(pairs)).astype(np.float64) * (rng.random(len(pairs)) < 0.9)
    times = rng.choice([0.0, 1.0, 2.0, 3.0, 10.0], n) if rng.random() < 0.7 else rng.random(n) * 100
    return Graph.from_arrays(name="ties", node_names=[f"n{i}" for i in range(n)],
                             time_us=times[np.argsort(perm)], memory_bytes=np.ones(n),
                             edge_src=perm[pairs[:, 0]], edge_dst=perm[pairs[:, 1]],
                             edge_bytes=nbytes, edge_src_output=src_output * rng.choice([1, 7, 2**40]))


def random_graph(rng: np.random.Generator) -> Graph:
    """A tie-heavy graph, a layered task DAG (integer times) or a small training step."""
    kind = rng.integers(0, 4)
    if kind == 0:
        return layered_dag(tasks=int(rng.integers(2, 300)), ccr=float(rng.choice([0.0, 0.5, 5.0])),
                           seed=int(rng.integers(0, 1000)), shape=float(rng.choice([0.5, 1.0, 2.0])))
    if kind == 1:
        return training_step_graph(layers=int(rng.integers(1, 4)), width=int(rng.integers(3, 64)),
                                   seed=int(rng.integers(0, 100)), branches=int(rng.integers(1, 4)),
                                   join=str(rng.choice(["concat", "add"])), residual=bool(rng.random() < 0.5),
                                   norm=bool(rng.random() < 0.5), reshapes=int(rng.integers(0, 3)))
    return tie_heavy_graph(rng)


def random_link(rng: np.random.Generator, name: str) -> Link:
    """A link of slope and intercept drawn from rounded and arbitrary values (some 0)."""
    return Link(name, float(rng.choice([0.0, 1e-5, 1e-3, 0.01, 1e-4 * rng.random()])),
                float(rng.choice([0.0, 1.0, 5.0, 50.0, 10 * rng.random()])))


def random_topology(rng: np.random.Generator, names: list[str]):
    """1-3 nodes of 1-2 islands over ``names`` in a shuffled order, random links, 1-2 NICs per node,
    some nodes with shared island uplinks, some pair overrides."""
    links = [random_link(rng, f"l{i}") for i in range(3)]
    order = rng.permutation(len(names))
    cuts = np.sort(rng.choice(np.arange(1, len(names)), size=min(int(rng.integers(0, 3)), len(names) - 1),
                              replace=False))
    nodes = []
    for i, members in enumerate(np.split(order, cuts)):
        half = int(rng.integers(0, len(members)))
        islands = [m for m in (members[:half], members[half:]) if len(m)]
        nodes.append(NodeSpec(f"n{i}", tuple(tuple(names[d] for d in m) for m in islands),
                              f"l{rng.integers(0, 3)}", f"l{rng.integers(0, 3)}", bool(rng.random() < 0.5),
                              int(rng.integers(1, min(2, len(members)) + 1))))
    pairs = [(names[0], names[-1], "l0")] if len(names) > 1 and rng.random() < 0.3 else []
    return build_topology(names, links, nodes, "l2", pairs)


def random_cluster(rng: np.random.Generator) -> Cluster:
    """1-6 devices, equal, rounded or arbitrary speeds, transfer slopes and intercepts (some 0); a
    third of them with a random link topology."""
    num = int(rng.integers(1, 7))
    speed = rng.choice([0.5, 1.0, 2.0, 3.0], num) if rng.random() < 0.5 else rng.uniform(0.2, 4.0, num)
    speed = speed if rng.random() < 0.7 else None
    flat = random_link(rng, "flat")
    names = [f"gpu:{i}" for i in range(num)]
    topology = random_topology(rng, names) if rng.random() < 0.5 else None
    return Cluster.build(names, [1e12] * num, speed, slope_us_per_byte=flat.slope_us_per_byte,
                         intercept_us=flat.intercept_us, topology=topology)


def random_assignment(rng: np.random.Generator, graph: Graph, num: int) -> np.ndarray:
    """Random, contiguous along the topological order, all on one device, or round robin."""
    n = graph.num_nodes
    kind = rng.integers(0, 4)
    if kind == 0:
        return rng.integers(0, num, n)
    if kind == 1:
        out = np.empty(n, dtype=np.int64)
        out[graph.topological_order] = np.arange(n) * num // n
        return out
    return np.full(n, int(rng.integers(0, num))) if kind == 2 else np.arange(n) % num


def replay_inputs(seed: int) -> tuple[Graph, np.ndarray, np.ndarray, simulator._Groups, int, bool, int]:
    """Everything :func:`simulator._run_events` takes, for one random case (the last, the number
    of shared port sides, by keyword: :func:`run_events`)."""
    rng = np.random.default_rng(seed)
    graph, cluster = random_graph(rng), random_cluster(rng)
    assign = random_assignment(rng, graph, cluster.num_devices)
    dur = graph.time_us / cluster.speed[assign]
    groups = simulator._transfer_groups(graph, cluster, assign)
    return graph, assign, dur, groups, cluster.num_devices, bool(rng.random() < 0.7), cluster.num_ports


def run_events(inputs: tuple) -> tuple[np.ndarray, ...]:
    """:func:`simulator._run_events` on :func:`replay_inputs`' tuple (documented dispatch)."""
    return simulator._run_events(*inputs[:6], num_ports=inputs[6])


def assert_identical(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]) -> None:
    """Same dtypes, shapes and bytes: no tolerance."""
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes(), np.flatnonzero(a != b)[:5]


SEEDS = range(120)


# ---------------------------------------------------------------------------- tests
@pytest.mark.parametrize("block", range(4))
def test_replay_matches_the_heapq_reference_bit_for_bit(block: int) -> None:
    for seed in SEEDS[block::4]:
        inputs = replay_inputs(seed)
        assert_identical(run_events(inputs), reference_events(*inputs))


def test_the_random_cases_exercise_shared_ports() -> None:
    # the comparison above checks the ports only if some random cases use them and some transfer
    # waits for one: count the cases whose transfer times change when the ports are dropped
    used = mattered = 0
    for seed in SEEDS:
        inputs = replay_inputs(seed)
        groups = inputs[3]
        if not (inputs[5] and (groups.egress >= 0).any()):
            continue
        used += 1
        none = np.full(len(groups.egress), -1, dtype=np.int64)
        portless = dataclasses.replace(groups, egress=none, ingress=none)
        with_ports = run_events(inputs)[3]
        mattered += not np.array_equal(with_ports, run_events((*inputs[:3], portless, *inputs[4:]))[3])
    assert used >= 10 and mattered >= 3, (used, mattered)


@pytest.mark.skipif(not jit.ENABLED, reason="the replay runs as Python already")
@pytest.mark.usefixtures("compiled_loops")
def test_compiled_replay_equals_the_same_loop_run_as_python(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = [run_events(replay_inputs(seed)) for seed in SEEDS[:40]]
    for name, func in list(vars(simulator).items()):  # every compiled function, so the loop runs as Python
        if hasattr(func, "py_func"):
            monkeypatch.setattr(simulator, name, func.py_func)
    for seed, want in zip(SEEDS[:40], compiled, strict=True):
        assert_identical(run_events(replay_inputs(seed)), want)


def test_long_device_queues_match_the_reference() -> None:
    # 3,000 sources at time 0 on two devices, then a fan-in: long device queues exercise the heaps
    n = 3001
    graph = Graph.from_arrays(name="wide", node_names=[f"n{i}" for i in range(n)],
                              time_us=np.r_[np.tile([0.0, 1.0, 2.0], 1000), 1.0], memory_bytes=np.ones(n),
                              edge_src=np.arange(n - 1), edge_dst=np.full(n - 1, n - 1),
                              edge_bytes=np.zeros(n - 1))
    cluster = Cluster.homogeneous(2, 1e12)
    assign = np.arange(n) % 2
    dur = graph.time_us / cluster.speed[assign]
    inputs = (graph, assign, dur, simulator._transfer_groups(graph, cluster, assign), 2, True)
    assert_identical(simulator._run_events(*inputs), reference_events(*inputs))
