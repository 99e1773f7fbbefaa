"""bench/baechi_reference.py: Baechi's own placers (beomyeol/baechi) on our graphs.

The tests extract Baechi from its git mirror into a temporary folder (skipped when there is no mirror)
and import its modules, which import TensorFlow: about ten seconds once per test process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from celeritas_core.generators.families import benchmark_instances
from celeritas_core.generators.synthetic import small_training_graph
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.graphs.graph import Graph, Liveness
from celeritas_core.graphs.topology import parse_preset
from celeritas_core.readwrite.formats import save_graph
from celeritas_core.simulation.simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # bench/ is a folder of scripts, not a package
import baechi_reference as br  # noqa: E402

MIRROR = Path(os.environ.get(br.BAECHI_MIRROR_ENV) or br.DEFAULT_MIRROR)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not MIRROR.exists(), reason=f"no Baechi mirror at {MIRROR} (${br.BAECHI_MIRROR_ENV})"),
]


@pytest.fixture(scope="module")
def baechi_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Baechi's placer/ and utils/, extracted from the mirror; skip when its modules cannot load here."""
    path = br.checkout_baechi(tmp_path_factory.mktemp("baechi"), MIRROR)
    reason = br.baechi_available(path)
    if reason is not None:
        pytest.skip(reason)
    return path


def _graph(names: list[str], times: list[float], memory: list[float],
           edges: list[tuple[int, int, float] | tuple[int, int, float, int]], *,
           colocation: list[str | None] | None = None, liveness: Liveness | None = None) -> Graph:
    """A hand-made graph: edges are (src, dst, bytes[, src_output])."""
    return Graph.from_arrays(
        name="hand", node_names=names, time_us=times, memory_bytes=memory,
        edge_src=[e[0] for e in edges], edge_dst=[e[1] for e in edges], edge_bytes=[e[2] for e in edges],
        edge_src_output=[e[3] if len(e) > 3 else 0 for e in edges],  # type: ignore[misc]
        colocation=colocation, liveness=liveness)


def test_checkout_holds_baechi_and_leaves_no_modules(baechi_dir: Path) -> None:
    assert (baechi_dir / "placer" / "m_etf.py").is_file()
    assert (baechi_dir / "utils" / "logger.py").is_file()
    assert not (ROOT / "placer").exists()  # nothing of Baechi in this repository
    # Baechi's generic package names are not left behind in sys.modules for other code to trip on
    leftover = [name for name, mod in list(sys.modules.items())
                if name.split(".")[0] in ("placer", "utils")
                and any(str(baechi_dir.resolve()) in str(p) for p in
                        [getattr(mod, "__file__", None), *getattr(mod, "__path__", [])])]
    assert leftover == []
    assert br.baechi_available(baechi_dir.parent / "no-such-checkout") is not None
    assert br.baechi_available(None) is not None


def test_op_graph_follows_placement_graph_generator(baechi_dir: Path) -> None:
    # a: two outputs; a:0 reaches c through two parallel edges (one tensor), a:1 too (a second tensor)
    # b -> c is a 0-byte control edge; a -> b carries data and a control edge (TF drops the latter)
    graph = _graph(["a", "b", "c", "d"], [0.2, 7.6, 3.0, 1.0], [100, 200, 300, 400],
                   [(0, 2, 1000, 0), (0, 2, 1000, 0), (0, 2, 3000, 1), (1, 2, 0), (0, 1, 500, 0), (0, 1, 0),
                    (2, 3, 50)],
                   colocation=["g", None, "g", None])
    cluster = Cluster.homogeneous(2, 1e6, slope_us_per_byte=0.01, intercept_us=5.0)
    op_graph = br.baechi_op_graph(graph, cluster, baechi_dir)

    assert [op_graph.nodes[i]["weight"] for i in range(4)] == [1, 8, 3, 1]  # >= 1 µs, rounded
    assert [op_graph.nodes[i]["colocation_group"] for i in range(4)] == [
        ["loc:@g"], ["loc:@b"], ["loc:@g"], ["loc:@d"]]
    # the sum model: memory_bytes persistent, on output 0, ports padded to those the edges read
    assert op_graph.nodes[0]["output_memory"] == [100, 0]
    assert op_graph.nodes[0]["persistent_memory"] == 100
    assert op_graph.nodes[3]["output_memory"] == [400]
    assert all(op_graph.nodes[i]["temporary_memory"] == 0 for i in range(4))

    a_c = op_graph[0][2]
    assert [t["name"] for t in a_c["tensor"]] == ["a:0", "a:1"]
    assert [t["weight"] for t in a_c["tensor"]] == [15, 35]  # int(round(0.01 * bytes + 5))
    assert a_c["weight"] == 50
    assert op_graph[1][2]["tensor"] == [{"name": "^b", "weight": 5, "num_bytes": 4}]
    assert [t["name"] for t in op_graph[0][1]["tensor"]] == ["a:0"]
    assert sorted(op_graph.edges[e]["id"] for e in op_graph.edges) == [0, 1, 2, 3]
    assert sorted(op_graph.nodes[i]["topo_order"] for i in range(4)) == [0, 1, 2, 3]


def test_liveness_fields_map_to_baechi_memory(baechi_dir: Path) -> None:
    # v: a variable (persistent, a 0-byte handle output); r: a view of v; m: an op with scratch
    live = Liveness.from_lists(persistent=[64, 0, 0], scratch=[0, 0, 8], outputs=[[0], [64], [32]],
                               aliases=[None, [(0, 0)], None])
    graph = _graph(["v", "r", "m"], [1.0, 1.0, 5.0], [64, 0, 40], [(0, 1, 64), (1, 2, 64)], liveness=live)
    op_graph = br.baechi_op_graph(graph, Cluster.homogeneous(2, 1e6), baechi_dir)
    assert [op_graph.nodes[i]["output_memory"] for i in range(3)] == [[64], [0], [32]]
    assert [op_graph.nodes[i]["persistent_memory"] for i in range(3)] == [64, 0, 0]
    assert [op_graph.nodes[i]["temporary_memory"] for i in range(3)] == [0, 0, 8]


@pytest.mark.parametrize("config", ["m-etf", "m-topo", "m-etf-reserve", "m-topo-nonuniform",
                                    "m-etf/fusion", "m-topo/fusion"])
def test_training_step_keeps_colocation_groups(baechi_dir: Path, config: str) -> None:
    graph = small_training_graph()
    assert len(graph.colocation_names) > 10  # variables with their reads and Adam updates
    cluster = Cluster.homogeneous(4, 0.3 * graph.total_memory_bytes)
    run = br.baechi_run(graph, cluster, config, baechi_dir)
    assert run.error is None and run.assignment is not None
    assert run.assignment.dtype == np.int64 and run.assignment.shape == (graph.num_nodes,)
    assert run.assignment.min() >= 0 and run.assignment.max() < cluster.num_devices
    assert colocation_respected(graph, run.assignment)
    assert run.baechi_makespan_us is not None and run.baechi_makespan_us > 0
    assert (run.placed_ops < graph.num_nodes) == config.endswith("/fusion")
    step = simulate(graph, cluster, run.assignment).step_time_us
    assert 0.8 < step / run.baechi_makespan_us < 1.2  # Baechi's estimate and our replay roughly agree


@pytest.mark.parametrize("config", ["m-etf", "m-topo"])
def test_benchmark_instances(baechi_dir: Path, config: str) -> None:
    for inst in benchmark_instances("small", quick=True):
        assignment = br.baechi_place(inst.graph, inst.cluster, config, baechi_dir)
        assert assignment.shape == (inst.graph.num_nodes,)
        assert set(assignment.tolist()) <= set(range(inst.cluster.num_devices))


def test_m_etf_keeps_an_expensive_transfer_local(baechi_dir: Path) -> None:
    chain = _graph(["a", "b"], [10.0, 10.0], [1, 1], [(0, 1, 1e9)])
    cluster = Cluster.homogeneous(2, 1e6)  # 1e9 bytes: 1e5 µs between devices
    assignment = br.baechi_place(chain, cluster, "m-etf", baechi_dir)
    assert assignment[0] == assignment[1]

    # a fork: with free transfers m-ETF runs the two long branches in parallel, with dear ones not
    fork = _graph(["a", "b", "c"], [1.0, 100.0, 100.0], [1, 1, 1], [(0, 1, 1e9), (0, 2, 1e9, 1)])
    split = br.baechi_place(fork, Cluster.homogeneous(2, 1e6, slope_us_per_byte=0.0, intercept_us=0.0),
                            "m-etf", baechi_dir)
    assert split[1] != split[2]
    assert len(set(br.baechi_place(fork, cluster, "m-etf", baechi_dir).tolist())) == 1


def test_ops_that_do_not_fit_are_a_reported_failure(baechi_dir: Path) -> None:
    graph = _graph(["a", "b", "c"], [1.0, 1.0, 1.0], [600, 600, 600], [(0, 1, 10), (1, 2, 10)])
    cluster = Cluster.homogeneous(2, 1000)  # three ops of 600 bytes on two devices of 1000
    run = br.baechi_run(graph, cluster, "m-etf", baechi_dir)
    assert run.assignment is None and run.error and "AssertionError" in run.error
    with pytest.raises(br.BaechiPlacementError, match="m-etf"):
        br.baechi_place(graph, cluster, "m-etf", baechi_dir)
    run = br.baechi_run(graph, cluster, "m-topo-nonuniform", baechi_dir)
    assert run.assignment is None and "cannot be placed" in str(run.error)


def test_refusals(baechi_dir: Path) -> None:
    graph = _graph(["a", "b"], [1.0, 1.0], [1, 1], [(0, 1, 10)])
    with pytest.raises(ValueError, match="unknown Baechi configuration"):
        br.baechi_run(graph, Cluster.homogeneous(2, 1e6), "m-nope", baechi_dir)
    base = Cluster.homogeneous(4, 1e6)
    routed = base.with_topology(parse_preset("2x2:nvlink,ib").topology(base.device_names))
    with pytest.raises(ValueError, match="flat cluster"):
        br.baechi_run(graph, routed, "m-etf", baechi_dir)
    mixed = Cluster.build(["x", "y"], [1e6, 1e6], speed=[1.0, 2.0])
    with pytest.raises(ValueError, match="identical devices"):
        br.baechi_run(graph, mixed, "m-etf", baechi_dir)
    for name, reason in br.UNAVAILABLE_CONFIGS.items():
        assert name.startswith("m-sct") and reason
        with pytest.raises(br.BaechiUnavailableError):
            br.baechi_run(graph, base, name, baechi_dir)


def test_cli_prints_the_replayed_step(baechi_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    path = save_graph(small_training_graph(), tmp_path / "step.json")
    rc = br.main([str(path), "--devices", "4", "--device-memory", "800MiB", "--baechi-dir", str(baechi_dir),
                  "--config", "m-etf", "--config", "m-topo/fusion"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("simulated step time") == 2
    assert "co-location groups kept: yes" in out
