"""The memory every placement needs (``peak_lower_bound``), the repair's guarantees, and the same
placement on a slow machine as on a fast one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celeritas_cli.main import main
from celeritas_core.generators.synthetic import small_training_graph
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.graphs.colocation import colocation_respected
from celeritas_core.placers import place
from celeritas_core.placers.local_search import CandidatePool, excess_bytes, peak_memory_repair
from celeritas_core.readwrite.formats import save_graph
from celeritas_core.simulation.memory import memory_profile, one_device_peak_bytes, peak_lower_bound
from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH, simulate
from tests.core.test_stages import training_step

ORDERS = ("rank", *ALTERNATIVE_DISPATCH)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 3), st.integers(1, 4), st.sampled_from(ORDERS), st.integers(0, 10**6))
def test_every_placement_and_order_holds_at_least_the_bound(layers_seed: int, devices: int, order: str,
                                                             seed: int) -> None:
    graph = training_step(4 + layers_seed) if layers_seed % 2 else small_training_graph(layers_seed,
                                                                                        liveness=True)
    bound = peak_lower_bound(graph)
    rng = np.random.default_rng(seed)
    assignment = rng.integers(0, devices, graph.num_nodes)
    if rng.random() < 0.5:  # contiguous along the topological order, as a pipeline would be
        assignment[graph.topological_order] = np.arange(graph.num_nodes) * devices // graph.num_nodes
    gid = graph.colocation_ids
    for group in np.unique(gid[gid >= 0]):  # keep co-location groups together
        assignment[gid == group] = assignment[np.flatnonzero(gid == group)[0]]
    cluster = Cluster.homogeneous(devices, 1e15, slope_us_per_byte=1e-6, intercept_us=3.0)
    result = simulate(graph, cluster, assignment, dispatch=order)
    peak = memory_profile(graph, devices, assignment, result).peak_bytes
    assert peak.sum() >= bound.live_total_bytes * (1 - 1e-9)
    assert peak.max() >= bound.fullest_device_bytes(devices) * (1 - 1e-9)
    assert peak.max() >= bound.largest_unit_bytes * (1 - 1e-9)


def test_the_bound_is_tight_on_one_device_for_a_training_step() -> None:
    graph = training_step(8)
    bound = peak_lower_bound(graph)
    assert bound.live_total_bytes == pytest.approx(one_device_peak_bytes(graph))  # all kept at the loss
    assert graph.node_names[bound.op] in ("loss", "g8", "f8")


def test_a_graph_where_nothing_fits_says_so_and_exits_0(tmp_path, capsys) -> None:
    graph = training_step(8)
    save_graph(graph, tmp_path / "g.json")
    need = peak_lower_bound(graph).fullest_device_bytes(2)
    code = main(["place", str(tmp_path / "g.json"), "--devices", "2",
                 "--device-memory", f"{int(0.9 * need)}B", "--out", str(tmp_path / "p.json")])
    out = capsys.readouterr().out
    assert code == 0
    assert "OOM: gpu:" in out and "cannot fit: every placement needs at least" in out
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["oom"] is True and doc["extra"]["cannot_fit"] is True
    assert doc["extra"]["memory_lower_bound_bytes"] == pytest.approx(need)
    assert doc["extra"]["memory_repair"] == {
        "skipped": "no placement fits these devices (memory lower bound)"}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0.35, 0.45, 0.6]))
def test_repair_never_raises_the_excess_nor_splits_a_group(seed: int, share: float) -> None:
    graph = training_step(6, weight=4e6)
    cluster = Cluster.homogeneous(3, share * one_device_peak_bytes(graph), slope_us_per_byte=1e-5,
                                  intercept_us=5.0)
    rng = np.random.default_rng(seed)
    assignment = rng.integers(0, 3, graph.num_nodes)
    gid = graph.colocation_ids
    for group in np.unique(gid[gid >= 0]):
        assignment[gid == group] = assignment[np.flatnonzero(gid == group)[0]]
    start = CandidatePool(graph, cluster).add("random", assignment)
    stats: dict = {}
    repaired = peak_memory_repair(graph, cluster, start, budget=60 * graph.num_nodes, stats=stats)
    assert colocation_respected(graph, repaired.assignment)
    replay = simulate(graph, cluster, repaired.assignment)
    replayed = excess_bytes(graph, cluster, repaired.assignment, replay)
    assert replayed == pytest.approx(repaired.excess_bytes)
    assert repaired.excess_bytes <= start.excess_bytes
    assert (repaired is start) == (stats["moves"] == 0)
    assert stats["replays"] <= 60


class _SlowClock:
    """``time.perf_counter`` running ``factor`` times faster than the real one: a machine that many
    times slower, as far as any wall-clock budget can tell."""

    def __init__(self, real, factor: float) -> None:
        self.real, self.factor, self.start = real, factor, real()

    def __call__(self) -> float:
        return self.start + (self.real() - self.start) * self.factor


@pytest.mark.parametrize("graph_name", ["training", "inference"])
def test_the_same_placement_on_a_machine_five_times_slower(graph_name: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    graph = (small_training_graph(1, liveness=True) if graph_name == "training"
             else training_step(10, weight=3e6, name="t10"))
    cluster = Cluster.homogeneous(4, 0.4 * one_device_peak_bytes(graph), slope_us_per_byte=1e-5,
                                  intercept_us=5.0)
    idle = place(graph, cluster, "celeritas")
    monkeypatch.setattr(time, "perf_counter", _SlowClock(time.perf_counter, 5.0))
    busy = place(graph, cluster, "celeritas")
    assert busy.assignment.tolist() == idle.assignment.tolist()
    assert busy.extra["stages"] == idle.extra["stages"] and busy.extra["search"] == idle.extra["search"]
    assert busy.extra["stages"]["cut_by_clock"] == []


def test_a_wall_clock_limit_cuts_only_optional_stages_and_says_so() -> None:
    graph = training_step(8)
    cluster = Cluster.homogeneous(2, 0.62 * one_device_peak_bytes(graph), slope_us_per_byte=1e-5,
                                  intercept_us=5.0)
    cut = place(graph, cluster, "celeritas", {"search_seconds": 0})
    assert not cut.oom  # the always-run stage split and the repair still decide what fits
    stages = cut.extra["stages"]
    assert stages["cut_by_clock"] and "robust ranking" not in stages["cut_by_clock"]
    assert cut.extra["search"]["stopped"] == "clock"
    for name in stages["cut_by_clock"]:
        assert name.split("/")[0] in ("stages", "multilevel", "heft", "etf", "sct", "order-place", "m-topo",
                                      "critical-path search")


def test_the_repair_moves_a_stage_boundary_with_a_run() -> None:
    graph = training_step(8)
    cluster = Cluster.homogeneous(2, 0.62 * one_device_peak_bytes(graph), slope_us_per_byte=1e-5,
                                  intercept_us=5.0)
    order = np.argsort(graph.topological_rank)
    over = np.zeros(graph.num_nodes, dtype=np.int64)
    over[order[int(0.9 * graph.num_nodes):]] = 1  # almost everything on device 0
    gid = graph.colocation_ids
    for group in np.unique(gid[gid >= 0]):
        over[gid == group] = over[np.flatnonzero(gid == group)[0]]
    start = CandidatePool(graph, cluster).add("lopsided", over)
    assert not start.fits
    stats: dict = {}
    repaired = peak_memory_repair(graph, cluster, start, budget=10**6, stats=stats)
    assert repaired.fits and stats["stopped"] == "fits"
    moved = np.flatnonzero(repaired.assignment != over)
    assert len(moved) > 0 and stats["moves"] < len(moved)  # some kept trial moved several units at once
