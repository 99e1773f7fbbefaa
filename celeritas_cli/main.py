"""The ``celeritas`` command line: place, compare, simulate, inspect and generate graphs, run the
TensorFlow adapter's steps and the pipeline.

Bad input prints one line ``celeritas: error: …`` naming the file and node/field, exits with
status 2 and writes no output file. The commands live in :mod:`celeritas_cli.core_commands`
(the engine), :mod:`celeritas_cli.tf_commands` (TensorFlow) and
:mod:`celeritas_cli.pipeline_commands` (the pipeline); this module only builds the parser and
dispatches. TensorFlow, MLflow and boto3 load when a command that needs them runs.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import typing
from collections.abc import Sequence

from celeritas_cli import core_commands, pipeline_commands, tf_commands, train_commands
from celeritas_core.errors import CeleritasInputError, one_line
from celeritas_core.readwrite.redact import install_log_redaction, redact

EXIT_INPUT_ERROR = 2


class _OneLineErrorParser(argparse.ArgumentParser):
    """Argument parser whose usage errors are one line (``celeritas place: error: …``), exit 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_INPUT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``celeritas`` command."""
    parser = _OneLineErrorParser(
        prog="celeritas",
        description="Fast device placement for large dataflow graphs (Celeritas: CPD-TOPO fusion "
                    "and Adjusting Placement). Formats: docs/formats.md.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    core_commands.add_commands(sub)
    tf_commands.add_commands(sub)  # argparse only: TensorFlow loads when a command runs
    pipeline_commands.add_commands(sub)  # argparse only, too
    train_commands.add_commands(sub)  # argparse only: TensorFlow and MLflow load when it runs
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``celeritas`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    install_log_redaction()  # a tracking URI's password never reaches a log line
    try:
        return int(args.func(args))
    except CeleritasInputError as exc:
        print(f"celeritas: error: {redact(one_line(str(exc)))}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except BrokenPipeError:  # the reader went away (`celeritas placers | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except OSError as exc:
        print(f"celeritas: error: {redact(one_line(str(exc)))}", file=sys.stderr)
        return 1
    except Exception as exc:
        if _transient(exc):  # the tracking server or storage is unreachable: one line, try again later
            print(f"celeritas: error: {redact(one_line(str(exc)))}", file=sys.stderr)
            return 1
        if not type(exc).__module__.startswith("tensorflow"):
            raise
        # a TensorFlow runtime error (e.g. a placement TensorFlow refuses): its first line
        text = str(exc).strip().splitlines()
        last = text[-1] if text else ""
        print(f"celeritas: tensorflow error: {type(exc).__name__}: {one_line(last)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("celeritas: interrupted", file=sys.stderr)
        return 130


def run(argv: Sequence[str] | None = None) -> typing.NoReturn:
    """The ``celeritas`` executable and ``python -m celeritas_cli``: :func:`main`, then exit with
    its status.

    Every object is frozen out of the garbage collector first (``gc.freeze``): the interpreter's
    last collections would otherwise walk them all, Numba's compiled code included, which took
    0.4-0.6 s at the end of a 2 s ``place``. Exit handlers still run; only the traversal is saved.
    """
    code = main(argv)
    gc.freeze()
    sys.exit(code)


def _transient(exc: BaseException) -> bool:
    """Whether ``exc`` is the pipeline's transient storage or tracking error (already one line)."""
    # lazy: the pipeline's modules load only to classify an error, not for every command
    from tasks.storage import TransientStorageError
    from tasks.tracking import TransientTrackingError

    return isinstance(exc, TransientStorageError | TransientTrackingError)


if __name__ == "__main__":  # pragma: no cover
    run()
