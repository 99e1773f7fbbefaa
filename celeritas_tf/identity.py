"""Structure keys of a training step's ops (see :mod:`celeritas_core.opkeys` for why).

An op's key hashes its type, its data inputs (``producer:slot``, in order), its control inputs
(sorted) and its attributes except those that vary with the batch size or the process: shapes
(``shape``, ``_output_shapes``), tensors (a ``Const``'s value holds shapes), functions (their
names carry a process-wide counter), and internal ``_``-prefixed attributes (co-location,
devices set by placement). What is kept (dtypes, strides, paddings, axes, flags, variable names)
is fixed by the model's configuration. Every key of a step also hashes the step's
batch-independent sizes (:func:`step_sizes`), so the keys of two configurations of a model differ
everywhere, and the keys of two batch sizes of one configuration differ only where TensorFlow
built another op.

Op names are themselves deterministic for the zoo: the step is built in a fresh graph after
``keras.backend.clear_session()``, and TensorFlow creates gradient ops (``gradients/AddN_K``
included) walking ops in input order with lists and insertion-ordered dicts, not in set or
hash order. ``tests/tf/test_op_identity.py`` builds every zoo model in two processes with
different ``PYTHONHASHSEED`` values and checks names and keys agree; the key is what makes a
mismatch (another batch size's structure, another configuration, a user model built in a
process-dependent order) show instead of pairing two different ops.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from celeritas_core.opkeys import keys_digest, structure_key
from celeritas_tf.models import get_model
from celeritas_tf.step import TrainingStep, build_training_step

#: AttrValue kinds left out of a key: they carry shapes, values or process-dependent names.
_SKIPPED_KINDS = frozenset({"shape", "tensor", "func", "placeholder"})


def op_structure(node: Any) -> str:
    """The canonical text an op's key hashes (a NodeDef: type, inputs, kept attributes)."""
    data, control = [], []
    for text in node.input:
        if text.startswith("^"):
            control.append(text)
        else:
            producer, _, slot = text.partition(":")
            data.append(f"{producer}:{slot or 0}")
    parts = [node.op, *data, *sorted(control)]
    for name in sorted(node.attr):
        if name.startswith("_"):
            continue
        value = node.attr[name]
        kind = value.WhichOneof("value")
        if kind in _SKIPPED_KINDS or (kind == "list" and (value.list.shape or value.list.tensor
                                                          or value.list.func)):
            continue
        parts.append(f"{name}={value.SerializeToString(deterministic=True).hex()}")
    return "\n".join(parts)


def step_sizes(graph_def: Any) -> str:
    """The batch-independent sizes of a step, as text: each variable's shape and dtype and each
    fed input's shape without its batch dimension. Every key of the step includes it, so fits or
    placements of another configuration of the model (other widths, image sizes, sequence
    lengths, vocabularies) pair with no op at all, while every batch size gives the same text."""
    lines = []
    for node in graph_def.node:
        if node.op in ("VarHandleOp", "VariableV2", "Placeholder") and "shape" in node.attr:
            dims = [d.size for d in node.attr["shape"].shape.dim]
            if node.op == "Placeholder":
                dims = dims[1:]
            lines.append(f"{node.name} {node.op} {dims} {node.attr['dtype'].type}")
    return "\n".join(sorted(lines))


def op_key(node: Any, sizes: str = "") -> str:
    """An op's structure key (:data:`celeritas_core.opkeys.KEY_HEX` hex digits) from its NodeDef
    and its step's :func:`step_sizes`."""
    return structure_key(f"{sizes}\n\n{op_structure(node)}")


def step_op_keys(step: TrainingStep) -> dict[str, str]:
    """``op name → key`` for every op of the step (:meth:`TrainingStep.step_graph_def`)."""
    graph_def = step.step_graph_def()
    sizes = step_sizes(graph_def)
    return {node.name: op_key(node, sizes) for node in graph_def.node}


def step_digest(step: TrainingStep) -> str:
    """The digest of the step's keys (:func:`celeritas_core.opkeys.keys_digest`)."""
    return keys_digest(step_op_keys(step))


def step_structure(step: TrainingStep) -> dict[str, list[Any]]:
    """Per op of the step: ``[key, type, inputs]`` (what comparing two builds needs)."""
    keys = step_op_keys(step)
    return {node.name: [keys[node.name], node.op, list(node.input)] for node in step.step_graph_def().node}


def main(argv: list[str] | None = None) -> int:
    """``python -m celeritas_tf.identity [--batch B] MODEL...``: print each zoo model's step
    structure (small configuration) as JSON, ``{model: {op: [key, type, inputs]}}``: run it in
    two processes (e.g. with different ``PYTHONHASHSEED``) and compare (tests, bench)."""
    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0] if main.__doc__ else None)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("models", nargs="+")
    args = parser.parse_args(argv)
    out = {name: step_structure(build_training_step(get_model(name), args.batch)) for name in args.models}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
