"""JSON documents as bytes: parsed by orjson where it agrees with the standard library, written
by orjson, and files written atomically. What every reader and writer of the formats shares
(:mod:`celeritas_core.readwrite.formats`, :mod:`celeritas_core.readwrite.columnar`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.safe_io import read_input_bytes, write_atomic

_BOM = b"\xef\xbb\xbf"
#: A run of this many digits may be an integer literal beyond 64 bits, which orjson would read as
#: a float (or refuse): such documents are parsed by the standard library, as they always were.
_LONG_DIGITS = 19
_DIGITS_ONLY = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))  # digits kept, the rest spaces
_SCAN_CHUNK = 1 << 24  # bytes translated at a time by the digit scan (16 MiB)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: parsing a large document allocates millions of
    containers, none of them cyclic, and each collection pass would walk them all again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _has_long_digit_run(data: bytes | memoryview) -> bool:
    """Whether ``data`` holds :data:`_LONG_DIGITS` consecutive ASCII digits (about 0.1 s per 100 MB)."""
    run = b"0" * _LONG_DIGITS
    for start in range(0, len(data), _SCAN_CHUNK):
        chunk = bytes(data[max(start - _LONG_DIGITS + 1, 0):start + _SCAN_CHUNK])
        if chunk.translate(_DIGITS_ONLY).find(run) >= 0:
            return True
    return False


def parse_json(data: bytes, source: str | None = None) -> Any:
    """Parse a JSON document (UTF-8, a BOM allowed), turning syntax problems into one-line input
    errors naming ``source``.

    orjson parses it when it can; the standard library decides everything else (the ``NaN`` and
    ``Infinity`` literals, integers beyond 64 bits, lone surrogates, deep nesting, every error
    message), so the accepted documents and the messages are those of :mod:`json`.
    """
    body = memoryview(data)[len(_BOM):] if data.startswith(_BOM) else data
    if not _has_long_digit_run(body):
        try:
            with gc_paused():
                return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # the standard library parses it or names the problem
    try:
        with gc_paused():
            return json.loads(data.decode("utf-8-sig"))  # UTF-8 only (docs/formats.md), a BOM allowed
    except json.JSONDecodeError as exc:
        raise CeleritasInputError(
            f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", source=source
        ) from None
    except UnicodeDecodeError:
        raise CeleritasInputError("not valid JSON (not UTF-8 text)", source=source) from None
    except RecursionError:
        raise CeleritasInputError("not valid JSON (nested too deeply)", source=source) from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CeleritasInputError(f"not valid JSON ({reason})", source=source) from None


def read_json(path: str | os.PathLike[str]) -> Any:
    """Parse a JSON file (:func:`parse_json`), turning I/O and syntax problems into one-line input errors.

    The file must be a regular file of at most :data:`~celeritas_core.limits.MAX_INPUT_FILE_BYTES`
    (:func:`celeritas_core.readwrite.safe_io.read_input_bytes`): FIFOs, devices and directories are refused
    before anything is read.
    """
    source = os.fspath(path)
    return parse_json(read_input_bytes(source), source)


def json_bytes(doc: Any, *, indent: int | None = None, finite: bool = False) -> bytes:
    """``doc`` as UTF-8 JSON: on one line, or ``indent`` spaces per level.

    orjson writes it; what orjson refuses (integers beyond 64 bits, lone surrogates, keys that are
    not strings, other types) is written or refused by :func:`json.dumps`, and a non-finite float
    (which orjson would write as ``null``) raises ``ValueError`` as ``json.dumps(allow_nan=False)``
    does. ``finite=True``: the caller has checked that every float is finite (skips that scan).
    """
    try:
        data = orjson.dumps(doc, option=0 if indent is None else orjson.OPT_INDENT_2)
    except orjson.JSONEncodeError:
        return json.dumps(doc, indent=indent, allow_nan=False).encode("utf-8")
    if not finite and b"null" in data:
        bad = _first_non_finite(doc)
        if bad is not None:
            raise ValueError(f"Out of range float values are not JSON compliant: {bad!r}")
    return data if indent is None or indent == 2 else _reindent(data, indent)


def _first_non_finite(doc: Any) -> float | None:
    """The first float in ``doc`` (nested dicts, lists, tuples) that is NaN or infinite, or None."""
    stack = [doc]
    while stack:
        obj = stack.pop()
        values = list(obj.values()) if isinstance(obj, dict) else obj
        if not isinstance(values, list | tuple):
            values = [values]
        kinds = set(map(type, values))
        if float in kinds:
            bad = next((v for v in values if type(v) is float and not math.isfinite(v)), None)
            if bad is not None:
                return bad
        if any(issubclass(k, dict | list | tuple) for k in kinds):
            stack.extend(v for v in values if isinstance(v, dict | list | tuple))
    return None


def _reindent(data: bytes, indent: int) -> bytes:
    """orjson's two-space indentation as ``indent`` spaces per level (what ``json.dumps`` writes).

    A line's indentation follows its line break; strings never hold a raw line break or NUL. Each
    depth, deepest first, becomes that many NULs (so shallower patterns cannot match it), then
    each NUL ``indent`` spaces: a few passes of ``bytes.replace`` whatever the number of lines.
    """
    depth = 0
    while b"\n" + b"  " * (depth + 1) in data:
        depth += 1
    for level in range(depth, 0, -1):
        data = data.replace(b"\n" + b"  " * level, b"\n" + b"\0" * level)
    return data.replace(b"\0", b" " * max(indent, 0))


def write_json_atomic(path: str | os.PathLike[str], doc: Any, *, indent: int | None = None,
                      inputs: Iterable[str | os.PathLike[str] | None] = (), finite: bool = False) -> Path:
    """Write ``doc`` as JSON (:func:`json_bytes`) to ``path`` through a temporary file and an atomic
    rename (:func:`celeritas_core.readwrite.safe_io.write_atomic`; ``inputs`` may not be overwritten)."""
    data = json_bytes(doc, indent=indent, finite=finite)
    return write_atomic(path, lambda fh: write_json_bytes(fh, data), binary=True, inputs=inputs)


def write_json_bytes(fh: IO[bytes], data: bytes) -> None:
    """Write a serialized document and its final line break."""
    fh.write(data)
    fh.write(b"\n")


def write_text_atomic(path: str | os.PathLike[str], text: str, *,
                      inputs: Iterable[str | os.PathLike[str] | None] = ()) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and an atomic rename."""
    return write_atomic(path, lambda fh: fh.write(text), inputs=inputs)
