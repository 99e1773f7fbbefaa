"""Op identity across processes and batch sizes: an op is its name *and* its structure key.

Standard Evaluation pairs figures of one op taken in different processes and at different batch
sizes: profiled costs (small batches, one process) with the step re-measured at the large batch
(another process), fits with the graph they predict, placements with the step they run. Names
alone can name another op: TensorFlow builds some ops differently at another batch size
(``tf.zeros`` of fewer than 1,000 elements is a ``Const``, of more a ``Fill`` with two new
inputs), another configuration of a model reuses names for other ops, and a model whose
construction depends on the process would number its ops differently. A structure key says what
the op computes: its type, its inputs (producer name and output slot, in order; control inputs
sorted) and its batch-independent attributes, hashed short (:func:`celeritas_tf.identity.op_key`
computes it from TensorFlow's NodeDef). Shapes, constant values and devices are not in it, so
the key of an op is the same at every batch size while its structure is; it names its inputs,
not their keys, so one changed op changes only its own key, not every key downstream.

Every document that carries per-op figures across a process boundary carries the keys too
(``op_keys``: op name → key; docs/formats.md), and a figure is applied only to the op of the
same name *and* key. This module is the format-free part: keyed fits, key matching, digests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from celeritas_core.errors import CeleritasInputError
from celeritas_core.limits import short_repr
from celeritas_core.statistics.regression import CostFits

#: Hex digits of an op's structure key (48 bits; keys are compared per op name, not globally).
KEY_HEX = 12
#: Longest key a document may carry (a key written by another version may be longer).
MAX_KEY_CHARS = 64


def structure_key(text: str) -> str:
    """The short key of an op's canonical structure text (:func:`celeritas_tf.identity.op_key`)."""
    return hashlib.blake2b(text.encode(), digest_size=KEY_HEX // 2).hexdigest()


def keys_digest(keys: Mapping[str, str]) -> str:
    """One 16-hex-digit digest of a whole step's ``op name → key`` map: equal digests, same ops."""
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(keys):
        h.update(f"{name}\0{keys[name]}\n".encode())
    return h.hexdigest()


@dataclass(frozen=True, eq=False)
class KeyedFits(CostFits):
    """Per-op fits that know the structure key of each fitted op (as profiled at the largest
    batch size); empty ``op_keys`` means unknown (fits of a profile that did not record them)."""

    op_keys: Mapping[str, str] = field(default_factory=dict)


def fits_op_keys(fits: CostFits) -> dict[str, str]:
    """The structure keys ``fits`` carry ({} for fits without them)."""
    return dict(getattr(fits, "op_keys", {}) or {})


def with_op_keys(fits: CostFits, keys: Mapping[str, str]) -> KeyedFits:
    """``fits`` carrying ``keys`` (restricted to the fitted ops)."""
    fields = {f: getattr(fits, f) for f in CostFits.__dataclass_fields__}
    names = set(fits.names)
    return KeyedFits(**fields, op_keys={n: str(k) for n, k in keys.items() if n in names})


@dataclass(frozen=True)
class KeyMatch:
    """How recorded per-op figures (``name → key``) pair with the ops of a step.

    ``matched``: ops of the step with a record of the same name and key; ``differing``: ops of
    the step whose name has a record of another structure (never paired); ``missing``: ops of
    the step without a record; ``checked``: False when the records carry no keys (paired by name
    only: documents written before keys were recorded)."""

    matched: frozenset[str]
    differing: tuple[str, ...]
    missing: int
    checked: bool = True

    @property
    def needs_action(self) -> bool:
        """Whether :meth:`note` asks for something to be done (records without keys: profile
        again), rather than reporting what TensorFlow does at another batch size (an op built
        differently: its record is not applied, which is expected)."""
        return not self.checked

    def note(self, what: str) -> str | None:
        """One line saying what was not paired and why (None when every recorded op was)."""
        if not self.checked:
            return (f"the {what} carry no op keys (written before op identity was recorded): ops are "
                    f"paired by name only; profile again to check their structure")
        if not self.differing:
            return None
        count, total = len(self.differing), len(self.matched) + len(self.differing) + self.missing
        first = ", ".join(repr(n) for n in self.differing[:3]) + (", …" if count > 3 else "")
        are, them = ("is", "it") if count == 1 else ("are", "them")
        return (f"{count:,} of this step's {total:,} ops {are} built differently (another type or inputs) "
                f"than the op of the same name in the {what}, so the {what} do not apply to {them} "
                f"({first}), as TensorFlow does for some ops at another batch size (a small tf.zeros is a "
                f"Const, a large one a Fill)")


def match_op_keys(recorded: Mapping[str, str], step_keys: Mapping[str, str],
                  names: Sequence[str] | None = None) -> KeyMatch:
    """Pair the records (``recorded``: name → key, empty = no keys; ``names``: the recorded op
    names, default those of ``recorded``) with a step's ops (``step_keys``: name → key)."""
    listed = set(recorded if names is None else names)
    if not recorded:
        matched = frozenset(n for n in step_keys if n in listed)
        return KeyMatch(matched, (), len(step_keys) - len(matched), checked=False)
    matched, differing = set(), []
    for name, key in step_keys.items():
        if name in listed and recorded.get(name) == key:
            matched.add(name)
        elif name in listed:
            differing.append(name)
    return KeyMatch(frozenset(matched), tuple(sorted(differing)),
                    len(step_keys) - len(matched) - len(differing))


def read_op_keys(raw: Any, where: str) -> dict[str, str]:
    """Check an ``op_keys`` object (op name → key string of at most :data:`MAX_KEY_CHARS`)."""
    if not isinstance(raw, dict):
        raise CeleritasInputError(f"{where}: field 'op_keys' must be an object of op name -> key")
    for name, key in raw.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS:
            raise CeleritasInputError(f"{where}: op_keys of op {name!r} must be a string of 1 to "
                                      f"{MAX_KEY_CHARS} characters, got {short_repr(key)}")
    return {str(n): k for n, k in raw.items()}
