"""The README's commands work exactly as printed, from a folder of their own.

The "Use it" paths are run as a newcomer would: the shell blocks, unchanged, in a fresh temporary
folder that holds only a link to this checkout's ``.venv`` (as a fresh clone after ``make setup``
would). The files they write land there, under ``build/try``, and nothing appears in the checkout.
The commands of the paths that need a published champion or minutes of pipeline are parsed by the
command's own parser (their runs are tested in tests/pipeline and tests/integration).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from celeritas_cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _use_it_blocks() -> list[str]:
    """The shell blocks of the README's "Use it" section, in order."""
    text = README.read_text()
    section = text.split("\n## Use it\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def _run_blocks(folder: Path, blocks: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the blocks as one bash script (stopping at the first failure) in ``folder``."""
    (folder / ".venv").symlink_to(ROOT / ".venv")
    script = "set -euo pipefail\n" + "\n".join(blocks)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)


def test_use_it_has_four_paths() -> None:
    text = README.read_text()
    section = text.split("\n## Use it\n", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\*\*(\d)\. ", section, flags=re.M) == ["1", "2", "3", "4"]
    assert len(_use_it_blocks()) >= 4


def test_place_and_compare_path_runs_in_a_folder_of_its_own(tmp_path: Path) -> None:
    result = _run_blocks(tmp_path, _use_it_blocks()[:1])
    assert result.returncode == 0, result.stderr[-3000:]
    work = tmp_path / "build" / "try"
    assert (work / "holography.json").is_file()
    assert (work / "holography.celeritas.placement.json").is_file()
    assert {p.name for p in (work / "holography.compare").iterdir()} >= {"compare.json", "compare.csv",
                                                                        "gantt.png", "memory.png"}
    assert "OOM: none" in result.stdout  # the README's memory is enough for Celeritas
    written = {p.name for p in work.iterdir()}
    assert not any((ROOT / name).exists() for name in written)  # nothing written into the checkout


@pytest.mark.tf
def test_tensorflow_path_runs_after_the_first(tmp_path: Path) -> None:
    blocks = _use_it_blocks()
    result = _run_blocks(tmp_path, blocks[:2])
    assert result.returncode == 0, result.stderr[-3000:]
    work = tmp_path / "build" / "try"
    for name in ("th.json", "th.placement.json", "th.validation.json"):
        assert (work / name).is_file(), name


def _command_lines() -> list[list[str]]:
    """Every `celeritas ...` line of the README, as argv after the program name."""
    lines = []
    for raw in README.read_text().splitlines():
        line = raw.split("  #", 1)[0].strip()
        for prefix in ("celeritas ", ".venv/bin/celeritas "):
            if line.startswith(prefix):
                lines.append(shlex.split(line[len(prefix):]))
    return lines


def test_every_celeritas_command_in_the_readme_parses() -> None:
    commands = _command_lines()
    assert len(commands) >= 8
    parser = build_parser()
    for argv in commands:
        try:
            parser.parse_args(argv)
        except SystemExit as exc:  # argparse's way of refusing
            pytest.fail(f"README: `celeritas {shlex.join(argv)}` is refused by the parser ({exc.code})")


def test_scripts_the_readme_runs_exist() -> None:
    scripts = re.findall(r"\.venv/bin/python (\S+\.py)", README.read_text())
    assert scripts
    for script in scripts:
        assert (ROOT / script).is_file(), script
