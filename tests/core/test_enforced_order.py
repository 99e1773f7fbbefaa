"""The enforced execution order: recorded by every placement, replayed bit for bit, refused when bad."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from celeritas_core.generators.families import benchmark_instances, layered_dag
from celeritas_core.generators.synthetic import small_training_graph
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.topology import parse_preset
from celeritas_core.placers import evaluate_placement, place
from celeritas_core.readwrite.formats import (
    load_placement,
    placement_from_json,
    placement_to_json,
    save_cluster,
    save_graph,
    save_placement,
)
from celeritas_core.simulation.simulator import dispatch_spread, order_indices, recorded_order, simulate


def _chain_graph() -> Graph:
    """a -> b, a -> c, b -> d, c -> d (a diamond) and a lone e."""
    return Graph.from_arrays(name="diamond", node_names=["a", "b", "c", "d", "e"],
                             time_us=[10.0, 50.0, 40.0, 10.0, 5.0], memory_bytes=[1, 1, 1, 1, 1],
                             edge_src=[0, 0, 1, 2], edge_dst=[1, 2, 3, 3], edge_bytes=[1e3] * 4)


def _assert_same_replay(graph: Graph, cluster: Cluster, assignment: np.ndarray,
                        dispatch: str = "rank") -> None:
    free = simulate(graph, cluster, assignment, dispatch=dispatch)
    order = recorded_order(free, assignment, cluster.num_devices)
    enforced = simulate(graph, cluster, assignment, dispatch=dispatch, device_order=order)
    assert enforced.step_time_us == free.step_time_us
    np.testing.assert_array_equal(enforced.start_us, free.start_us)
    np.testing.assert_array_equal(enforced.finish_us, free.finish_us)
    np.testing.assert_array_equal(enforced.transfers.end_us, free.transfers.end_us)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), devices=st.integers(1, 5),
       dispatch=st.sampled_from(["rank", "fifo", "random:7"]))
def test_enforcing_the_recorded_order_replays_the_same_schedule_bit_for_bit(seed, devices, dispatch):
    graph = layered_dag(tasks=40 + seed % 60, ccr=0.2 + (seed % 7) / 2, seed=seed)
    rng = np.random.default_rng(seed)
    assignment = rng.integers(0, devices, graph.num_nodes)
    _assert_same_replay(graph, Cluster.homogeneous(devices, 2**40), assignment, dispatch)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), devices=st.integers(2, 4), zero_share=st.floats(0.3, 0.9))
def test_ops_that_start_together_are_recorded_in_the_order_they_ran(seed, devices, zero_share):
    """Zero-duration ops (shapes, constants: most ops of a real step) start at one instant on one
    device; the recorded order must be the order they ran in, not their index order."""
    base = layered_dag(tasks=60 + seed % 40, ccr=1.0, seed=seed)
    rng = np.random.default_rng(seed)
    times = np.where(rng.random(base.num_nodes) < zero_share, 0.0, base.time_us)
    names = [f"op{i}" for i in range(base.num_nodes)][::-1]  # index order unlike the dispatch order
    graph = Graph.from_arrays(name="zeros", node_names=names, time_us=times, memory_bytes=base.memory_bytes,
                              edge_src=base.edge_src, edge_dst=base.edge_dst, edge_bytes=base.edge_bytes)
    _assert_same_replay(graph, Cluster.homogeneous(devices, 2**40), rng.integers(0, devices, graph.num_nodes))


def test_same_replay_on_a_link_topology_and_for_every_placer():
    graph = small_training_graph(1)
    flat = Cluster.homogeneous(4, 2**40)
    linked = flat.with_topology(parse_preset("2x2:nvlink,ib").topology(flat.device_names))
    for cluster in (flat, linked):
        for placer in ("celeritas", "heft", "m-etf", "metis", "m-topo", "order-place"):
            placement = place(graph, cluster, placer)
            assert placement.order_mode == "enforced"
            enforced = simulate(graph, cluster, placement.assignment, device_order=placement.device_order)
            assert enforced.step_time_us == placement.predicted_step_time_us, placer


def test_bench_instances_keep_their_prediction_when_enforced():
    for instance in benchmark_instances("training", quick=True) + benchmark_instances("layered", quick=True):
        placement = place(instance.graph, instance.cluster, "celeritas")
        again = evaluate_placement(instance.graph, instance.cluster, placement)  # replays the recorded order
        assert again.predicted_step_time_us == placement.predicted_step_time_us, instance.name


def test_an_enforced_order_is_followed_whatever_the_dispatch():
    graph, cluster = small_training_graph(3), Cluster.homogeneous(3, 2**40)
    placement = place(graph, cluster, "heft")
    for name in ("fifo", "random:1", "random:2"):
        result = simulate(graph, cluster, placement.assignment, dispatch=name,
                          device_order=placement.device_order)
        for order in placement.device_order:
            assert (np.diff(result.start_us[order]) >= 0).all()
            assert (result.start_us[order[1:]] >= result.finish_us[order[:-1]]).all()
    spread = dispatch_spread(graph, cluster, placement.assignment, device_order=placement.device_order)
    assert spread.documented_us == placement.predicted_step_time_us


def test_another_valid_order_gives_its_own_step():
    graph = _chain_graph()
    cluster = Cluster.homogeneous(1, 2**40)
    zero = np.zeros(5, dtype=int)
    late = simulate(graph, cluster, zero, device_order=[np.array([0, 1, 2, 3, 4])])
    early = simulate(graph, cluster, zero, device_order=[np.array([4, 0, 2, 1, 3])])
    assert late.start_us[4] == 110.0 and early.start_us[4] == 0.0
    assert late.step_time_us == early.step_time_us == 115.0


@pytest.mark.parametrize(("order", "message"), [
    ([[0, 1, 1, 3], [2, 4]], "device_order: op 'c' is listed on device 1, assigned to 0"),
    ([[0, 1, 2], [4]], "device_order: op 'd' is not listed (1 ops missing)"),
    ([[0, 1, 2, 3, 1], [4]], "device_order: op 'b' is listed twice"),
    ([[0, 1, 2, 3, 9], [4]], "device_order[0] names node index 9, but graph 'diamond' has 5 nodes"),
])
def test_bad_orders_are_refused_in_one_line(order, message):
    graph = _chain_graph()
    assignment = np.array([0, 0, 0, 0, 1])
    with pytest.raises(CeleritasInputError) as info:
        order_indices(graph, assignment, 2, [np.array(o) for o in order])
    assert str(info.value) == message


def test_an_order_against_the_dependencies_deadlocks_and_names_the_ops():
    graph = _chain_graph()
    one = Cluster.homogeneous(1, 2**40)
    with pytest.raises(CeleritasInputError, match=r"^device_order contradicts the graph's dependencies: "
                                                  r"device 0 runs 'b' before its input 'a'$"):
        simulate(graph, one, np.zeros(5, dtype=int), device_order=[np.array([1, 0, 2, 3, 4])])
    two = Cluster.homogeneous(2, 2**40)
    # device 0 runs d before a; c (device 1) needs a; d needs c: a cycle through both devices
    with pytest.raises(CeleritasInputError, match="device_order contradicts the graph's dependencies"):
        simulate(graph, two, np.array([0, 0, 1, 0, 1]), device_order=[np.array([3, 0, 1]), np.array([2, 4])])


# ---------------------------------------------------------------------------- files
def test_the_file_records_the_order_by_name_and_reads_it_back(tmp_path):
    graph, cluster = small_training_graph(0), Cluster.homogeneous(3, 2**40)
    placement = place(graph, cluster, "heft")
    path = save_placement(placement, tmp_path / "p.json")
    doc = json.loads(path.read_text())
    assert doc["order_mode"] == "enforced"
    assert sorted(op for ops in doc["device_order"] for op in ops) == sorted(graph.node_names)
    back = load_placement(path, graph, cluster)
    assert back.order_mode == "enforced"
    for mine, theirs in zip(placement.device_order, back.device_order, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert evaluate_placement(graph, cluster, back).predicted_step_time_us == placement.predicted_step_time_us


def test_a_file_without_an_order_reads_as_free_and_gets_one_recorded():
    graph, cluster = small_training_graph(0), Cluster.homogeneous(2, 2**40)
    doc = placement_to_json(place(graph, cluster, "m-topo"))
    del doc["device_order"], doc["order_mode"]
    old = placement_from_json(doc, graph, cluster)
    assert old.order_mode == "free" and old.device_order is None
    evaluated = evaluate_placement(graph, cluster, old)
    assert evaluated.device_order is not None and evaluated.enforced_order is None


def test_a_free_placement_is_replayed_under_the_dispatch_order():
    graph, cluster = small_training_graph(3), Cluster.homogeneous(3, 2**40)
    placement = place(graph, cluster, "heft", order_mode="free")
    assert placement.enforced_order is None
    fifo = evaluate_placement(graph, cluster, placement, dispatch="fifo")
    assert fifo.predicted_step_time_us == simulate(graph, cluster, placement.assignment,
                                                   dispatch="fifo").step_time_us
    enforced = evaluate_placement(graph, cluster, replace(placement, order_mode="enforced"), dispatch="fifo")
    assert enforced.predicted_step_time_us == simulate(graph, cluster, placement.assignment, dispatch="fifo",
                                                       device_order=placement.device_order).step_time_us


@pytest.mark.parametrize(("change", "message"), [
    ({"device_order": [["a"]]}, "field 'device_order' has 1 entries for 2 devices"),
    ({"device_order": "a,b"}, "field 'device_order' must be an array of arrays of op names"),
    ({"device_order": [["a", 3], []]}, "field 'device_order[0]' must be an array of op names"),
    ({"device_order": [["a", "zz"], []]}, "device_order: op 'zz' is not in graph 'diamond'"),
    ({"order_mode": "sorted"}, "field 'order_mode' must be one of enforced, free, got 'sorted'"),
    ({"devices": ["g", "g"]}, "field 'devices': device 'g' is listed twice"),
    ({"devices": ["g", " "]}, "field 'devices[1]' must be a non-empty device name"),
    ({"device_capacity_bytes": ["1GiB", 5]}, "field 'device_capacity_bytes[0]' must be a number of bytes"),
    ({"device_capacity_bytes": [-1, 5]}, "field 'device_capacity_bytes[0]' must be a number of bytes"),
    ({"device_capacity_bytes": [None, 5]}, "field 'device_capacity_bytes[0]' must be a number of bytes"),
    ({"device_capacity_bytes": [[1], 5]}, "field 'device_capacity_bytes[0]' must be a number of bytes"),
    ({"device_capacity_bytes": [True, 5]}, "field 'device_capacity_bytes[0]' must be a number of bytes"),
    ({"device_capacity_bytes": [{"a": 1}, 5]}, "field 'device_capacity_bytes[0]' must be a number of bytes"),
    ({"device_capacity_bytes": [5]}, "field 'device_capacity_bytes' must be an array of 2 byte counts"),
])
def test_bad_order_devices_and_capacity_fields_are_refused(change, message):
    graph = _chain_graph()
    doc = placement_to_json(place(graph, Cluster.homogeneous(2, 2**40), "m-topo"))
    doc.update(change)
    with pytest.raises(CeleritasInputError) as info:
        placement_from_json(doc, graph, Cluster.homogeneous(2, 2**40))
    assert str(info.value).startswith(message)


# ---------------------------------------------------------------------------- CLI
@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    graph, cluster = small_training_graph(3), Cluster.homogeneous(3, 2**40)
    paths = tmp_path / "step.json", tmp_path / "c.json", tmp_path / "p.json"
    save_graph(graph, paths[0])
    save_cluster(cluster, paths[1])
    save_placement(place(graph, cluster, "heft"), paths[2])
    return paths


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_replays_in_the_placement_mode_or_the_flag(files, capsys):
    graph_path, cluster_path, placement_path = files
    doc = json.loads(placement_path.read_text())
    code, out, _ = _run(["simulate", str(graph_path), str(placement_path), "--cluster", str(cluster_path)],
                        capsys)
    assert code == 0 and "execution order            enforced" in out
    code, out, _ = _run(["simulate", str(graph_path), str(placement_path), "--cluster", str(cluster_path),
                         "--order", "free", "--dispatch", "fifo"], capsys)
    assert code == 0 and "execution order                free" in out
    assert doc["predicted_step_time_us"] is not None


def test_simulate_refuses_a_deadlocking_order_and_bad_devices_with_cluster_flags(files, tmp_path, capsys):
    graph_path, _, placement_path = files
    doc = json.loads(placement_path.read_text())
    busy = max(range(3), key=lambda d: len(doc["device_order"][d]))
    doc["device_order"][busy].reverse()
    bad = tmp_path / "reversed.json"
    bad.write_text(json.dumps(doc))
    flags = ["--devices", "3", "--device-memory", "1TiB"]
    code, out, err = _run(["simulate", str(graph_path), str(bad), *flags], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "device_order contradicts the graph's dependencies" in err and str(bad) in err
    code, _, err = _run(["simulate", str(graph_path), str(bad), "--order", "free", "--devices", "3",
                         "--device-memory", "1TiB"], capsys)
    assert code == 2 and "contradicts" in err, "the order is part of the file: checked in free mode too"
    doc = json.loads(placement_path.read_text())
    doc["devices"] = ["g", "g", "g"]
    bad.write_text(json.dumps(doc))
    code, _, err = _run(["simulate", str(graph_path), str(bad), "--devices", "3", "--device-memory", "1TiB"],
                        capsys)
    assert code == 2 and "device 'g' is listed twice" in err and "Traceback" not in err


def test_place_order_flag_is_recorded(files, tmp_path, capsys):
    graph_path, cluster_path, _ = files
    out_path = tmp_path / "free.json"
    code, _, _ = _run(["place", str(graph_path), "--cluster", str(cluster_path), "--placer", "m-topo",
                         "--order", "free", "--out", str(out_path)], capsys)
    assert code == 0 and json.loads(out_path.read_text())["order_mode"] == "free"
