"""The ``celeritas`` command: summaries, written files, one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from celeritas_cli.main import main
from celeritas_core.graphs.cluster import Cluster
from celeritas_core.readwrite.formats import load_placement, save_cluster, save_graph
from tests.conftest import make_graph


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    edges = [(f"n{i}", f"n{i + 1}", 4e5) for i in range(30)]
    edges += [(f"w{i}", f"n{3 * i}", 1e3) for i in range(10)]
    g = make_graph(edges, times={f"n{i}": 10.0 + i for i in range(31)}, default_memory=100.0,
                   colocation={"w0": "var0", "n29": "var0"})
    path = tmp_path / "g.json"
    save_graph(g, path)
    return path


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_place_prints_summary_and_writes_placement(graph_file, tmp_path, capsys):
    out_file = tmp_path / "p.json"
    code, out, err = _run(["place", str(graph_file), "--devices", "2", "--device-memory", "3KB",
                           "--R", "5", "--out", str(out_file)], capsys)
    assert code == 0, err
    for text in ("step time (simulated)", "single device", "lower bound", "gpu:0", "gpu:1", "OOM: none",
                 "memory bound: every placement needs at least"):
        assert text in out
    doc = json.loads(out_file.read_text())
    assert doc["format"] == "celeritas-placement/1" and doc["placer"] == "celeritas"
    assert doc["params"] == {"R": 5, "memory_fraction": 0.25, "refine": True, "work_seconds": 1.0,
                             "search_seconds": 60.0, "search_budget": 1_200_000, "repair_budget": 4_000_000}
    assert doc["extra"]["cannot_fit"] is False and 0 < doc["extra"]["memory_lower_bound_bytes"] <= 3000
    assert set(doc["extra"]["stages"]) == {"ran", "skipped_for_work", "cut_by_clock"}
    assert doc["params"]["refine"] is True  # a real boolean, not 1
    assert len(doc["assignment"]) == 41 and doc["oom"] is False
    assert doc["assignment"]["w0"] == doc["assignment"]["n29"]


def test_place_then_simulate_round_trip(graph_file, tmp_path, capsys):
    cluster_file = tmp_path / "c.json"
    save_cluster(Cluster.homogeneous(3, 2000.0, slope_us_per_byte=1e-4, intercept_us=10.0), cluster_file)
    out_file = tmp_path / "p.json"
    assert _run(["place", str(graph_file), "--cluster", str(cluster_file), "--placer", "order-place",
                 "--out", str(out_file)], capsys)[0] == 0
    placed = json.loads(out_file.read_text())
    code, out, _ = _run(["simulate", str(graph_file), str(out_file), "--cluster", str(cluster_file)], capsys)
    assert code == 0
    from celeritas_core.readwrite.units import format_us
    assert format_us(placed["predicted_step_time_us"]) in out
    code, out, _ = _run(["simulate", str(graph_file), str(out_file)], capsys)  # devices from the file
    assert code == 0 and "gpu:2" in out


def test_best_effort_placement_reports_oom(graph_file, tmp_path, capsys):
    code, out, _ = _run(["place", str(graph_file), "--devices", "2", "--device-memory", "1KB",
                         "--out", str(tmp_path / "p.json")], capsys)
    assert code == 0
    assert "OOM: gpu:" in out
    assert json.loads((tmp_path / "p.json").read_text())["oom"] is True


@pytest.mark.parametrize(
    ("doc_change", "expected"),
    [
        (lambda d: d.update(format="celeritas-graph/9"), "unknown format tag"),
        (lambda d: d["nodes"].append(dict(d["nodes"][0])), "duplicate node name"),
        (lambda d: d["edges"].append({"src": "n0", "dst": "ghost", "bytes": 1}), "'ghost' is not a node"),
        (lambda d: d["edges"].append({"src": "n0", "dst": "n0", "bytes": 1}), "self-loop"),
        (lambda d: d["edges"].append({"src": "n30", "dst": "n0", "bytes": 1}), "cycle"),
        (lambda d: d["nodes"][3].update(time_us=-1), "time_us"),
        (lambda d: d.update(nodes=[], edges=[]), "empty"),
    ],
)
def test_bad_graphs_give_one_line_errors_and_no_output(graph_file, tmp_path, capsys, doc_change, expected):
    doc = json.loads(graph_file.read_text())
    doc_change(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    out_file = tmp_path / "never.json"
    code, _out, err = _run(["place", str(bad), "--devices", "2", "--device-memory", "1GiB",
                           "--out", str(out_file)], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("celeritas: error: ")
    assert str(bad) in err and expected in err
    assert not out_file.exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--devices", "0", "--device-memory", "1GiB"], "at least one device"),
        (["--devices", "2", "--device-memory=-5GiB"], "--device-memory"),
        (["--devices", "2"], "--devices and --device-memory must be given together"),
        ([], "no cluster"),
        (["--devices", "2", "--device-memory", "1GiB", "--placer", "magic"], "unknown placer 'magic'"),
        (["--devices", "2", "--device-memory", "1GiB", "--R", "0"], "'R': must be >= 1"),
        (["--devices", "2", "--device-memory", "1GiB", "--memory-fraction", "1.5"], "memory_fraction"),
    ],
)
def test_bad_cluster_and_parameters(graph_file, tmp_path, capsys, args, expected):
    out_file = tmp_path / "never.json"
    code, _, err = _run(["place", str(graph_file), *args, "--out", str(out_file)], capsys)
    assert code == 2 and expected in err and err.count("\n") == 1
    assert not out_file.exists()


#: Every command that takes one device's memory, with ``--device-memory 600`` (the unit forgotten).
FORGOTTEN_UNIT = [
    ["place", "{graph}", "--devices", "4", "--device-memory", "600", "--out", "{out}"],
    ["simulate", "{graph}", "{out}", "--devices", "4", "--device-memory", "600"],
    ["info", "{graph}", "--devices", "4", "--device-memory", "600"],
    ["compare", "{graph}", "--devices", "4", "--device-memory", "600", "--out-dir", "{out}"],
    ["remeasure", "--model", "mlp", "--batch", "32", "--fits", "{out}", "--devices", "4",
     "--device-memory", "600", "--out", "{out}"],
    ["profile", "--model", "mlp", "--batch-sizes", "2,4", "--span-target", "32", "--device-memory", "600",
     "--out", "{out}"],
    ["calibrate-comm", "--device-memory", "600", "--out", "{out}"],
    ["train", "--model", "mlp", "--device-memory", "600"],
    ["run", "--model", "mlp", "--device-memory", "600"],
]


@pytest.mark.parametrize("argv", FORGOTTEN_UNIT, ids=lambda argv: argv[0])
def test_a_device_memory_without_its_unit_is_refused_with_the_unit_suggested(graph_file, tmp_path, capsys,
                                                                            argv: list[str]) -> None:
    out = tmp_path / "never"
    code, _, err = _run([a.format(graph=graph_file, out=out) for a in argv], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.endswith("600 bytes is too small for a device; did you mean 600MiB? (write the unit: 600MiB, "
                        "16GiB; a bare number is bytes)\n"), err
    assert not out.exists()


def test_a_large_bare_count_of_bytes_is_a_device_memory(graph_file, tmp_path, capsys) -> None:
    code, out, err = _run(["place", str(graph_file), "--devices", "2", "--device-memory", "17179869184",
                           "--out", str(tmp_path / "p.json")], capsys)
    assert code == 0, err
    assert "2 devices (16.00 GiB)" in out


def test_a_colocation_group_larger_than_any_device_is_placed_best_effort_and_said_not_to_fit(
        graph_file, tmp_path, capsys):
    out_file = tmp_path / "p.json"
    code, out, _ = _run(["place", str(graph_file), "--devices", "2", "--device-memory", "150B",
                         "--out", str(out_file)], capsys)
    assert code == 0 and "OOM: gpu:" in out and "cannot fit:" in out
    doc = json.loads(out_file.read_text())
    assert doc["oom"] is True and doc["extra"]["cannot_fit"] is True


def test_simulate_rejects_a_placement_of_another_graph(graph_file, tmp_path, capsys):
    other = tmp_path / "other.json"
    save_graph(make_graph([("a", "b")]), other)
    out_file = tmp_path / "p.json"
    assert _run(["place", str(other), "--devices", "2", "--device-memory", "1GiB", "--out", str(out_file)],
                capsys)[0] == 0
    code, _, err = _run(["simulate", str(graph_file), str(out_file)], capsys)
    assert code == 2 and "is not in graph" in err


@pytest.fixture
def step_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A 407-op training step, a 3-device cluster and its HEFT placement (the orders' steps differ)."""
    from celeritas_core.generators.synthetic import small_training_graph
    from celeritas_core.placers import place
    from celeritas_core.readwrite.formats import save_placement

    graph, cluster = small_training_graph(3), Cluster.homogeneous(3, 2**40)
    paths = tmp_path / "step.json", tmp_path / "c.json", tmp_path / "heft.json"
    save_graph(graph, paths[0])
    save_cluster(cluster, paths[1])
    save_placement(place(graph, cluster, "heft"), paths[2])
    return paths


def _steps_by_order(graph_path: Path, cluster_path: Path, placement_path: Path,
                    names: tuple[str, ...]) -> dict[str, float]:
    from celeritas_core.readwrite.formats import load_cluster, load_graph
    from celeritas_core.simulation.simulator import simulate

    graph, cluster = load_graph(graph_path), load_cluster(cluster_path)
    assignment = load_placement(placement_path, graph, cluster).assignment
    return {name: simulate(graph, cluster, assignment, dispatch=name).step_time_us for name in names}


def test_simulate_dispatch_replays_under_the_named_order(step_files, capsys):
    from celeritas_core.readwrite.units import format_us

    graph, cluster, placement = step_files
    steps = _steps_by_order(graph, cluster, placement, ("rank", "random:2"))
    assert steps["rank"] != steps["random:2"]
    code, out, err = _run(["simulate", str(graph), str(placement), "--cluster", str(cluster),
                           "--dispatch", "random:2", "--order", "free"], capsys)
    assert code == 0, err
    assert f"step time (simulated)  {format_us(steps['random:2']):>12}" in out
    assert "dispatch order" in out and "random:2" in out
    code, out, _ = _run(["simulate", str(graph), str(placement), "--cluster", str(cluster),
                         "--order", "free"], capsys)
    assert code == 0 and f"step time (simulated)  {format_us(steps['rank']):>12}" in out
    assert "dispatch order" not in out  # the default, documented order says nothing more
    # the placement's own mode enforces its recorded order: the dispatch order then only breaks
    # ties between events at one instant, and the step is the one predicted
    code, out, _ = _run(["simulate", str(graph), str(placement), "--cluster", str(cluster),
                         "--dispatch", "random:2"], capsys)
    assert code == 0 and f"step time (simulated)  {format_us(steps['rank']):>12}" in out


def test_simulate_dispatch_all_prints_every_order_and_the_median(step_files, capsys):
    from celeritas_core.readwrite.units import format_change, format_us
    from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH

    graph, cluster, placement = step_files
    steps = _steps_by_order(graph, cluster, placement, ("rank", *ALTERNATIVE_DISPATCH))
    code, out, err = _run(["simulate", str(graph), str(placement), "--cluster", str(cluster),
                           "--dispatch", "all", "--order", "free"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert f"step time (simulated)  {format_us(steps['rank']):>12}" in out
    assert next(x for x in lines if x.startswith("rank (documented)")).split()[2:4] == \
        format_us(steps["rank"]).split()
    for name in ALTERNATIVE_DISPATCH:
        line = next(x for x in lines if x.startswith(name + " "))
        change = format_change(steps[name] / steps["rank"])
        assert line.split()[1:] == [*format_us(steps[name]).split(), change]
    median = float(np.median([steps[name] for name in ALTERNATIVE_DISPATCH]))
    line = next(x for x in lines if x.startswith("median of the others"))
    assert f"{format_us(median)}    {format_change(median / steps['rank'])}" in line
    others = [steps[name] for name in ALTERNATIVE_DISPATCH]
    assert f"(min {format_us(min(others))}, max {format_us(max(others))})" in line


def test_simulate_dispatch_all_on_one_device_shows_one_step(step_files, tmp_path, capsys):
    from celeritas_core.placers import place
    from celeritas_core.readwrite.formats import load_graph, save_placement
    from celeritas_core.readwrite.units import format_us
    from celeritas_core.simulation.simulator import ALTERNATIVE_DISPATCH

    graph_path, cluster_path, _ = step_files
    graph = load_graph(graph_path)
    single = tmp_path / "single.json"
    save_placement(place(graph, Cluster.homogeneous(3, 2**40), "single"), single)
    code, out, err = _run(["simulate", str(graph_path), str(single), "--cluster", str(cluster_path),
                           "--dispatch", "all"], capsys)
    assert code == 0, err
    total = format_us(graph.total_time_us)
    for name in ("rank (documented)", *ALTERNATIVE_DISPATCH, "median of the others"):
        line = next(x for x in out.splitlines() if x.startswith(name + " "))
        assert total in line and ("+0.0%" in line or name == "rank (documented)")


@pytest.mark.parametrize("name", ["lifo", "random", "random:-1", "RANK", ""])
def test_simulate_bad_dispatch_is_one_line_before_any_file_is_read(step_files, tmp_path, capsys, name):
    graph, cluster, placement = step_files
    for files in ([str(graph), str(placement), "--cluster", str(cluster)],
                  [str(tmp_path / "missing.json"), str(tmp_path / "missing_too.json")]):
        code, out, err = _run(["simulate", *files, "--dispatch", name], capsys)
        assert code == 2 and out == ""
        assert err.startswith(f"celeritas: error: --dispatch: unknown dispatch order {name!r}")
        assert err.count("\n") == 1 and "random:N" in err and "all" in err


def test_info_and_placers(graph_file, capsys):
    code, out, _ = _run(["info", str(graph_file)], capsys)
    assert code == 0 and "41 (10 with in-degree 0)" in out and "CCR" in out
    code, out, _ = _run(["placers"], capsys)
    assert code == 0 and "celeritas" in out and "order-place" in out and "memory_fraction=0.25" in out
    assert "threshold=0.1" in out and "--param NAME=VALUE" in out


def test_place_passes_params_to_the_chosen_placer(graph_file, tmp_path, capsys):
    out_file = tmp_path / "p.json"
    code, _, err = _run(["place", str(graph_file), "--devices", "2", "--device-memory", "3KB",
                           "--placer", "m-sct", "--param", "threshold=0.3", "--out", str(out_file)], capsys)
    assert code == 0, err
    params = json.loads(out_file.read_text())["params"]
    assert params == {"threshold": 0.3, "fusion": True, "live_memory": True, "baechi_model": True}
    code, _, err = _run(["place", str(graph_file), "--devices", "2", "--device-memory", "3KB",
                         "--refine", "0", "--out", str(out_file)], capsys)
    assert code == 0 and json.loads(out_file.read_text())["params"]["refine"] == 0


def test_the_summary_names_the_wall_clock_safety_net_only_when_it_cut_something(graph_file, tmp_path, capsys):
    out_file = tmp_path / "p.json"
    place = ["place", str(graph_file), "--devices", "2", "--device-memory", "3KB", "--out", str(out_file)]
    code, out, err = _run(place, capsys)
    assert code == 0, err
    (placer,) = [line for line in out.splitlines() if line.startswith("placer ")]
    assert " work_seconds=1.0 " in placer and " search_budget=1200000 " in placer  # the budgets
    assert "search_seconds" not in out and "safety net" not in out
    assert json.loads(out_file.read_text())["params"]["search_seconds"] == 60.0  # still recorded
    code, out, err = _run([*place, "--param", "search_seconds=0"], capsys)  # the clock cuts at once
    assert code == 0, err
    (placer,) = [line for line in out.splitlines() if line.startswith("placer ")]
    (net,) = [line for line in out.splitlines() if line.startswith("safety net ")]
    assert "search_seconds" not in placer
    assert "the wall clock passed search_seconds=0.0 and cut optional quality work: " in net
    assert net.endswith("(an idle or faster machine may place better; raise search_seconds to let it finish)")
    cut = json.loads(out_file.read_text())["extra"]["stages"]["cut_by_clock"]
    assert "critical-path search" in cut and all(stage in net for stage in cut)


@pytest.mark.parametrize(("argv", "message"), [
    (["--placer", "m-sct", "--param", "R=5"], "placer 'm-sct': unknown parameter 'R'"),
    (["--placer", "m-sct", "--param", "threshold=x"], "expected a number, got 'x'"),
    (["--param", "=3"], "--param: expected NAME=VALUE"),
])
def test_place_bad_params_are_one_line_errors(graph_file, tmp_path, capsys, argv, message):
    out_file = tmp_path / "p.json"
    code, _, err = _run(["place", str(graph_file), "--devices", "2", "--device-memory", "3KB", *argv,
                         "--out", str(out_file)], capsys)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not out_file.exists()


@pytest.mark.parametrize("command", [[], ["place"], ["compare"], ["simulate"], ["info"], ["placers"],
                                     ["generate"], ["convert"], ["models"], ["graph"], ["profile"], ["fit"],
                                     ["remeasure"], ["validate"], ["calibrate-comm"], ["run"], ["runs"],
                                     ["runs", "compare"]])
def test_help_on_every_command(command):
    proc = subprocess.run([sys.executable, "-m", "celeritas_cli", *command, "--help"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "usage: celeritas" in proc.stdout


def test_console_script_exit_code_and_no_traceback(tmp_path):
    exe = Path(sys.executable).with_name("celeritas")
    missing = tmp_path / "missing.json"
    proc = subprocess.run([str(exe), "info", str(missing)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"celeritas: error: {missing}: file not found"


def test_loaded_placement_matches_written(graph_file, tmp_path, capsys):
    out_file = tmp_path / "p.json"
    assert _run(["place", str(graph_file), "--devices", "2", "--device-memory", "3KB", "--out",
                 str(out_file)], capsys)[0] == 0
    from celeritas_core.readwrite.formats import load_graph
    graph = load_graph(graph_file)
    loaded = load_placement(out_file, graph)
    doc = json.loads(out_file.read_text())
    assert [doc["assignment"][n] for n in graph.node_names] == loaded.assignment.tolist()


def test_a_reader_that_goes_away_is_not_an_error(monkeypatch, capsys):
    """``celeritas placers | head -2``: the pipe closes early; exit 0 and no error message."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    stdout = os.fdopen(write_end, "w", buffering=1)  # line-buffered: the first print hits the closed pipe
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        assert main(["placers"]) == 0
    finally:
        stdout.close()
    assert "error" not in capsys.readouterr().err
