"""Errors raised for bad user input: one line, naming the file and the offending node or field."""

from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped, so it prints on one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class CeleritasInputError(ValueError):
    """Bad input (graph, cluster, placement or parameter); the CLI prints it on one line, exit 2.

    A ``source`` (a file path) with a line break or another control character is shown escaped,
    so the message stays on one line.

    Examples
    --------
    >>> from celeritas_core import CeleritasInputError, parse_size
    >>> try:
    ...     parse_size("-1GiB", field="devices[0].memory_bytes")
    ... except CeleritasInputError as exc:
    ...     print(exc.with_source("cluster.json"))
    cluster.json: devices[0].memory_bytes: cannot read '-1GiB' as a size (examples: 32GiB, 500MB, 1e9)
    """

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.message = message
        self.source = source
        super().__init__(f"{one_line(source)}: {message}" if source else message)

    def with_source(self, source: str) -> CeleritasInputError:
        """Return the same error attributed to ``source`` (a file path), unless it already has one."""
        if self.source is not None:
            return self
        return CeleritasInputError(self.message, source=source)
