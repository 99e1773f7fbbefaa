"""The command starts fast because heavy modules load only where they are used: ``--help`` and
``info`` on a small graph import none of them (timings: bench/bench_startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GRAPH = ROOT / "examples" / "graphs" / "training_step_small.json"

#: Modules that cost a tenth of a second or more to import (Numba about 0.2 s, then 0.5 s to set
#: up its compiler; TensorFlow, Airflow and MLflow seconds).
HEAVY = ("numba", "llvmlite", "scipy", "matplotlib", "networkx", "pymetis", "tensorflow", "keras",
         "mlflow", "airflow", "boto3", "pandas", "sqlalchemy", "yaml")

#: Runs ``celeritas ARGS`` in-process and prints the top-level modules then loaded, as JSON.
SCRIPT = """
import contextlib, io, json, sys
from celeritas_cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:  # --help
        code = exc.code
print(json.dumps({"code": code, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _modules_after(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, check=False,
                          cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["code"] == 0
    return out["modules"]


@pytest.mark.parametrize("args", [["--help"], ["place", "--help"], ["compare", "--help"],
                                  ["simulate", "--help"], ["info", str(GRAPH)]], ids=" ".join)
def test_light_commands_import_no_heavy_module(args: list[str]) -> None:
    assert sorted(set(HEAVY) & set(_modules_after(*args))) == []


@pytest.mark.parametrize("args", [["--help"], ["place", "--help"], ["compare", "--help"],
                                  ["simulate", "--help"], ["profile", "--help"], ["run", "--help"]],
                         ids=" ".join)
def test_help_builds_the_parser_without_numpy(args: list[str]) -> None:
    # numpy alone takes 0.1 s idle, 0.3-0.5 s on a busy machine: --help stays pure Python
    assert "numpy" not in _modules_after(*args)


def test_the_executable_exits_with_the_commands_status_and_skips_the_last_collections(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from celeritas_cli.main import run

    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    with pytest.raises(SystemExit) as exit_info:
        run(["info", str(GRAPH)])
    assert exit_info.value.code == 0 and frozen == [True]
    with pytest.raises(SystemExit) as exit_info:
        run(["info", str(ROOT / "no-such-graph.json")])
    assert exit_info.value.code != 0
