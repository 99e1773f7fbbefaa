"""Fuzzing every command with several hundred invalid inputs: mutated graphs, clusters,
placements, profiles and fits, bad flags, and output paths that must never be replaced (a FIFO, a
symbolic link, a directory, the input itself, a hard link to it). Each case must exit with status
2, print exactly one line on stderr and no traceback, and leave the working folder exactly as it
was (names, kinds, sizes, mtimes, inodes and content hashes). A fixed seed makes the cases the
same on every run.

The TensorFlow commands are covered through their flag and file validation, which fails before
TensorFlow loads (checked in a subprocess). No real device node is ever given as an output; a
folder of ``/proc`` or ``/sys`` is (nothing can be created there). The cases issue 23's fuzzer
found run as a fixed list too, and the MLflow queries (``runs compare``, ``production``) are fed
stores that are not MLflow databases.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import random
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from celeritas_cli.main import main

SEED = 20_250_611
CASES = 890

# ---------------------------------------------------------------------------- valid base files
GRAPH: dict[str, Any] = {
    "format": "celeritas-graph/1", "name": "g", "meta": {"batch_size": 8},
    "nodes": [
        {"name": "a", "op": "Placeholder", "time_us": 5.0, "memory_bytes": 100},
        {"name": "b", "op": "MatMul", "time_us": 20.0, "memory_bytes": 200, "persistent_bytes": 40,
         "output_bytes": [80, 80], "scratch_bytes": 0},
        {"name": "c", "op": "Relu", "time_us": 30, "memory_bytes": 300, "colocation": "grp",
         "output_bytes": [60], "output_aliases": [{"node": "b", "output": 0}]},
        {"name": "d", "op": "Sum", "time_us": 7, "memory_bytes": 50, "colocation": "grp"},
        {"name": "e", "op": "Add", "time_us": 11, "memory_bytes": 70},
        {"name": "f", "op": "Mul", "time_us": 13, "memory_bytes": 90},
    ],
    "edges": [
        {"src": "a", "dst": "b", "bytes": 1000},
        {"src": "b", "dst": "c", "bytes": 80},
        {"src": "c", "dst": "d", "bytes": 0},
        {"src": "a", "dst": "c", "bytes": 1000, "src_output": 0},
        {"src": "b", "dst": "d", "bytes": 80, "src_output": 1},
        {"src": "a", "dst": "e", "bytes": 1000},
        {"src": "e", "dst": "f", "bytes": 500},
        {"src": "f", "dst": "d", "bytes": 500},
    ],
}
CLUSTER: dict[str, Any] = {
    "format": "celeritas-cluster/1",
    "devices": [{"name": "gpu:0", "memory_bytes": 100_000, "speed": 1.0},
                {"name": "gpu:1", "memory_bytes": 200_000, "speed": 2.0}],
    "comm": {"slope_us_per_byte": 1e-3, "intercept_us": 5.0},
}
PLACEMENT: dict[str, Any] = {
    "format": "celeritas-placement/1", "graph": "g", "placer": "manual", "params": {},
    "devices": ["gpu:0", "gpu:1"], "assignment": {"a": 0, "b": 0, "c": 1, "d": 1, "e": 0, "f": 1},
    "device_capacity_bytes": [100_000, 200_000], "placement_seconds": 0.1, "coarse_nodes": 3,
}
PROFILE: dict[str, Any] = {
    "format": "celeritas-profile/1", "model": "m", "model_config": {},
    "profiles": [{"batch_size": 2, "time_us": {"a": 1.0, "b": 2.0}, "memory_bytes": {"a": 10, "b": 20}},
                 {"batch_size": 4, "time_us": {"a": 2.0, "b": 4.0}, "memory_bytes": {"a": 20, "b": 40}}],
}
FITS: dict[str, Any] = {
    "format": "celeritas-fits/1", "batch_sizes": [2, 4],
    "ops": {"a": {"time_us": [0.5, 0.0], "memory_bytes": [5.0, 0.0], "time_r2": 1.0, "memory_r2": 1.0}},
}
BASE = {"g.json": GRAPH, "c.json": CLUSTER, "p.json": PLACEMENT, "prof.json": PROFILE, "fits.json": FITS}

# Paths in the work folder that an output must never replace, and inputs that must never be read.
ROOT = Path(__file__).resolve().parents[2]
# Folders of the kernel's own filesystems (Linux), where no output file can be created.
KERNEL_OUTPUTS = ["/proc/x.json", "/sys/x.json"] if os.path.isdir("/proc/self") else []
# Paths that an output must never replace, whatever the command's inputs are…
NEVER_OUTPUTS = ["fifo", "link.json", "dir", "g.json/x.json", "", "loop.json", "dirlink",
                 "newdir/", "newdir/.", "dir/", *KERNEL_OUTPUTS]
# …and, for a command reading g.json, the graph itself and a hard link to it.
BAD_OUTPUTS = [*NEVER_OUTPUTS, "g.json", "hard.json"]
BAD_INPUTS = ["fifo", "/dev/zero", "/dev/null", "dir", "missing.json", "loop.json", "empty.json",
              "garbage.json", "truncated.json", "deep.json", "utf16.json"]

# ---------------------------------------------------------------------------- invalid values
NOT_NUMBERS = ["2", "fast", True, False, None, [], {}, [1]]
NON_FINITE = [math.nan, math.inf, -math.inf, 10**400, -(10**400)]
BAD_BYTES = [-1, -0.5, 1e308, 1.1e18, 2**63 - 1, 2**64, *NON_FINITE, *NOT_NUMBERS]
BAD_TIME = [-1, 1e308, 1.1e15, 2e15, *NON_FINITE, *NOT_NUMBERS]
BAD_SRC_OUTPUT = [-1, 2**31, 2**63 - 1, 2**64, 1.5, 0.0, "0", True, None, math.nan]

Mutation = Callable[[dict[str, Any], random.Random], Any]


def _set(doc: dict[str, Any], path: list[Any], value: Any) -> None:
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def _graph_mutations() -> list[Mutation]:
    def node_field(field: str, values: list[Any]) -> Mutation:
        return lambda d, r: _set(d, ["nodes", r.randrange(len(d["nodes"])), field], r.choice(values))

    def edge_field(field: str, values: list[Any]) -> Mutation:
        return lambda d, r: _set(d, ["edges", r.randrange(len(d["edges"])), field], r.choice(values))

    def totals(field: str, value: float) -> Mutation:  # each value in range, the sum above the limit
        def mutate(d: dict[str, Any], r: random.Random) -> None:
            for node in d["nodes"]:
                node[field] = value
        return mutate

    def edge_totals(d: dict[str, Any], r: random.Random) -> None:
        for e in d["edges"]:
            e["bytes"] = 0.3e18

    def delete(path_of: Callable[[dict[str, Any], random.Random], list[Any]]) -> Mutation:
        def mutate(d: dict[str, Any], r: random.Random) -> None:
            path = path_of(d, r)
            target: Any = d
            for key in path[:-1]:
                target = target[key]
            del target[path[-1]]
        return mutate

    return [
        node_field("time_us", BAD_TIME), node_field("memory_bytes", BAD_BYTES),
        lambda d, r: _set(d, ["nodes", 1, r.choice(["persistent_bytes", "scratch_bytes"])],
                          r.choice(BAD_BYTES)),
        lambda d, r: _set(d, ["nodes", 1, "output_bytes"], r.choice([[r.choice(BAD_BYTES), 1], "x", 5, {}])),
        lambda d, r: _set(d, ["nodes", 2, "output_aliases"],
                          r.choice([[{"node": "zz", "output": 0}], [{"node": "b", "output": 2**31}], "x",
                                    [None, None], [{"node": "b"}], [{"node": "b", "output": True}]])),
        node_field("name", ["", 5, None, []]), node_field("op", [5, None, [], True]),
        lambda d, r: _set(d, ["nodes", r.randrange(1, len(d["nodes"])), "name"], "a"),  # a duplicate
        node_field("colocation", ["", 5, [], {}]),
        edge_field("bytes", BAD_BYTES), edge_field("src_output", BAD_SRC_OUTPUT),
        edge_field("src", ["ghost", 5, None, ""]), edge_field("dst", ["ghost", 5, None]),
        lambda d, r: d["edges"].append({"src": "c", "dst": "c", "bytes": 1}),
        lambda d, r: d["edges"].append({"src": "d", "dst": "a", "bytes": 1}),  # a cycle
        lambda d, r: d["edges"].append(r.choice([[], "x", 5, None, {"src": "a"}])),
        lambda d, r: d["nodes"].append(r.choice([[], "x", 5, None, {"name": "z"}])),
        lambda d, r: _set(d, [r.choice(["format", "meta", "nodes", "edges"])],
                          r.choice([None, 5, "x", "celeritas-graph/2"])),
        lambda d, r: _set(d, ["name"], r.choice([None, 5, "", []])),
        delete(lambda d, r: [r.choice(["format", "name", "nodes", "edges"])]),
        delete(lambda d, r: ["nodes", r.randrange(len(d["nodes"])), r.choice(["name", "op", "time_us",
                                                                               "memory_bytes"])]),
        delete(lambda d, r: ["edges", r.randrange(len(d["edges"])), r.choice(["src", "dst", "bytes"])]),
        totals("time_us", 0.3e15), totals("memory_bytes", 0.3e18), edge_totals,
        lambda d, r: d.update(nodes=[], edges=[]),
    ]


def _cluster_mutations() -> list[Mutation]:
    def device_field(field: str, values: list[Any]) -> Mutation:
        return lambda d, r: _set(d, ["devices", r.randrange(len(d["devices"])), field], r.choice(values))

    return [
        device_field("memory_bytes", [0, *BAD_BYTES]),
        device_field("speed", [0, -1, 1e-7, 1.1e6, 1e308, *NON_FINITE, "fast", True, None, []]),
        device_field("name", ["", 5, None, []]),
        lambda d, r: _set(d, ["devices", 1, "name"], "gpu:0"),  # a duplicate
        lambda d, r: _set(d, ["comm", "slope_us_per_byte"],
                          r.choice([-1, 1.5, 1e308, *NON_FINITE, "x", True])),
        lambda d, r: _set(d, ["comm", "intercept_us"], r.choice([-1, 1.1e15, 1e308, *NON_FINITE, "x", None])),
        lambda d, r: _set(d, ["comm"], r.choice([[], "x", 5])),
        lambda d, r: _set(d, ["devices"], r.choice(
            [[], None, "x", {"a": 1}, [{"name": f"d{i}", "memory_bytes": 1} for i in range(1025)]])),
        lambda d, r: _set(d, ["format"], r.choice([None, "celeritas-graph/1", 5])),
        lambda d, r: d["devices"].append(r.choice([None, 5, "gpu:2", {"name": "gpu:9"}])),
    ]


def _placement_mutations() -> list[Mutation]:
    return [
        lambda d, r: _set(d, ["assignment", r.choice("abcdef")],
                          r.choice([2, -1, 1.0, True, "gpu:1", None, 2**63])),
        lambda d, r: d["assignment"].pop(r.choice("abcdef")),
        lambda d, r: _set(d, ["assignment", "ghost"], 0),
        lambda d, r: _set(d, ["assignment"], r.choice([[], "x", None])),
        lambda d, r: _set(d, ["devices"], r.choice([[], None, [0, 1], ["gpu:0"] * 1025, ["a", "b", "c"]])),
        lambda d, r: _set(d, ["coarse_nodes"], r.choice([0, -1, 2**31, "x", 1.5, True])),
        lambda d, r: _set(d, ["placement_seconds"], r.choice([-1, "x", *NON_FINITE])),
        lambda d, r: _set(d, ["placer"], r.choice([5, None, []])),
        lambda d, r: _set(d, ["params"], r.choice([[], "x", 5])),
        lambda d, r: _set(d, ["format"], r.choice([None, "celeritas-graph/1", 5])),
    ]


def _profile_mutations() -> list[Mutation]:
    return [
        lambda d, r: _set(d, ["profiles", r.randrange(2), "batch_size"],
                          r.choice([0, -2, "2", 2.5, True, 1e30, 2_000_000, math.nan, None, 10**400])),
        lambda d, r: _set(d, ["profiles", r.randrange(2), r.choice(["time_us", "memory_bytes"]), "a"],
                          r.choice([math.nan, "1", True, None, -1, 1e308, 2e18, math.inf])),
        lambda d, r: _set(d, ["profiles", r.randrange(2), r.choice(["time_us", "memory_bytes"])],
                          r.choice([[], "x", None, 5])),
        lambda d, r: _set(d, ["profiles"], r.choice([[], None, "x", [d["profiles"][0]]])),
        lambda d, r: _set(d, ["profiles", 1, "batch_size"], 2),  # a repeated batch size
        lambda d, r: _set(d, ["profiles", r.randrange(2)], {"batch_size": 8, "time_us": {},
                                                           "memory_bytes": {}}),  # no ops to fit
        lambda d, r: _set(d, ["profiles"], [{"batch_size": b, "time_us": {}, "memory_bytes": {}}
                                            for b in (2, 4)]),
        lambda d, r: _set(d, ["format"], r.choice([None, "celeritas-fits/1"])),
    ]


def _fits_mutations() -> list[Mutation]:
    return [
        lambda d, r: _set(d, ["ops", "a", r.choice(["time_us", "memory_bytes"])],
                          r.choice([[1], [1, 2, 3], "x", None, [math.nan, 0], [10**400, 0], [1e31, 0],
                                    [True, 0]])),
        lambda d, r: _set(d, ["batch_sizes"],
                          r.choice([[0], [-1], ["2"], [2.5], [True], None, [], [2_000_000]])),
        lambda d, r: _set(d, ["ops"], r.choice([{}, [], None, {"a": 5}])),
        lambda d, r: _set(d, ["ops", "a", "time_r2"], r.choice(["x", math.inf, [], 10**400])),
        lambda d, r: _set(d, ["format"], r.choice([None, "celeritas-profile/1"])),
    ]


# ---------------------------------------------------------------------------- bad flags
CLUSTER_FLAGS = [
    ["--devices", "0", "--device-memory", "1GiB"], ["--devices", "-2", "--device-memory", "1GiB"],
    ["--devices", "1025", "--device-memory", "1GiB"], ["--devices", "100000", "--device-memory", "1GiB"],
    ["--devices", "abc", "--device-memory", "1GiB"], ["--devices", "2.5", "--device-memory", "1GiB"],
    *[["--devices", "2", "--device-memory", m] for m in ("0", "-1GiB", "inf", "nan", "1e30", "abc", "1.1e18",
                                                          "0.5", "")],
    *[["--devices", "2", "--device-memory", "1GiB", "--comm-slope", v]
      for v in ("nan", "inf", "-1", "1e308", "1.5", "x", "-inf")],
    *[["--devices", "2", "--device-memory", "1GiB", "--comm-intercept", v]
      for v in ("nan", "-inf", "-1", "1.1e15", "1e308", "inf")],
    ["--devices", "2"], ["--device-memory", "1GiB"], ["--cluster", "c.json", "--devices", "2"],
    ["--cluster", ""], ["--cluster", "", "--devices", "2", "--device-memory", "1GiB"],
]
PLACER_FLAGS = [
    ["--R", "0"], ["--R", "-1"], ["--R", "1e40"], ["--R", "99999999999999999999"], ["--R", "x"],
    ["--memory-fraction", "0"], ["--memory-fraction", "nan"], ["--memory-fraction", "1.5"],
    ["--memory-fraction", "inf"], ["--headroom", "1"], ["--headroom", "nan"], ["--headroom", "-0.1"],
    ["--headroom", "inf"], ["--refine", "2"], ["--param", "=3"], ["--param", "threshold"],
    ["--param", "R=0"], ["--param", "R=nan"], ["--param", "R=1e300"], ["--param", "bogus=1"],
    ["--param", "search_seconds=1e9"], ["--param", "search_budget=-1"],
]
DISPATCH_FLAGS = [["--dispatch", v] for v in ("lifo", "", "random", "random:", "random:-1", "random:x",
                                             "random:1234567890", "RANK", "all:1", "fifo ")]
GENERATE_FLAGS = [
    ["layered", "--tasks", "0"], ["layered", "--tasks", "1"], ["layered", "--tasks", "3000000"],
    ["layered", "--ccr", "-1"], ["layered", "--ccr", "nan"], ["layered", "--ccr", "inf"],
    ["layered", "--ccr", "1e300"], ["layered", "--mean-predecessors", "0"], ["layered", "--modules", "3"],
    ["inception-modules", "--modules", "0"], ["inception-modules", "--modules", "121"],
    ["towers", "--towers", "0"], ["towers", "--batch-size", "0"], ["towers", "--batch-size", "2000000"],
    ["towers", "--seed", "-1"], ["nmt", "--tasks", "5"], ["bogus"],
    ["transformer", "--ops", "5"], ["transformer", "--ops", "0"], ["nmt", "--ops", "20000000"],
    ["layered", "--ops", "1000"], ["inception_v3", "--ops", "x"],
]


# ---------------------------------------------------------------------------- the work folder
def _write(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc), encoding="utf-8")  # NaN / Infinity literals where present


def _prepare(folder: Path) -> None:
    for name, doc in BASE.items():
        _write(folder / name, doc)
    os.mkfifo(folder / "fifo")
    (folder / "link.json").symlink_to("g.json")
    (folder / "dir").mkdir()
    (folder / "dirlink").symlink_to("dir")
    os.link(folder / "g.json", folder / "hard.json")
    (folder / "loop.json").symlink_to("loop.json")
    (folder / "empty.json").write_bytes(b"")
    (folder / "garbage.json").write_bytes(bytes(range(256)))
    (folder / "truncated.json").write_text(json.dumps(GRAPH)[:-7])
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "utf16.json").write_bytes(json.dumps(GRAPH).encode("utf-16"))
    os.mkfifo(folder / "dir" / "compare.json")  # an out-dir holding a FIFO where an output goes


def _snapshot(folder: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``folder``: kind, size, mtime, inode and (regular files) content hash or
    (links) target. FIFOs are never opened."""
    entries: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            entry: tuple[Any, ...] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ino,
                                      st.st_nlink)
            if stat.S_ISREG(st.st_mode):
                entry += (hashlib.sha256(Path(path).read_bytes()).hexdigest(),)
            elif stat.S_ISLNK(st.st_mode):
                entry += (os.readlink(path),)
            entries[os.path.relpath(path, folder)] = entry
    return entries


# ---------------------------------------------------------------------------- the cases
def _doc_file(r: random.Random, name: str, mutations: list[Mutation],
              base: dict[str, Any]) -> tuple[str, str]:
    """A mutated copy of ``base`` as JSON text for the file ``name``: returns (name, text)."""
    doc = copy.deepcopy(base)
    k = r.randrange(len(mutations))
    replaced = mutations[k](doc, r)
    return name, json.dumps(doc if replaced is None else replaced)


def _cases(seed: int, count: int) -> list[tuple[list[str], dict[str, str]]]:
    """``count`` (argv, files to write first) pairs, each invalid in exactly one respect."""
    r = random.Random(seed)
    graph_m, cluster_m, placement_m = _graph_mutations(), _cluster_mutations(), _placement_mutations()
    profile_m, fits_m = _profile_mutations(), _fits_mutations()
    ok_cluster = ["--devices", "2", "--device-memory", "1MiB"]
    cases: list[tuple[list[str], dict[str, str]]] = []

    def bad_graph() -> tuple[str, dict[str, str]]:
        if r.random() < 0.25:
            return r.choice(BAD_INPUTS), {}
        name, text = _doc_file(r, "case_graph.json", graph_m, GRAPH)
        return name, {name: text}

    def bad_cluster() -> tuple[list[str], dict[str, str]]:
        roll = r.random()
        if roll < 0.4:
            return list(r.choice(CLUSTER_FLAGS)), {}
        if roll < 0.55:
            return ["--cluster", r.choice(BAD_INPUTS)], {}
        name, text = _doc_file(r, "case_cluster.json", cluster_m, CLUSTER)
        return ["--cluster", name], {name: text}

    while len(cases) < count:
        command = r.choice(["place", "place", "compare", "compare", "simulate", "info", "generate", "fit",
                            "tf"])
        what = r.choice(["graph", "cluster", "flags", "output"])
        files: dict[str, str] = {}
        if command in ("place", "compare"):
            graph, cluster, extra, out = "g.json", list(ok_cluster), [], None
            if what == "graph":
                graph, files = bad_graph()
            elif what == "cluster":
                cluster, files = bad_cluster()
            elif what == "flags":
                extra = list(r.choice(PLACER_FLAGS))
                if command == "place" and r.random() < 0.2:
                    extra = ["--placer", r.choice(["magic", "", "../x"])]
                if command == "compare" and r.random() < 0.2:
                    extra = ["--placers", r.choice(["bogus", "celeritas,,m-topo", " ", "single,single", ""])]
            else:
                out = r.choice(BAD_OUTPUTS) if command == "place" else r.choice(
                    ["g.json", "fifo", "dir", "link.json", "hard.json", "", *KERNEL_OUTPUTS])
            argv = [command, graph, *cluster, *extra]
            if command == "place":
                argv += ["--out", out if out is not None else "out.json"]
            else:
                argv += ["--out-dir", out if out is not None else "outdir"]
                if r.random() < 0.5:
                    argv.append("--quiet")
                if r.random() < 0.3 and out not in ("fifo", "dir"):
                    argv.append("--no-figures")
        elif command == "simulate":
            graph, placement, cluster, dispatch = "g.json", "p.json", [], []
            if r.random() < 0.3:  # a valid order must not hide what else is wrong
                dispatch = ["--dispatch", r.choice(["fifo", "all", "random:2"])]
            if what == "graph":
                graph, files = bad_graph()
            elif what == "cluster":
                cluster, files = bad_cluster()
            elif what in ("flags", "output") and r.random() < 0.3:
                dispatch = list(r.choice(DISPATCH_FLAGS))  # a bad order, with valid files
            else:
                if r.random() < 0.25:
                    placement = r.choice(BAD_INPUTS)
                else:
                    placement, text = _doc_file(r, "case_placement.json", placement_m, PLACEMENT)
                    files = {placement: text}
                if r.random() < 0.5:
                    cluster = ["--cluster", "c.json"]
            argv = ["simulate", graph, placement, *cluster, *dispatch]
        elif command == "info":
            graph, cluster = "g.json", []
            if what in ("graph", "output"):
                graph, files = bad_graph()
            else:
                cluster, files = bad_cluster()
            argv = ["info", graph, *cluster]
        elif command == "generate":
            if what in ("output", "graph"):
                argv = ["generate", "layered", "--tasks", "10", "--out", r.choice(NEVER_OUTPUTS)]
            else:
                argv = ["generate", *r.choice(GENERATE_FLAGS), "--out", "gen.json"]
        elif command == "fit":
            profile, extra, out = "prof.json", [], "fits_out.json"
            if what in ("graph", "cluster"):
                if r.random() < 0.25:
                    profile = r.choice(BAD_INPUTS)
                else:
                    profile, text = _doc_file(r, "case_profile.json", profile_m, PROFILE)
                    files = {profile: text}
            elif what == "flags":
                extra = ["--batch", r.choice(["0", "-1", "2000000", "x", "2.5"])]
            else:
                out = r.choice([*NEVER_OUTPUTS, "prof.json"])
            argv = ["fit", profile, *extra, "--out", out]
        else:
            argv, files = _tf_case(r, fits_m, what)
        cases.append((argv, files))
    return cases


def _tf_case(r: random.Random, fits_m: list[Mutation], what: str) -> tuple[list[str], dict[str, str]]:
    """A TensorFlow command whose flags or files are invalid: it must fail before TensorFlow loads."""
    model = ["--model", "tensor_holography"]
    out_bad = r.choice([o for o in NEVER_OUTPUTS if o != ""])
    kind = r.choice(["graph", "profile", "remeasure", "validate", "calibrate-comm"])
    files: dict[str, str] = {}
    if kind == "graph":
        flags = r.choice([["--batch", "0"], ["--batch", "2000000"], ["--steps", "0"], ["--steps", "-1"],
                          ["--costs", "magic"], ["--out", out_bad]])
        argv = ["graph", *model, "--batch", "4", "--out", "gout.json", *flags]
    elif kind == "profile":
        flags = r.choice([["--batch-sizes", v] for v in ("0,2", "2", "2,2", "a,b", "2,2000000", "-2,4", ",")]
                         + [["--steps", "0"], ["--steps", "200000"], ["--out", out_bad]])
        argv = ["profile", *model, "--batch-sizes", "2,4", "--out", "pout.json", *flags]
    elif kind == "remeasure":
        base = ["remeasure", *model, "--batch", "8", "--fits", "fits.json", "--devices", "2",
                "--device-memory", "1MiB", "--out", "rout.json"]
        roll = r.random()
        if roll < 0.3:
            fits, text = _doc_file(r, "case_fits.json", fits_m, FITS)
            files = {fits: text}
            base[base.index("fits.json")] = fits
            flags = []
        elif roll < 0.4:
            base[base.index("fits.json")] = r.choice(BAD_INPUTS)
            flags = []
        else:
            flags = r.choice([["--batch", "0"], ["--steps", "0"], ["--devices", "100000"], ["--out", out_bad],
                              ["--accuracy-out", "rout.json"], ["--estimated-out", "fits.json"],
                              ["--cdf-out", out_bad], ["--comm-slope", "nan"], ["--batch", "1000001"]])
        argv = [*base, *flags]
    elif kind == "validate":
        placement = "p.json"
        flags = r.choice([["--batch", "0"], ["--warmup", "-1"], ["--steps", "0"], ["--devices", "5000"],
                          ["--out", out_bad], ["--out", "p.json"], ["--steps", "1000000"]])
        if r.random() < 0.2:
            placement, flags = r.choice(BAD_INPUTS), []
        argv = ["validate", *model, "--batch", "4", placement, "--out", "vout.json", *flags]
    else:
        flags = r.choice([["--devices", "0"], ["--devices", "2000"], ["--repeats", "0"], ["--sizes", "2GiB"],
                          ["--sizes", "0"], ["--sizes", ""], ["--sizes", ","], ["--device-memory", "0"],
                          ["--device-memory", "1e30"], ["--out", out_bad]])
        argv = ["calibrate-comm", "--device-memory", "1GiB", "--out", "cout.json", *flags]
    return argv, files


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int | str, str, str]:
    """Exit status, stdout and stderr of ``celeritas ARGV`` in this process; an exception that
    escapes ``main`` is a status naming it, and a "Traceback" on stderr."""
    escaped = ""
    try:
        code: int | str = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    except Exception as exc:  # what the CLI let through: counted as a failure, not a crash of the test
        code, escaped = f"raised {type(exc).__name__}", f"Traceback: {type(exc).__name__}: {exc}\n"
    out, err = capsys.readouterr()
    return code, out, err + escaped


def _failures(cases: list[tuple[list[str], dict[str, str]]], work: Path,
              capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The cases (argv, files to write first) that do not exit 2 with one line ``celeritas…
    error: …`` on stderr, without a traceback, leaving ``work`` exactly as it was."""
    failures: list[str] = []
    for argv, files in cases:
        for name, text in files.items():
            (work / name).write_text(text, encoding="utf-8")
        before = _snapshot(work)
        code, out, err = _run(argv, capsys)
        after = _snapshot(work)
        problems = []
        if code != 2:
            problems.append(f"exit {code}")
        if not (err.endswith("\n") and err.count("\n") == 1 and err.startswith("celeritas")
                and "error:" in err):
            problems.append(f"stderr {err[-300:]!r}")
        if "Traceback" in err or "Traceback" in out:
            problems.append("traceback")
        if after != before:
            changed = sorted(set(after.items()) ^ set(before.items()))
            problems.append(f"folder changed: {changed[:4]}")
        if problems:
            failures.append(f"{argv}: {'; '.join(problems)}")
        for name in files:
            (work / name).unlink()
    return failures


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    _prepare(folder)
    monkeypatch.chdir(folder)  # default outputs (GRAPH_STEM.placer.placement.json, …) would land here
    return folder


# ---------------------------------------------------------------------------- tests
def test_the_base_files_are_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The positive control: unmutated, every command succeeds on the base files."""
    monkeypatch.chdir(tmp_path)
    for name, doc in BASE.items():
        _write(tmp_path / name, doc)
    ok = ["--devices", "2", "--device-memory", "1MiB"]
    for argv in (["place", "g.json", *ok, "--out", "out.json"],
                 ["place", "g.json", "--cluster", "c.json", "--placer", "metis", "--out", "out.json"],
                 ["compare", "g.json", *ok, "--placers", "single,m-topo", "--out-dir", "outdir", "--quiet"],
                 ["simulate", "g.json", "p.json"], ["simulate", "g.json", "p.json", "--cluster", "c.json"],
                 ["simulate", "g.json", "p.json", "--dispatch", "all"],
                 ["simulate", "g.json", "p.json", "--cluster", "c.json", "--dispatch", "random:3"],
                 ["info", "g.json"], ["info", "g.json", "--cluster", "c.json"],
                 ["generate", "layered", "--tasks", "10", "--out", "gen.json"],
                 ["fit", "prof.json", "--batch", "8", "--out", "fits_out.json"]):
        code, _, err = _run(argv, capsys)
        assert code == 0, (argv, err)
    assert sorted(p.name for p in (tmp_path / "outdir").iterdir()) == ["compare.csv", "compare.json",
                                                                        "gantt.png", "memory.png"]


def test_every_command_refuses_mutated_inputs(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    failures = _failures(_cases(SEED, CASES), work, capsys)
    assert not failures, f"{len(failures)} of {CASES} cases failed:\n" + "\n".join(failures[:20])


def test_the_cases_issue_23_found_are_refused(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each case the issue's fuzzer found, whatever the random draws above pick."""
    failures = _failures(ISSUE_23_CASES, work, capsys)
    assert not failures, f"{len(failures)} of {len(ISSUE_23_CASES)} cases failed:\n" + "\n".join(failures)


def test_metis_and_celeritas_place_on_a_cluster_with_a_tiny_device(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A device of 1e-40 bytes beside one of 200 kB is valid: the placers must work (Metis used to
    raise pymetis's "Caught an unknown exception!")."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "g.json", GRAPH)
    tiny = copy.deepcopy(CLUSTER)
    tiny["devices"][0]["memory_bytes"] = 1e-40
    _write(tmp_path / "tiny.json", tiny)
    for argv in (["place", "g.json", "--cluster", "tiny.json", "--placer", "metis", "--out", "out.json"],
                 ["compare", "g.json", "--cluster", "tiny.json", "--placers", "metis,celeritas", "--out-dir",
                  "outdir", "--quiet", "--no-figures"]):
        code, _, err = _run(argv, capsys)
        assert code == 0 and "Traceback" not in err, (argv, err)
    assert json.loads((tmp_path / "out.json").read_text())["assignment"] == dict.fromkeys("abcdef", 1)


def _sqlite_with_table(path: Path) -> None:
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("CREATE TABLE inventory (item TEXT)")
    con.commit()
    con.close()


@pytest.mark.parametrize("store", ["garbage", "text", "folder", "not-mlflow"])
@pytest.mark.parametrize("command", [["runs", "compare"], ["production", "show"], ["production", "history"]])
def test_run_queries_refuse_a_store_that_is_not_an_mlflow_database(
        store: str, command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``MLFLOW_TRACKING_URI=sqlite:///x.db`` naming garbage, a folder or another program's database:
    one line naming the store, exit 2, and the file as it was (MLflow would add its tables to it)."""
    db = tmp_path / "x.db"
    if store == "garbage":
        db.write_bytes(bytes(range(256)) * 8)
    elif store == "text":
        db.write_text("hello\n")
    elif store == "folder":
        db.mkdir()
    else:
        _sqlite_with_table(db)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    before = _snapshot(tmp_path)
    code, out, err = _run([*command, "--model", "nmt"], capsys)
    assert code == 2 and err.startswith("celeritas: error: MLFLOW_TRACKING_URI=sqlite:///"), (code, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err and str(db) in err, err
    assert _snapshot(tmp_path) == before


def test_run_queries_on_a_missing_store_find_nothing_and_create_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'no' / 'store' / 'mlflow.db'}")
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    for command, said in ((["runs", "compare"], "no runs"), (["production", "show"], "no champion"),
                          (["production", "history"], "no decisions")):
        code, out, err = _run([*command, "--model", "nmt"], capsys)
        assert code == 0 and out.startswith(f"{said} ") and "'nmt'" in out, out + err
    assert list(tmp_path.iterdir()) == []


OK_CLUSTER = ["--devices", "2", "--device-memory", "1MiB"]
#: The cases issue 23's fuzzer found, each invalid in one respect.
ISSUE_23_CASES: list[tuple[list[str], dict[str, str]]] = [
    (["fit", "case_profile.json", "--out", "fits_out.json"],  # a profile of no ops
     {"case_profile.json": json.dumps({**PROFILE, "profiles": [
         {"batch_size": b, "time_us": {}, "memory_bytes": {}} for b in (2, 4)]})}),
    (["compare", "g.json", *OK_CLUSTER, "--placers", "", "--out-dir", "outdir", "--quiet"], {}),
    (["compare", "g.json", *OK_CLUSTER, "--placers", "single", "--out-dir", "", "--quiet"], {}),
    *[(["place", "g.json", *OK_CLUSTER, "--out", out], {}) for out in ("newdir/", "newdir/.", "dir/", "..")],
    (["generate", "layered", "--tasks", "10", "--out", "newdir/"], {}),
    (["convert", "g.json", "newdir/"], {}),
    (["fit", "prof.json", "--out", "newdir/"], {}),
    (["place", "g.json", "--cluster", "", "--out", "out.json"], {}),
    (["place", "g.json", "--cluster", "", *OK_CLUSTER, "--out", "out.json"], {}),
    (["info", "g.json", "--cluster", ""], {}),
    (["run", "--params", "", "--model", "mlp"], {}),  # once "no parameter file"
    (["calibrate-comm", "--device-memory", "1GiB", "--sizes", "", "--out", "cout.json"], {}),
    (["calibrate-comm", "--device-memory", "1GiB", "--sizes", " , ", "--out", "cout.json"], {}),
    *[(["place", "g.json", *OK_CLUSTER, "--out", out], {}) for out in KERNEL_OUTPUTS],
    *[(["compare", "g.json", *OK_CLUSTER, "--placers", "single", "--out-dir", out, "--quiet"], {})
      for out in KERNEL_OUTPUTS],
    *[(["convert", "g.json", out], {}) for out in KERNEL_OUTPUTS],
    *[(["generate", "layered", "--tasks", "10", "--out", out], {}) for out in KERNEL_OUTPUTS],
]


def test_cases_cover_every_command() -> None:
    commands = {argv[0] for argv, _ in _cases(SEED, CASES)}
    assert commands == {"place", "compare", "simulate", "info", "generate", "fit", "graph", "profile",
                        "remeasure", "validate", "calibrate-comm"}


def test_cli_in_a_subprocess_exits_2_with_one_line_and_no_traceback(work: Path) -> None:
    """A few cases through the real entry point (``python -m celeritas_cli``); the TensorFlow
    commands' flag errors come before TensorFlow loads."""
    script = """
import sys
from celeritas_cli.main import main
argvs = [a.split("|") for a in sys.argv[1:]]
codes = []
for argv in argvs:
    try:
        codes.append(main(argv))
    except SystemExit as exc:
        codes.append(exc.code)
print(codes, "tensorflow" in sys.modules)
"""
    tf_cases = ["profile|--model|tensor_holography|--batch-sizes|2,4|--steps|0|--out|x.json",
                "fit|prof.json|--batch|0|--out|x.json",
                "graph|--model|nmt|--batch|0|--out|x.json",
                "remeasure|--model|nmt|--batch|8|--fits|fits.json|--devices|2|--device-memory|1MiB"
                "|--out|fifo",
                "validate|--model|nmt|--batch|4|p.json|--out|p.json",
                "calibrate-comm|--device-memory|1GiB|--devices|0|--out|x.json"]
    before = _snapshot(work)
    proc = subprocess.run([sys.executable, "-c", script, *tf_cases], capture_output=True, text=True,
                          cwd=work, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip() == f"{[2] * len(tf_cases)} False", proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == len(tf_cases), proc.stderr
    for argv in (["place", "g.json", "--devices", "2", "--device-memory", "1MiB", "--out", "fifo"],
                 *[["place", "g.json", "--devices", "2", "--device-memory", "1MiB", "--out", out]
                   for out in KERNEL_OUTPUTS],  # once a raw errno line and exit 1
                 ["info", "/dev/zero"], ["info", "fifo"],
                 ["place", "case.json", "--devices", "2", "--device-memory", "1MiB", "--out", "x.json"]):
        if argv[1] == "case.json":
            doc = copy.deepcopy(GRAPH)
            doc["edges"][0]["bytes"] = 1e308  # the issue's segfault in the Metis placer
            _write(work / "case.json", doc)
            before = _snapshot(work)
        proc = subprocess.run([sys.executable, "-m", "celeritas_cli", *argv], capture_output=True, text=True,
                              cwd=work, check=False, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert _snapshot(work) == before
