"""The documentation site builds with ``mkdocs build --strict``, and the strict build fails on what
it must catch: a broken link, an API reference to a name that does not exist, a docstring that
names a parameter the function does not have.

Each build writes into its own ``tmp_path`` (no fixed output directory, so ``pytest -n 2`` runs
them side by side). The whole site takes about 10 s of CPU to build (10 s on the idle 2-core build
machine, 20-35 s when others load it), the broken-link build of a copy of it a little less (no
search index); a missing module stops the build at its page, and the docstring check builds a
one-page site (a few seconds each).
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "mkdocs.yml"
GUIDES = ("algorithms", "simulator", "pipelining", "tensorflow", "pipeline", "deploy", "formats")


def mkdocs_build(config: Path, site_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m mkdocs build --strict`` of ``config`` into ``site_dir``, output captured."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # no notice about MkDocs 2.0
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir), "-f", str(config)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )


def page_text(path: Path) -> str:
    """The text of a built page: tags dropped, entities decoded, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8"))).split())


class ConfigLoader(yaml.SafeLoader):
    """YAML of mkdocs.yml: MkDocs's ``!relative`` tag read as its plain value."""


ConfigLoader.add_constructor("!relative", lambda loader, node: loader.construct_scalar(node))


def load_config() -> dict[str, Any]:
    with CONFIG.open(encoding="utf-8") as f:
        return yaml.load(f, Loader=ConfigLoader)  # a SafeLoader


def python_handler(config: dict[str, Any]) -> dict[str, Any]:
    plugin = next(p for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    return plugin["mkdocstrings"]["handlers"]["python"]


def copy_site(tmp_path: Path) -> Path:
    """mkdocs.yml and docs/ copied under ``tmp_path``, the package and the snippets still read
    from the repository (absolute paths); returns the copied config. The search plugin is left
    out of the copy: it only indexes the built pages (a quarter of the build's time), checks nothing."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    config = load_config()
    config["plugins"] = [plugin for plugin in config["plugins"] if plugin != "search"]
    python_handler(config)["paths"] = [str(ROOT)]
    for ext in config["markdown_extensions"]:
        if isinstance(ext, dict) and "pymdownx.snippets" in ext:
            ext["pymdownx.snippets"]["base_path"] = [str(ROOT)]
    out = tmp_path / "mkdocs.yml"
    out.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return out


@pytest.mark.slow
def test_site_builds_strict_with_guides_and_api(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = mkdocs_build(CONFIG, site, ROOT)
    assert result.returncode == 0, result.stdout + result.stderr

    for guide in GUIDES:
        assert (site / f"{guide}.html").is_file(), guide
    for page in ("index", "benchmarks", "results", "api/index", "api/tasks", "api/tensorflow"):
        assert (site / f"{page}.html").is_file(), page
    assert "bench/bench_determinism.py" in page_text(site / "benchmarks.html")
    # CHANGELOG.md, included: its first section's heading is on the page
    first_section = next(line[3:] for line in (ROOT / "CHANGELOG.md").read_text("utf-8").splitlines()
                         if line.startswith("## "))
    assert " ".join(first_section.replace("`", "").split()) in page_text(site / "changelog.html")

    # a public name, its summary and its numpy Parameters section rendered from the docstring
    readwrite = (site / "api" / "readwrite.html").read_text(encoding="utf-8")
    assert 'id="celeritas_core.readwrite.units.parse_size"' in readwrite
    text = page_text(site / "api" / "readwrite.html")
    assert "Parse a size such as" in text and "into a whole number of bytes" in text
    assert "Parameters:" in text
    assert 'id="celeritas_core.placers.base.place"' in (site / "api" / "placers.html").read_text("utf-8")
    # the docstrings' Sphinx roles show as code, not as ":func:" (docs/hooks/sphinx_roles.py)
    for page in (site / "api").glob("*.html"):
        assert not re.search(r":(func|class|meth|mod|data|attr):<code>", page.read_text("utf-8")), page


@pytest.mark.slow
def test_strict_build_fails_on_a_broken_link(tmp_path: Path) -> None:
    config = copy_site(tmp_path)
    page = tmp_path / "docs" / "benchmarks.md"
    page.write_text(page.read_text("utf-8") + "\nSee [the missing page](no-such-page.md).\n", "utf-8")

    result = mkdocs_build(config, tmp_path / "site", tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "no-such-page.md" in output
    assert "benchmarks.md" in output


def test_strict_build_fails_on_a_missing_api_name(tmp_path: Path) -> None:
    config = copy_site(tmp_path)
    page = tmp_path / "docs" / "index.md"  # the first page built: the build stops there
    page.write_text(page.read_text("utf-8") + "\n::: celeritas_core.no_such_module\n", "utf-8")

    result = mkdocs_build(config, tmp_path / "site", tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "celeritas_core.no_such_module" in output


def test_strict_build_fails_on_a_docstring_griffe_cannot_match(tmp_path: Path) -> None:
    """The site's mkdocstrings options (numpy style) on a one-page site: a Parameters entry for a
    parameter the function does not have is a warning, so the strict build fails."""
    (tmp_path / "probe_docstrings.py").write_text(
        'def scale(value):\n    """Scale a value.\n\n    Parameters\n    ----------\n'
        '    factor : float\n        Not a parameter of this function.\n    """\n',
        encoding="utf-8",
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Probe\n\n::: probe_docstrings.scale\n", "utf-8")
    full = load_config()
    python_handler(full)["paths"] = [str(tmp_path)]
    config = {key: full[key] for key in ("site_name", "theme", "markdown_extensions", "plugins")}
    config["markdown_extensions"] = [  # no snippets here: nothing to include
        ext for ext in config["markdown_extensions"]
        if not (isinstance(ext, dict) and "pymdownx.snippets" in ext)
    ]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")

    result = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site", tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Parameter 'factor' does not appear in the function signature" in output

