"""A read-only copy of this checkout's packages, and the ``celeritas`` command run over it as an
unprivileged user: the deployment case of a shared install or a container with a read-only root
file system (``bench/bench_startup.py``, ``tests/deploy/test_readonly_install.py``).

:func:`make_install` copies the packages (no ``__pycache__``, no prebuilt cache), runs the
precompile step as the current user (what ``make setup`` or an image build does), then makes the
copy read-only. :meth:`Install.run` runs ``python -S ARGS`` in the copy as ``nobody`` when this
process is root (else as the current user, who cannot write the copy either), with a clean
environment: ``HOME`` a folder the user cannot write, ``PYTHONPATH`` the copy then the running
interpreter's site-packages (read-only to the user), no ``NUMBA_*`` or ``CELERITAS_*``
variables. The interpreter is this one when the user can run it, else the system's Python of the
same version (a pyenv Python under root's 0700 home is out of ``nobody``'s reach).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: The checkout this file belongs to.
REPO = Path(__file__).resolve().parents[1]
#: The packages the copy holds, and the data the commands read.
PACKAGES = ("celeritas_cli", "celeritas_core", "celeritas_tf", "celeritas_plugins", "tasks")
DATA = ("examples/graphs",)
#: The unprivileged user the commands run as when this process is root.
USER = "nobody"


class Unavailable(RuntimeError):
    """The machine cannot run the case (no such user, no interpreter the user can run)."""


@dataclass(frozen=True)
class Install:
    """A read-only copy of the packages and how to run Python over it."""

    root: Path
    python: str
    site_packages: str
    home: Path
    out: Path
    user: tuple[int, int] | None

    def env(self) -> dict[str, str]:
        """The clean environment of a run."""
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8",
                "PYTHONPATH": f"{self.root}{os.pathsep}{self.site_packages}"}

    def run(self, args: Sequence[str], *, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``python -S ARGS`` in the copy, as the unprivileged user; never raises on failure."""
        return _run([self.python, "-S", *args], self.root, self.env(), self.user, timeout)


def unprivileged_user() -> tuple[int, int] | None:
    """``(uid, gid)`` of :data:`USER` when this process is root, None when it is not root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        raise Unavailable(f"there is no user {USER!r} to run as") from None
    return entry.pw_uid, entry.pw_gid


def _run(argv: Sequence[str], cwd: Path, env: dict[str, str], user: tuple[int, int] | None,
         timeout: float) -> subprocess.CompletedProcess[str]:
    ids = {} if user is None else {"user": user[0], "group": user[1], "extra_groups": []}
    return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False, **ids)  # type: ignore[call-overload]


def find_python(site_packages: str, user: tuple[int, int] | None, cwd: Path) -> str:
    """An interpreter of this Python version that ``user`` can run with numpy and Numba importable."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    env = {"PATH": "/usr/bin:/bin", "HOME": "/", "PYTHONPATH": site_packages}
    for candidate in (sys.executable, shutil.which(version), f"/usr/bin/{version}"):
        if not candidate:
            continue
        try:
            probe = _run([candidate, "-S", "-c", "import numpy, numba"], cwd, env, user, 60)
        except OSError:
            continue
        if probe.returncode == 0:
            return candidate
    raise Unavailable(f"no {version} interpreter that user {user} can run with this environment's packages")


def make_install(*, precompile: bool = True, seed_cache: bool = False, base: str | None = None) -> Install:
    """Copy the packages to a new temporary folder (under ``base``, default the system's), run
    the precompile step there as this user, make the copy read-only. ``seed_cache`` first copies
    the checkout's prebuilt cache, if any, so that the precompile step only tops it up (seconds
    instead of about 30 s).

    Raises :class:`Unavailable` when the machine cannot run the case and ``RuntimeError`` when
    the precompile step fails. :func:`remove` deletes ``Install.root.parent``.
    """
    user = unprivileged_user()
    dest = Path(tempfile.mkdtemp(prefix="celeritas-readonly-", dir=base))
    dest.chmod(0o755)  # mkdtemp makes it 0700
    if any(not p.stat().st_mode & stat.S_IXOTH for p in dest.parents):
        raise Unavailable(f"{dest.parent} is not reachable by other users")
    root = dest / "install"
    for name in PACKAGES + DATA:
        shutil.copytree(REPO / name, root / name, copy_function=shutil.copy,  # new times, as a fresh copy
                        ignore=shutil.ignore_patterns("__pycache__", "_jitcache", "*.pyc"))
    prebuilt = REPO / "celeritas_core" / "compiled" / "_jitcache"
    if seed_cache and prebuilt.is_dir():
        shutil.copytree(prebuilt, root / "celeritas_core" / "compiled" / "_jitcache",
                        copy_function=shutil.copy)
    site_packages = sysconfig.get_paths()["purelib"]
    python = find_python(site_packages, user, root)
    home, out = dest / "home", dest / "out"
    home.mkdir()
    out.mkdir()
    out.chmod(0o777)
    install = Install(root, python, site_packages, home, out, user)
    if precompile:
        build_home = dest / "build-home"
        build_home.mkdir()
        env = {**install.env(), "HOME": str(build_home)}
        done = _run([python, "-S", "-m", "celeritas_core.install.precompile"], root, env, None, 1800)
        if done.returncode != 0:
            raise RuntimeError(f"precompile failed ({done.returncode}): {done.stderr[-2000:]}")
    read_only(root)
    home.chmod(0o555)
    return install


def read_only(root: Path) -> None:
    """Remove every write permission under ``root`` (folders 0555, files 0444)."""
    for folder, _dirs, files in os.walk(root):
        for name in files:
            Path(folder, name).chmod(0o444)
        Path(folder).chmod(0o555)


def remove(install: Install) -> None:
    """Delete the folder :func:`make_install` made (write permissions back first)."""
    dest = install.root.parent
    for folder, _dirs, _files in os.walk(dest):
        Path(folder).chmod(0o755)
    shutil.rmtree(dest, ignore_errors=True)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: relative path -> (size, modification time in ns)."""
    out = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            st = Path(folder, name).stat()
            out[str(Path(folder, name).relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out
