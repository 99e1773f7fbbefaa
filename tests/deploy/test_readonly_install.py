"""The commands as a user who can write neither the installed code nor a home (``nobody``; a pod
with a read-only root file system): they run, and they load the compiled loops from the cache
the precompile step built at install time instead of compiling them (celeritas_core/compiled/jit.py).

The install is a copy of this checkout's packages, precompiled as root (as ``make setup`` and the
images do), then made read-only (bench/readonly_install.py). Needs root, to run as ``nobody``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # bench/ is a folder of scripts: its helper imports by module name
import readonly_install  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the commands must run as another user "
                       "(nobody) who can write neither the install nor a home"),
]

GRAPH = "examples/graphs/training_step_small.json"
CLUSTER = ["--devices", "4", "--device-memory", "600MiB"]

#: Runs CLI commands in one process (argv lists as JSON in argv[1]) and prints their exit codes
#: and what the compiled loops did, as JSON.
DRIVER = """
import contextlib, io, json, sys
import celeritas_core
from celeritas_cli.main import main
from celeritas_core.compiled import jit
codes = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()):
        codes.append(main(argv))
print(json.dumps({"codes": codes, "file": celeritas_core.__file__, "numba": jit.numba_loaded(),
                  "stats": jit.cache_stats()}))
"""


@pytest.fixture(scope="module")
def install() -> Iterator[readonly_install.Install]:
    """A read-only, precompiled copy of the packages (built from an empty cache: about 30 s)."""
    try:
        made = readonly_install.make_install()
    except readonly_install.Unavailable as exc:
        pytest.skip(str(exc))
    yield made
    readonly_install.remove(made)


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def _drive(install: readonly_install.Install, commands: Sequence[Sequence[str]]) -> dict[str, Any]:
    done = install.run(["-c", DRIVER, json.dumps([list(c) for c in commands])])
    _ok(done)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _copy(install: readonly_install.Install) -> readonly_install.Install:
    """The same read-only install at another path, every file with a new modification time."""
    dest = Path(tempfile.mkdtemp(prefix="celeritas-moved-", dir=install.root.parent))
    dest.chmod(0o755)
    root = dest / "install"
    shutil.copytree(install.root, root, copy_function=shutil.copy)
    readonly_install.read_only(root)
    return dataclasses.replace(install, root=root)


def test_the_commands_run_as_nobody_over_a_read_only_install(install: readonly_install.Install) -> None:
    assert install.user is not None
    before = readonly_install.snapshot(install.root)
    placement = install.out / "p.json"
    _ok(install.run(["-m", "celeritas_cli", "place", GRAPH, *CLUSTER, "--out", str(placement)]))
    assert json.loads(placement.read_text())["format"] == "celeritas-placement/1"
    info = install.run(["-m", "celeritas_cli", "info", GRAPH])
    _ok(info)
    assert "lower bound" in info.stdout
    _ok(install.run(["-m", "celeritas_cli", "simulate", GRAPH, str(placement)]))
    _ok(install.run(["-m", "celeritas_cli", "compare", GRAPH, *CLUSTER, "--placers", "single,celeritas",
                     "--quiet", "--out-dir", str(install.out / "compare")]))
    assert (install.out / "compare" / "compare.json").is_file()
    assert readonly_install.snapshot(install.root) == before  # no cache file, no bytecode written
    assert list(install.home.iterdir()) == []


def test_the_first_placement_loads_every_loop_from_the_prebuilt_cache(
        install: readonly_install.Install) -> None:
    before = readonly_install.snapshot(install.root)
    run = _drive(install, [["place", GRAPH, *CLUSTER, "--out", str(install.out / "first.json")]])
    assert run["codes"] == [0]
    assert Path(run["file"]).is_relative_to(install.root)  # the copy, not the checkout
    assert run["numba"]
    stats = run["stats"]
    # the loops the placement called from Python (those they call are linked into their code)
    assert {"celeritas_core.graphs.dagloops.stack_order", "celeritas_core.simulation.simulator._replay",
            "celeritas_core.placers.fusion._segment_dp"} <= set(stats)
    assert all(s["loaded"] >= 1 for s in stats.values())  # each from the prebuilt cache ...
    assert {key: s["compiled"] for key, s in stats.items() if s["compiled"]} == {}  # ... none compiled
    assert all(Path(s["cache_path"]).is_relative_to(install.root) for s in stats.values())
    assert readonly_install.snapshot(install.root) == before


def test_a_copy_of_the_install_elsewhere_loads_the_same_cache(install: readonly_install.Install) -> None:
    moved = _copy(install)
    run = _drive(moved, [["place", GRAPH, *CLUSTER, "--placer", "m-topo",
                          "--out", str(install.out / "moved.json")]])
    assert Path(run["file"]).is_relative_to(moved.root)
    assert run["stats"] and all(s["compiled"] == 0 and s["loaded"] >= 1 for s in run["stats"].values())


def test_an_unreadable_cache_means_compiling_in_memory(install: readonly_install.Install) -> None:
    broken = _copy(install)
    cache = broken.root / "celeritas_core" / "compiled" / "_jitcache"
    data = sorted(cache.rglob("*.nbc"))
    assert data
    for path in data:  # valid indexes that point to garbage
        path.chmod(0o644)
        path.write_bytes(b"not a pickle")
        path.chmod(0o444)
    big = install.out / "big.npz"  # a graph large enough that info loads Numba
    done = subprocess.run([sys.executable, "-m", "celeritas_cli", "generate", "transformer", "--ops", "30000",
                           "--out", str(big)], capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(readonly_install.REPO)})
    assert done.returncode == 0, done.stderr
    before = readonly_install.snapshot(broken.root)
    run = _drive(broken, [["info", str(big)]])
    assert run["codes"] == [0] and run["numba"]
    compiled = {key for key, s in run["stats"].items() if s["compiled"]}
    assert "celeritas_core.graphs.dagloops.stack_order" in compiled
    assert all(s["loaded"] == 0 for s in run["stats"].values())
    assert readonly_install.snapshot(broken.root) == before
