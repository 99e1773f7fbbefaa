"""The project's one hardened file layer: checked inputs and atomic, all-or-nothing outputs.

Inputs (:func:`read_input_bytes`) must be regular files of at most
:data:`~celeritas_core.limits.MAX_INPUT_FILE_BYTES`; a FIFO, a device (``/dev/zero``), a socket or
a directory is refused before anything is read, so no input can hang or exhaust memory.

Outputs only ever replace regular files (:func:`check_output_path`): a destination that is a
symbolic link, a directory, a FIFO, a socket or a device is refused, and so is a destination that
is the same file as one of the command's inputs; so is a path that names a folder (``out/``,
``out/.``) and a folder on one of the kernel's own filesystems (``/proc``, ``/sys``, …), where no
file can be created. Every write goes through :class:`OutputSet`: the
content is written to a temporary file in the destination's folder and fsynced, and only when
every output of the set is staged are they renamed into place (``os.replace``), so a command with
several outputs leaves all of them or none (previous files untouched). :func:`write_atomic` is a
set of one; inside :func:`staged_outputs` every write joins the active set instead. Refusals are
one-line :class:`CeleritasInputError`\\ s naming the path.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from celeritas_core.errors import CeleritasInputError
from celeritas_core.limits import MAX_INPUT_FILE_BYTES

PathLike = str | os.PathLike[str]

_ACTIVE: contextvars.ContextVar[OutputSet | None] = contextvars.ContextVar("celeritas_outputs", default=None)


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


# ---------------------------------------------------------------------------- inputs
def _check_input_stat(st: os.stat_result, source: str, limit: int) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise CeleritasInputError("is a directory, expected a JSON file", source=source)
    if not stat.S_ISREG(st.st_mode):
        raise CeleritasInputError(f"is {_kind(st.st_mode)}; inputs must be regular files", source=source)
    if st.st_size > limit:
        raise CeleritasInputError(f"file is {st.st_size:,} bytes, above the input limit of {limit:,} bytes",
                                  source=source)


def _os_error(exc: OSError, source: str, verb: str = "cannot read") -> CeleritasInputError:
    if isinstance(exc, FileNotFoundError):
        return CeleritasInputError("file not found", source=source)
    return CeleritasInputError(f"{verb}: {exc.strerror or type(exc).__name__}", source=source)


def check_input_file(path: PathLike, *, limit: int = MAX_INPUT_FILE_BYTES) -> None:
    """Raise unless ``path`` is a regular file (symbolic links followed) of at most ``limit`` bytes."""
    source = os.fspath(path)
    if not source or "\0" in source:
        raise CeleritasInputError("invalid input path", source=repr(source))
    try:
        st = os.stat(source)
    except OSError as exc:
        raise _os_error(exc, source) from None
    _check_input_stat(st, source, limit)


def read_input_bytes(path: PathLike, *, limit: int = MAX_INPUT_FILE_BYTES) -> bytes:
    """The content of the regular file ``path`` (at most ``limit`` bytes), checked before reading.

    The file is checked with ``stat``, opened non-blocking (a FIFO swapped in meanwhile cannot
    hang the open) and checked again with ``fstat`` on the open descriptor, then read.
    """
    check_input_file(path, limit=limit)
    source = os.fspath(path)
    flags = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
             | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(source, flags)
    except OSError as exc:
        raise _os_error(exc, source) from None
    try:
        _check_input_stat(os.fstat(fd), source, limit)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise _os_error(exc, source) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise CeleritasInputError(f"file is larger than the input limit of {limit:,} bytes", source=source)
    return data


# ---------------------------------------------------------------------------- outputs
def _same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name the same file (by device and inode, else by resolved path)."""
    with contextlib.suppress(OSError, ValueError):
        return os.path.samefile(a, b)
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


#: Filesystems that expose the kernel's state (``/proc``, ``/sys``, cgroups, …): no output file
#: can be created there, whatever the folder's permission bits say (root passes ``os.access``).
KERNEL_FILESYSTEMS = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "pstore", "bpf",
    "configfs", "efivarfs", "binfmt_misc", "fusectl", "selinuxfs", "devpts", "mqueue", "nsfs",
})


def _mount_fstype(folder: str) -> str | None:
    """The filesystem type of the mount holding ``folder`` (an existing path), from
    ``/proc/self/mountinfo``; None where that cannot be read (not Linux)."""
    try:
        lines = Path("/proc/self/mountinfo").read_bytes().splitlines()
        real = os.fsencode(os.path.realpath(folder))
    except (OSError, ValueError):
        return None
    best, fstype = b"", None
    for line in lines:
        fields = line.split()
        if b"-" not in fields[6:]:
            continue
        # the kernel writes a space, tab, newline or backslash in a mount point as "\040" and so on
        point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4])
        inside = real == point or real.startswith(point.rstrip(b"/") + b"/")
        if inside and len(point) >= len(best):
            best, fstype = point, os.fsdecode(fields[fields.index(b"-", 6) + 1])
    return fstype


def _check_output_name(source: str) -> None:
    """Raise when ``source`` names a folder (``out/``, ``out/.``, ``..``) rather than a file."""
    tail = os.path.basename(source)
    if tail in ("", ".", ".."):
        raise CeleritasInputError("expected a file name, got a path ending in "
                                  f"{(tail or os.sep)!r}", source=source)


def check_output_path(path: PathLike, *, inputs: Iterable[PathLike | None] = ()) -> Path:
    """Raise unless ``path`` may be written.

    Parameters
    ----------
    path : str or os.PathLike
        The destination: it must name a file (not end in ``/``), be absent or a regular file
        (not a symbolic link), in a folder that exists or can be created, is writable and is not
        on a kernel filesystem (:data:`KERNEL_FILESYSTEMS`).
    inputs : iterable of paths or None
        The command's inputs, none of which the destination may be.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    source = os.fspath(path)
    if not source or "\0" in source:
        raise CeleritasInputError("invalid output path", source=repr(source))
    _check_output_name(source)
    p = Path(source)
    try:
        st: os.stat_result | None = os.lstat(source)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # e.g. a parent that is a regular file (ENOTDIR)
        raise CeleritasInputError(f"cannot write: {exc.strerror}", source=source) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise CeleritasInputError(f"output is {_kind(st.st_mode)}; outputs only replace regular files",
                                  source=source)
    for ancestor in (p.parent, *p.parent.parents):
        try:
            ast = os.stat(ancestor)
        except FileNotFoundError:
            if os.path.islink(ancestor):
                raise CeleritasInputError(f"cannot write: {ancestor} is a dangling symbolic link",
                                          source=source) from None
            continue
        except OSError as exc:
            raise CeleritasInputError(f"cannot write: {exc.strerror}", source=source) from None
        if not stat.S_ISDIR(ast.st_mode):
            raise CeleritasInputError(f"cannot write: {ancestor} is not a directory", source=source)
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise CeleritasInputError(f"cannot write: folder {ancestor} is not writable", source=source)
        fstype = _mount_fstype(os.fspath(ancestor))
        if fstype in KERNEL_FILESYSTEMS:
            raise CeleritasInputError(f"cannot write: {ancestor} is on the kernel's {fstype} filesystem, "
                                      "where no file can be created", source=source)
        break
    for inp in inputs:
        if inp is not None and _same_file(source, os.fspath(inp)):
            raise CeleritasInputError(f"output is the same file as the input {os.fspath(inp)}", source=source)
    return p


def check_outputs(paths: Iterable[PathLike | None], *, inputs: Iterable[PathLike | None] = ()) -> list[Path]:
    """:func:`check_output_path` on every path (``None`` skipped), and no path given twice; call it
    before a long computation so that a bad destination fails first."""
    inputs = list(inputs)
    checked: list[Path] = []
    for path in paths:
        if path is None:
            continue
        p = check_output_path(path, inputs=inputs)
        _check_not_twice(p, checked)
        checked.append(p)
    return checked


def _check_not_twice(path: Path, earlier: Iterable[Path]) -> None:
    """Raise when ``path`` names the same output as one of ``earlier`` (same path or same file)."""
    for other in earlier:
        if os.path.abspath(path) == os.path.abspath(other) or _same_file(os.fspath(path), os.fspath(other)):
            raise CeleritasInputError(f"the same output is given twice ({other})", source=os.fspath(path))


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class OutputSet:
    """A command's outputs, written all or nothing.

    :meth:`add` checks a destination and writes its content to a fsynced temporary file next to
    it; :meth:`commit` renames every staged file into place (restoring the previous files if a
    rename fails); :meth:`discard` removes the temporary files and any folder the set created.
    Used as a context manager it commits on success and discards on any exception.
    """

    def __init__(self, *, inputs: Iterable[PathLike | None] = ()) -> None:
        self.inputs = [os.fspath(i) for i in inputs if i is not None]
        self._staged: list[tuple[Path, str]] = []
        self._created: list[Path] = []
        self._done = False

    # -------------------------------------------------------------- staging
    def add(self, path: PathLike, write: Callable[[IO[Any]], Any], *, binary: bool = False) -> Path:
        """Stage ``write(fh)`` for ``path`` (text files are UTF-8); returns ``path``."""
        if self._done:
            raise RuntimeError("output set already committed or discarded")
        p = check_output_path(path, inputs=self.inputs)
        _check_not_twice(p, self.paths)
        self._make_parents(p.parent)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:100]}.", suffix=".tmp", dir=p.parent)
        except OSError as exc:  # the folder refuses new files after all (EACCES, EROFS, ENOENT, …)
            raise CeleritasInputError(f"cannot write: {exc.strerror or type(exc).__name__}",
                                      source=os.fspath(p)) from None  # the OSError stays the context
        try:
            # mkstemp creates the file with mode 0600; give the output the mode a plain open() would.
            os.chmod(tmp, 0o666 & ~_current_umask())
            with (os.fdopen(fd, "wb") if binary else
                  os.fdopen(fd, "w", encoding="utf-8", newline="")) as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._staged.append((p, tmp))
        return p

    def _make_parents(self, folder: Path) -> None:
        missing = []
        for ancestor in (folder, *folder.parents):
            if ancestor.exists():
                break
            missing.append(ancestor)
        for d in reversed(missing):
            try:
                d.mkdir()
            except FileExistsError:
                continue
            except OSError as exc:
                raise CeleritasInputError(f"cannot create folder: {exc.strerror}", source=str(d)) from None
            self._created.append(d)

    @property
    def paths(self) -> list[Path]:
        """The staged destinations, in order."""
        return [dest for dest, _ in self._staged]

    # -------------------------------------------------------------- finishing
    def commit(self) -> list[Path]:
        """Rename every staged file into place: all of them, or (on failure) none."""
        if self._done:
            raise RuntimeError("output set already committed or discarded")
        try:
            for dest, _ in self._staged:  # a destination swapped since it was staged is refused
                check_output_path(dest, inputs=self.inputs)
            backups: list[tuple[Path, str | None]] = [(dest, self._backup(dest)) for dest, _ in self._staged]
        except BaseException:
            self.discard()
            raise
        replaced: list[int] = []
        try:
            for k, (dest, tmp) in enumerate(self._staged):
                os.replace(tmp, dest)
                replaced.append(k)
        except BaseException:
            for k in reversed(replaced):
                dest, backup = backups[k]
                with contextlib.suppress(OSError):
                    if backup is not None:
                        os.replace(backup, dest)
                    else:
                        dest.unlink()
            self._remove_backups(backups)
            self.discard()
            raise
        self._remove_backups(backups)
        for folder in {dest.parent for dest, _ in self._staged}:
            _fsync_dir(folder)
        self._done = True
        return self.paths

    @staticmethod
    def _backup(dest: Path) -> str | None:
        """A hard link to the file at ``dest`` (to restore it if a later rename fails), or None."""
        if not dest.exists():
            return None
        name = os.path.join(dest.parent, f".{dest.name[:100]}.{secrets.token_hex(6)}.bak")
        try:
            os.link(dest, name)
        except OSError:
            return None
        return name

    @staticmethod
    def _remove_backups(backups: list[tuple[Path, str | None]]) -> None:
        for _, backup in backups:
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.unlink(backup)

    def discard(self) -> None:
        """Remove the staged temporary files and the folders this set created (when empty)."""
        for _, tmp in self._staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for folder in reversed(self._created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._done = True

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._done:
            return
        if exc_type is None:
            self.commit()
        else:
            self.discard()


@contextlib.contextmanager
def staged_outputs(*, inputs: Iterable[PathLike | None] = ()) -> Iterator[OutputSet]:
    """Within this block every :func:`write_atomic` (hence every ``save_*``, JSON, CSV and PNG
    writer) joins one :class:`OutputSet`, committed when the block ends without an exception."""
    outputs = OutputSet(inputs=inputs)
    token = _ACTIVE.set(outputs)
    try:
        with outputs:
            yield outputs
    finally:
        _ACTIVE.reset(token)


def write_atomic(path: PathLike, write: Callable[[IO[Any]], Any], *, binary: bool = False,
                 inputs: Iterable[PathLike | None] = ()) -> Path:
    """Write ``path`` through ``write(fh)`` atomically (see the module docstring); inside
    :func:`staged_outputs` the file is only staged and lands when the block ends."""
    active = _ACTIVE.get()
    if active is not None:
        active.inputs.extend(os.fspath(i) for i in inputs if i is not None)
        return active.add(path, write, binary=binary)
    with OutputSet(inputs=inputs) as outputs:
        return outputs.add(path, write, binary=binary)
