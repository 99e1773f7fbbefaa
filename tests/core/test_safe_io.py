"""safe_io's output checks: a path naming a folder, a kernel filesystem, and a folder that refuses
the temporary file after the checks passed are one-line input errors that write nothing."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.safe_io import check_output_path, write_atomic


@pytest.mark.parametrize("name", ["out/", "out/.", "..", "sub/out/"])
def test_an_output_path_naming_a_folder_is_refused(name: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CeleritasInputError, match="expected a file name, got a path ending in"):
        check_output_path(name)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux's /proc")
@pytest.mark.parametrize("path", ["/proc/x.json", "/sys/x.json", "/proc/self/x/y.json"])
def test_an_output_on_a_kernel_filesystem_is_refused_before_anything_runs(path: str) -> None:
    with pytest.raises(CeleritasInputError, match=r"cannot write: .*(kernel's|not writable)"):
        check_output_path(path)


def test_a_folder_that_refuses_the_temporary_file_is_one_line(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".out.json.x.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(CeleritasInputError) as info:
        write_atomic(tmp_path / "out.json", lambda fh: fh.write("{}"))
    assert str(info.value) == f"{tmp_path / 'out.json'}: cannot write: Permission denied"
    assert isinstance(info.value.__context__, PermissionError)  # what tasks/storage.py classifies
    assert list(tmp_path.iterdir()) == []
