"""The product's import structure, read from the source (nothing is imported): no module imports a
module that imports it back, and every import inside a function says why it is there.

The product is celeritas_core, celeritas_tf, celeritas_cli, celeritas_plugins, tasks and dags
(tests/, bench/ and examples/ are not). An import inside a function hides a dependency, so one is
kept only where loading late has a reason (DAG parse time, TensorFlow, the CLI's fast start,
Numba, an optional or slow library), written as a ``# lazy: why`` comment on its line or on the
line above its group of consecutive imports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("celeritas_core", "celeritas_tf", "celeritas_cli", "celeritas_plugins", "tasks", "dags")
REASON = "# lazy:"


@dataclass(frozen=True)
class Import:
    """One import statement of a module: the modules it names, where, and whether it runs only
    when a function is called."""

    targets: tuple[str, ...]
    lineno: int
    in_function: bool
    node: ast.Import | ast.ImportFrom
    siblings: list[ast.stmt]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "dags":  # the DAG processor puts dags/ itself on sys.path
        parts = parts[1:]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _product_files() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES
            for path in sorted((ROOT / package).rglob("*.py"))}


MODULES = _product_files()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> tuple[str, ...]:
    """The product modules ``node`` imports (``from pkg import mod`` names ``pkg.mod``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            anchor = package[: len(package) - (node.level - 1)]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                 for alias in node.names]
    found = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.append(name)
    return tuple(found)


def _imports(module: str) -> Iterator[Import]:
    """Every import statement of ``module`` that runs (``if TYPE_CHECKING:`` blocks never do)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def walk(body: list[ast.stmt], in_function: bool) -> Iterator[Import]:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield Import(_targets(node, module, path.name == "__init__.py"), node.lineno, in_function,
                             node, body)
                continue
            if isinstance(node, ast.If) and _is_type_checking(node):
                yield from walk(node.orelse, in_function)
                continue
            inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    yield from walk(block, inner)
            for clause in [*getattr(node, "handlers", ()), *getattr(node, "cases", ())]:
                yield from walk(clause.body, inner)

    yield from walk(tree.body, False)


def import_graph() -> nx.DiGraph:
    """Product module -> the product modules it imports, at the top or inside functions."""
    graph = nx.DiGraph()
    for module in MODULES:
        graph.add_node(module)
        for imp in _imports(module):
            graph.add_edges_from((module, target) for target in imp.targets)
    return graph


def test_the_product_is_found() -> None:
    graph = import_graph()
    assert {"celeritas_core.formats", "celeritas_core.columnar", "celeritas_tf.models", "celeritas_tf.zoo",
            "tasks.tracking.runs", "celeritas_steps"} <= set(graph)
    assert graph.has_edge("celeritas_core.formats", "celeritas_core.columnar")
    assert graph.has_edge("celeritas_tf.models", "celeritas_tf.zoo")
    assert graph.has_edge("tasks.tracking.registry", "tasks.tracking.runs")
    assert graph.has_edge("celeritas_steps", "tasks.prepare")  # an import inside a function counts


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    graph = import_graph()
    shown = []
    for component in (c for c in nx.strongly_connected_components(graph) if len(c) > 1):
        start = min(component)
        edges = nx.find_cycle(graph.subgraph(component), start)
        shown.append(" -> ".join([*(u for u, _ in edges), edges[0][0]]))
    assert shown == [], "modules that import a module that imports them back: " + "; ".join(shown)


def _has_reason(lines: list[str], imp: Import) -> bool:
    """A ``# lazy:`` comment on one of the import's lines, or on the line above the group of
    imports (consecutive lines of the same block) that it belongs to."""
    node = imp.node
    if any(REASON in lines[k - 1] for k in range(node.lineno, (node.end_lineno or node.lineno) + 1)):
        return True
    index = imp.siblings.index(node)
    while index > 0 and isinstance(imp.siblings[index - 1], ast.Import | ast.ImportFrom) \
            and (imp.siblings[index - 1].end_lineno or 0) == imp.siblings[index].lineno - 1:
        index -= 1
        if REASON in lines[imp.siblings[index].lineno - 1]:
            return True
    head = imp.siblings[index].lineno
    return head >= 2 and lines[head - 2].strip().startswith(REASON)


def _unexplained(module: str) -> list[str]:
    path = MODULES[module]
    lines = path.read_text(encoding="utf-8").splitlines()
    return [f"{path.relative_to(ROOT)}:{imp.lineno}: {lines[imp.lineno - 1].strip()}"
            for imp in _imports(module) if imp.in_function and not _has_reason(lines, imp)]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_import_inside_a_function_says_why(package: str) -> None:
    prefix = "" if package == "dags" else package
    modules = [m for m, path in MODULES.items()
               if path.is_relative_to(ROOT / package) and (not prefix or m.startswith(prefix))]
    assert modules
    found = [line for module in modules for line in _unexplained(module)]
    assert found == [], "imports inside functions without a '# lazy: why' comment:\n" + "\n".join(found)


def test_the_reason_check_sees_a_bare_import_and_accepts_a_group_under_one_reason(tmp_path: Path) -> None:
    source = ("def f():\n    import json\n\n\ndef g():\n    # lazy: slow to import\n    import json\n"
              "    import csv\n\n\ndef h():\n    x = 1  # lazy: not a comment above an import\n"
              "    import csv\n")
    tree = ast.parse(source)
    lines = source.splitlines()
    verdicts = []
    for function in tree.body:
        assert isinstance(function, ast.FunctionDef)
        for node in function.body:
            if isinstance(node, ast.Import):
                verdicts.append(_has_reason(lines, Import((), node.lineno, True, node, function.body)))
    assert verdicts == [False, True, True, False]
