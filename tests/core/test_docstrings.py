"""The user-facing API is documented in numpydoc sections with a runnable example.

Every name of ``celeritas_core.__all__`` that is a function, every public classmethod of its
classes (the construction helpers), and every registered placer's function and parameter class
must have the sections below; the examples themselves run under ``pytest --doctest-modules``
(pyproject.toml: ``testpaths`` and ``addopts``), so they stay true.
"""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import celeritas_core
from celeritas_core.placers import PLACERS, NoParams

ROOT = Path(__file__).resolve().parents[2]


def sections(doc: str) -> dict[str, list[str]]:
    """The numpydoc sections of ``doc``: heading -> the lines under it (a heading is a line
    underlined by as many dashes)."""
    lines = inspect.cleandoc(doc).splitlines()
    out: dict[str, list[str]] = {}
    current = None
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        under = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line and set(under) == {"-"} and len(under) == len(line):
            current = line
            out[current] = []
            i += 2
            continue
        if current is not None:
            out[current].append(lines[i])
        i += 1
    return out


def documented_names(lines: list[str]) -> list[str]:
    """The names a Parameters section describes: its unindented lines (``a, b : type``)."""
    names = []
    for line in lines:
        if line.strip() and not line.startswith(" "):
            names += [n.strip().lstrip("*") for n in line.split(" : ")[0].split(",")]
    return names


def problems(obj: Callable[..., object], *, skip_first: bool = False) -> list[str]:
    """What the docstring of function ``obj`` lacks: Parameters naming exactly its parameters,
    Returns (unless it returns None) and Examples with a doctest."""
    doc = inspect.getdoc(obj) or ""
    found = sections(doc)
    params = list(inspect.signature(obj).parameters)[1 if skip_first else 0:]
    missing = []
    if params:
        if "Parameters" not in found:
            missing.append("no Parameters section")
        elif sorted(documented_names(found["Parameters"])) != sorted(params):
            missing.append(f"Parameters names {documented_names(found['Parameters'])}, "
                           f"the signature {params}")
    if inspect.signature(obj).return_annotation not in ("None", None) and "Returns" not in found:
        missing.append("no Returns section")
    if not any(line.lstrip().startswith(">>>") for line in found.get("Examples", [])):
        missing.append("no Examples section with a doctest")
    return missing


def public_api() -> list[tuple[str, Callable[..., object], bool]]:
    """(name, function, whether its first parameter is ``cls``) of every function of
    ``celeritas_core.__all__`` and every public classmethod of its classes."""
    out = []
    for name in celeritas_core.__all__:
        obj = getattr(celeritas_core, name)
        if inspect.isclass(obj):
            for attr, raw in vars(obj).items():
                if isinstance(raw, classmethod) and not attr.startswith("_"):
                    out.append((f"{name}.{attr}", raw.__func__, True))
        elif inspect.isfunction(obj):
            out.append((name, obj, False))
    return out


def test_the_parser_reads_sections_and_parameter_names() -> None:
    def sample(a: int, b: int, *, c: int = 0) -> int:
        """Sum.

        Parameters
        ----------
        a, b : int
            Numbers.

        Examples
        --------
        >>> 1
        1
        """
        return a + b + c

    found = sections(inspect.getdoc(sample) or "")
    assert list(found) == ["Parameters", "Examples"]
    assert documented_names(found["Parameters"]) == ["a", "b"]
    assert problems(sample) == ["Parameters names ['a', 'b'], the signature ['a', 'b', 'c']",
                                "no Returns section"]


def test_the_public_api_resolves_lazily_to_its_defining_module() -> None:
    assert len(set(celeritas_core.__all__)) == len(celeritas_core.__all__)
    assert set(celeritas_core.__all__) == {"CeleritasInputError", *celeritas_core._LAZY}
    for name, module in celeritas_core._LAZY.items():
        obj = getattr(celeritas_core, name)
        assert obj is getattr(sys.modules[module], name)
    with pytest.raises(AttributeError):
        celeritas_core.no_such_name  # noqa: B018
    assert len(public_api()) >= 40


def test_importing_the_package_loads_no_numpy() -> None:
    code = "import sys, celeritas_core; print('numpy' in sys.modules, 'place' in dir(celeritas_core))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.stdout.split() == ["False", "True"]


def test_a_subpackage_is_reached_from_the_package_alone() -> None:
    code = "import celeritas_core; help(celeritas_core.placers.celeritas.CeleritasParams)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "class CeleritasParams" in done.stdout and "search_seconds" in done.stdout
    listed = ("import sys, celeritas_core; names = dir(celeritas_core); "
              "print(sorted(n for n in names if n in ('graphs', 'placers', 'simulation', 'pipeline', "
              "'readwrite', 'generators', 'statistics', 'compiled')), 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", listed], capture_output=True, text=True, check=True,
                          cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.stdout.split("] ") == ["['compiled', 'generators', 'graphs', 'pipeline', 'placers', "
                                       "'readwrite', 'simulation', 'statistics'", "False\n"]
    with pytest.raises(AttributeError):
        celeritas_core.errors_and_more  # noqa: B018 (not a subpackage: still no such attribute)


@pytest.mark.parametrize(("name", "func", "is_method"), public_api(), ids=[n for n, _, _ in public_api()])
def test_every_public_function_has_parameters_returns_and_examples(
        name: str, func: Callable[..., object], is_method: bool) -> None:
    assert problems(func, skip_first=is_method) == []


def test_every_public_class_has_an_example() -> None:
    classes = [getattr(celeritas_core, n) for n in celeritas_core.__all__
               if inspect.isclass(getattr(celeritas_core, n))]
    assert {c.__name__ for c in classes} >= {"Graph", "Cluster", "Placement"}
    for cls in classes:
        assert ">>>" in "".join(sections(inspect.getdoc(cls) or "").get("Examples", [])), cls.__name__


@pytest.mark.parametrize("placer", sorted(PLACERS))
def test_every_placer_documents_its_function_and_parameters(placer: str) -> None:
    spec = PLACERS[placer]
    assert problems(spec.func) == []
    if spec.params_type is NoParams:
        return
    found = sections(inspect.getdoc(spec.params_type) or "")
    fields = [f.name for f in dataclasses.fields(spec.params_type)]
    assert sorted(documented_names(found.get("Parameters", []))) == sorted(fields)
    assert any(line.lstrip().startswith(">>>") for line in found.get("Examples", []))
