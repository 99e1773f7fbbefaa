"""The champion/challenger decision on synthetic step times: clear wins are promoted, noise and
losses are not, spikes do not fool it, and its false-promotion rate stays at the level."""

from __future__ import annotations

import math

import numpy as np
import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.statistics.step_time_comparison import MIN_SAMPLES, compare_step_times


def _steps(rng: np.random.Generator, median_s: float, n: int = 30, noise: float = 0.02,
           spikes: float = 0.0) -> np.ndarray:
    """``n`` step times around ``median_s``; a fraction ``spikes`` of them take twice as long."""
    times = median_s * (1 + noise * rng.standard_normal(n))
    times[rng.random(n) < spikes] *= 2.0
    return times


def test_a_clear_win_is_promoted_with_its_figures():
    rng = np.random.default_rng(1)
    result = compare_step_times(_steps(rng, 0.010), _steps(rng, 0.008), threshold=0.02)
    assert result.promote and result.reason.startswith("faster by at least the threshold with confidence")
    assert result.gain == pytest.approx(0.25, abs=0.03)
    assert result.gain_low >= 0.02 and result.gain_low <= result.gain <= result.gain_high
    assert result.p_value < 0.05 and (result.champion_n, result.challenger_n) == (30, 30)
    doc = result.to_json()
    assert doc["level"] == 0.05 and "Mann-Whitney" in doc["test"] and doc["promote"] is True


def test_noise_and_a_clear_loss_are_kept():
    rng = np.random.default_rng(2)
    champion = _steps(rng, 0.010)
    same = compare_step_times(champion, _steps(rng, 0.010), threshold=0.02)
    assert not same.promote
    small = compare_step_times(champion, _steps(rng, 0.0099), threshold=0.02)  # 1 %: below the threshold
    assert not small.promote
    loss = compare_step_times(champion, _steps(rng, 0.012), threshold=0.02)
    assert not loss.promote and loss.reason.startswith("not faster") and loss.gain < 0


def test_single_step_spikes_do_not_decide():
    """Two-times spikes in a tenth of the steps (what a shared GPU node shows) neither hide a real
    10 % win nor fake one; means would be moved by them, medians and ranks are not."""
    rng = np.random.default_rng(3)
    win = compare_step_times(_steps(rng, 0.010, 50, spikes=0.1), _steps(rng, 0.009, 50, spikes=0.1),
                             threshold=0.02)
    assert win.promote
    spiky_champion = _steps(rng, 0.010, 50, spikes=0.3)
    assert not compare_step_times(spiky_champion, _steps(rng, 0.010, 50), threshold=0.02).promote


def test_false_promotions_stay_below_alpha_and_real_wins_are_found():
    """Over many synthetic A/B runs the promotion rate is at most alpha (with binomial slack) with
    no difference and with a gain exactly at the threshold; a 10 % gain is promoted nearly always."""
    rng = np.random.default_rng(4)
    trials = 200

    def rate(challenger_median: float, threshold: float) -> float:
        wins = sum(compare_step_times(_steps(rng, 0.010), _steps(rng, challenger_median), threshold=threshold,
                                      resamples=1000, seed=i).promote for i in range(trials))
        return wins / trials

    slack = 3 * math.sqrt(0.05 * 0.95 / trials)
    assert rate(0.010, 0.0) <= 0.05 + slack  # no difference at all, no threshold
    assert rate(0.010 / 1.02, 0.02) <= 0.05 + slack  # exactly at the threshold
    assert rate(0.010 / 1.10, 0.02) >= 0.95


def test_bonferroni_splits_alpha_over_the_challengers():
    # evenly spread steps, the challenger's 4 % lower: p ~ 0.006, sure at 0.05 but not at 0.001
    champion = np.linspace(9.5e-3, 10.5e-3, 12)
    challenger = champion - 0.4e-3
    one = compare_step_times(champion, challenger, threshold=0.0)
    many = compare_step_times(champion, challenger, threshold=0.0, comparisons=50)
    assert many.level == pytest.approx(0.001) and one.p_value == many.p_value
    assert one.promote and not many.promote  # the same evidence is not enough among 50 tries
    assert many.gain_low < one.gain_low  # a wider interval at the stricter level


def test_too_few_steps_and_bad_input():
    few = compare_step_times([0.01] * (MIN_SAMPLES - 1), [0.005] * 30, threshold=0.02)
    assert not few.promote and few.reason.startswith("too few timed steps") and math.isnan(few.gain)
    for champion, challenger, kwargs, message in (
            ([0.01, float("nan")] * 5, [0.01] * 10, {}, "champion step times"),
            ([0.01] * 10, [0.01, -1.0] * 5, {}, "challenger step times"),
            ([0.01] * 10, [0.01] * 10, {"threshold": float("inf")}, "threshold"),
            ([0.01] * 10, [0.01] * 10, {"alpha": 1.5}, "alpha"),
            ([0.01] * 10, [0.01] * 10, {"comparisons": 0}, "comparisons")):
        with pytest.raises(CeleritasInputError, match=message):
            compare_step_times(champion, challenger, **{"threshold": 0.02, **kwargs})


def test_deterministic_for_a_seed():
    rng = np.random.default_rng(6)
    a, b = _steps(rng, 0.010), _steps(rng, 0.0095)
    first = compare_step_times(a, b, threshold=0.02, seed=7)
    assert compare_step_times(a, b, threshold=0.02, seed=7) == first
