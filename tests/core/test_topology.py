"""Link topologies: presets, the per-pair arrays, the celeritas-cluster/2 file (round trip and
one-line errors), the simulator's shared network ports on cases worked by hand, flat clusters
unchanged, and the lower bound below every replay on random topologies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from celeritas_cli.main import main
from celeritas_core.defaults import LINK_ALIASES, LINK_PRESETS
from celeritas_core.errors import CeleritasInputError
from celeritas_core.generators.families import benchmark_instances, layered_dag
from celeritas_core.generators.synthetic import training_step_graph
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.topology import Link, NodeSpec, build_topology, parse_preset
from celeritas_core.placers import place
from celeritas_core.readwrite.format_tags import CLUSTER_FORMAT, CLUSTER_FORMAT_V2
from celeritas_core.readwrite.formats import (
    cluster_from_json,
    cluster_to_json,
    load_cluster,
    load_graph,
    save_cluster,
)
from celeritas_core.simulation.bounds import lower_bound_us
from celeritas_core.simulation.simulator import simulate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "graphs" / "training_step_small.json"


def preset_cluster(text: str, memory: float = 1e12, speed: list[float] | None = None) -> Cluster:
    preset = parse_preset(text)
    num = preset.num_devices
    flat = Cluster.build([f"gpu:{i}" for i in range(num)], [memory] * num, speed)
    return flat.with_topology(preset.topology(flat.device_names))


# ---------------------------------------------------------------------------- presets
def test_preset_links_are_the_table_with_k_one_over_the_bandwidth() -> None:
    for name, (gb_per_s, latency) in LINK_PRESETS.items():
        link = Link.preset(name)
        assert link.name == name and link.intercept_us == latency
        assert link.time_us(gb_per_s * 1e3) == pytest.approx(1.0 + latency)  # a µs's worth of bytes
    for alias, name in LINK_ALIASES.items():
        assert Link.preset(alias) == Link.preset(name)


def test_two_nodes_of_four_use_the_island_link_inside_and_the_network_between() -> None:
    c = preset_cluster("2x4:nvlink,ib")
    topo = c.topology
    assert topo is not None and c.num_devices == 8 and topo.node_names == ("node0", "node1")
    names = [x.name for x in c.links]
    for i in range(8):
        for j in range(8):
            want = -1 if i == j else names.index("nvlink4" if i // 4 == j // 4 else "ib-ndr")
            assert c.pair_link[i, j] == want
    nv, ib = Link.preset("nvlink4"), Link.preset("ib-ndr")
    assert c.transfer_time_us(1e6, 0, 3) == nv.time_us(1e6)
    assert c.transfer_time_us(1e6, 5, 2) == ib.time_us(1e6)
    # the flat model of a topology-blind tool: the mean over the 56 ordered pairs, 24 inside a node
    assert c.slope_us_per_byte == pytest.approx((24 * nv.slope_us_per_byte + 32 * ib.slope_us_per_byte) / 56)
    assert c.intercept_us == pytest.approx((24 * nv.intercept_us + 32 * ib.intercept_us) / 56)


def test_islands_inside_a_node_use_the_host_link_between_them() -> None:
    c = preset_cluster("1x2x4:nvlink3,pcie4")
    names = [x.name for x in c.links]
    assert c.pair_link[0, 3] == names.index("nvlink3") and c.pair_link[3, 4] == names.index("pcie4")
    assert (c.pair_egress == -1).all()  # one node, host link not shared: no shared port
    shared = preset_cluster("1x2x4:nvlink3,pcie4,host-shared")
    assert shared.pair_egress[0, 1] == -1 and shared.pair_egress[0, 4] >= 0
    assert shared.pair_egress[1, 5] == shared.pair_egress[0, 4] != shared.pair_egress[4, 0]


def test_nics_split_a_nodes_devices_in_index_order() -> None:
    c = preset_cluster("2x4:nvlink,ib,nics=2")
    assert c.topology is not None and c.topology.nic_of.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert c.pair_egress[0, 4] == c.pair_egress[1, 7] != c.pair_egress[2, 4]
    assert c.pair_ingress[0, 4] == c.pair_ingress[3, 5] != c.pair_ingress[0, 6]
    one = preset_cluster("2x4:nvlink,ib")
    assert len({int(x) for x in one.pair_egress[:4, 4:].ravel()}) == 1  # one NIC: one send side


def test_port_ids_send_and_receive_sides_are_disjoint_and_within_num_ports() -> None:
    c = preset_cluster("3x2x2:nvlink,pcie,ib,nics=2,host-shared")
    off = ~np.eye(c.num_devices, dtype=bool)
    node = c.topology.node_of
    cross = node[:, None] != node[None, :]
    assert ((c.pair_egress >= 0) == (c.pair_ingress >= 0)).all()
    assert ((c.pair_egress[cross]) % 2 == 0).all() and ((c.pair_ingress[cross]) % 2 == 1).all()
    used = np.concatenate([c.pair_egress[off], c.pair_ingress[off]])
    assert used.max() < c.num_ports
    assert not set(c.pair_egress[off].tolist()) & set(c.pair_ingress[off].tolist()) - {-1}
    names = {c.topology.port_name(int(p)) for p in used if p >= 0}
    assert "node0/nic0 send" in names and "node2/nic1 receive" in names


@pytest.mark.parametrize("text,needle", [
    ("", "expected NODESxDEVICES"), ("2x4", "expected NODESxDEVICES"), ("2x4:", "needs LINK"),
    ("2x4:nvlnk,ib", "unknown link 'nvlnk'"), ("2x4:nvlink", "2 nodes need a network link"),
    ("0x4:nvlink", "at least 1"), ("1x2x4:nvlink", "needs LINK,HOST_LINK"),
    ("2x4:nvlink,ib,nics=5", "unknown option 'nics=5'"),
    ("2x4:nvlink,ib,fast", "needs LINK[,NETWORK] after the shape (got 3 link names)"),
    ("1x4:nvlink,host-shared", "unknown option 'host-shared'"), ("2x4:nvlink,ib,pcie,ib", "needs LINK"),
    ("2x4:warp", "unknown link 'warp'"), ("99999x99999:nvlink,ib", "above the limit of 1,024"),
])
def test_bad_presets_are_one_line_errors_naming_the_flag(text: str, needle: str) -> None:
    with pytest.raises(CeleritasInputError) as err:
        parse_preset(text)
    message = str(err.value)
    assert message.startswith("--topology: ") and needle in message and "\n" not in message


def test_presets_combine_with_mixed_devices() -> None:
    flat = Cluster.build([f"d{i}" for i in range(4)], [8e9, 8e9, 4e9, 4e9], [1.0, 1.0, 2.0, 2.0])
    c = flat.with_topology(parse_preset("2x2:nvlink,ib").topology(flat.device_names))
    assert c.memory_bytes.tolist() == [8e9, 8e9, 4e9, 4e9] and c.speed.tolist() == [1.0, 1.0, 2.0, 2.0]
    assert c.topology.node_of.tolist() == [0, 0, 1, 1]
    with pytest.raises(CeleritasInputError, match="the topology has 8 devices, the cluster 4"):
        parse_preset("2x4:nvlink,ib").topology(flat.device_names)


# ---------------------------------------------------------------------------- pairwise view
def test_flat_pair_arrays_are_the_one_model_and_transfer_time_is_comm_time() -> None:
    c = Cluster.build(["a", "b", "c"], [1e9] * 3, slope_us_per_byte=3e-4, intercept_us=7.0)
    assert c.is_flat and c.num_ports == 0 and (c.pair_egress == -1).all() and (c.pair_ingress == -1).all()
    off = ~np.eye(3, dtype=bool)
    assert (c.pair_slope_us_per_byte[off] == 3e-4).all() and (c.pair_intercept_us[off] == 7.0).all()
    assert (np.diag(c.pair_slope_us_per_byte) == 0).all() and (np.diag(c.pair_link) == -1).all()
    nbytes = np.array([0.0, 1.0, 12345.0, 1e9])
    assert c.transfer_time_us(nbytes, 0, 2).tobytes() == np.asarray(c.comm_time_us(nbytes)).tobytes()
    assert c.transfer_time_us(5.0, 1, 1) == 0.0


def test_transfer_time_is_each_pairs_link_and_broadcasts() -> None:
    c = preset_cluster("2x2x2:nvlink3,pcie3,100gbe")
    src, dst = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    got = c.transfer_time_us(1e5, src, dst)
    for i in range(8):
        for j in range(8):
            want = 0.0 if i == j else c.links[c.pair_link[i, j]].time_us(1e5)
            assert got[i, j] == want
    assert c.pair_slope_us_per_byte.flags.writeable is False  # shared by every caller


def test_copies_keep_the_topology_and_flat_drops_it() -> None:
    c = preset_cluster("2x2:nvlink,ib")
    assert c.with_headroom(0.1).topology is c.topology and c.with_memory(5.0).topology is c.topology
    flat = c.flat()
    assert flat.is_flat
    assert (flat.slope_us_per_byte, flat.intercept_us) == (c.slope_us_per_byte, c.intercept_us)
    with pytest.raises(CeleritasInputError, match="topology: 4 devices, the cluster has 2"):
        Cluster.homogeneous(2, 1e9).with_topology(c.topology)


# ---------------------------------------------------------------------------- the file
def test_topology_file_round_trip(tmp_path: Path) -> None:
    c = preset_cluster("2x2x2:nvlink3,pcie4,ib-hdr,nics=2,host-shared", speed=[1.0, 2.0] * 4)
    path = save_cluster(c, tmp_path / "c.json")
    doc = json.loads(path.read_text())
    assert doc["format"] == CLUSTER_FORMAT_V2 and doc["topology"]["network"] == "ib-hdr"
    again = load_cluster(path)
    for field in ("pair_link", "pair_egress", "pair_ingress", "pair_slope_us_per_byte", "pair_intercept_us",
                  "speed", "memory_bytes"):
        assert np.array_equal(getattr(again, field), getattr(c, field)), field
    assert again.links == c.links and again.topology.describe() == c.topology.describe()
    assert (again.slope_us_per_byte, again.intercept_us) == (c.slope_us_per_byte, c.intercept_us)
    assert cluster_to_json(again) == doc


def test_flat_clusters_still_write_format_1(tmp_path: Path) -> None:
    doc = json.loads(save_cluster(Cluster.homogeneous(2, 1e9), tmp_path / "c.json").read_text())
    assert doc["format"] == CLUSTER_FORMAT and "topology" not in doc
    assert cluster_from_json({**doc, "format": CLUSTER_FORMAT_V2}).is_flat  # /2 without a topology: flat


def _two_node_doc() -> dict[str, Any]:
    return {
        "format": CLUSTER_FORMAT_V2,
        "devices": [{"name": f"g{i}", "memory_bytes": 1e9} for i in range(4)],
        "topology": {
            "links": {"fast": {"slope_us_per_byte": 1e-6, "intercept_us": 2.0},
                      "net": {"slope_us_per_byte": 1e-4, "intercept_us": 20.0, "source": "preset"}},
            "nodes": [{"name": "a", "islands": [["g0", "g1"]], "island_link": "fast"},
                      {"name": "b", "islands": [["g2"], ["g3"]], "island_link": "fast", "host_link": "net",
                       "nics": 2}],
            "network": "net",
            "pairs": [{"devices": ["g0", "g3"], "link": "fast"}],
        },
    }


def test_pair_overrides_change_the_time_not_the_ports() -> None:
    c = cluster_from_json(_two_node_doc())
    assert c.pair_link[0, 3] == c.pair_link[3, 0] == 0 and c.pair_link[0, 2] == 1
    assert c.pair_egress[0, 3] == c.pair_egress[0, 2] >= 0  # still leaves node a through its NIC
    assert (c.slope_us_per_byte, c.intercept_us) == pytest.approx((c.pair_slope_us_per_byte.sum() / 12,
                                                                  c.pair_intercept_us.sum() / 12))


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``doc`` with the value at a dotted ``path`` (list indices as numbers) set, or deleted for ...."""
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    target = doc
    for k in keys[:-1]:
        target = target[k]
    if value is ...:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value
    return doc


TOPOLOGY_ERRORS = [
    ("format", CLUSTER_FORMAT, "field 'topology' needs \"format\": \"celeritas-cluster/2\""),
    ("format", "celeritas-cluster/3", "expected 'celeritas-cluster/1' or 'celeritas-cluster/2'"),
    ("topology", [1], "field 'topology' must be an object"),
    ("topology.links", {}, "topology: field 'links' must be a non-empty object"),
    ("topology.links.fast.slope_us_per_byte", ...,
     "topology.links['fast']: missing field 'slope_us_per_byte'"),
    ("topology.links.fast.intercept_us", -1, "topology.links['fast']: field 'intercept_us' must be a finite"),
    ("topology.links.fast.slope_us_per_byte", 2.0, "field 'slope_us_per_byte' must be at most 1"),
    ("topology.links.net.source", "guessed", "topology.links['net']: field 'source' must be one of"),
    ("topology.nodes", [], "topology: field 'nodes' must be a non-empty list"),
    ("topology.nodes.0.island_link", "slow", "topology.nodes[0].island_link: unknown link 'slow'"),
    ("topology.nodes.0.island_link", ..., "topology.nodes[0]: missing field 'island_link'"),
    ("topology.nodes.0.islands", [["g0", "g9"]], "topology.nodes[0].islands[0][1]: 'g9' is not a device"),
    ("topology.nodes.0.islands", [["g0", "g1", "g2"]], "topology.nodes[1].islands[0][0]: device 'g2' is "
                                                      "already in topology.nodes[0].islands[0][2]"),
    ("topology.nodes.0.islands", [["g0"]], "topology: device 'g1' is in no island"),
    ("topology.nodes.0.islands", [["g0", "g1"], []],
     "topology.nodes[0].islands[1]: an island needs at least"),
    ("topology.nodes.0.islands", "g0", "field 'islands' must be a list of lists of device names"),
    ("topology.nodes.1.host_link", ...,
     "topology.nodes[1]: field 'host_link' is needed: the node has 2 islands"),
    ("topology.nodes.1.name", "a", "topology.nodes[1]: duplicate node name 'a'"),
    ("topology.nodes.1.nics", 3, "topology.nodes[1]: field 'nics' must be an integer from 1 to the node's 2"),
    ("topology.nodes.1.nics", True, "field 'nics' must be an integer"),
    ("topology.nodes.1.host_shared", "yes", "field 'host_shared' must be true or false"),
    ("topology.network", ..., "topology: field 'network' is needed: the cluster has 2 nodes"),
    ("topology.network", 3, "topology: field 'network' must be a link name"),
    ("topology.pairs.0.devices", ["g0", "g0"], "topology.pairs[0]: a pair needs two different devices"),
    ("topology.pairs.0.devices", ["g0"], "topology.pairs[0]: field 'devices' must be a list of two"),
    ("topology.pairs.0.link", "slow", "topology.pairs[0].link: unknown link 'slow'"),
    ("topology.pairs", [{"devices": ["g0", "g3"], "link": "fast"}, {"devices": ["g3", "g0"], "link": "net"}],
     "topology.pairs[1]: the pair 'g3', 'g0' is already in topology.pairs[0]"),
]


@pytest.mark.parametrize("path,value,needle", TOPOLOGY_ERRORS,
                         ids=[f"{p}={v!r}"[:60] for p, v, _ in TOPOLOGY_ERRORS])
def test_topology_errors_are_one_line_naming_file_and_field(tmp_path: Path, path: str, value: Any,
                                                            needle: str) -> None:
    file = tmp_path / "cluster.json"
    file.write_text(json.dumps(_set(_two_node_doc(), path, value)))
    with pytest.raises(CeleritasInputError) as err:
        load_cluster(file)
    message = str(err.value)
    assert message.startswith(f"{file}: ") and needle in message and "\n" not in message, message


def test_the_command_line_exits_2_with_one_line_on_a_bad_topology_file(tmp_path: Path, capsys) -> None:
    file = tmp_path / "cluster.json"
    file.write_text(json.dumps(_set(_two_node_doc(), "topology.network", "slow")))
    code = main(["info", str(EXAMPLE), "--cluster", str(file)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{file}: topology.network: unknown link 'slow'" in err


# ---------------------------------------------------------------------------- the command line
def test_place_with_a_preset_and_a_mixed_cluster_file(tmp_path: Path, capsys) -> None:
    mixed = Cluster.build([f"d{i}" for i in range(4)], [2**31, 2**31, 2**30, 2**30], [1.0, 1.0, 2.0, 2.0])
    cluster_file = save_cluster(mixed, tmp_path / "mixed.json")
    out = tmp_path / "p.json"
    code = main(["place", str(EXAMPLE), "--cluster", str(cluster_file), "--topology", "2x2:nvlink,ib",
                 "--placer", "m-topo", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "topology 2 nodes x 2 devices, islands nvlink4, network ib-ndr (1 NIC per node)" in text
    transfers = next(line for line in text.splitlines() if line.startswith("transfers "))
    assert " over ib-ndr (" in transfers or " over nvlink4 (" in transfers or transfers.endswith("none")
    doc = json.loads(out.read_text())
    cluster = mixed.with_topology(parse_preset("2x2:nvlink,ib").topology(mixed.device_names))
    graph = load_graph(EXAMPLE)
    assignment = np.array([doc["assignment"][n] for n in graph.node_names])
    assert doc["predicted_step_time_us"] == simulate(graph, cluster, assignment).step_time_us
    assert doc["predicted_step_time_us"] != simulate(graph, mixed, assignment).step_time_us


@pytest.mark.parametrize("argv,needle", [
    (["--topology", "2x2:nvlink,ib", "--device-memory", "1GiB", "--comm-slope", "1e-4"],
     "--comm-slope and --comm-intercept set one link for every pair: not with --topology"),
    (["--topology", "2x2:nvlink,ib", "--devices", "3", "--device-memory", "1GiB"],
     "--devices 3 but --topology 2x2:nvlink,ib has 4 devices"),
    (["--topology", "2x2:nvlink,ib"],
     "--topology 2x2:nvlink,ib has 4 devices, but the cluster has 1 (give --device-memory"),
    (["--topology", "2x2:warp,ib", "--device-memory", "1GiB"], "--topology: unknown link 'warp'"),
    (["--topology", "32x64:nvlink,ib", "--device-memory", "1GiB"],
     "--topology: 2,048 devices, above the limit"),
])
def test_topology_flag_errors_exit_2_in_one_line(argv: list[str], needle: str, capsys) -> None:
    code = main(["info", str(EXAMPLE), *argv])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_info_names_the_topology(capsys) -> None:
    assert main(["info", str(EXAMPLE), "--topology", "1x2x2:nvlink,pcie", "--device-memory", "1GiB"]) == 0
    out = capsys.readouterr().out
    assert "topology       1 node x 4 devices (2 islands), islands nvlink4, host pcie4" in out


# ---------------------------------------------------------------------------- the simulator, by hand
def _two_sends(times: tuple[float, float] = (10.0, 10.0), nbytes: float = 1000.0) -> Graph:
    """a0 -> b0 and a1 -> b1: two producers finishing together, each sending one tensor."""
    return Graph.from_arrays(name="sends", node_names=["a0", "a1", "b0", "b1"],
                             time_us=np.array([times[0], times[1], 1.0, 1.0]), memory_bytes=np.ones(4),
                             edge_src=np.array([0, 1]), edge_dst=np.array([2, 3]),
                             edge_bytes=np.array([nbytes, nbytes]))


FAST, NET = Link("fast", 1e-3, 0.0), Link("net", 0.01, 5.0)  # 1000 B: 1 µs inside, 15 µs across


def _cluster(nodes: list[NodeSpec], pairs: tuple = ()) -> Cluster:
    names = [n for node in nodes for island in node.islands for n in island]
    return Cluster.build(names, [1e9] * len(names), topology=build_topology(names, [FAST, NET], nodes, "net",
                                                                             pairs))


def test_two_transfers_leaving_one_node_at_once_take_twice_as_long_on_its_network_port() -> None:
    one_nic = _cluster([NodeSpec("A", (("g0", "g1"),), "fast"), NodeSpec("B", (("g2", "g3"),), "fast")])
    r = simulate(_two_sends(), one_nic, np.array([0, 1, 2, 3]))
    assert sorted(r.transfers.start_us.tolist()) == [10.0, 25.0] and sorted(r.transfers.end_us.tolist()) == [
        25.0, 40.0]  # 15 µs each, one after the other: the pair is done 30 µs after they finish
    assert r.step_time_us == 41.0
    two_nics = _cluster([NodeSpec("A", (("g0", "g1"),), "fast", nics=2),
                         NodeSpec("B", (("g2", "g3"),), "fast", nics=2)])
    assert simulate(_two_sends(), two_nics, np.array([0, 1, 2, 3])).transfers.end_us.tolist() == [25.0, 25.0]
    flat = Cluster.build(one_nic.device_names, [1e9] * 4, slope_us_per_byte=NET.slope_us_per_byte,
                         intercept_us=NET.intercept_us)
    assert simulate(_two_sends(), flat, np.array([0, 1, 2, 3])).step_time_us == 26.0  # no port: in parallel
    assert simulate(_two_sends(), one_nic, np.array([0, 1, 2, 3]), channels=False).step_time_us == 26.0


def test_two_transfers_entering_one_node_share_its_receive_side_and_not_its_send_side() -> None:
    nodes = [NodeSpec("A", (("g0",),), "fast"), NodeSpec("B", (("g1",),), "fast"),
             NodeSpec("C", (("g2", "g3"),), "fast")]
    r = simulate(_two_sends(), _cluster(nodes), np.array([0, 1, 2, 3]))
    assert sorted(r.transfers.end_us.tolist()) == [25.0, 40.0]
    # C sending to A and to B at once: both leave through C's one port, A and B receive apart
    back = simulate(_two_sends(), _cluster(nodes), np.array([2, 3, 0, 1]))
    assert sorted(back.transfers.end_us.tolist()) == [25.0, 40.0]
    # A -> C and C -> B at once: A's send side and C's receive side, C's send side and B's receive side
    crossing = simulate(_two_sends(), _cluster(nodes), np.array([0, 2, 3, 1]))
    assert crossing.transfers.end_us.tolist() == [25.0, 25.0]


def test_inside_an_island_transfers_of_different_devices_run_in_parallel_on_the_fast_link() -> None:
    c = _cluster([NodeSpec("A", (("g0", "g1", "g2", "g3"),), "fast"), NodeSpec("B", (("g4",),), "fast")])
    r = simulate(_two_sends(), c, np.array([0, 1, 2, 3]))
    assert r.transfers.start_us.tolist() == [10.0, 10.0] and r.transfers.end_us.tolist() == [11.0, 11.0]


def test_shared_island_uplinks_serialize_traffic_between_islands() -> None:
    islands = (("g0", "g1"), ("g2", "g3"))
    private = _cluster([NodeSpec("A", islands, "fast", host_link="net")])
    shared = _cluster([NodeSpec("A", islands, "fast", host_link="net", host_shared=True)])
    assert simulate(_two_sends(), private, np.array([0, 1, 2, 3])).transfers.end_us.tolist() == [25.0, 25.0]
    ends = simulate(_two_sends(), shared, np.array([0, 1, 2, 3])).transfers.end_us
    assert sorted(ends.tolist()) == [25.0, 40.0]


def test_a_pair_override_is_faster_but_still_holds_the_network_port() -> None:
    c = _cluster([NodeSpec("A", (("g0", "g1"),), "fast"), NodeSpec("B", (("g2", "g3"),), "fast")],
                 pairs=(("g0", "g2", "fast"),))
    graph = _two_sends(times=(10.0, 10.5))  # a0's tensor goes first, over the override
    r = simulate(graph, c, np.array([0, 1, 2, 3]))
    assert r.transfers.start_us.tolist() == [10.0, 11.0] and r.transfers.end_us.tolist() == [11.0, 26.0]


# ---------------------------------------------------------------------------- flat clusters unchanged
def _flat_cases() -> list[tuple[str, Graph, Cluster]]:
    cases = [(i.name, i.graph, i.cluster) for fam in ("a", "b", "c", "d")
             for i in benchmark_instances(fam, quick=True)]
    graph = load_graph(EXAMPLE)
    cases.append(("example", graph, Cluster.build(["a", "b", "c"], [2**31] * 3, [1.0, 2.0, 0.5],
                                                  slope_us_per_byte=3e-4, intercept_us=7.0)))
    return cases


def test_a_one_island_topology_of_the_flat_link_replays_bit_for_bit_as_the_flat_cluster() -> None:
    """The topology path (per-pair arrays, ports) reduces exactly to the paper's model: every
    family's quick instances and the example graph, random and placed assignments."""
    for name, graph, flat in _flat_cases():
        link = Link("flat", flat.slope_us_per_byte, flat.intercept_us)
        topology = build_topology(flat.device_names, [link], [NodeSpec("n", (flat.device_names,), "flat")])
        linked = flat.with_topology(topology, comm=(flat.slope_us_per_byte, flat.intercept_us))
        rng = np.random.default_rng(0)
        assignments = [rng.integers(0, flat.num_devices, graph.num_nodes) for _ in range(3)]
        assignments.append(place(graph, flat, "m-topo", {}).assignment)
        for a in assignments:
            want, got = simulate(graph, flat, a), simulate(graph, linked, a)
            for field in ("start_us", "finish_us"):
                assert getattr(got, field).tobytes() == getattr(want, field).tobytes(), (name, field)
            assert got.transfers.end_us.tobytes() == want.transfers.end_us.tobytes(), name
            assert got.step_time_us == want.step_time_us


# ---------------------------------------------------------------------------- the lower bound
PRESETS = ["2x2:nvlink,ib", "2x4:nvlink,100gbe", "1x2x2:nvlink3,pcie3,host-shared", "3x1:pcie,ib-hdr",
           "2x2x2:nvlink,pcie,ib,nics=2", "4x2:pcie5,100gbe"]


@pytest.mark.parametrize("seed", range(12))
def test_the_lower_bound_is_below_every_replay_on_random_topologies(seed: int) -> None:
    rng = np.random.default_rng(seed)
    text = PRESETS[seed % len(PRESETS)]
    num = parse_preset(text).num_devices
    speed = rng.choice([0.5, 1.0, 2.0], num).tolist() if seed % 3 else None
    cluster = preset_cluster(text, speed=speed)
    graph = (layered_dag(tasks=int(rng.integers(20, 200)), ccr=float(rng.choice([0.5, 5.0])), seed=seed)
             if seed % 2 else training_step_graph(layers=2, width=int(rng.integers(4, 32)), seed=seed))
    bound = lower_bound_us(graph, cluster)
    assignments = [rng.integers(0, num, graph.num_nodes), np.full(graph.num_nodes, int(rng.integers(0, num)))]
    assignments += [place(graph, cluster, p, {}).assignment for p in ("m-topo", "heft", "m-etf")]
    for a in assignments:
        for channels in (True, False):
            step = simulate(graph, cluster, a, channels=channels).step_time_us
            assert bound <= step * (1 + 1e-12), (text, bound, step)
