"""Readers for the deployment files under docker/ (shared by the tests in tests/deploy)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
ENV_EXAMPLE = DOCKER / ".env.example"
DOCKERFILES = {"control-plane": DOCKER / "control-plane.Dockerfile",
               "gpu-worker": DOCKER / "gpu-worker.Dockerfile"}
IMAGES = ("control-plane", "cpu-worker", "gpu-worker")
REQUIREMENTS = {name: DOCKER / f"requirements-{name}.txt" for name in IMAGES}

#: ``${NAME``, not ``$${NAME`` (compose's escape for a variable the container's shell expands)
VARIABLE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[(?P<extras>[^\]]+)\])?"
                 r"==(?P<version>[0-9][^\s;#]*)$")


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def compose() -> dict:
    """docker/compose.yaml, with YAML merge keys applied."""
    return yaml.safe_load(COMPOSE.read_text())


def env_example() -> dict[str, str]:
    """NAME=value lines of docker/.env.example."""
    out = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, value = line.partition("=")
            assert sep, f"docker/.env.example: not NAME=value: {line!r}"
            out[name.strip()] = value.strip()
    return out


def pins(path: Path) -> dict[str, tuple[str, str]]:
    """normalized name -> (version, extras) of a requirements file, following ``-r``; every line a pin."""
    out: dict[str, tuple[str, str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            out.update(pins(path.parent / line[3:].strip()))
            continue
        match = PIN.match(line)
        assert match, f"{path.name}: not an exact pin: {raw!r}"
        out[normalize(match["name"])] = (match["version"], match["extras"] or "")
    return out


def constraint_pins(path: Path = ROOT / "constraints.txt") -> dict[str, str]:
    """normalized name -> version of constraints.txt."""
    return {name: version for name, (version, _) in pins(path).items()}


@dataclass
class Stage:
    """One ``FROM`` stage of a Dockerfile: its base, alias and (instruction, arguments) list."""

    base: str
    alias: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def dockerfile_stages(path: Path) -> list[Stage]:
    """The stages of a Dockerfile (comments dropped, continuation lines joined)."""
    logical, current = [], ""
    for raw in path.read_text().splitlines():
        if raw.lstrip().startswith("#") and not current:
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip():
            logical.append(current.strip())
        current = ""
    stages: list[Stage] = []
    for line in logical:
        instruction, _, args = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            words = args.split()
            words = [w for w in words if not w.startswith("--platform")]
            alias = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], alias=alias))
        else:
            assert stages, f"{path.name}: {instruction} before FROM"
            stages[-1].instructions.append((instruction, args.strip()))
    return stages
