"""Placers on clusters with a link topology: a chain that must split once lands inside an island
(devices numbered across the islands, so index order alone would cross), the block → device
mapping puts heavy cuts on fast links, list schedules time transfers on their pair's link and
ports, the MILP stays a lower bound, topologies are recorded, and flat clusters take none of the
new paths."""

from __future__ import annotations

import numpy as np
import pytest

from celeritas_core.generators.families import benchmark_instances
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import edge_comm_us, fastest_link, planning_comm_us
from celeritas_core.graphs.topology import Link, NodeSpec, build_topology, parse_preset
from celeritas_core.placers import place
from celeritas_core.placers.compare import compare_placers
from celeritas_core.placers.etf import list_schedule
from celeritas_core.placers.metis import hierarchical_partition, unit_graph
from celeritas_core.placers.partition import (
    device_classes,
    device_permutation,
    interchangeable_groups,
    map_to_topology,
    mapping_cost,
    transfer_traffic,
)
from celeritas_core.placers.stages import StagePlan, pipeline_sequences, split, stage_devices
from celeritas_core.readwrite.formats import placement_to_json
from celeritas_core.simulation.simulator import simulate

FAST = Link("fast", 1e-6, 1.0)  # 1 MB: 2 µs
SLOW = Link("slow", 1e-4, 50.0)  # 1 MB: 150 µs


def two_islands(memory: float, *, interleaved: bool = True, speed: list[float] | None = None) -> Cluster:
    """Four devices in two islands of one node, fast inside an island and slow between (the host
    link); ``interleaved``: island A is gpu:0 and gpu:2, so index order alone crosses islands."""
    names = [f"gpu:{i}" for i in range(4)]
    islands = (("gpu:0", "gpu:2"), ("gpu:1", "gpu:3")) if interleaved else (("gpu:0", "gpu:1"),
                                                                             ("gpu:2", "gpu:3"))
    topology = build_topology(names, [FAST, SLOW], [NodeSpec("n0", islands, "fast", "slow")])
    return Cluster.build(names, [memory] * 4, speed).with_topology(topology)


def chain(n: int = 8, nbytes: float = 1e6) -> Graph:
    """``n`` ops in a row, 10 µs and 100 bytes each, ``nbytes`` between neighbours."""
    return Graph.from_arrays(name="chain", node_names=[f"op{i}" for i in range(n)], time_us=[10.0] * n,
                             memory_bytes=[100] * n, edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
                             edge_bytes=[nbytes] * (n - 1))


# ---------------------------------------------------------------------------- the case worked by hand
#: The placers that see the links and may use two devices (metis always cuts into one part per
#: device: its test is below; the optimal MILP prices every pair at the fastest link, and
#: Order-Place, m-TOPO and single fill devices in index order without looking at transfers).
AWARE = (("celeritas", {}), ("celeritas", {"refine": False}), ("stages", {}),
         ("m-etf", {"fusion": False}), ("m-sct", {"fusion": False}), ("heft", {}))


@pytest.mark.parametrize(("placer", "params"), AWARE, ids=lambda x: str(x))
def test_a_chain_that_must_split_once_cuts_inside_an_island(placer: str, params: dict) -> None:
    graph, cluster = chain(), two_islands(450.0)  # 800 bytes of ops, 400 fit a device: two devices
    p = place(graph, cluster, placer, params)
    used = np.unique(p.assignment)
    assert not p.oom and len(used) == 2
    assert len(set(cluster.topology.island_of[used].tolist())) == 1, (placer, used)
    crossing = simulate(graph, cluster, p.assignment).transfers
    assert len(crossing) == 1 and crossing.duration_us[0] == pytest.approx(FAST.time_us(1e6))


def test_the_topology_blind_placer_crosses_islands_on_the_same_case() -> None:
    """The case is not trivial: run on the flat (mean-link) cluster, Celeritas takes gpu:0 and gpu:1,
    which lie in different islands, and its replay on the true topology is slower."""
    graph, cluster = chain(), two_islands(450.0)
    blind = place(graph, cluster.flat(), "celeritas").assignment
    aware = place(graph, cluster, "celeritas").assignment
    assert len(set(cluster.topology.island_of[np.unique(blind)].tolist())) == 2
    assert simulate(graph, cluster, aware).step_time_us < simulate(graph, cluster, blind).step_time_us


# ---------------------------------------------------------------------------- the block → device mapping
def test_the_mapping_puts_the_heavy_cut_on_the_fast_link() -> None:
    cluster = two_islands(1e9)  # islands {0, 2} and {1, 3}
    nbytes = np.zeros((4, 4))
    nbytes[0, 1] = nbytes[2, 3] = 1e9  # heavy, but 0-1 and 2-3 cross islands
    nbytes[0, 2] = 1e3  # light, inside an island
    count = (nbytes > 0).astype(float)
    perm = device_permutation(nbytes, count, cluster.pair_slope_us_per_byte, cluster.pair_intercept_us,
                              device_classes(cluster.memory_bytes, cluster.speed))
    island = cluster.topology.island_of
    assert island[perm[0]] == island[perm[1]] and island[perm[2]] == island[perm[3]]
    assert sorted(perm.tolist()) == [0, 1, 2, 3]
    before = mapping_cost(nbytes, count, cluster.pair_slope_us_per_byte, cluster.pair_intercept_us,
                          np.arange(4)[None, :])[0]
    after = mapping_cost(nbytes, count, cluster.pair_slope_us_per_byte, cluster.pair_intercept_us,
                         perm[None, :])[0]
    assert after < before / 50


def test_the_mapping_keeps_blocks_on_devices_of_their_memory_and_speed() -> None:
    """Devices of a different class are never swapped, however much faster the link would be."""
    cluster = two_islands(1e9, speed=[2.0, 1.0, 1.0, 1.0])  # gpu:0 alone in its class
    nbytes = np.zeros((4, 4))
    nbytes[0, 1] = 1e9
    perm = device_permutation(nbytes, (nbytes > 0).astype(float), cluster.pair_slope_us_per_byte,
                              cluster.pair_intercept_us, device_classes(cluster.memory_bytes, cluster.speed))
    assert perm[0] == 0 and cluster.topology.island_of[perm[1]] == cluster.topology.island_of[0]


def test_the_mapping_is_exact_on_small_clusters_and_never_worse_than_the_identity_on_large_ones() -> None:
    rng = np.random.default_rng(0)
    for preset in ("1x2x2:nvlink,pcie", "2x4:nvlink,ib", "2x8:nvlink,ib"):
        cluster = Cluster.homogeneous(parse_preset(preset).num_devices, 1e9)
        cluster = cluster.with_topology(parse_preset(preset).topology(cluster.device_names))
        n = cluster.num_devices
        nbytes = rng.random((n, n)) * (rng.random((n, n)) < 0.3) * 1e8
        np.fill_diagonal(nbytes, 0.0)
        count = (nbytes > 0).astype(float)
        k, b = cluster.pair_slope_us_per_byte, cluster.pair_intercept_us
        perm = device_permutation(nbytes, count, k, b, np.zeros(n, dtype=np.int64))
        cost = mapping_cost(nbytes, count, k, b, perm[None, :])[0]
        assert sorted(perm.tolist()) == list(range(n))
        assert cost <= mapping_cost(nbytes, count, k, b, np.arange(n)[None, :])[0]
        if n <= 4:  # against every permutation
            import itertools
            every = np.array(list(itertools.permutations(range(n))))
            assert cost == pytest.approx(mapping_cost(nbytes, count, k, b, every).min())


def test_the_exact_mapping_counts_interchangeable_devices_once_and_loses_nothing() -> None:
    """2 nodes of 4: 70 distinct mappings stand for the 8! permutations and reach their optimum;
    a per-pair override makes its two devices distinct from their node's others."""
    import itertools

    names = [f"gpu:{i}" for i in range(8)]
    nodes = [NodeSpec(f"n{j}", (tuple(names[4 * j:4 * j + 4]),), "fast") for j in range(2)]
    plain = build_topology(names, [FAST, SLOW], nodes, network="slow")
    odd = build_topology(names, [FAST, SLOW, Link("mid", 1e-5, 5.0)], nodes, network="slow",
                         pairs=[("gpu:0", "gpu:1", "mid")])
    every = np.array(list(itertools.permutations(range(8))))
    rng = np.random.default_rng(3)
    for topology, groups in ((plain, [0, 0, 0, 0, 1, 1, 1, 1]), (odd, None)):
        cluster = Cluster.homogeneous(8, 1e9).with_topology(topology)
        k, b = cluster.pair_slope_us_per_byte, cluster.pair_intercept_us
        group = interchangeable_groups(k, b, np.zeros(8, dtype=np.int64))
        if groups is not None:
            assert group.tolist() == groups
        else:  # gpu:0 and gpu:1 swap with each other, not with gpu:2 or gpu:3
            assert group[0] == group[1] != group[2] == group[3] != group[4]
        for _ in range(3):
            nbytes = rng.random((8, 8)) * (rng.random((8, 8)) < 0.4) * 1e8
            np.fill_diagonal(nbytes, 0.0)
            count = (nbytes > 0).astype(float)
            perm = device_permutation(nbytes, count, k, b, np.zeros(8, dtype=np.int64))
            assert sorted(perm.tolist()) == list(range(8))
            cost = mapping_cost(nbytes, count, k, b, perm[None, :])[0]
            assert cost == pytest.approx(mapping_cost(nbytes, count, k, b, every).min())


def test_a_topology_where_every_pair_costs_the_same_keeps_the_placement() -> None:
    graph = chain()
    cluster = Cluster.homogeneous(4, 450.0)
    uniform = cluster.with_topology(build_topology(cluster.device_names, [FAST], [NodeSpec(
        "n0", (tuple(cluster.device_names),), "fast")]))
    assignment = np.repeat(np.arange(4), 2)
    assert map_to_topology(graph, uniform, assignment).tolist() == assignment.tolist()


def test_traffic_counts_one_transfer_per_tensor_and_destination_device() -> None:
    graph = Graph.from_arrays(name="fan", node_names=["a", "b", "c"], time_us=[1.0] * 3, memory_bytes=[1] * 3,
                              edge_src=[0, 0], edge_dst=[1, 2], edge_bytes=[500.0, 800.0])
    nbytes, count = transfer_traffic(graph, np.array([0, 1, 1]), 2)
    assert nbytes.tolist() == [[0.0, 800.0], [0.0, 0.0]] and count.tolist() == [[0.0, 1.0], [0.0, 0.0]]
    result = simulate(graph, Cluster.homogeneous(2, 1e9), np.array([0, 1, 1])).transfers
    assert len(result) == 1 and result.bytes[0] == 800.0


def test_metis_parts_are_remapped_so_the_heavy_cut_stays_in_an_island() -> None:
    pytest.importorskip("pymetis")
    graph, cluster = chain(16), two_islands(1e9)
    p = place(graph, cluster, "metis")
    transfers = simulate(graph, cluster, p.assignment).transfers
    island = cluster.topology.island_of
    crossing = island[transfers.src_device] != island[transfers.dst_device]
    assert int(crossing.sum()) == 1  # four chain parts over two islands: the one cut that must be


def test_hierarchical_partition_cuts_the_slow_level_once() -> None:
    pytest.importorskip("pymetis")
    graph = chain(32)
    cluster = Cluster.homogeneous(8, 1e9)
    cluster = cluster.with_topology(parse_preset("2x4:nvlink,ib").topology(cluster.device_names))
    units = unit_graph(graph)
    device = hierarchical_partition(units, cluster, np.arange(8))[units.unit_of]
    node = cluster.topology.node_of[device]
    assert int(np.count_nonzero(node[1:] != node[:-1])) == 1 and len(np.unique(device)) == 8


# ---------------------------------------------------------------------------- stages
def test_stages_follow_the_hierarchy_and_price_each_cut_on_its_link() -> None:
    cluster = two_islands(1e9)
    assert stage_devices(cluster, 2).tolist() == [0, 2] and stage_devices(cluster, 4).tolist() == [0, 2, 1, 3]
    assert stage_devices(cluster.flat(), 2).tolist() == [0, 1]
    graph = chain(8)
    plan = StagePlan.build(graph, cluster, pipeline_sequences(graph)[-1])
    devices = stage_devices(cluster, 4)
    cost = plan.stage_costs(devices)
    assert cost.shape == (4, plan.seq.num_units + 1)
    assert cost[2, 3] == pytest.approx(SLOW.time_us(1e6)) and cost[1, 3] == pytest.approx(FAST.time_us(1e6))
    flat_plan = StagePlan.build(graph, cluster.flat(), pipeline_sequences(graph)[-1])
    assert flat_plan.traffic is None and flat_plan.stage_costs(devices) is flat_plan.cost


def test_split_takes_per_stage_costs_and_one_row_the_same_as_before() -> None:
    ends = np.array([[4, 4, 4, 4]] * 2)
    cost = np.array([0.0, 5.0, 1.0, 2.0, 0.0])
    assert split(ends, cost).tolist() == split(ends, np.stack([cost, cost])).tolist() == [2]
    per_stage = np.stack([np.zeros(5), [0.0, 5.0, 9.0, 2.0, 0.0]])
    assert split(ends, per_stage).tolist() == [3]


# ---------------------------------------------------------------------------- list schedules and levels
def test_m_etf_times_a_chain_on_its_links_as_the_replay_does() -> None:
    graph, cluster = chain(), two_islands(450.0)
    result = list_schedule(graph, cluster)
    replay = simulate(graph, cluster, result.assignment)
    assert result.makespan_us == pytest.approx(replay.step_time_us)
    assert result.makespan_us == pytest.approx(80.0 + FAST.time_us(1e6))


def test_m_etf_waits_for_the_shared_network_port_like_the_simulator() -> None:
    """Two producers on node 0 each feed a consumer pinned to node 1 (memory): the second transfer
    waits for node 0's port, in the schedule as in the replay."""
    names = [f"gpu:{i}" for i in range(4)]
    cluster = Cluster.build(names, [300.0, 300.0, 1000.0, 1000.0]).with_topology(
        parse_preset("2x2:nvlink,ib").topology(names))
    graph = Graph.from_arrays(name="pair", node_names=["a", "b", "x", "y"], time_us=[10.0, 10.0, 1.0, 1.0],
                              memory_bytes=[250, 250, 900, 900], edge_src=[0, 1], edge_dst=[2, 3],
                              edge_bytes=[1e7, 1e7])
    result = list_schedule(graph, cluster)
    replay = simulate(graph, cluster, result.assignment)
    assert result.makespan_us == pytest.approx(replay.step_time_us)
    network = Link.preset("ib").time_us(1e7)
    assert result.makespan_us == pytest.approx(10.0 + 2 * network + 1.0)


def test_fusion_prices_potential_cuts_on_the_fastest_link_and_flat_clusters_as_before() -> None:
    graph = chain()
    cluster = two_islands(1e9)
    assert fastest_link(cluster) == (FAST.slope_us_per_byte, FAST.intercept_us)
    assert planning_comm_us(graph, cluster) == pytest.approx(FAST.time_us(graph.edge_bytes))
    flat = cluster.flat()
    assert fastest_link(flat) == (flat.slope_us_per_byte, flat.intercept_us)
    assert planning_comm_us(graph, flat).tolist() == edge_comm_us(graph, flat).tolist()


# ---------------------------------------------------------------------------- the MILP and the records
def test_the_milp_on_a_topology_warns_and_stays_a_lower_bound() -> None:
    graph, cluster = chain(6), two_islands(350.0)
    opt = place(graph, cluster, "optimal", {"channels": 1, "time_limit": 20})
    assert "fastest link" in opt.extra["warning"] and "fastest link" in opt.extra["milp_model"]
    bound = opt.extra["milp_bound_us"]
    for placer in ("celeritas", "metis", "m-etf", "heft", "stages"):
        p = place(graph, cluster, placer)
        if not p.oom:
            assert bound <= p.predicted_step_time_us * (1 + 1e-9), placer
    assert "warning" not in place(graph, cluster.flat(), "optimal", {"time_limit": 20}).extra


def test_placement_and_compare_documents_record_the_topology() -> None:
    graph, cluster = chain(), two_islands(450.0)
    p = place(graph, cluster, "m-topo")
    line = cluster.topology.describe()
    assert p.evaluation.topology == line and placement_to_json(p)["extra"]["topology"] == line
    assert "topology" not in placement_to_json(place(graph, cluster.flat(), "m-topo"))["extra"]
    doc = compare_placers(graph, cluster, ["m-topo", "single"]).to_json()
    assert doc["topology"] == line
    assert "topology" not in compare_placers(graph, cluster.flat(), ["m-topo"]).to_json()


# ---------------------------------------------------------------------------- the celeritas placer's budget
def _live_step_on(preset: str | None, node_share: float, devices: int = 8) -> tuple[Graph, Cluster]:
    """The family-a live training step on ``devices`` devices holding ``node_share`` of its
    one-device peak per four devices, on ``preset``'s topology (flat when None)."""
    from celeritas_core.simulation.memory import one_device_peak_bytes

    graph = next(i.graph for i in benchmark_instances("a", quick=True) if i.variant == "live")
    cluster = Cluster.homogeneous(devices, node_share * one_device_peak_bytes(graph) / 4)
    if preset is not None:
        cluster = cluster.with_topology(parse_preset(preset).topology(cluster.device_names))
    return graph, cluster


def test_stage_estimates_on_a_topology_use_its_table_and_grow_with_devices_for_list_schedules() -> None:
    from celeritas_core.placers.portfolio import (
        STAGE_US_PER_ITEM,
        TOPOLOGY_STAGE_US_PER_ITEM,
        stage_estimate_us,
    )

    graph = chain()
    items = graph.num_nodes + graph.num_edges
    flat = Cluster.homogeneous(32, 1e9)
    big = flat.with_topology(parse_preset("4x8:nvlink,ib").topology(flat.device_names))
    small = two_islands(1e9)
    for stage in ("etf", "sct", "stages", "multilevel"):
        assert stage_estimate_us(graph, stage) == STAGE_US_PER_ITEM[stage] * items
        assert stage_estimate_us(graph, stage, flat) == STAGE_US_PER_ITEM[stage] * items
        assert stage_estimate_us(graph, stage, small) == TOPOLOGY_STAGE_US_PER_ITEM[stage] * items
    assert stage_estimate_us(graph, "etf", big) == 2 * TOPOLOGY_STAGE_US_PER_ITEM["etf"] * items  # 32 of 16
    assert stage_estimate_us(graph, "stages", big) == TOPOLOGY_STAGE_US_PER_ITEM["stages"] * items


def test_on_a_topology_the_stage_splits_the_estimate_admits_come_first_nearest_the_fewest() -> None:
    from celeritas_core.placers.local_search import CandidatePool
    from celeritas_core.placers.stages import stage_candidates

    graph, cluster = _live_step_on("2x8:nvlink,ib", 0.75, devices=16)
    for nearest in (False, True):
        _, _, rest = stage_candidates(graph, cluster, CandidatePool(graph, cluster), nearest_first=nearest)
        for order in ("paired", "topo"):
            ks = [int(name.split("/")[2]) for name, _ in rest if name.split("/")[1] == order]
            assert ks, order
            if not nearest:
                assert ks == sorted(ks)
                continue
            turn = next((i for i in range(1, len(ks)) if ks[i] < ks[i - 1]), len(ks))
            above, below = ks[:turn], ks[turn:]
            assert above == sorted(above) and below == sorted(below, reverse=True), ks
            assert not below or not above or below[0] < above[0]


def test_on_a_topology_a_faster_candidate_that_overflows_is_repaired_within_the_work_budget() -> None:
    """When a candidate fits and a faster one overflows, the optional repair (a quarter of the work
    budget) runs on a topology cluster; a flat cluster keeps today's behaviour (no such stage)."""
    graph, cluster = _live_step_on("2x4:nvlink,ib", 1.5)
    p = place(graph, cluster, "celeritas")
    assert "memory repair" in p.extra["stages"]["ran"]
    report = p.extra["memory_repair"]
    assert report["starts"] >= 1 and report["replays"] >= 1
    assert not p.oom and "+repair" in p.extra["chosen"]
    flat = place(graph, cluster.flat(), "celeritas")
    assert "memory repair" not in flat.extra["stages"]["ran"] + flat.extra["stages"]["skipped_for_work"]
    starved = place(graph, cluster, "celeritas", {"work_seconds": 0.0})  # its share pays for no replay
    assert "memory repair" not in starved.extra["stages"]["ran"] and "memory_repair" not in starved.extra


def test_on_a_topology_the_hierarchical_partitions_cover_every_device_count_the_budget_admits() -> None:
    graph, cluster = _live_step_on("2x4:nvlink,ib", 1.5)
    p = place(graph, cluster, "celeritas", {"work_seconds": 100.0})
    counts = {int(name.split("/")[1].split("+")[0]) for name in p.extra["candidates"]
              if name.startswith("hierarchical/")}
    assert len(counts) > 2 and cluster.num_devices in counts


def test_traffic_by_link_counts_the_replays_transfers_on_each_kind_of_link() -> None:
    from celeritas_core.placers.partition import traffic_by_link

    graph, cluster = _live_step_on("2x4:nvlink,ib", 1.5)
    assignment = place(graph, cluster, "metis").assignment
    transfers = simulate(graph, cluster, assignment).transfers
    link = cluster.topology.pair_link()[transfers.src_device, transfers.dst_device]
    rows = traffic_by_link(graph, cluster, assignment)
    assert [name for name, _, _ in rows] == ["ib-ndr", "nvlink4"]  # the slowest first
    for name, count, nbytes in rows:
        index = [x.name for x in cluster.topology.links].index(name)
        on = link == index
        assert count == int(on.sum()) and nbytes == pytest.approx(transfers.bytes[on].sum())
    flat = traffic_by_link(graph, cluster.flat(), assignment)
    assert flat == [("", len(transfers), pytest.approx(float(transfers.bytes.sum())))]
    assert traffic_by_link(graph, cluster, np.zeros(graph.num_nodes, dtype=np.int64)) == []


def test_the_refinement_along_the_links_takes_the_heavy_tensors_off_the_network() -> None:
    """op0 -> op1 and op2 -> op3 carry 1 MB, op1 -> op2 one byte; the start puts both heavy
    tensors across nodes. Refined with the nodes as parts first, nothing crosses the network."""
    from celeritas_core.placers.local_search import CandidatePool
    from celeritas_core.placers.partition import traffic_by_link
    from celeritas_core.placers.refinement import OpNets, refine_along_links

    graph = Graph.from_arrays(name="pairs", node_names=[f"op{i}" for i in range(4)], time_us=[10.0] * 4,
                              memory_bytes=[100] * 4, edge_src=[0, 1, 2], edge_dst=[1, 2, 3],
                              edge_bytes=[1e6, 1.0, 1e6])
    flat = Cluster.homogeneous(4, 250.0)  # two ops per device: one node holds them all
    cluster = flat.with_topology(parse_preset("2x2:nvlink,ib").topology(flat.device_names))
    pool = CandidatePool(graph, cluster)
    start = pool.add("crossed", np.array([0, 2, 1, 3]))
    refine_along_links(graph, cluster, pool, OpNets.build(graph, np.arange(4), cluster))
    refined = next(c for c in pool.candidates if c.name == "crossed+links")
    network = {name: nbytes for name, _, nbytes in traffic_by_link(graph, cluster, refined.assignment)}
    assert "ib-ndr" not in network and refined.fits
    assert refined.step_time_us < start.step_time_us
    alone = CandidatePool(graph, flat)  # nothing on a flat cluster
    alone.add("crossed", np.array([0, 2, 1, 3]))
    refine_along_links(graph, flat, alone, OpNets.build(graph, np.arange(4), flat))
    assert [c.name for c in alone.candidates] == ["crossed"]


def test_on_a_flat_cluster_the_mapping_returns_the_assignment_itself() -> None:
    inst = benchmark_instances("a", quick=True)[0]
    assignment = place(inst.graph, inst.cluster, "metis").assignment
    assert inst.cluster.is_flat and map_to_topology(inst.graph, inst.cluster, assignment) is assignment


# ---------------------------------------------------------------------------- the benchmark
def test_bench_topology_quick_runs_and_reports_both_targets(tmp_path) -> None:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "topology.json"
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, str(root / "bench" / "bench_topology.py"), "--quick", "--real-dir",
                           str(tmp_path), "--out", str(out)], capture_output=True, text=True, check=False,
                          cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert sum(1 for line in lines if line.startswith(("PASS ", "MISS "))) == 6
    assert any("topology-aware never slower than blind under the other dispatch" in line for line in lines)
    assert any("placement seconds on a topology" in line for line in lines)
    enforced = "PASS every placement's replay with its recorded order enforced"
    assert any(line.startswith(enforced) for line in lines)
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 4 and {r["setup"] for r in doc["rows"]} == {"2x4/tight", "mixed/topo"}
    for row in doc["rows"]:
        assert row["topology"].startswith("2 nodes x 4 devices") and "blind" in row
        assert row["cross_node"] == (row["cross_node_forced"] or row["fastest_uses_both_nodes"])
        cel, blind = row["placers"]["celeritas"], row["blind"]
        if cel["fits"] and blind["fits"]:
            assert row["blind_vs_aware"] == pytest.approx(blind["step_time_us"] / cel["step_time_us"])


def test_celeritas_on_a_topology_is_never_robustly_slower_than_its_blind_candidate() -> None:
    from celeritas_core.generators.layers import layer_training_graph
    from celeritas_core.placers.local_search import robust_step_us
    from celeritas_core.simulation.memory import one_device_peak_bytes
    from celeritas_core.simulation.simulator import simulate

    graph = layer_training_graph("inception", size=2, liveness=True)
    cluster = Cluster.homogeneous(8, 0.5 * one_device_peak_bytes(graph))
    cluster = cluster.with_topology(parse_preset("2x2x2:nvlink,pcie,ib").topology(cluster.device_names))
    placement = place(graph, cluster, "celeritas")
    assert placement.extra["blind"]["chosen"]  # the blind run happened and is reported
    assert "blind" in placement.extra["candidates"]
    blind = place(graph, cluster.flat(), "celeritas", {"search_budget": 0, "work_seconds": 0}).assignment

    def robust(assignment: np.ndarray) -> float:
        return robust_step_us(graph, cluster, assignment, simulate(graph, cluster, assignment))

    assert not placement.oom
    assert robust(placement.assignment) <= robust(blind) * (1 + 1e-9)
