"""Errors raised for bad user input: one line, naming the file and the offending node or field."""

from __future__ import annotations


class CeleritasInputError(ValueError):
    """Bad input (graph, cluster, placement or parameter); the CLI prints it on one line, exit 2."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.message = message
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)

    def with_source(self, source: str) -> CeleritasInputError:
        """Return the same error attributed to ``source`` (a file path), unless it already has one."""
        if self.source is not None:
            return self
        return CeleritasInputError(self.message, source=source)
