"""Op identity: every zoo model's ops have the same names and structure keys in every process, a
key changes exactly where TensorFlow builds another op, and a fit never predicts another op."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorflow")

from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.opkeys import fits_op_keys
from celeritas_core.readwrite.formats import fits_from_json, fits_to_json
from celeritas_tf.evaluation import (
    check_structure,
    fits_from_profile,
    fits_identity_note,
    fitted_costs,
    profile_document,
)
from celeritas_tf.identity import step_digest, step_op_keys, step_structure
from celeritas_tf.models import ZOO, get_model
from celeritas_tf.profile import StepTrace
from celeritas_tf.step import TrainingStep, build_training_step

ROOT = Path(__file__).resolve().parents[2]
HASH_SEEDS = ("0", "4242")
_STEPS: dict[tuple[str, int], TrainingStep] = {}


def _step(name: str, batch: int) -> TrainingStep:
    if (name, batch) not in _STEPS:
        _STEPS[name, batch] = build_training_step(get_model(name), batch)
    return _STEPS[name, batch]


@pytest.fixture(scope="module")
def two_processes() -> list[dict[str, Any]]:
    """Every zoo model's step at batch 2, built in two processes with different hash seeds (and,
    with address randomisation, different object ids), side by side."""
    runs = []
    for seed in HASH_SEEDS:
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
        runs.append(subprocess.Popen([sys.executable, "-m", "celeritas_tf.identity", "--batch", "2", *ZOO],
                                     cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    docs = []
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err.decode()[-2000:]
        docs.append(json.loads(out))
    return docs


@pytest.mark.parametrize("model", list(ZOO))
def test_names_and_keys_agree_between_processes(two_processes: list[dict[str, Any]], model: str) -> None:
    first, second = (doc[model] for doc in two_processes)
    assert list(first) == list(second)  # the same op names, in the same order
    differing = [n for n in first if first[n] != second[n]]
    assert differing == [], f"{len(differing)} ops of {model} differ between processes: {differing[:5]}"



def test_keys_in_this_process_agree_with_the_others(two_processes: list[dict[str, Any]]) -> None:
    assert {n: v[0] for n, v in two_processes[0]["mlp"].items()} == step_op_keys(_step("mlp", 2))


@pytest.mark.parametrize("model", ["nmt", "transformer", "tensor_holography"])
def test_a_key_changes_exactly_where_the_op_does(model: str) -> None:
    """Across batch sizes a key is equal exactly when the op's type and inputs are (TensorFlow
    builds a small ``tf.zeros`` as a Const and a large one as a Fill: those keys must differ)."""
    small, large = step_structure(_step(model, 2)), step_structure(_step(model, 32))
    for name in set(small) & set(large):
        same_key = small[name][0] == large[name][0]
        assert same_key == (small[name][1:] == large[name][1:]), name


def _profile(steps: list[TrainingStep], rename: dict[str, str] | None = None) -> dict[str, Any]:
    """A profile document of ``steps`` with synthetic costs (time = 1 + batch · (index + 1) µs,
    memory = 1000 × that bytes, every output ``"external"``) and their real op keys; ``rename``
    swaps records between names, as a process that numbered those ops the other way round
    would have written them."""
    traces = []
    for step in steps:
        keys = step_op_keys(step)
        time = {n: 1.0 + step.batch_size * (i + 1) for i, n in enumerate(keys)}
        names = {n: (rename or {}).get(n, n) for n in keys}
        traces.append(StepTrace(step.batch_size, {names[n]: t for n, t in time.items()},
                                {names[n]: 1000 * t for n, t in time.items()},
                                aliases={names[n]: ["external"] for n in keys},
                                op_keys={names[n]: k for n, k in keys.items()}))
    return profile_document(steps[0].model, traces)


def test_a_fit_is_never_applied_to_an_op_of_another_structure() -> None:
    """nmt profiled at batches 2 and 4 predicts batch 32, where TensorFlow builds some ops of the
    same name differently: every op that gets a fit has the type and inputs it was profiled with,
    and the others get none."""
    profiled, target = _step("nmt", 4), _step("nmt", 32)
    fits = fits_from_json(fits_to_json(fits_from_profile(_profile([_step("nmt", 2), profiled]))))
    costs, aliases, identity = fitted_costs(fits, target, 32)
    before, after = step_structure(profiled), step_structure(target)
    assert costs and identity.checked and set(costs) == identity.matched == set(aliases)
    for name in costs:
        assert before[name][1:] == after[name][1:], name
    changed = {n for n in before if n in after and before[n][1:] != after[n][1:]}
    assert set(identity.differing) == changed
    assert not changed & set(costs)
    assert identity.note("fits") is None if not changed else str(len(changed)) in identity.note("fits")
    # what `celeritas run` and `celeritas remeasure` say about them: expected, harmless, info level
    note = fits_identity_note(identity)
    assert not identity.needs_action and (note is None) == (not changed)
    if changed:  # nmt: the LSTMs' initial zeros, a Const at batch 4, a Fill at 32
        total = len(step_op_keys(target))
        assert note is not None and "\n" not in note
        assert note.startswith(f"{len(changed)} of this step's {total:,} ops are built differently")
        assert "as TensorFlow does for some ops at another batch size" in note
        assert "harmless to the placement, which uses their re-measured costs" in note


def test_ops_numbered_the_other_way_round_get_no_fit() -> None:
    """A profile whose process named two ops the other way round (as ``gradients/AddN_K`` would
    if its numbering depended on the process): neither op gets the other's fit; every other
    op gets its own."""
    step = _step("mlp", 2)
    matmuls = [n for n, v in step_structure(step).items() if v[1] == "MatMul"][:2]
    swap = {matmuls[0]: matmuls[1], matmuls[1]: matmuls[0]}
    fits = fits_from_profile(_profile([step, _step("mlp", 4)], swap))
    costs, _, identity = fitted_costs(fits, _step("mlp", 8), 8)
    assert set(identity.differing) == set(matmuls)
    assert set(costs) == set(step_op_keys(step)) - set(matmuls)
    honest = fits_from_profile(_profile([step, _step("mlp", 4)]))
    assert set(fitted_costs(honest, _step("mlp", 8), 8)[0]) == set(step_op_keys(step))


def test_a_point_of_another_structure_is_left_out_of_the_fit() -> None:
    step2, step4, step8 = _step("mlp", 2), _step("mlp", 4), _step("mlp", 8)
    doc = _profile([step2, step4, step8])
    op = next(iter(doc["profiles"][0]["op_keys"]))
    doc["profiles"][0]["op_keys"][op] = "0" * 12  # at batch 2 this name was another op
    doc["profiles"][0]["time_us"][op] = 1e6
    fits = fits_from_profile(doc)
    i = fits.names.index(op)
    index = list(step_op_keys(step8)).index(op)
    assert fits.time_slope[i] == pytest.approx(index + 1)  # the line through batches 4 and 8 only
    assert fits_op_keys(fits)[op] == step_op_keys(step8)[op]


def test_fits_without_keys_pair_by_name_and_say_so() -> None:
    step = _step("mlp", 2)
    doc = _profile([step, _step("mlp", 4)])
    for p in doc["profiles"]:
        del p["op_keys"]
    fits = fits_from_profile(doc)
    assert "op_keys" not in fits_to_json(fits)
    costs, _, identity = fitted_costs(fits, step, 8)
    assert set(costs) == set(step_op_keys(step)) and not identity.checked
    assert "no op keys" in identity.note("fits")


def test_fits_of_another_model_or_configuration_are_refused() -> None:
    fits = fits_from_profile(_profile([_step("mlp", 2), _step("mlp", 4)]))
    wider = build_training_step(get_model("mlp", hidden=48), 8)  # the same op names, other sizes
    assert set(step_op_keys(wider)) == set(step_op_keys(_step("mlp", 8)))
    for step in (_step("tensor_holography", 2), wider):
        with pytest.raises(CeleritasInputError, match="do not belong to this step") as info:
            fitted_costs(fits, step, 8, "fits.json")
        assert "fits.json" in str(info.value) and "\n" not in str(info.value)


def test_a_placement_made_for_another_structure_is_refused() -> None:
    step = _step("mlp", 2)
    check_structure(step, None)
    check_structure(step, step_digest(_step("mlp", 8)))  # every batch size: the same structure
    other = step_digest(build_training_step(get_model("mlp", features=12), 2))
    with pytest.raises(CeleritasInputError, match="another structure") as info:
        check_structure(step, other, "p.json")
    assert "\n" not in str(info.value) and "p.json" in str(info.value)
