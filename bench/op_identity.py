"""Op identity between processes and batch sizes, per zoo model (``bench/bench_tf.py`` reports it;
``.venv/bin/python bench/op_identity.py [--models mlp,nmt]`` runs it alone).

Each zoo model's training step (small configuration) is built in three fresh processes: batch 2
with ``PYTHONHASHSEED`` 1 and 2, and the large batch with seed 1 (``python -m
celeritas_tf.identity``). Counted per model:

* **between processes**, by name (what pairs profiles with re-measurements without keys): ops
  whose name names an op of another type or inputs in the other process, or only one has;
  by key (name and structure key): ops whose pair the other process lacks. Target: 0 and 0.
* **between batch sizes** (2 and the large batch): ops whose name is another op at the large
  batch (a name-only pairing gives them a fit of another op) and, by key, how many of those keep
  their key (must be 0: a key never pairs two different ops).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = ("mlp", "tensor_holography", "inception_v3", "nmt", "transformer")


def _build(models: Sequence[str], batch: int, seed: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen([sys.executable, "-m", "celeritas_tf.identity", "--batch", str(batch), *models],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _result(run: subprocess.Popen[bytes]) -> dict[str, Any]:
    out, err = run.communicate()
    if run.returncode != 0:
        raise RuntimeError(f"building the steps failed: {err.decode()[-500:]}")
    return json.loads(out)


def _by_name(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> list[str]:
    """Names that name another op (type, inputs) in ``b`` than in ``a``, or only one has."""
    return sorted({n for n in a if n not in b or a[n][1:] != b[n][1:]} | (set(b) - set(a)))


def _by_key(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> list[str]:
    """Names whose (name, key) pair only one of ``a``, ``b`` has."""
    return sorted({n for n in a if n not in b or a[n][0] != b[n][0]} | (set(b) - set(a)))


def op_identity(models: Sequence[str], large_batch: int = 32) -> list[dict[str, Any]]:
    """One row per model (see the module docstring); builds run two at a time."""
    first, second = _build(models, 2, "1"), _build(models, 2, "2")
    one, two = _result(first), _result(second)
    large = _result(_build(models, large_batch, "1"))
    rows = []
    for m in models:
        renamed = [n for n in _by_name(one[m], large[m]) if n in one[m] and n in large[m]]
        rows.append({"model": m, "ops": len(one[m]), "process_by_name": len(_by_name(one[m], two[m])),
                     "process_by_key": len(_by_key(one[m], two[m])), "large_batch": large_batch,
                     "batch_other_op_by_name": len(renamed),
                     "batch_other_op_same_key": sum(one[m][n][0] == large[m][n][0] for n in renamed),
                     "batch_examples": renamed[:3]})
    return rows


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    """The rows as a table."""
    print("Op identity: ops whose identity differs between two processes (batch 2, PYTHONHASHSEED 1 "
          "vs 2), and ops that are another op under the same name at the large batch\n")
    print(f"{'model':<18} {'ops':>6} {'proc: name':>11} {'proc: key':>10} {'batch: name':>12} "
          f"{'same key':>9}")
    for r in rows:
        print(f"{r['model']:<18} {r['ops']:>6} {r['process_by_name']:>11} {r['process_by_key']:>10} "
              f"{r['batch_other_op_by_name']:>12} {r['batch_other_op_same_key']:>9}")
    print("(name: paired by op name, as without keys; key: by name and structure key; batch: 2 vs "
          f"{rows[0]['large_batch'] if rows else '?'}; same key: of those, ops whose key did not change, "
          "must be 0)\n")


def checks(rows: Sequence[dict[str, Any]]) -> list[str]:
    """PASS/MISS lines: no identity differs between processes; no key pairs two different ops."""
    out = []
    for r in rows:
        ok = r["process_by_key"] == 0 and r["batch_other_op_same_key"] == 0
        out.append(f"{'PASS' if ok else 'MISS'} {r['model']}: {r['process_by_key']} ops whose identity "
                   f"differs between two processes, {r['batch_other_op_same_key']} of "
                   f"{r['batch_other_op_by_name']} ops rebuilt at batch {r['large_batch']} keep their key "
                   f"(target 0 and 0)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison for ``--models`` and print the table and the checks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help=f"comma-separated zoo models (default {','.join(DEFAULT_MODELS)})")
    parser.add_argument("--large-batch", type=int, default=32, help="the large batch (default 32)")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(DEFAULT_MODELS))
    if not models or unknown or args.large_batch < 3:
        what = f"unknown models {', '.join(unknown)}" if unknown else (
            "no models" if not models else f"--large-batch must be at least 3, not {args.large_batch}")
        print(f"op_identity: {what} (zoo: {', '.join(DEFAULT_MODELS)})", file=sys.stderr)
        return 2
    table = op_identity(models, args.large_batch)
    print_table(table)
    print("\n".join(checks(table)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
