"""When the compiled loops run compiled, where their machine code is cached, and that compiling
is not counted as placement time (celeritas_core/jit.py, celeritas_core/jitcache.py). The
read-only install as another user: tests/deploy/test_readonly_install.py."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from celeritas_core import jit
from celeritas_core.cluster import Cluster
from celeritas_core.placers import PLACERS, get_placer, place
from tests.conftest import make_graph

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not jit.ENABLED, reason="Numba is off: every loop runs as Python")

#: In a fresh process: a small call, then ``sys.argv[1]`` more calls of the chain graph of
#: ``sys.argv[2]`` nodes; whether Numba was loaded after each step, and whether the results agree.
SCRIPT = """
import json, sys
import numpy as np
from celeritas_core import dagloops, jit

def chain(n):
    ptr = np.arange(n + 1, dtype=np.int64); ptr[-1] = n - 1
    nbr = np.arange(1, n, dtype=np.int64)
    indeg = np.r_[0, np.ones(n - 1, dtype=np.int64)]
    return ptr, nbr, indeg, np.zeros(1, dtype=np.int64)

small = dagloops.stack_order(*chain(50))
steps = [{"numba": "numba" in sys.modules, "equal": small.tolist() == list(range(50))}]
calls, n = int(sys.argv[1]), int(sys.argv[2])
for _ in range(calls):
    out = dagloops.stack_order(*chain(n))
loaded = jit.numba_loaded() and "numba" in sys.modules
steps.append({"numba": loaded, "equal": out.tolist() == list(range(n))})
print(json.dumps(steps))
"""


def _fresh(calls: int, nodes: int) -> list[dict[str, bool]]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(calls), str(nodes)], capture_output=True,
                          text=True, check=False, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_small_calls_run_as_python_and_numba_loads_for_a_large_one() -> None:
    first, after = _fresh(1, jit.SMALL_CALL + 10)
    assert first == {"numba": False, "equal": True}
    assert after == {"numba": True, "equal": True}


def test_numba_loads_once_the_python_work_budget_is_spent() -> None:
    size = jit.SMALL_CALL // 2
    first, after = _fresh(jit.PYTHON_WORK // size + 2, size)
    assert first == {"numba": False, "equal": True}
    assert after == {"numba": True, "equal": True}


def test_a_few_small_calls_stay_in_python() -> None:
    _, after = _fresh(3, 100)
    assert after == {"numba": False, "equal": True}


def _fresh_loop() -> jit.Loop:
    """A loop no cache has: made from source with a random constant, so Numba compiles it."""
    namespace: dict[str, Any] = {"__name__": "fresh"}
    exec(f"def fresh(x):\n    s = 0.0\n    for v in x:\n        s += v * {random.random()!r}\n    return s\n",
         namespace)
    return jit.Loop(namespace["fresh"])  # not jit.jit: it stays out of the registry


def test_compiling_during_a_placement_is_not_placement_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The placer compiles a fresh loop; ``place`` must subtract exactly the seconds Numba reports
    holding its compiler lock. The placer's clock is a fake that advances by those seconds plus
    10 ms, so the check reads no wall clock and holds on a busy machine."""
    from numba.core import event

    spec = get_placer("single")
    loop, compiled = _fresh_loop(), []

    def compiling_placer(graph: Any, cluster: Any, params: Any) -> Any:
        with event.install_timer("numba:compiler_lock", compiled.append):
            loop(np.ones(jit.SMALL_CALL))  # compiled in memory: no cache layer holds a loop made by exec
        return spec.func(graph, cluster, params)

    readings = iter([100.0])

    def fake_perf_counter() -> float:  # the first reading starts the clock, the second stops it
        return next(readings, 100.0 + sum(compiled) + 0.010)

    monkeypatch.setitem(PLACERS, "single", dataclasses.replace(spec, func=compiling_placer))
    placer_clock = types.SimpleNamespace(perf_counter=fake_perf_counter)
    monkeypatch.setattr("celeritas_core.placers.base.time", placer_clock)
    placement = place(make_graph([("a", "b"), ("b", "c")]), Cluster.homogeneous(2, 1e9), "single")
    assert loop.dispatcher.stats.cache_misses and sum(compiled) > 0.005  # it really compiled ...
    # the two listeners read the clock microseconds apart; compiling itself takes tens of ms
    assert placement.placement_seconds == pytest.approx(0.010, abs=1e-3)  # ... and that is not placement time


class _Layer:
    """A cache layer that holds ``data``, fails to load (``broken``) or to save (``read_only``)."""

    def __init__(self, data: Any = None, *, broken: bool = False, read_only: bool = False) -> None:
        self.data, self.broken, self.read_only, self.saved = data, broken, read_only, None
        self.cache_path = f"layer-{id(self)}"

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        if self.broken:
            raise EOFError("truncated cache file")
        return self.data

    def save_overload(self, sig: Any, data: Any) -> None:
        if self.read_only:
            raise PermissionError("read-only file system")
        self.saved = data


def _outside(x: float) -> float:
    """A function outside the package: it has no prebuilt layer."""
    return x


def _layered(*layers: _Layer) -> Any:
    from celeritas_core.jitcache import LayeredCache

    cache = LayeredCache(_outside)
    cache._layers = list(layers)
    return cache


def test_loads_from_the_first_layer_that_has_the_code_and_skips_broken_ones() -> None:
    assert _layered(_Layer(broken=True), _Layer("user")).load_overload("sig", None) == "user"
    assert _layered(_Layer("prebuilt"), _Layer("user")).load_overload("sig", None) == "prebuilt"
    assert _layered(_Layer(), _Layer(broken=True)).load_overload("sig", None) is None
    assert _layered().load_overload("sig", None) is None


def test_saves_to_the_first_writable_layer_or_keeps_the_code_in_memory() -> None:
    prebuilt, user = _Layer(read_only=True), _Layer()
    _layered(prebuilt, user).save_overload("sig", "code")
    assert (prebuilt.saved, user.saved) == (None, "code")
    both = _Layer(read_only=True), _Layer(read_only=True)
    _layered(*both).save_overload("sig", "code")  # no error: the code stays in memory
    assert [layer.saved for layer in both] == [None, None]


def test_the_prebuilt_layer_is_inside_the_package_whether_or_not_it_is_writable() -> None:
    from celeritas_core import dagloops
    from celeritas_core.jitcache import LayeredCache, PrebuiltLocator

    cache = LayeredCache(dagloops.stack_order.py_func)
    assert Path(cache.cache_path) == jit.CACHE_DIR
    assert isinstance(cache.layers[0]._impl.locator, PrebuiltLocator)
    assert PrebuiltLocator.from_function(_outside, __file__) is None  # not a file of the package
