"""CHANGELOG.md follows Keep a Changelog 1.1.0 (https://keepachangelog.com/en/1.1.0/), read from the
file (nothing is imported): an ``## [Unreleased]`` heading first, then releases newest first as
``## [X.Y.Z] - YYYY-MM-DD`` with strictly decreasing versions and non-increasing dates, each with
at least one section; sections only of the allowed names, in the allowed order (breaking changes and
changes of behaviour first), none of them empty; and the newest release is the version pyproject.toml
declares, so the changelog and the package move together.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import celeritas_core

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"

#: The section names a release may have, in the order they must come.
SECTIONS = ("Breaking", "Changed", "Added", "Deprecated", "Removed", "Fixed", "Security")
UNRELEASED = "## [Unreleased]"
RELEASE = re.compile(r"## \[(?P<version>\d+\.\d+\.\d+)\] - (?P<date>\d{4}-\d{2}-\d{2})")


@dataclass
class Section:
    name: str
    line: int
    entries: int = 0


@dataclass
class Release:
    """One ``##`` heading and what is under it; ``version`` is None for Unreleased."""

    heading: str
    line: int
    version: tuple[int, int, int] | None
    date: dt.date | None
    sections: list[Section] = field(default_factory=list)


def _parse(text: str) -> tuple[list[str], list[Release]]:
    """The file's ``##`` blocks, and every problem found on the way (as readable lines)."""
    problems: list[str] = []
    releases: list[Release] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("## "):
            if line == UNRELEASED:
                releases.append(Release(line, number, None, None))
                continue
            match = RELEASE.fullmatch(line)
            if match is None:
                problems.append(f"line {number}: {line!r} is neither {UNRELEASED!r} "
                                "nor '## [X.Y.Z] - YYYY-MM-DD'")
                continue
            try:
                date = dt.date.fromisoformat(match["date"])
            except ValueError:
                problems.append(f"line {number}: {match['date']!r} is not a date")
                continue
            version = tuple(int(part) for part in match["version"].split("."))
            releases.append(Release(line, number, version, date))  # type: ignore[arg-type]
        elif line.startswith("### "):
            name = line[4:].strip()
            if not releases:
                problems.append(f"line {number}: section {name!r} before any release heading")
            elif name not in SECTIONS:
                problems.append(f"line {number}: section {name!r} is not one of {', '.join(SECTIONS)}")
            else:
                releases[-1].sections.append(Section(name, number))
        elif line.startswith("#") and not line.startswith("# "):
            problems.append(f"line {number}: heading {line!r} is deeper than a section (###)")
        elif line.startswith("- ") and releases and releases[-1].sections:
            releases[-1].sections[-1].entries += 1
    return problems, releases


@pytest.fixture(scope="module")
def changelog() -> str:
    return CHANGELOG.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def releases(changelog: str) -> list[Release]:
    return _parse(changelog)[1]


def _released(releases: list[Release]) -> list[Release]:
    return [r for r in releases if r.version is not None]


def test_the_file_has_a_title_and_only_keep_a_changelog_headings(changelog: str) -> None:
    assert changelog.startswith("# Changelog\n")
    problems, _ = _parse(changelog)
    assert not problems, "\n".join(problems)


def test_unreleased_comes_first_and_once(releases: list[Release]) -> None:
    assert releases, "no '##' heading at all"
    assert releases[0].heading == UNRELEASED, f"the first '##' heading is {releases[0].heading!r}"
    assert [r.heading for r in releases].count(UNRELEASED) == 1


def test_there_is_a_release(releases: list[Release]) -> None:
    assert _released(releases), "no '## [X.Y.Z] - YYYY-MM-DD' heading"


def test_versions_strictly_decrease_and_dates_never_increase(releases: list[Release]) -> None:
    released = _released(releases)
    for newer, older in itertools.pairwise(released):
        assert newer.version > older.version, f"{newer.heading!r} (line {newer.line}) is not newer than " \
                                              f"{older.heading!r} (line {older.line})"
        assert newer.date >= older.date, f"{newer.heading!r} (line {newer.line}) is dated before " \
                                         f"{older.heading!r} (line {older.line})"


def test_no_release_is_empty_and_no_section_is_empty(releases: list[Release]) -> None:
    empty = [f"{r.heading} (line {r.line}) has no section" for r in _released(releases) if not r.sections]
    empty += [f"{r.heading}: section {s.name!r} (line {s.line}) has no entry"
              for r in releases for s in r.sections if s.entries == 0]
    assert not empty, "\n".join(empty)


def test_sections_come_once_each_in_the_documented_order(releases: list[Release]) -> None:
    wrong = []
    for release in releases:
        names = [s.name for s in release.sections]
        if names != sorted(set(names), key=SECTIONS.index):
            wrong.append(f"{release.heading} (line {release.line}): {', '.join(names)}; expected the order "
                         f"{', '.join(SECTIONS)}, each at most once")
    assert not wrong, "\n".join(wrong)


def test_the_newest_release_is_the_version_in_pyproject(releases: list[Release]) -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        declared = tomllib.load(f)["project"]["version"]
    newest = _released(releases)[0]
    assert ".".join(map(str, newest.version)) == declared, \
        f"CHANGELOG.md's newest release is {newest.heading!r}; pyproject.toml's [project] version is " \
        f"{declared!r}: set one to the other"


HEAD = "# Changelog\n\n## [Unreleased]\n\n"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("## [1.0.0] - 2026-01-01\n\n### Misc\n\n- x\n", "'Misc' is not one of"),
        ("## 1.0.0 - 2026-01-01\n\n### Added\n\n- x\n", "is neither"),
        ("## [1.0.0] - 2026-02-30\n\n### Added\n\n- x\n", "is not a date"),
        ("#### Added\n", "deeper than a section"),
    ],
)
def test_the_parser_names_what_is_wrong(text: str, problem: str) -> None:
    problems, _ = _parse(HEAD + text)
    assert any(problem in p for p in problems), problems


def test_the_parser_reads_releases_sections_and_entries() -> None:
    text = ("## [0.2.0] - 2026-01-02\n\nIntro.\n\n### Breaking\n\n- a\n  more\n- b\n\n### Fixed\n\n- c\n\n"
            "## [0.1.0] - 2026-01-01\n\n### Added\n\n```\n## not a heading\n```\n- d\n")
    problems, releases = _parse(HEAD + text)
    assert not problems
    assert [r.version for r in releases] == [None, (0, 2, 0), (0, 1, 0)]
    assert [(s.name, s.entries) for s in releases[1].sections] == [("Breaking", 2), ("Fixed", 1)]
    assert [(s.name, s.entries) for s in releases[2].sections] == [("Added", 1)]


def test_the_images_and_the_package_carry_the_version_of_pyproject() -> None:
    """The version is declared once, in pyproject.toml: ``celeritas_core.__version__`` reads the
    installed distribution, and every image tag the deployment files name is that version."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        declared = tomllib.load(f)["project"]["version"]
    assert celeritas_core.__version__ == declared, "reinstall (make setup) after changing the version"
    files = [*(ROOT / "docker").iterdir(), ROOT / "docs" / "deploy.md"]
    tags = [(f.name, tag) for f in files if f.is_file()
            for tag in re.findall(r"celeritas/[a-z-]+:(\d+\.\d+\.\d+)", f.read_text())]
    assert tags and all(tag == declared for _, tag in tags), tags
