"""Tests for the event-driven simulator: hand-computed timelines and properties on random DAGs."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.simulation.simulator import SimulationResult, simulate

K = 0.01  # µs per byte
B = 5.0  # µs per transfer


def graph_of(
    times: Sequence[float],
    edges: Sequence[tuple[int, int, float] | tuple[int, int, float, int]],
    name: str = "g",
) -> Graph:
    """Graph with nodes n0..n{k-1} of ``times`` (µs) and (src, dst, bytes[, src_output]) edges."""
    return Graph.from_arrays(
        name=name,
        node_names=[f"n{i}" for i in range(len(times))],
        time_us=list(times),
        memory_bytes=[100.0 * (i + 1) for i in range(len(times))],
        edge_src=[e[0] for e in edges],
        edge_dst=[e[1] for e in edges],
        edge_bytes=[e[2] for e in edges],
        edge_src_output=[e[3] if len(e) > 3 else 0 for e in edges],  # type: ignore[misc]
    )


def cluster_of(num: int, speed: Sequence[float] | None = None, k: float = K, b: float = B) -> Cluster:
    """``num`` devices with 1 GB each, the given speeds and transfer model k·bytes + b (µs)."""
    return Cluster.build([f"gpu:{i}" for i in range(num)], [1e9] * num, speed,
                         slope_us_per_byte=k, intercept_us=b)


def run(graph: Graph, cluster: Cluster, assignment: Sequence[int]) -> SimulationResult:
    """Simulate with a list assignment."""
    return simulate(graph, cluster, np.asarray(assignment, dtype=np.int64))


# ---------------------------------------------------------------------------- hand-made cases
def test_chain_on_one_device_is_the_sum_of_times() -> None:
    g = graph_of([10, 20, 30], [(0, 1, 1000), (1, 2, 1000)])
    r = run(g, cluster_of(2), [1, 1, 1])
    assert r.step_time_us == 60.0
    assert r.start_us.tolist() == [0, 10, 30]
    assert r.finish_us.tolist() == [10, 30, 60]
    assert r.num_transfers == 0
    assert r.comm_time_total_us == 0.0
    assert r.device_busy_us.tolist() == [0, 60]
    assert r.device_memory_bytes.tolist() == [0, 600]


def test_chain_split_across_two_devices_adds_one_transfer() -> None:
    g = graph_of([10, 20, 30], [(0, 1, 1000), (1, 2, 1000)])
    r = run(g, cluster_of(2), [0, 0, 1])
    transfer = K * 1000 + B  # 15 µs
    assert r.num_transfers == 1
    assert r.step_time_us == 10 + 20 + transfer + 30
    assert r.start_us.tolist() == [0, 10, 45]
    assert r.transfers.start_us.tolist() == [30] and r.transfers.end_us.tolist() == [45]
    assert r.transfers.src_node.tolist() == [1]
    assert r.transfers.src_device.tolist() == [0] and r.transfers.dst_device.tolist() == [1]
    assert r.transfers.bytes.tolist() == [1000]
    assert r.comm_time_total_us == transfer
    assert r.device_busy_us.tolist() == [30, 30]
    assert r.device_memory_bytes.tolist() == [300, 300]


def test_zero_byte_edge_across_devices_costs_the_intercept() -> None:
    g = graph_of([10, 20], [(0, 1, 0)])
    r = run(g, cluster_of(2), [0, 1])
    assert r.step_time_us == 10 + B + 20


def test_speed_scales_op_durations() -> None:
    g = graph_of([10, 20, 30], [(0, 1, 0), (1, 2, 0)])
    assert run(g, cluster_of(2, [2.0, 4.0]), [0, 0, 0]).step_time_us == 30.0
    assert run(g, cluster_of(2, [2.0, 4.0]), [1, 1, 1]).step_time_us == 15.0
    r = run(g, cluster_of(2, [2.0, 4.0]), [0, 1, 1])  # 5 µs, transfer 5 µs, then 5 + 7.5 µs
    assert r.finish_us.tolist() == [5.0, 15.0, 22.5]
    assert r.device_busy_us.tolist() == [5.0, 12.5]


def test_fan_out_of_one_output_to_one_remote_device_is_one_transfer() -> None:
    g = graph_of([10, 5, 5], [(0, 1, 100), (0, 2, 300)])
    r = run(g, cluster_of(2), [0, 1, 1])
    assert r.num_transfers == 1
    assert r.transfers.bytes.tolist() == [300]  # the larger of the edges
    end = 10 + K * 300 + B  # 18
    assert r.transfers.end_us.tolist() == [end]
    # Both consumers are ready at 18; n2 has the lower topological rank, so it runs first.
    assert g.topological_rank[2] < g.topological_rank[1]
    assert r.start_us.tolist() == [0, end + 5, end]
    assert r.step_time_us == end + 10


def test_fan_out_to_two_remote_devices_is_two_transfers_serialized_on_the_send_channel() -> None:
    g = graph_of([10, 1, 1], [(0, 1, 100), (0, 2, 200)])
    r = run(g, cluster_of(3), [0, 1, 2])
    assert r.num_transfers == 2
    # gpu:1 first (destination index order): 10 -> 16; gpu:2 waits for the send channel: 16 -> 23.
    assert r.transfers.dst_device.tolist() == [1, 2]
    assert r.transfers.start_us.tolist() == [10.0, 16.0]
    assert r.transfers.end_us.tolist() == [16.0, 23.0]
    assert r.start_us.tolist() == [0.0, 16.0, 23.0]
    assert r.step_time_us == 24.0


def test_two_outputs_are_two_transfers() -> None:
    g = graph_of([10, 1, 1], [(0, 1, 100, 0), (0, 2, 200, 1)])
    r = run(g, cluster_of(2), [0, 1, 1])
    assert r.num_transfers == 2
    assert r.transfers.src_output.tolist() == [0, 1]
    # Same sender and receiver: output 0 at 10 -> 16, then output 1 at 16 -> 23.
    assert r.transfers.start_us.tolist() == [10.0, 16.0]
    assert r.transfers.end_us.tolist() == [16.0, 23.0]
    assert r.start_us.tolist() == [0.0, 16.0, 23.0]
    assert r.comm_time_total_us == 13.0


def test_two_senders_to_one_receiver_serialize_on_the_receive_channel() -> None:
    g = graph_of([10, 10, 1], [(0, 2, 100), (1, 2, 200)])
    r = run(g, cluster_of(3), [0, 1, 2])
    # Both finish at 10: n0 (lower topological rank) reserves first, 10 -> 16; n1 waits, 16 -> 23.
    assert g.topological_rank[0] < g.topological_rank[1]
    assert r.transfers.src_node.tolist() == [0, 1]
    assert r.transfers.start_us.tolist() == [10.0, 16.0]
    assert r.transfers.end_us.tolist() == [16.0, 23.0]
    assert r.start_us[2] == 23.0
    assert r.step_time_us == 24.0


def test_transfers_are_reserved_in_order_of_producer_finish() -> None:
    g = graph_of([10, 8, 1], [(0, 2, 100), (1, 2, 200)])
    r = run(g, cluster_of(3), [0, 1, 2])
    # n1 finishes first (8) and takes the receive channel 8 -> 15; n0's transfer then runs 15 -> 21.
    assert r.transfers.start_us.tolist() == [15.0, 8.0]
    assert r.transfers.end_us.tolist() == [21.0, 15.0]
    assert r.step_time_us == 22.0


def test_ready_ties_break_by_topological_rank_not_index() -> None:
    # Edges n0->n1 then n0->n2: the stack-based topological order visits n2 before n1.
    g = graph_of([1, 10, 100], [(0, 1, 0), (0, 2, 0)])
    assert g.topological_rank.tolist() == [0, 2, 1]
    r = run(g, cluster_of(1), [0, 0, 0])
    assert r.start_us.tolist() == [0.0, 101.0, 1.0]
    assert r.step_time_us == 111.0


def test_earlier_ready_time_wins_over_lower_rank() -> None:
    # gpu:0 runs n0 (0..100). n2 finishes at 5, its transfer takes gpu:0's receive channel 5 -> 11;
    # n1's (21 µs) waits for it, 11 -> 32. So n4 is ready at 11 and n3 (lower rank) at 32.
    g = graph_of([100, 10, 5, 1, 1], [(1, 3, 1600), (2, 4, 100)])
    ranks = g.topological_rank
    assert ranks[3] < ranks[4]
    r = run(g, cluster_of(3), [0, 1, 2, 0, 0])
    assert r.transfers.start_us.tolist() == [11.0, 5.0]
    assert r.transfers.end_us.tolist() == [32.0, 11.0]
    assert r.start_us[4] == 100.0 and r.start_us[3] == 101.0
    assert r.step_time_us == 102.0


def test_local_input_does_not_wait_for_a_transfer() -> None:
    # n0 feeds n1 on its own device and n2 remotely; n1 starts as soon as n0 finishes.
    g = graph_of([10, 10, 10], [(0, 1, 10_000), (0, 2, 10_000)])
    r = run(g, cluster_of(2), [0, 0, 1])
    assert r.start_us.tolist() == [0.0, 10.0, 10.0 + K * 10_000 + B]


def test_docs_worked_example() -> None:
    g = graph_of([10, 20, 30, 5], [(0, 1, 100), (0, 2, 100), (0, 3, 300), (1, 3, 200)])
    r = run(g, cluster_of(2), [0, 0, 1, 1])
    assert r.start_us.tolist() == [0.0, 10.0, 18.0, 48.0]
    assert r.finish_us.tolist() == [10.0, 30.0, 48.0, 53.0]
    assert r.transfers.start_us.tolist() == [10.0, 30.0]
    assert r.transfers.end_us.tolist() == [18.0, 37.0]
    assert r.step_time_us == 53.0
    assert r.num_transfers == 2 and r.comm_time_total_us == 15.0
    assert r.device_busy_us.tolist() == [30.0, 35.0]


def test_float_assignment_with_integer_values_is_accepted() -> None:
    g = graph_of([10, 20], [(0, 1, 0)])
    assert simulate(g, cluster_of(2), np.array([0.0, 1.0])).step_time_us == 35.0


@pytest.mark.parametrize(
    ("assignment", "fragment"),
    [
        ([0, 1], "has 2 entries"),
        ([0, 1, 0, 1], "has 4 entries"),
        ([0, 2, 0], "device 2"),
        ([0, -1, 0], "device -1"),
        ([0, 0.5, 0], "integer"),
        ([[0, 1, 0]], "1-D"),
    ],
)
def test_bad_assignment_raises_input_error(assignment: list, fragment: str) -> None:
    g = graph_of([1, 1, 1], [(0, 1, 0), (1, 2, 0)])
    with pytest.raises(CeleritasInputError, match=fragment) as info:
        simulate(g, cluster_of(2), np.asarray(assignment))
    assert "\n" not in str(info.value)


def test_large_random_graph_accounts_for_every_op() -> None:
    """A 36k-op replay is consistent (speed is measured by `make bench`, not here)."""
    rng = np.random.default_rng(7)
    n, m = 36_000, 60_000
    src = rng.integers(0, n - 1, size=m)
    dst = np.minimum(src + rng.integers(1, 200, size=m), n - 1)
    g = Graph.from_arrays(name="big", node_names=[f"n{i}" for i in range(n)],
                          time_us=rng.uniform(1, 100, n), memory_bytes=np.ones(n),
                          edge_src=src, edge_dst=dst, edge_bytes=rng.uniform(0, 1e6, m),
                          edge_src_output=rng.integers(0, 3, m))
    assignment = rng.integers(0, 4, n)
    r = simulate(g, Cluster.homogeneous(4, 1e12), assignment)
    assert r.step_time_us >= g.total_time_us / 4
    assert np.allclose(r.device_busy_us, np.bincount(assignment, weights=g.time_us, minlength=4))
    assert np.all(r.start_us[g.edge_dst] >= r.finish_us[g.edge_src] - 1e-9)


# ---------------------------------------------------------------------------- properties
@st.composite
def placed_dags(draw: st.DrawFn) -> tuple[Graph, Cluster, np.ndarray]:
    """A random DAG (edges only i -> j with i < j), a small cluster and an assignment."""
    n = draw(st.integers(1, 12))
    times = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))
    edges: list[tuple[int, int, float, int]] = []
    if n > 1:
        pairs = draw(st.lists(st.tuples(st.integers(0, n - 2), st.integers(1, n - 1)), max_size=3 * n))
        for a, b in pairs:
            lo, hi = min(a, b), max(a, b)
            if lo == hi:
                continue
            edges.append((lo, hi, float(draw(st.integers(0, 1000))), draw(st.integers(0, 2))))
    num_dev = draw(st.integers(1, 3))
    speed = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=num_dev, max_size=num_dev))
    intercept = float(draw(st.integers(0, 10)))
    cluster = cluster_of(num_dev, speed, k=1 / 64, b=intercept)
    assignment = np.asarray(draw(st.lists(st.integers(0, num_dev - 1), min_size=n, max_size=n)))
    return graph_of(times, edges), cluster, assignment


def _no_overlap(intervals: list[tuple[float, float]]) -> bool:
    """True when the (start, end) intervals, sorted by start, never overlap."""
    intervals = sorted(intervals)
    return all(b[0] >= a[1] for a, b in itertools.pairwise(intervals))


@settings(max_examples=300, deadline=None)
@given(placed_dags())
def test_replay_properties_on_random_dags(case: tuple[Graph, Cluster, np.ndarray]) -> None:
    g, c, a = case
    r = simulate(g, c, a)
    n, eps = g.num_nodes, 1e-9
    dur = g.time_us / c.speed[a]
    dev = a.tolist()

    # Durations and step time.
    np.testing.assert_allclose(r.finish_us - r.start_us, dur)
    assert r.step_time_us == r.finish_us.max()
    assert (r.start_us >= 0).all()
    np.testing.assert_allclose(r.device_busy_us, np.bincount(a, weights=dur, minlength=c.num_devices))
    np.testing.assert_allclose(r.device_memory_bytes,
                               np.bincount(a, weights=g.memory_bytes, minlength=c.num_devices))

    # Lower bounds: critical path without communication on the fastest device, work / total speed.
    longest = np.zeros(n)
    for v in g.topological_order.tolist():
        preds = g.pred_idx[g.pred_ptr[v]:g.pred_ptr[v + 1]]
        longest[v] = g.time_us[v] + (longest[preds].max() if len(preds) else 0.0)
    assert r.step_time_us >= longest.max() / c.speed.max() - eps
    assert r.step_time_us >= g.total_time_us / c.speed.sum() - eps
    assert (r.step_time_us >= r.device_busy_us - eps).all()

    # Transfers: one per distinct (src, output, dst device) over cross edges, size = max bytes.
    t = r.transfers
    index = {(s, o, d): i for i, (s, o, d) in
             enumerate(zip(t.src_node.tolist(), t.src_output.tolist(), t.dst_device.tolist(), strict=True))}
    expected: dict[tuple[int, int, int], float] = {}
    for s, d, nb, o in zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_bytes.tolist(),
                           g.edge_src_output.tolist(), strict=True):
        if dev[s] != dev[d]:
            key = (s, o, dev[d])
            expected[key] = max(expected.get(key, 0.0), nb)
    assert len(index) == r.num_transfers == len(expected)
    for key, nb in expected.items():
        i = index[key]
        assert t.bytes[i] == nb
        assert t.src_device[i] == dev[key[0]]
        assert t.start_us[i] >= r.finish_us[key[0]]
        assert t.end_us[i] - t.start_us[i] == pytest.approx(c.comm_time_us(nb))
    assert r.comm_time_total_us == pytest.approx(float(c.comm_time_us(t.bytes).sum()) if len(t) else 0.0)

    # Dependencies: after same-device predecessors and after the transfers of remote inputs.
    ready = np.zeros(n)
    for s, d, o in zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_src_output.tolist(), strict=True):
        avail = r.finish_us[s] if dev[s] == dev[d] else t.end_us[index[(s, o, dev[d])]]
        assert r.start_us[d] >= avail
        ready[d] = max(ready[d], avail)

    # Resources: one op at a time per device, one transfer at a time per send / receive channel.
    for d in range(c.num_devices):
        ops = [(r.start_us[v], r.finish_us[v]) for v in range(n) if dev[v] == d and dur[v] > 0]
        assert _no_overlap(ops)
        assert _no_overlap([(t.start_us[i], t.end_us[i]) for i in range(len(t)) if t.src_device[i] == d])
        assert _no_overlap([(t.start_us[i], t.end_us[i]) for i in range(len(t)) if t.dst_device[i] == d])

    # Work conserving: a device is never idle while one of its ops is ready and waiting.
    for d in range(c.num_devices):
        on_d = sorted((r.start_us[v], r.finish_us[v]) for v in range(n) if dev[v] == d)
        for v in range(n):
            if dev[v] != d or r.start_us[v] <= ready[v]:
                continue
            covered = ready[v]
            for s, f in on_d:
                if s <= covered < f or (s == covered and f == s):
                    covered = max(covered, f)
            assert covered >= r.start_us[v], f"device {d} idle while node {v} was ready"

    # One device, everything on it: the step time is the total work over its speed.
    if c.num_devices == 1 or (a == a[0]).all():
        assert r.step_time_us == pytest.approx(g.total_time_us / c.speed[a[0]])


# ---------------------------------------------------------------------------- dispatch orders
def test_every_dispatch_order_is_a_seeded_topological_order() -> None:
    from celeritas_core.generators.synthetic import small_training_graph
    from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH, dispatch_order

    graph = small_training_graph(3)
    orders = {}
    for name in ("rank", *ALTERNATIVE_DISPATCH):
        order, rank = dispatch_order(graph, name)
        assert sorted(order.tolist()) == list(range(graph.num_nodes))
        assert (rank[order] == np.arange(graph.num_nodes)).all()
        assert (rank[graph.edge_src] < rank[graph.edge_dst]).all()
        orders[name] = order.tobytes()
    assert len(set(orders.values())) == len(orders)  # each name a different tie-break
    again = small_training_graph(3)  # a new graph object: the same order for the same seed
    assert dispatch_order(again, "random:2")[0].tobytes() == orders["random:2"]


def test_dispatch_order_decides_ties_between_ready_ops() -> None:
    # two independent ops ready at 0 on one device: the order decides which runs first
    graph = graph_of([10.0, 20.0], [])
    assignment = np.zeros(2, dtype=np.int64)
    firsts = set()
    for name in ("rank", "fifo", "random:1", "random:2", "random:3", "random:4", "random:5"):
        result = simulate(graph, cluster_of(1), assignment, dispatch=name)
        assert result.step_time_us == 30.0  # one device: the order never changes the step
        firsts.add(int(np.argmin(result.start_us)))
    assert firsts == {0, 1}


@pytest.mark.parametrize("name", ["lifo", "random", "random:x", "random:-1", "random:1e3"])
def test_unknown_dispatch_order_is_one_line_error(name: str) -> None:
    with pytest.raises(CeleritasInputError, match="unknown dispatch order"):
        simulate(graph_of([1.0], []), cluster_of(1), np.zeros(1, dtype=np.int64), dispatch=name)


@pytest.mark.parametrize("name", ["rank", "fifo", "random:0", "random:7", "random:123456789"])
def test_check_dispatch_accepts_every_documented_name(name: str) -> None:
    from celeritas_core.simulation.simulator import check_dispatch

    assert check_dispatch(name) == name


@pytest.mark.parametrize("name", ["all", "", "RANK", "random:", "random:1234567890", "random: 1", "fifo:1"])
def test_check_dispatch_refuses_other_names_in_one_line(name: str) -> None:
    from celeritas_core.simulation.simulator import check_dispatch

    with pytest.raises(CeleritasInputError, match="unknown dispatch order") as info:
        check_dispatch(name)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["rank", "fifo", "random:1", "random:2", "random:3", "random:4"])
def test_earlier_ready_time_wins_under_every_dispatch_order(name: str) -> None:
    # the case of test_earlier_ready_time_wins_over_lower_rank: n4 is ready at 11, n3 at 32, so
    # no order changes who runs first on gpu:0 once n0 is done (only ties are the order's to break)
    g = graph_of([100, 10, 5, 1, 1], [(1, 3, 1600), (2, 4, 100)])
    r = simulate(g, cluster_of(3), np.array([0, 1, 2, 0, 0]), dispatch=name)
    assert r.start_us[4] == 100.0 and r.start_us[3] == 101.0
    assert r.step_time_us == 102.0


def test_dispatch_order_decides_which_transfer_takes_a_channel_first() -> None:
    # n0 on gpu:0 and n1 on gpu:2 finish together at 10, each sending 1000 B (15 µs) to gpu:1: the
    # finish events are processed in the order's rank, so the lower-ranked producer's transfer
    # takes gpu:1's receive channel first (10 -> 25) and the other waits (25 -> 40)
    from celeritas_core.simulation.simulator import dispatch_order

    g = graph_of([10, 10, 1, 1], [(0, 2, 1000), (1, 3, 1000)])
    firsts = set()
    for name in ("rank", "fifo", "random:1", "random:2", "random:3", "random:4", "random:5"):
        r = simulate(g, cluster_of(3), np.array([0, 2, 1, 1]), dispatch=name)
        rank = dispatch_order(g, name)[1]
        first = 0 if rank[0] < rank[1] else 1
        end = dict(zip(r.transfers.src_node.tolist(), r.transfers.end_us.tolist(), strict=True))
        assert (end[first], end[1 - first]) == (25.0, 40.0)
        firsts.add(first)
    assert firsts == {0, 1}  # some orders rank n0 first, others n1


def _heft_case() -> tuple[Graph, Cluster, np.ndarray]:
    """A 407-op training step placed by HEFT on 3 devices, where the orders' steps differ."""
    from celeritas_core.generators.synthetic import small_training_graph
    from celeritas_core.placers import place

    graph = small_training_graph(3)
    cluster = Cluster.homogeneous(3, 2**40)
    return graph, cluster, place(graph, cluster, "heft").assignment


def test_dispatch_spread_is_the_replays_under_each_order() -> None:
    from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH, dispatch_spread

    graph, cluster, assignment = _heft_case()
    spread = dispatch_spread(graph, cluster, assignment)
    assert spread.documented_us == simulate(graph, cluster, assignment).step_time_us
    steps = [simulate(graph, cluster, assignment, dispatch=name).step_time_us
             for name in ALTERNATIVE_DISPATCH]
    assert spread.steps_us == tuple(zip(ALTERNATIVE_DISPATCH, steps, strict=True))
    assert len(set(steps)) > 1  # the orders do break ties differently here
    assert spread.median_us == float(np.median(steps))
    assert (spread.min_us, spread.max_us) == (min(steps), max(steps))
    assert spread.ratio == spread.median_us / spread.documented_us
    # a documented step the caller already has is taken as given (no replay under rank)
    given = dispatch_spread(graph, cluster, assignment, ("fifo",), documented_us=1.0)
    assert given.documented_us == 1.0 and given.steps_us == (("fifo", steps[0]),)


def test_dispatch_spread_figures_by_hand() -> None:
    from celeritas_core.simulation.simulator import DispatchSpread

    spread = DispatchSpread(10.0, (("a", 12.0), ("b", 9.0), ("c", 11.0), ("d", 11.5)))
    assert (spread.median_us, spread.min_us, spread.max_us) == (11.25, 9.0, 12.0)
    assert spread.ratio == pytest.approx(1.125)
    assert DispatchSpread(0.0, (("a", 0.0),)).ratio == 1.0
    assert DispatchSpread(0.0, (("a", 1.0),)).ratio == float("inf")


def test_dispatch_spread_refuses_bad_or_no_names_before_replaying() -> None:
    from celeritas_core.simulation.simulator import dispatch_spread

    graph, cluster = graph_of([1.0], []), cluster_of(1)
    with pytest.raises(CeleritasInputError, match="unknown dispatch order 'lifo'"):
        dispatch_spread(graph, cluster, np.zeros(1, dtype=np.int64), ("fifo", "lifo"))
    with pytest.raises(CeleritasInputError, match="no dispatch orders"):
        dispatch_spread(graph, cluster, np.zeros(1, dtype=np.int64), ())


def test_on_one_device_every_order_gives_the_same_step() -> None:
    from celeritas_core.generators.synthetic import small_training_graph
    from celeritas_core.simulation.simulator import dispatch_spread

    graph = small_training_graph(3)
    for num_devices, device in ((1, 0), (3, 2)):  # a one-device cluster, and one device of three
        cluster = Cluster.homogeneous(num_devices, 2**40)
        spread = dispatch_spread(graph, cluster, np.full(graph.num_nodes, device, dtype=np.int64))
        assert spread.documented_us == pytest.approx(graph.total_time_us, rel=1e-12)
        for _, step in spread.steps_us:  # the same up to the rounding of adding in another order
            assert step == pytest.approx(spread.documented_us, rel=1e-12)
        assert spread.ratio == pytest.approx(1.0, rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(placed_dags())
def test_one_device_step_is_the_same_under_every_order_on_random_dags(
        case: tuple[Graph, Cluster, np.ndarray]) -> None:
    from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH

    g, c, a = case
    one = np.full_like(a, a[0])
    rank = simulate(g, c, one).step_time_us
    for name in ALTERNATIVE_DISPATCH:
        assert simulate(g, c, one, dispatch=name).step_time_us == pytest.approx(rank, rel=1e-12, abs=1e-9)


def test_evaluate_placement_replays_under_the_given_order() -> None:
    from celeritas_core.placers import evaluate_placement, place

    graph, cluster, _ = _heft_case()
    placed = place(graph, cluster, "heft", evaluate=False)
    for name in ("rank", "random:2"):
        evaluated = evaluate_placement(graph, cluster, placed, dispatch=name)
        step = simulate(graph, cluster, placed.assignment, dispatch=name).step_time_us
        assert evaluated.predicted_step_time_us == step
    assert evaluate_placement(graph, cluster, placed).predicted_step_time_us == \
        simulate(graph, cluster, placed.assignment).step_time_us
