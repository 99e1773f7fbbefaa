"""The import-linter contracts (pyproject.toml, ``[tool.importlinter]``; ``make lint`` runs them):
the project keeps them, and the layers contract inside celeritas_core catches an upward import
that runs only when a function is called.

The throwaway package is built from the real contract's layers, so the test checks the contract
as written, not a copy of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
FAKE = "fakecore"


def _contracts() -> list[dict[str, Any]]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]["contracts"]


def _core_contract() -> dict[str, Any]:
    [contract] = [c for c in _contracts() if c.get("containers") == ["celeritas_core"]]
    return contract


def _layer_modules(contract: dict[str, Any]) -> list[list[str]]:
    """Each layer's module names, top layer first (siblings are joined by ``|`` or ``:``)."""
    return [[name.strip() for name in layer.replace(":", "|").split("|")] for layer in contract["layers"]]


def _lint(cwd: Path, *args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"PYTHONPATH": str(pythonpath)} if pythonpath else {})}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_the_projects_import_contracts_hold() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_every_module_of_celeritas_core_has_a_layer() -> None:
    contract = _core_contract()
    assert contract["type"] == "layers" and contract.get("exhaustive") is True
    named = {name for layer in _layer_modules(contract) for name in layer}
    children = {p.stem if p.is_file() else p.name for p in (ROOT / "celeritas_core").iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert named == children
    assert not contract.get("ignore_imports"), "fix an upward import by moving code, not by ignoring it"
    # the install step exercises everything, so it is on top; the compiled loops sit below the graphs
    layers = _layer_modules(contract)
    assert layers[0] == ["install"]
    where = {name: i for i, layer in enumerate(layers) for name in layer}
    assert where["placers"] < where["readwrite"] < where["graphs"] < where["compiled"]


def _fake_core(root: Path, *, upward: bool, extra: str | None = None) -> Path:
    """A package ``fakecore`` with one module per layer of the real contract, each importing the
    one below at the top; with ``upward``, the lowest module that any other imports (the compiled
    loops) imports the top layer (the install step) inside a function, as precompile did. Returns
    the import-linter config (TOML) with the real contract, on ``fakecore``."""
    contract = _core_contract()
    layers = _layer_modules(contract)
    package = root / FAKE
    package.mkdir()
    (package / "__init__.py").write_text("")
    for i, layer in enumerate(layers):
        below = layers[i + 1] if i + 1 < len(layers) else []
        for name in layer:
            imports = "".join(f"from {FAKE} import {low}  # noqa: F401\n" for low in below)
            (package / f"{name}.py").write_text(imports)
    if upward:
        with (package / "compiled.py").open("a") as f:
            f.write(f"\n\ndef warm():\n    from {FAKE} import {layers[0][0]}\n    return {layers[0][0]}\n")
    if extra:
        (package / f"{extra}.py").write_text("")
    fake = {k: v for k, v in contract.items() if k != "name"}
    fake["containers"] = [FAKE]
    lines = ["[tool.importlinter]", f"root_packages = [{json.dumps(FAKE)}]", "",
             "[[tool.importlinter.contracts]]", 'name = "fake core layers"']
    lines += [f"{key} = {json.dumps(value)}" for key, value in fake.items()]
    config = root / "importlinter.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def test_the_core_layers_pass_on_a_tree_that_points_down(tmp_path: Path) -> None:
    config = _fake_core(tmp_path, upward=False)
    done = _lint(tmp_path, "--config", str(config), pythonpath=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_core_layers_catch_an_upward_import_inside_a_function(tmp_path: Path) -> None:
    config = _fake_core(tmp_path, upward=True)
    done = _lint(tmp_path, "--config", str(config), pythonpath=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    report = " ".join(done.stdout.split())  # the report wraps long lines
    assert f"{FAKE}.compiled is not allowed to import {FAKE}.install" in report
    source = (tmp_path / FAKE / "compiled.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if text.endswith(f"from {FAKE} import install"))
    assert source[line - 1].startswith("    ")  # inside the function
    assert f"{FAKE}.compiled -> {FAKE}.install (l.{line})" in report


def test_the_core_layers_refuse_a_module_without_a_layer(tmp_path: Path) -> None:
    config = _fake_core(tmp_path, upward=False, extra="newcomer")
    done = _lint(tmp_path, "--config", str(config), pythonpath=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{FAKE}.newcomer" in " ".join(done.stdout.split())


def test_the_precompile_command_sits_on_top_and_the_old_path_is_gone() -> None:
    # the Makefile and the Docker images run it by this path (tests/deploy, tests/test_gpu_setup.py)
    done = subprocess.run([sys.executable, "-m", "celeritas_core.install.precompile", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and "usage: python -m celeritas_core.install.precompile" in done.stdout, \
        done.stdout + done.stderr
    assert not (ROOT / "celeritas_core" / "compiled" / "precompile.py").exists()
