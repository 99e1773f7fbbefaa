"""Standard Evaluation beyond the paper's lines (no TensorFlow): the per-op time model chosen by
leave-one-out error, the noise-driven count of traced steps, the profile batch that spans towards
the target, and the celeritas-fits/2 document that stores the choice."""

from __future__ import annotations

import math

import numpy as np
import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.estimation import (
    TIME_MODELS,
    choose_time_models,
    spanning_batch,
    traced_steps_needed,
    weighted_median_error,
)
from celeritas_core.formats import fits_from_json, fits_to_json
from celeritas_core.regression import fit_costs

BATCHES = (2, 4, 8, 16)
#: Ops whose right model is known: a fixed cost until the work grows past it, a power law, a line.
TRUTH = {
    "floor": lambda b: max(40.0, 10.0 * b),
    "power": lambda b: 6.0 * b**0.5,
    "linear": lambda b: 3.0 * b + 10.0,
}


def _times(noise: float = 0.0, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = np.array([[f(b) for f in TRUTH.values()] for b in BATCHES])
    return y * (1.0 + noise * rng.standard_normal(y.shape))


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_the_known_model_of_each_op_is_chosen(noise):
    models = choose_time_models(list(TRUTH), BATCHES, _times(noise))
    assert models.kinds == tuple(TRUTH)
    # the chosen model is the best of the three on the profiled batches by leave-one-out error
    best = [TIME_MODELS[i] for i in np.argmin(models.loo_error, axis=1)]
    assert best == list(models.kinds)
    if noise == 0.0:  # and it extrapolates as the truth does
        assert models.predict(64).tolist() == pytest.approx([f(64) for f in TRUTH.values()], rel=1e-9)


def test_the_floor_is_a_candidate_only_where_its_folds_can_bend():
    y = np.array([[TRUTH["floor"](b)] for b in BATCHES])
    floor = TIME_MODELS.index("floor")
    assert choose_time_models(["f"], BATCHES, y).kinds == ("floor",)
    three = choose_time_models(["f"], BATCHES[1:], y[1:])  # on two points its bend is the line
    assert three.kinds != ("floor",) and math.isinf(three.loo_error[0, floor])


def test_a_tie_keeps_the_paper_line_and_too_few_batches_choose_nothing():
    constant = np.full((3, 1), 5.0)
    assert choose_time_models(["c"], (2, 4, 8), constant).kinds == ("linear",)
    two = choose_time_models(["p"], (2, 8), np.array([[6 * 2**0.5], [6 * 8**0.5]]))
    assert two.kinds == ("linear",) and np.isnan(two.loo_error).all()
    # the line through both points, as the paper's fit
    assert two.predict(8)[0] == pytest.approx(6 * 8**0.5)


def test_an_op_missing_at_a_batch_keeps_its_line_and_zero_times_rule_out_the_power_law():
    y = np.array([[1.0, 0.0], [2.0, 0.0], [np.nan, 3.0], [8.0, 6.0]])
    models = choose_time_models(["gap", "zeros"], (2, 4, 8, 16), y)
    assert models.kinds[0] == "linear" and np.isnan(models.loo_error[0]).all()
    assert models.predict(32)[0] == pytest.approx(16.0)  # the line 0.5 · b through its three points
    assert math.isinf(models.loo_error[1, TIME_MODELS.index("power")])


def test_power_exponent_is_held_between_0_and_1():
    y = np.array([[b**2.0] for b in BATCHES])  # faster than the work: an exponent of 1 at most
    models = choose_time_models(["x"], BATCHES, y)
    power = TIME_MODELS.index("power")
    from celeritas_core.estimation import fit_model

    assert fit_model("power", np.array(BATCHES, float), y)[0, 1] == pytest.approx(1.0)
    assert models.loo_error[0, power] > 0


def test_fit_costs_choose_predicts_with_the_chosen_models_and_round_trips_as_fits_2():
    y = _times()
    rows = [(b, {n: float(y[i, j]) for j, n in enumerate(TRUTH)}, {n: 100.0 * b for n in TRUTH})
            for i, b in enumerate(BATCHES)]
    paper = fit_costs(rows)
    chosen = fit_costs(rows, time_model="choose")
    assert paper.time_models is None and chosen.time_models.kinds == chosen.names  # each op's own model
    assert chosen.predict(64)[0].tolist() == pytest.approx([TRUTH[n](64) for n in chosen.names])
    assert np.array_equal(paper.predict(64)[1], chosen.predict(64)[1])  # memory stays the line
    doc = fits_to_json(chosen)
    assert doc["format"] == "celeritas-fits/2"
    assert doc["ops"]["power"]["time_model"]["kind"] == "power"
    assert doc["ops"]["power"]["time_model"]["exponent"] == pytest.approx(0.5)
    back = fits_from_json(doc)
    assert back.time_models.kinds == chosen.time_models.kinds
    assert np.allclose(back.predict(64)[0], chosen.predict(64)[0])
    assert np.allclose(back.time_models.loo_error, chosen.time_models.loo_error, equal_nan=True)
    old = fits_to_json(paper)  # the paper's fits stay celeritas-fits/1, without time models
    assert old["format"] == "celeritas-fits/1" and all("time_model" not in f for f in old["ops"].values())
    with pytest.raises(CeleritasInputError, match="time model must be one of"):
        fit_costs(rows, time_model="cubic")


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m.update(kind="cubic"), "'kind' one of linear, floor, power"),
    (lambda m: m.pop("coefficient"), "'coefficient' must be a finite number"),
    (lambda m: m.update(exponent=1.5), "'exponent' must be within 0 and 1"),
    (lambda m: m.update(loo_error={"linear": -1}), "'loo_error'"),
])
def test_a_broken_time_model_is_refused_naming_the_op(change, message):
    y = _times()
    rows = [(b, {n: float(y[i, j]) for j, n in enumerate(TRUTH)}, {n: 1.0 for n in TRUTH})
            for i, b in enumerate(BATCHES)]
    doc = fits_to_json(fit_costs(rows, time_model="choose"))
    change(doc["ops"]["power"]["time_model"])
    with pytest.raises(CeleritasInputError, match=message) as info:
        fits_from_json(doc, source="f.json")
    assert "op 'power'" in str(info.value) and str(info.value).startswith("f.json: ")
    del doc["ops"]["power"]["time_model"]
    with pytest.raises(CeleritasInputError, match="'time_model'"):
        fits_from_json(doc)


# ---------------------------------------------------------------------------- traced steps

def _median_se(values: list[float]) -> float:
    """The relative standard error of a median, from first principles: 1.2533 · σ / √n with σ
    estimated as 1.4826 · MAD."""
    v = np.asarray(values)
    m = np.median(v)
    return 1.2533 * 1.4826 * np.median(np.abs(v - m)) / math.sqrt(len(v)) / m


def test_extra_traces_follow_the_dispersion_of_the_traced_steps():
    noisy = [90.0, 100.0, 110.0, 90.0, 110.0]
    error = _median_se(noisy)
    assert weighted_median_error({"a": noisy}) == pytest.approx(error)
    wanted = math.ceil(5 * (error / 0.05) ** 2)  # the error falls as 1/√n
    assert wanted > 5
    assert traced_steps_needed({"a": noisy}, target=0.05, max_steps=100) == wanted
    assert traced_steps_needed({"a": noisy}, target=0.05, max_steps=8) == 8  # the work bound
    assert traced_steps_needed({"a": noisy}, target=1.0, max_steps=100) == 5  # never fewer than traced
    quiet = [100.0, 100.0, 101.0, 100.0, 100.0]
    assert traced_steps_needed({"a": quiet}, target=0.05, max_steps=100) == 5
    assert traced_steps_needed({}, target=0.05, max_steps=9) == 9
    with pytest.raises(CeleritasInputError, match="noise target"):
        traced_steps_needed({"a": noisy}, target=0.0, max_steps=9)


def test_the_decision_weighs_ops_by_their_time():
    noisy_small = [1.0, 3.0, 1.0, 3.0, 2.0]  # ±50 % on a 2 µs op
    quiet_large = [1000.0, 1001.0, 1000.0, 999.0, 1000.0]
    mixed = {"small": noisy_small, "large": quiet_large}
    assert traced_steps_needed(mixed, target=0.05, max_steps=50) == 5
    assert traced_steps_needed({"small": noisy_small}, target=0.05, max_steps=50) > 5
    # the same figures in another order give the same answer
    assert traced_steps_needed(dict(reversed(mixed.items())), target=0.05, max_steps=50) == 5


# ---------------------------------------------------------------------------- spanning batch

def test_the_spanning_batch_is_the_largest_doubling_up_to_half_the_target_that_fits():
    def peak(b: int) -> float:
        return 1000.0 * b

    assert spanning_batch((2, 4, 8), 32, peak, device_bytes=1e12) == 16
    assert spanning_batch((2, 4, 8), 128, peak, device_bytes=1e12) == 64
    assert spanning_batch((2, 4, 8), 128, peak, device_bytes=40_000) == 32  # 64 does not fit
    assert spanning_batch((2, 4, 8), 128, peak, device_bytes=10_000) is None  # not even 16
    assert spanning_batch((2, 4, 8), 31, peak, device_bytes=1e12) is None  # 16 is above half of 31
    with pytest.raises(CeleritasInputError, match="positive target"):
        spanning_batch((2, 4), 0, peak, 1e12)
