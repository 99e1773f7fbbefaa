"""The benchmark graph families: determinism, shape, sizes, exact CCR, the generate CLI, the bench."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from celeritas_core.generators.families import (
    CHEAP_CCR,
    FAMILIES,
    LAYERED_CCRS,
    LIVENESS_SETUPS,
    NVLINK_INTERCEPT_US,
    NVLINK_SLOPE_US_PER_BYTE,
    Instance,
    benchmark_instances,
    cheap_cluster,
    inception_graph,
    layered_cluster,
    layered_dag,
    scale_to_ccr,
    towers_graph,
)
from celeritas_core.generators.synthetic import small_training_graph
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.graph import Graph
from celeritas_core.graphs.levels import ccr
from celeritas_core.readwrite.formats import load_graph
from celeritas_core.simulation.memory import one_device_peak_bytes
from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH

ROOT = Path(__file__).resolve().parents[2]


def _same(a: Graph, b: Graph) -> bool:
    return (a.node_names == b.node_names and a.ops == b.ops
            and np.array_equal(a.time_us, b.time_us) and np.array_equal(a.memory_bytes, b.memory_bytes)
            and np.array_equal(a.edge_src, b.edge_src) and np.array_equal(a.edge_dst, b.edge_dst)
            and np.array_equal(a.edge_bytes, b.edge_bytes))


GENERATORS = {
    "layered": lambda seed: layered_dag(tasks=80, ccr=1.0, seed=seed),
    "inception": lambda seed: inception_graph(modules=5, seed=seed),
    "towers": lambda seed: towers_graph(towers=5, seed=seed),
}


# ---------------------------------------------------------------------------- generators
@pytest.mark.parametrize("kind", list(GENERATORS))
def test_generators_are_deterministic_per_seed_and_acyclic(kind):
    make = GENERATORS[kind]
    a, b, c = make(3), make(3), make(4)
    assert _same(a, b)
    assert not _same(a, c)
    assert len(a.topological_order) == a.num_nodes
    assert np.all(a.edge_src < a.edge_dst)  # inputs precede consumers: acyclic by construction
    assert np.all(a.time_us > 0) and np.all(a.memory_bytes >= 0)
    assert all(group is None for group in a.colocation)


@pytest.mark.parametrize("tasks", [2, 3, 10, 50, 333])
def test_layered_size_and_edges_only_go_to_later_layers(tasks):
    g = layered_dag(tasks=tasks, ccr=1.0, seed=tasks)
    assert g.num_nodes == tasks
    layer = np.array([int(name.split("/")[0][1:]) for name in g.node_names])
    assert np.all(layer[g.edge_src] < layer[g.edge_dst])
    assert set(layer.tolist()) == set(range(g.meta["layers"]))
    # every non-entry task has a predecessor in the previous layer
    for v in np.flatnonzero(layer > 0):
        assert (layer[g.pred_idx[g.pred_ptr[v]:g.pred_ptr[v + 1]]] == layer[v] - 1).any()
    times = g.time_us
    assert np.all(times == np.rint(times)) and times.min() >= 1 and times.max() <= 100
    pairs = set(zip(g.edge_src.tolist(), g.edge_dst.tolist(), strict=True))
    assert len(pairs) == g.num_edges  # no duplicate edges


@pytest.mark.parametrize("target", [*LAYERED_CCRS, 0.37, 25.0])
@pytest.mark.parametrize("tasks", [10, 120, 500])
def test_layered_ccr_is_exact(target, tasks):
    g = layered_dag(tasks=tasks, ccr=target, seed=7)
    got = ccr(g, layered_cluster(4, 1e12))
    if target == 0:
        assert got == 0.0 and not g.edge_bytes.any()
    else:
        assert abs(got - target) <= 1e-9 * target


def test_scale_to_ccr_is_exact_with_latency():
    g = towers_graph(towers=3, seed=1)
    cluster = Cluster.homogeneous(2, 1e12)
    assert abs(ccr(scale_to_ccr(g, 1.0, cluster), cluster) - 1.0) < 1e-9
    with pytest.raises(CeleritasInputError, match="cannot reach CCR"):
        scale_to_ccr(g, 1e-6, cluster)  # the 25 µs latencies alone exceed it


@pytest.mark.parametrize("seed", range(6))
def test_inception_module_branches_are_pairwise_unreachable(seed):
    g = inception_graph(modules=3, seed=seed)
    nxg = nx.DiGraph(zip(g.edge_src.tolist(), g.edge_dst.tolist(), strict=True))
    concats = [i for i, op in enumerate(g.ops) if op == "ConcatV2"]
    assert len(concats) == 3
    for c in concats:
        branch_ends = list(nxg.predecessors(c))
        assert 3 <= len(branch_ends) <= 4
        for u, v in combinations(branch_ends, 2):
            assert not nx.has_path(nxg, u, v) and not nx.has_path(nxg, v, u)
        start = _module_input(nxg, c)
        lengths = [len(nx.shortest_path(nxg, start, e)) - 1 for e in branch_ends]
        assert len(set(lengths)) > 1 and min(lengths) >= 1 and max(lengths) <= 4  # chains differ
    assert g.num_nodes <= 6 + 12 * 3


def _module_input(nxg: nx.DiGraph, concat: int) -> int:
    """The node every branch of the module ending in ``concat`` starts from."""
    ends = list(nxg.predecessors(concat))
    common = set.intersection(*(nx.ancestors(nxg, e) for e in ends))
    return max(common, key=lambda u: len(nx.ancestors(nxg, u)))


@pytest.mark.parametrize(("towers", "seed"), [(1, 0), (3, 1), (8, 2)])
def test_towers_are_independent_and_sized(towers, seed):
    g = towers_graph(towers=towers, seed=seed, min_depth=2, max_depth=5)
    assert 4 + 2 * towers <= g.num_nodes <= 4 + 5 * towers
    nxg = nx.DiGraph(zip(g.edge_src.tolist(), g.edge_dst.tolist(), strict=True))
    concat = g.index["concat"]
    ends = list(nxg.predecessors(concat))
    assert len(ends) == towers
    for u, v in combinations(ends, 2):
        assert not nx.has_path(nxg, u, v) and not nx.has_path(nxg, v, u)
    assert set(nxg.successors(g.index["input"])) == {g.index[f"tower_{t}/dense_0"] for t in range(towers)}


@pytest.mark.parametrize("seed", range(20))
def test_two_inception_modules_fit_in_30_ops(seed):
    assert inception_graph(modules=2, seed=seed).num_nodes <= 30


@pytest.mark.parametrize(("call", "message"), [
    (lambda: layered_dag(tasks=1, ccr=1.0), r"tasks: must be an integer in \[2, 2000000\]"),
    (lambda: layered_dag(tasks=10, ccr=-1.0), "ccr: must be a finite number >= 0"),
    (lambda: layered_dag(tasks=10, ccr=float("inf")), "ccr: must be a finite number"),
    (lambda: layered_dag(tasks=10, ccr=1.0, mean_predecessors=0.5),
     r"mean_predecessors: must be in \[1, 1000\]"),
    (lambda: inception_graph(modules=0), r"modules: must be an integer in \[1, 120\]"),
    (lambda: towers_graph(towers=2, min_depth=3, max_depth=2),
     r"max_depth: must be an integer in \[3, 1000000\]"),
    (lambda: benchmark_instances("z"), "unknown family 'z'"),
])
def test_bad_values_are_input_errors(call, message):
    with pytest.raises(CeleritasInputError, match=message):
        call()


# ---------------------------------------------------------------------------- instances
def test_small_family_has_at_most_30_ops_on_2_to_4_devices():
    for quick in (True, False):
        instances = benchmark_instances("d", quick=quick)
        assert instances
        for inst in instances:
            assert inst.family == "d" and inst.graph.num_nodes <= 30
            assert 2 <= inst.cluster.num_devices <= 4 and inst.fits_one_device


def test_layered_family_grid():
    instances = benchmark_instances("layered")
    assert {i.cluster.num_devices for i in instances} == {2, 4, 8}
    assert {i.graph.meta["target_ccr"] for i in instances} == set(LAYERED_CCRS)
    assert all(50 <= i.graph.num_nodes <= 500 and i.fits_one_device for i in instances)
    assert all(i.cluster.intercept_us == 0 for i in instances)


def test_training_and_inference_families_memory_setups():
    a = [i for i in benchmark_instances("a") if not i.variant]  # the sum-model cases
    tight = [i for i in a if not i.fits_one_device]
    assert tight and any(i.fits_one_device for i in a)
    for inst in tight:
        share = inst.cluster.memory_bytes[0] / inst.graph.total_memory_bytes
        assert inst.cluster.num_devices in (2, 4) and 0.3 - 1e-9 <= share <= 0.6 + 1e-9
    assert any(i.graph.name == "tensor_holography" and i.graph.num_nodes == 3810 for i in a)
    b = benchmark_instances("b", quick=True)
    assert b and all(i.family == "b" for i in b)
    assert len(benchmark_instances("a", quick=True)) < len(a)
    assert set(FAMILIES) == {"a", "b", "c", "d", "e"}


def test_liveness_instances_need_several_devices_for_their_peak():
    a = benchmark_instances("a")
    for variant in ("live", "cheap"):
        cases = [i for i in a if i.variant == variant]
        assert len(cases) == 4 * len(LIVENESS_SETUPS)
        assert {i.cluster.num_devices for i in cases} == {2, 4, 8}
        for inst in cases:
            assert inst.name.endswith(f"/{variant}") and inst.family == "a"
            live = inst.graph.liveness
            assert live is not None and live.modelled.all()
            peak = one_device_peak_bytes(inst.graph)
            assert peak < inst.graph.total_memory_bytes
            share = inst.cluster.memory_bytes[0] / peak
            assert 0.3 - 1e-9 <= share <= 0.6 + 1e-9 and np.all(inst.cluster.memory_bytes < peak)
            assert not inst.fits_one_device  # several devices needed
            assert inst.cluster.num_devices * share >= 1.2 - 1e-9
    assert all(i.graph.liveness is None for i in a if not i.variant)


def test_cheap_instances_have_ccr_below_a_tenth_and_live_ones_the_default_link():
    a = benchmark_instances("a")
    cheap = [i for i in a if i.variant == "cheap"]
    live = {i.name.removesuffix("/live"): i for i in a if i.variant == "live"}
    assert cheap and live
    for inst in cheap:
        assert ccr(inst.graph, inst.cluster) < 0.1
        assert ccr(inst.graph, inst.cluster) == pytest.approx(CHEAP_CCR, rel=1e-9)
        # NVLink's shape, made faster by one factor
        factor = inst.cluster.slope_us_per_byte / NVLINK_SLOPE_US_PER_BYTE
        assert 0 < factor < 1 and inst.cluster.intercept_us == pytest.approx(factor * NVLINK_INTERCEPT_US)
        twin = live[inst.name.removesuffix("/cheap")]  # the same graph and memory, default link
        assert twin.graph is inst.graph
        np.testing.assert_array_equal(twin.cluster.memory_bytes, inst.cluster.memory_bytes)
        assert ccr(twin.graph, twin.cluster) > 10


def test_cheap_cluster_keeps_nvlink_when_it_is_cheap_already():
    graph = layered_dag(tasks=30, ccr=0.0, seed=1)  # 0-byte edges: only the latency costs
    cluster = cheap_cluster(graph, 3, 1e9, ccr=10.0)
    assert cluster.slope_us_per_byte == NVLINK_SLOPE_US_PER_BYTE
    assert cluster.intercept_us == NVLINK_INTERCEPT_US and cluster.num_devices == 3
    assert ccr(graph, cluster) < 10.0
    tight = cheap_cluster(graph, 3, 1e9, ccr=0.01)
    assert ccr(graph, tight) == pytest.approx(0.01)


def test_fits_one_device_follows_the_liveness_peak():
    graph = small_training_graph(0, liveness=True)
    peak = one_device_peak_bytes(graph)
    assert peak < graph.total_memory_bytes
    holds = Instance("x", "a", graph, Cluster.homogeneous(2, peak))
    short = Instance("y", "a", graph, Cluster.homogeneous(2, peak - 1))
    assert holds.fits_one_device and not short.fits_one_device
    plain = small_training_graph(0)
    assert not Instance("z", "a", plain, Cluster.homogeneous(2, peak)).fits_one_device


def test_training_family_is_a_pure_function_of_the_seed():
    first = benchmark_instances("a", quick=True, seed=3)
    again = benchmark_instances("a", quick=True, seed=3)
    assert [i.name for i in first] == [i.name for i in again]
    assert {i.variant for i in first} == {"", "live", "cheap"} and len(first) <= 6
    for x, y in zip(first, again, strict=True):
        assert _same(x.graph, y.graph)
        np.testing.assert_array_equal(x.cluster.memory_bytes, y.cluster.memory_bytes)
        assert (x.cluster.slope_us_per_byte, x.cluster.intercept_us) == (y.cluster.slope_us_per_byte,
                                                                       y.cluster.intercept_us)
    assert all("-s3/" in i.name for i in first)


# ---------------------------------------------------------------------------- the generate CLI
@pytest.mark.parametrize("argv", [
    ["layered", "--tasks", "60", "--ccr", "1", "--seed", "3"],
    ["layered", "--tasks", "40", "--ccr", "0", "--mean-predecessors", "2"],
    ["inception-modules", "--modules", "2", "--batch-size", "8"],
    ["towers", "--towers", "3"],
    ["transformer", "--ops", "2500", "--seed", "1"],
])
def test_generate_writes_loadable_graphs(argv, tmp_path, capsys):
    out = tmp_path / "g.json"
    assert main(["generate", *argv, "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    graph = load_graph(out)
    if argv[0] == "layered":
        assert graph.num_nodes == int(argv[2])
        assert abs(ccr(graph, layered_cluster(2, 1e12)) - float(argv[4])) < 1e-9
    if "--ops" in argv:
        assert graph.num_nodes == int(argv[argv.index("--ops") + 1])


@pytest.mark.parametrize(("argv", "message"), [
    (["layered", "--tasks", "1"], "--tasks: must be an integer in [2, 2000000], got 1"),
    (["layered", "--tasks", "100000000"], "--tasks: must be an integer in [2, 2000000]"),
    (["layered", "--mean-predecessors", "1e308"], "--mean-predecessors: must be in [1, 1000]"),
    (["inception-modules", "--modules", "100000"], "--modules: must be an integer in [1, 120]"),
    (["inception-modules", "--batch-size", "1" + "0" * 320],
     "--batch-size: must be an integer in [1, 1000000]"),
    (["towers", "--towers", "1000000"], "--towers: must be an integer in [1, 100000]"),
    (["layered", "--ccr", "-0.5"], "--ccr: must be a finite number >= 0"),
    (["layered", "--ccr", "nan"], "--ccr: must be a finite number >= 0"),
    (["towers", "--towers", "0"], "--towers: must be an integer in [1, 100000]"),
    (["towers", "--tasks", "5"], "--tasks: applies to layered only"),
    (["transformer", "--ops", "100"], "--ops: cannot build 100 ops: two layers already need"),
    (["nmt", "--ops", "10000001"], "--ops: must be at most 10,000,000"),
    (["layered", "--ops", "1000"], "--ops: applies to tensor_holography, inception_v3, nmt, transformer"),
    (["inception-modules", "--seed", "-1"], "--seed: must be an integer >= 0"),
])
def test_generate_rejects_bad_values_with_exit_2(argv, message, tmp_path, capsys):
    out = tmp_path / "g.json"
    assert main(["generate", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_generate_rejects_unknown_kind(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["generate", "ring", "--out", str(tmp_path / "g.json")])
    assert exc.value.code == 2 and "invalid choice: 'ring'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the benchmark
def _quick_bench(tmp_path, families: str, timeout: int,
                 baechi: str = "off") -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run ``bench_quality.py --quick --families FAMILIES --baechi BAECHI`` in a subprocess; its result
    and JSON path."""
    out = tmp_path / "quality.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_quality.py"), "--quick",
                           "--families", families, "--out", str(out), "--baechi", baechi],
                          capture_output=True, text=True, check=False, cwd=tmp_path, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc, out


def test_bench_quality_quick_runs_and_writes_json(tmp_path):
    proc, out = _quick_bench(tmp_path, "c", 120)
    assert "== (c)" in proc.stdout and "CCR-0 DAGs" in proc.stdout
    doc = json.loads(out.read_text())
    assert {"format", "seed", "quick", "placers", "notes", "families", "checks", "wall_seconds"} <= set(doc)
    fam = doc["families"]["c"]
    assert {"title", "summary", "instances"} <= set(fam)
    assert {"graphs", "geomean_vs_best_other", "worst_vs_best_other", "worst_graph", "worst_beaten_by",
            "geomean_vs_lower_bound_ccr0", "placement_seconds"} <= set(fam["summary"])
    assert fam["summary"]["graphs"] == len(fam["instances"]) > 0
    row = fam["instances"][0]
    assert {"name", "nodes", "devices", "ccr", "placers", "best_other", "ratio_vs_best_other",
            "lower_bound_us", "single_device_time_us"} <= set(row)
    assert "celeritas" in row["placers"] and "step_time_us" in row["placers"]["celeritas"]
    assert all(line.split()[0] in ("PASS", "MISS", "SKIP") for line in doc["checks"])


def test_bench_quality_without_baechi_says_so_and_skips_its_targets(tmp_path):
    _, out = _quick_bench(tmp_path, "e", 300)
    doc = json.loads(out.read_text())
    assert "Baechi's own placers: off (--baechi off)" in doc["notes"]
    assert all(r["baechi"] is None for r in doc["families"]["e"]["instances"])
    skip = [line for line in doc["checks"] if line.startswith("SKIP Celeritas on (e)")]
    assert len(skip) == 1 and "--baechi off" in skip[0]


@pytest.mark.slow
def test_bench_quality_replays_baechis_own_placements_as_a_reference_column(tmp_path):
    mirror = Path(os.environ.get("BAECHI_MIRROR") or "/work/.mirror/beomyeol+baechi/repo")
    if not os.environ.get("BAECHI_DIR") and not mirror.exists():
        pytest.skip("no Baechi checkout ($BAECHI_DIR) or mirror ($BAECHI_MIRROR)")
    proc, out = _quick_bench(tmp_path, "e", 600, baechi="auto")
    doc = json.loads(out.read_text())
    rows = doc["families"]["e"]["instances"]
    assert all(r["baechi"] for r in rows)
    for row in rows:
        for config, fig in row["baechi"].items():
            assert "error" in fig or (fig["step_time_us"] > 0 and isinstance(fig["oom"], bool)), config
        cel = row["placers"]["celeritas"]
        fits = [f["step_time_us"] for f in row["baechi"].values() if "error" not in f and not f["oom"]]
        if fits and not row["celeritas_oom"]:
            best = min([*fits, row["best_other_step_us"] or float("inf")])
            assert row["ratio_vs_best_with_baechi"] == pytest.approx(cel["step_time_us"] / best)
    assert "Baechi's own code on" in proc.stdout
    lines = [line for line in doc["checks"] if "Baechi" in line]
    assert len(lines) == 3 and all(line.split()[0] in ("PASS", "MISS") for line in lines)


def test_bench_quality_training_quick_reports_cheap_steps_groups_and_dispatch(tmp_path):
    proc, out = _quick_bench(tmp_path, "a", 300)
    assert "Cheap-transfer memory-bound steps (1)" in proc.stdout
    doc = json.loads(out.read_text())
    rows = doc["families"]["a"]["instances"]
    assert {r["variant"] for r in rows} == {"", "live", "cheap"}
    for row in rows:
        steps = row["dispatch"]["steps_us"]
        assert list(steps) == list(ALTERNATIVE_DISPATCH) and all(v > 0 for v in steps.values())
        cel = row["placers"]["celeritas"]["step_time_us"]
        assert row["dispatch"]["ratio"] == pytest.approx(sorted(steps.values())[2] / cel)
        assert all(f["keeps_groups"] for f in row["placers"].values())
    cheap = next(r for r in rows if r["variant"] == "cheap")
    assert cheap["ccr"] < 0.1 and {"best_list", "best_list_step_us", "ratio_vs_best_list"} <= set(cheap)
    lines = {key: next(line for line in doc["checks"] if key in line)
             for key in ("cheap transfers", "dispatch orders fifo", "co-location groups")}
    assert all(line.split()[0] in ("PASS", "MISS") for line in lines.values())
    assert "m-sct/ops, m-topo that fits" in lines["cheap transfers"]
    placed = sum(len(r["placers"]) for r in rows)
    assert f"{len(rows)} placements" in lines["dispatch orders fifo"]
    assert f"{placed} placements" in lines["co-location groups"]


def _bench() -> dict:
    """The benchmark's functions, without running it."""
    return runpy.run_path(str(ROOT / "bench" / "bench_quality.py"), run_name="bench_quality")


def _row(name: str, variant: str, cel: float, lists: dict[str, float | None], ratio: float = 1.0) -> dict:
    """A bench row: Celeritas's step and each list schedule's (None: it does not fit), µs."""
    placers = {"celeritas": {"step_time_us": cel, "oom": False, "keeps_groups": True}}
    for p, step in lists.items():
        placers[p] = {"step_time_us": step or 1.0, "oom": step is None, "keeps_groups": True}
    row = {"name": name, "variant": variant, "placers": placers, "celeritas_oom": False,
           "dispatch": {"steps_us": {}, "median_us": cel * ratio, "ratio": ratio}}
    return {**row, **_bench()["_list_ratio"](placers, False)}


def test_bench_cheap_target_misses_when_a_list_schedule_is_faster():
    bench = _bench()
    ok = [_row("g1", "cheap", 100.0, {"heft": 100.5, "m-topo": 120.0}),
          _row("g2", "cheap", 100.0, {"heft": None, "m-etf": None})]  # none fits: not rated
    assert bench["_cheap_target"](ok).startswith("PASS")
    assert "1 of 2 rated, 1 where none fits" in bench["_cheap_target"](ok)
    slow = [*ok, _row("g3", "cheap", 100.0, {"m-sct/ops": 95.0, "heft": 99.5})]
    line = bench["_cheap_target"](slow)
    assert line.startswith("MISS") and "worst 1.053 on g3 vs m-sct/ops" in line
    other = [_row("g4", "live", 100.0, {"heft": 50.0})]  # not a cheap step: not judged here
    assert bench["_cheap_target"]([*ok, *other]).startswith("PASS")
    oom = _row("g5", "cheap", 100.0, {"heft": 200.0})
    oom["placers"]["celeritas"]["oom"] = oom["celeritas_oom"] = True
    oom.update(bench["_list_ratio"](oom["placers"], True))
    assert "Celeritas OOM on 1 where one fits" in bench["_cheap_target"]([*ok, oom])


def test_bench_dispatch_and_groups_targets_can_miss():
    bench = _bench()
    rows = [_row("a", "", 100.0, {}, ratio=1.01), _row("b", "", 100.0, {}, ratio=0.98)]
    assert bench["_dispatch_target"](rows).startswith("PASS")
    rows.append(_row("c", "", 100.0, {}, ratio=0.96))
    line = bench["_dispatch_target"](rows)
    assert line.startswith("MISS") and "furthest 0.960 on c" in line and "1 of 3 outside" in line
    assert bench["_groups_target"](rows).startswith("PASS")
    rows[0]["placers"]["celeritas"]["keeps_groups"] = False
    assert bench["_groups_target"](rows).startswith("MISS")


def test_bench_quality_without_optimal_says_so(tmp_path):
    out = tmp_path / "quality.json"
    script = ("import sys, runpy; from celeritas_core.placers import PLACERS; "
              "PLACERS.pop('optimal', None); PLACERS.pop('heft', None); "
              f"sys.argv = ['bench_quality.py', '--quick', '--families', 'd', '--out', {str(out)!r}]; "
              f"runpy.run_path({str(ROOT / 'bench' / 'bench_quality.py')!r}, run_name='__main__')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False,
                          cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "optimal placer not available" in proc.stdout
    assert "placer 'heft' is not registered: skipped" in proc.stdout
    doc = json.loads(out.read_text())
    assert "heft" not in doc["placers"] and "optimal placer not available" in doc["notes"]
    assert any(line.startswith("SKIP") and "MILP optimum" in line for line in doc["checks"])


def test_bench_scale_runs_and_checks_its_targets(tmp_path):
    out = tmp_path / "scale.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_scale.py"), "--sizes", "3000",
                           "--out", str(out)],
                          capture_output=True, text=True, check=False, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert {(r["ops"], r["placer"]) for r in doc["rows"]} == {(3000, "celeritas"), (3000, "metis")}
    for row in doc["rows"]:
        assert row["placement_seconds"] > 0 and row["wall_seconds"] > row["placement_seconds"]
        assert row["peak_rss_bytes"] > 10 * 2**20 and row["step_time_us"] > 0
    assert any("Celeritas placement" in line and "Metis's" in line for line in doc["targets"])
    assert "3,000 ops" in proc.stdout
