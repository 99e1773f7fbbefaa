"""Champion/challenger decision on measured step times: promote only a win that is both sure and big.

Step times are noisy (a single step can take twice the median), so a new placement replaces the
production one only when two statistics agree, each at the family-wise level ``alpha`` split over
the challengers compared (Bonferroni: ``alpha / comparisons`` per comparison):

* **Mann-Whitney U**, one-sided, of the challenger's step times scaled by ``1 + threshold``
  against the champion's: a p-value below the level says the challenger is faster *by at least the
  threshold*, not merely faster, without assuming normal step times.
* **A bootstrap interval of the gain in medians**, ``median(champion) / median(challenger) - 1``:
  its one-sided lower bound at the same level must reach the threshold too. The interval, the
  point estimate and the p-value are reported with every decision.

Both samples must come from the same machine and the same task, interleaved in blocks, so drift
over time (thermal, other tenants) hits both alike: see ``tasks/validate.py``.

References: H. B. Mann and D. R. Whitney, "On a test of whether one of two random variables is
stochastically larger than the other", Ann. Math. Statist. 18 (1947); B. Efron and R. Tibshirani,
*An Introduction to the Bootstrap*, ch. 13 (percentile intervals), 1993.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> champion = 0.100 * (1 + 0.02 * rng.standard_normal(50))
>>> challenger = 0.080 * (1 + 0.02 * rng.standard_normal(50))
>>> result = compare_step_times(champion, challenger, threshold=0.02)
>>> result.promote, round(result.gain, 2)
(True, 0.25)
>>> compare_step_times(champion, champion * 1.001, threshold=0.02).promote
False
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from celeritas_core.errors import CeleritasInputError

#: Fewer timed steps per side than this cannot show a difference with confidence.
MIN_SAMPLES = 5
TEST_NAME = "one-sided Mann-Whitney U on challenger x (1 + threshold) vs champion, " \
            "and bootstrap percentile lower bound of the median gain; Bonferroni over challengers"


@dataclass(frozen=True)
class StepTimeComparison:
    """The outcome of :func:`compare_step_times` (times in seconds, gains as fractions)."""

    champion_n: int
    challenger_n: int
    champion_median_s: float
    challenger_median_s: float
    gain: float
    gain_low: float
    gain_high: float
    p_value: float
    threshold: float
    alpha: float
    comparisons: int
    promote: bool
    reason: str

    @property
    def level(self) -> float:
        """The per-comparison significance level, ``alpha / comparisons``."""
        return self.alpha / self.comparisons

    def to_json(self) -> dict[str, Any]:
        """The comparison as a JSON object (with the test's name and the per-comparison level)."""
        return {"test": TEST_NAME, **asdict(self), "level": self.level}


def _samples(values: Sequence[float], what: str) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    if array.size and (not np.all(np.isfinite(array)) or np.any(array <= 0)):
        raise CeleritasInputError(f"{what} step times: expected positive finite seconds")
    return array


def bootstrap_gain(champion: np.ndarray, challenger: np.ndarray, *, confidence: float,
                   resamples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Two-sided percentile bootstrap interval of ``median(champion) / median(challenger) - 1``."""
    rng = np.random.default_rng(seed)
    a = rng.choice(champion, size=(resamples, champion.size), replace=True)
    b = rng.choice(challenger, size=(resamples, challenger.size), replace=True)
    gains = np.median(a, axis=1) / np.median(b, axis=1) - 1.0
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(gains, [tail, 1.0 - tail])
    return float(low), float(high)


def compare_step_times(champion: Sequence[float], challenger: Sequence[float], *, threshold: float,
                       alpha: float = 0.05, comparisons: int = 1, resamples: int = 4000,
                       seed: int = 0) -> StepTimeComparison:
    """Whether ``challenger`` (step times, s) beats ``champion`` by at least ``threshold`` (a
    fraction, 0.02 = 2 %) with confidence: see the module docstring. Deterministic for a ``seed``."""
    # lazy: scipy.stats takes most of a second to import; only the test needs it
    from scipy.stats import mannwhitneyu

    if not (np.isfinite(threshold) and 0 <= threshold < 10):
        raise CeleritasInputError(f"threshold: expected a finite fraction in [0, 10), got {threshold!r}")
    if not (np.isfinite(alpha) and 0 < alpha < 1):
        raise CeleritasInputError(f"alpha: expected a number in (0, 1), got {alpha!r}")
    if comparisons < 1:
        raise CeleritasInputError(f"comparisons: expected >= 1, got {comparisons!r}")
    old, new = _samples(champion, "champion"), _samples(challenger, "challenger")
    level = alpha / comparisons
    nan = float("nan")
    if min(old.size, new.size) < MIN_SAMPLES:
        return StepTimeComparison(int(old.size), int(new.size), nan, nan, nan, nan, nan, nan,
                                  float(threshold), float(alpha), int(comparisons), False,
                                  f"too few timed steps to decide (need {MIN_SAMPLES} per side, got "
                                  f"{old.size} and {new.size})")
    old_median, new_median = float(np.median(old)), float(np.median(new))
    gain = old_median / new_median - 1.0
    p_value = float(mannwhitneyu(new * (1.0 + threshold), old, alternative="less").pvalue)
    # the two-sided interval at 1 - 2·level: each bound is one-sided at `level`
    low, high = bootstrap_gain(old, new, confidence=1.0 - 2.0 * level, resamples=resamples, seed=seed)
    sure, big = p_value < level, low >= threshold
    promote = sure and big
    figures = (f"median {new_median * 1e3:.3f} ms vs champion {old_median * 1e3:.3f} ms, gain "
               f"{gain * 100:+.1f} % (lower bound {low * 100:+.1f} %), Mann-Whitney p = {p_value:.2g} "
               f"at level {level:.3g}, threshold {threshold * 100:.1f} %")
    if promote:
        verdict = "faster by at least the threshold with confidence"
    elif gain <= 0:
        verdict = "not faster"
    elif not sure:
        verdict = "not sure it is faster by the threshold"
    else:
        verdict = "faster, but the gain's lower bound is below the threshold"
    return StepTimeComparison(int(old.size), int(new.size), old_median, new_median, gain, low, high, p_value,
                              float(threshold), float(alpha), int(comparisons), promote,
                              f"{verdict}: {figures}")
