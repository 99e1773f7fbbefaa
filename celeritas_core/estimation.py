"""Standard Evaluation beyond the paper's lines: a per-op time model, traced steps, profile batches.

The paper fits every op's time as a line in the batch size (:func:`celeritas_core.regression.fit_costs`,
the default). This module adds three choices a careful engineer makes, each a pure function of
the figures it is given (same input, same answer):

* :func:`choose_time_models`: per op, the time model among ``linear`` (``max(0, a·b + c)``, the
  paper's), ``floor`` (``max(f, a·b + c)``: a fixed cost ``f``, e.g. a launch latency, until the
  work grows past it; never below the op's fastest profiled time) and ``power`` (``c·b^p`` with
  ``0 <= p <= 1``: fixed costs make an op's time grow more slowly than its work, which grows in
  proportion to the batch), whichever has the smallest leave-one-out error on the profiled
  batches (ties: that order, so the paper's line wins a tie); a model is a candidate only with
  more profiled batches than it has parameters (:data:`MIN_BATCHES`: the floor needs four).
* :func:`traced_steps_needed`: how many traced steps a profile needs so that the time-weighted
  standard error of the per-op median times is at most a target, from the dispersion of the steps
  traced so far, capped by a count (work-bounded: never a wall-clock budget).
* :func:`spanning_batch`: a profile batch closer to the target batch, when one device holds it.

Times are µs, memory bytes, batch sizes positive integers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from celeritas_core.errors import CeleritasInputError

#: The per-op time models, in tie-break order (the paper's line first).
TIME_MODELS = ("linear", "floor", "power")
#: Each model's parameters, in the columns of :attr:`TimeModels.params` and by name in
#: ``celeritas-fits/2`` (docs/formats.md).
MODEL_PARAMS = {"linear": ("slope", "intercept"), "floor": ("slope", "intercept", "floor"),
                "power": ("coefficient", "exponent")}
#: Fewest profiled batch sizes for a choice: leave-one-out fits a line on the others.
MIN_BATCHES_TO_CHOOSE = 3
#: Fewest profiled batch sizes at which each model can be chosen: one more than its fitted
#: parameters, so that every leave-one-out fold fits the model as the final fit does (the floor's
#: bend needs three points: on two it is the line, and a choice made so would go unchecked).
MIN_BATCHES = {"linear": 3, "floor": 4, "power": 3}


@dataclass(frozen=True, eq=False)
class TimeModels:
    """Per op: the chosen time model, its parameters (``ops × 3``, columns named by
    :data:`MODEL_PARAMS`, unused ones 0) and the leave-one-out error of every model (``ops × 3``,
    columns in :data:`TIME_MODELS` order: the mean absolute error over the folds divided by the
    op's mean profiled time; NaN where no choice was made, inf where a model could not fit or was
    no candidate, :data:`MIN_BATCHES`)."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    params: np.ndarray
    loo_error: np.ndarray

    def predict(self, batch_size: float) -> np.ndarray:
        """Predicted time (µs) per op at ``batch_size``, never below 0."""
        return np.maximum(_evaluate(np.asarray(self.kinds), self.params, float(batch_size)), 0.0)

    def counts(self) -> dict[str, int]:
        """How many ops chose each model."""
        return {k: sum(1 for x in self.kinds if x == k) for k in TIME_MODELS}


def _evaluate(kinds: np.ndarray, params: np.ndarray, b: float) -> np.ndarray:
    """Each op's model (``kinds``, ``params`` as in :class:`TimeModels`) at batch ``b``."""
    p0, p1, p2 = params[:, 0], params[:, 1], params[:, 2]
    with np.errstate(over="ignore", invalid="ignore"):
        line = p0 * b + p1
        power = p0 * np.power(b, p1)
    return np.where(kinds == "linear", line, np.where(kinds == "floor", np.maximum(line, p2), power))


def fit_model(kind: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Parameters ``(ops, 3)`` of ``kind`` through the points ``(x[i], y[i, j])`` of every op
    ``j`` (``y``: batches × ops, complete). ``linear``: least squares; ``floor``:
    :func:`_fit_floor`; ``power``: least squares of ``log y`` on ``log x`` with the exponent held
    to ``[0, 1]`` (for a fixed exponent the best ``log c`` is the mean of ``log y − p·log x``, so
    the constrained optimum clamps the free one); it needs ``y > 0`` (NaN parameters otherwise)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    zero = np.zeros(y.shape[1])
    if kind == "linear":
        return np.stack([*_line(x, y), zero], axis=1)
    if kind == "floor":
        return _fit_floor(x, y)
    if kind == "power":
        positive = (y > 0).all(axis=0)
        lx, ly = np.log(x), np.log(np.where(y > 0, y, 1.0))
        p = np.clip(_line(lx, ly)[0], 0.0, 1.0)
        c = np.exp((ly - p * lx[:, None]).mean(axis=0))
        return np.where(positive[:, None], np.stack([c, p, zero], axis=1), np.nan)
    raise CeleritasInputError(f"time model must be one of {', '.join(TIME_MODELS)}, got {kind!r}")


def _line(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope and intercept per column of ``y`` (slope 0 when ``x`` is constant)."""
    dx = x - x.mean()
    sxx = float(dx @ dx)
    slope = (dx @ (y - y.mean(axis=0))) / sxx if sxx > 0 else np.zeros(y.shape[1])
    return slope, y.mean(axis=0) - slope * x.mean()


def _fit_floor(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``max(f, a·b + c)`` per op, trying every split of the sorted batches: none on the floor
    (the least-squares line, ``f`` the smallest time), or the first ``s`` on it (``f`` their mean
    time) and the line through the others anchored where the floor ends (``a >= 0`` by least
    squares through ``(b_s, f)``); the split of the smallest squared error wins, the first of
    equal ones. With two batches this is the line, never below the faster time."""
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    slope, intercept = _line(xs, ys)
    params = np.stack([slope, intercept, ys.min(axis=0)], axis=1)
    best = _sse(xs, ys, params)
    for split in range(1, len(xs)):
        f = ys[:split].mean(axis=0)
        dx, dy = xs[split:] - xs[split - 1], ys[split:] - f
        a = np.maximum((dx @ dy) / float(dx @ dx), 0.0)
        candidate = np.stack([a, f - a * xs[split - 1], f], axis=1)
        sse = _sse(xs, ys, candidate)
        better = sse < best
        best = np.where(better, sse, best)
        params = np.where(better[:, None], candidate, params)
    return params


def _sse(x: np.ndarray, y: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Squared error of ``max(f, a·b + c)`` per op over the points."""
    pred = np.maximum(params[:, 0] * x[:, None] + params[:, 1], params[:, 2])
    return ((pred - y) ** 2).sum(axis=0)


def loo_errors(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Leave-one-out error ``(ops, models)`` of every model: fit on all batches but one, predict
    the one left out, mean absolute error over the folds divided by the op's mean time (an op
    whose times are all 0 scores 0 with every model that predicts 0). inf where a model could not
    fit a fold (``power`` with a time of 0)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    k, n = y.shape
    scale = np.abs(y).mean(axis=0)
    out = np.zeros((n, len(TIME_MODELS)))
    for m, kind in enumerate(TIME_MODELS):
        total = np.zeros(n)
        for left in range(k):
            keep = np.arange(k) != left
            pred = np.maximum(_evaluate(np.full(n, kind), fit_model(kind, x[keep], y[keep]), x[left]), 0.0)
            total += np.where(np.isfinite(pred), np.abs(pred - y[left]), np.inf)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, m] = np.where(scale > 0, total / k / np.where(scale > 0, scale, 1.0),
                                 np.where(total == 0, 0.0, np.inf))
    return out


def choose_time_models(names: Sequence[str], batch_sizes: Sequence[int], times: np.ndarray) -> TimeModels:
    """Per op, the time model of smallest leave-one-out error (:func:`loo_errors`), fitted on all
    profiled batches. ``times``: batches × ops (µs), NaN where an op was not profiled. Ops missing
    at any batch, and every op when fewer than :data:`MIN_BATCHES_TO_CHOOSE` distinct batches were
    profiled, keep the paper's line (through the batches they were seen at; slope 0 at one)."""
    x = np.asarray(batch_sizes, dtype=np.float64)
    y = np.asarray(times, dtype=np.float64)
    if y.shape != (len(x), len(names)):
        raise CeleritasInputError(f"times must be {len(x)} batches × {len(names)} ops, got {y.shape}")
    complete = ~np.isnan(y).any(axis=0)
    kinds = np.full(len(names), "linear", dtype=object)
    params = np.zeros((len(names), 3))
    errors = np.full((len(names), len(TIME_MODELS)), np.nan)
    for j in np.flatnonzero(~complete):
        seen = ~np.isnan(y[:, j])
        if seen.any():
            params[j] = fit_model("linear", x[seen], y[seen, j][:, None])[0]
    cols = np.flatnonzero(complete)
    if len(cols) and len(set(x.tolist())) >= MIN_BATCHES_TO_CHOOSE:
        errors[cols] = loo_errors(x, y[:, cols])
        for m, kind in enumerate(TIME_MODELS):
            if len(set(x.tolist())) < MIN_BATCHES[kind]:
                errors[cols, m] = np.inf
        pick = np.argmin(errors[cols], axis=1)  # the first of equal errors: the tie-break order
        for m, kind in enumerate(TIME_MODELS):
            sel = cols[pick == m]
            if len(sel):
                kinds[sel] = kind
                params[sel] = fit_model(kind, x, y[:, sel])
    elif len(cols):
        params[cols] = fit_model("linear", x, y[:, cols])
    return TimeModels(tuple(names), tuple(str(k) for k in kinds), params, errors)


# ---------------------------------------------------------------------------- traced steps

#: The standard error of a median of normal samples is about 1.2533 σ/√n; σ ≈ 1.4826 · MAD.
_MEDIAN_SE = 1.2533 * 1.4826


def weighted_median_error(samples: Mapping[str, Sequence[float]]) -> float:
    """The time-weighted relative standard error of the per-op median times, ``Σ m_i · se_i / Σ m_i``
    with ``se_i = 1.2533 · 1.4826 · MAD_i / (m_i · √n_i)`` (``m_i``: median µs, MAD: median
    absolute deviation over the op's ``n_i`` traced steps). 0 when no op took time."""
    total = weighted = 0.0
    for values in samples.values():
        v = np.asarray(values, dtype=np.float64)
        if not len(v):
            continue
        m = float(np.median(v))
        if m <= 0:
            continue
        mad = float(np.median(np.abs(v - m)))
        total += m
        weighted += _MEDIAN_SE * mad / math.sqrt(len(v))
    return weighted / total if total > 0 else 0.0


def traced_steps_needed(samples: Mapping[str, Sequence[float]], *, target: float, max_steps: int) -> int:
    """How many traced steps the profile should have in all: the count ``n`` at which the
    time-weighted standard error of the medians (:func:`weighted_median_error`, which falls as
    ``1/√n``) reaches ``target``, from the steps traced so far, at least as many as traced and at
    most ``max_steps``. ``samples``: op → its time (µs) in each traced step so far."""
    if not target > 0 or max_steps < 1:
        raise CeleritasInputError(f"need a noise target > 0 and max steps >= 1, got {target!r} and "
                                  f"{max_steps!r}")
    traced = max((len(v) for v in samples.values()), default=0)
    if traced == 0:
        return max_steps
    error = weighted_median_error(samples)
    wanted = math.ceil(traced * (error / target) ** 2 - 1e-9)
    return int(min(max(wanted, traced), max(max_steps, traced)))


# ---------------------------------------------------------------------------- profile batches

def spanning_batch(batch_sizes: Sequence[int], target: int, peak_bytes: Callable[[int], float],
                   device_bytes: float) -> int | None:
    """A profile batch closer to ``target``: the largest doubling of the largest profiled batch
    that is at most half the target and whose predicted one-device peak (``peak_bytes(b)``,
    bytes) fits ``device_bytes``; None when no doubling qualifies. At most half: the target
    itself is re-measured (its figures replace the estimates), and in the paper's setting it does
    not fit one device; a batch at half the target halves the extrapolation from the small ones."""
    if not batch_sizes or target < 1:
        raise CeleritasInputError(f"need profiled batch sizes and a positive target, got {list(batch_sizes)} "
                                  f"and {target!r}")
    candidate, best = 2 * max(batch_sizes), None
    while 2 * candidate <= target:
        if peak_bytes(candidate) > device_bytes:
            break
        best, candidate = candidate, 2 * candidate
    return best
