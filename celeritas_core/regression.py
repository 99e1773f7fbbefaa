"""Standard Evaluation, step 1: per-op linear regression of time (µs) and memory (bytes) on batch size.

The paper profiles a model at a few small batch sizes that fit on one device and fits, per op,
``cost = slope · batch + intercept``; the fit predicts the large batch (memory well, time
roughly). Ops seen at a single batch size get slope 0. Predictions are clipped at 0. Fits are
stored as ``celeritas-fits/1`` (docs/formats.md; :func:`celeritas_core.formats.fits_to_json`).
That is the default; ``fit_costs(..., time_model="choose")`` also picks each op's time model by
leave-one-out error (:mod:`celeritas_core.estimation`), stored as ``celeritas-fits/2``; memory
stays the paper's line (an op's bytes are its tensors', linear in the batch).
Estimation accuracy follows the paper's "Estimation Accuracy": per op
``|estimate − actual| / actual``, over the ops whose actual value is positive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from celeritas_core.errors import CeleritasInputError
from celeritas_core.estimation import TimeModels, choose_time_models

#: How :func:`fit_costs` models time: the paper's line, or a per-op choice.
TIME_MODEL_MODES = ("linear", "choose")


@dataclass(frozen=True, eq=False)
class CostFits:
    """Per-op linear fits ``cost(batch) = slope · batch + intercept`` of time (µs) and memory (bytes)."""

    names: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    time_slope: np.ndarray
    time_intercept: np.ndarray
    memory_slope: np.ndarray
    memory_intercept: np.ndarray
    time_r2: np.ndarray
    memory_r2: np.ndarray
    output_aliases: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """Per op with any, as profiled: for each output None (own buffer), ``(producer, output)``
    (shares that input's buffer) or ``"external"`` (a buffer outside the step). Aliasing does not
    depend on the batch size, so it carries over to the predicted graph unchanged."""
    time_models: TimeModels | None = None
    """Per op, the chosen time model (same op order as :attr:`names`); when present it predicts
    time instead of the line (which stays, as the paper's figure). None: the paper's line."""

    def with_aliases(self, aliases: Mapping[str, Sequence[Any]]) -> CostFits:
        """The same fits carrying ``aliases`` (see :attr:`output_aliases`)."""
        return replace(self, output_aliases={n: tuple(a) for n, a in aliases.items()})

    def predict(self, batch_size: float) -> tuple[np.ndarray, np.ndarray]:
        """Predicted ``(time_us, memory_bytes)`` per op at ``batch_size`` (clipped at 0)."""
        if not np.isfinite(batch_size) or batch_size <= 0:
            raise CeleritasInputError(f"batch size must be positive, got {batch_size!r}")
        if self.time_models is not None:
            t = self.time_models.predict(batch_size)
        else:
            t = np.maximum(self.time_slope * batch_size + self.time_intercept, 0.0)
        m = np.maximum(self.memory_slope * batch_size + self.memory_intercept, 0.0)
        return t, m

    def predict_costs(self, batch_size: float) -> dict[str, tuple[float, float]]:
        """``op → (time_us, memory_bytes)`` at ``batch_size``."""
        t, m = self.predict(batch_size)
        return {n: (float(a), float(b)) for n, a, b in zip(self.names, t, m, strict=True)}


def fit_costs(profiles: Sequence[tuple[int, Mapping[str, float], Mapping[str, float]]], *,
              time_model: str = "linear") -> CostFits:
    """Fit per-op lines through ``(batch, time_us, memory_bytes)`` profiles, one per batch size.

    ``profiles`` holds ``(batch_size, {op: time_us}, {op: memory_bytes})``; an op missing from a
    profile is left out of that profile's points. Least squares per op, vectorised.

    Parameters
    ----------
    profiles : sequence of (int, mapping, mapping)
        One ``(batch_size, {op: time_us}, {op: memory_bytes})`` per distinct batch size (µs and
        bytes measured at that batch size).
    time_model : str
        ``"linear"`` (the paper's line, the default) or ``"choose"`` (each op's time model by
        leave-one-out error, :func:`celeritas_core.estimation.choose_time_models`; kept in
        :attr:`CostFits.time_models`).

    Returns
    -------
    CostFits
        Per op (sorted by name): the slope and intercept of time (µs) and memory (bytes) against
        the batch size and each fit's R² (NaN from fewer than two batch sizes or values that do
        not vary); its
        ``predict_costs(batch)`` gives every op's predicted ``(time_us, memory_bytes)``, clipped
        at 0.

    Raises
    ------
    CeleritasInputError
        No profiles, two with the same batch size, or an unknown ``time_model``.

    Examples
    --------
    >>> from celeritas_core import fit_costs
    >>> fits = fit_costs([
    ...     (8, {"conv": 100.0, "relu": 10.0}, {"conv": 1000.0, "relu": 500.0}),
    ...     (16, {"conv": 180.0, "relu": 18.0}, {"conv": 1800.0, "relu": 900.0}),
    ...     (32, {"conv": 340.0}, {"conv": 3400.0}),   # relu not profiled at 32
    ... ])
    >>> fits.names, fits.time_slope.round(6).tolist(), fits.time_intercept.round(6).tolist()
    (('conv', 'relu'), [10.0, 1.0], [20.0, 2.0])
    >>> {op: (round(t, 6), round(m, 6)) for op, (t, m) in fits.predict_costs(64).items()}
    {'conv': (660.0, 6600.0), 'relu': (66.0, 3300.0)}
    """
    if time_model not in TIME_MODEL_MODES:
        raise CeleritasInputError(f"time model must be one of {', '.join(TIME_MODEL_MODES)}, "
                                  f"got {time_model!r}")
    if not profiles:
        raise CeleritasInputError("no profiles to fit")
    batches = [int(b) for b, _, _ in profiles]
    if len(set(batches)) != len(batches):
        raise CeleritasInputError(f"profiles repeat a batch size: {sorted(batches)}")
    names = sorted({n for _, t, m in profiles for n in (*t, *m)})
    index = {n: i for i, n in enumerate(names)}
    k, n = len(profiles), len(names)
    x = np.asarray(batches, dtype=np.float64)
    times = np.full((k, n), np.nan)
    mems = np.full((k, n), np.nan)
    for row, (_, t, m) in enumerate(profiles):
        for name, v in t.items():
            times[row, index[name]] = v
        for name, v in m.items():
            mems[row, index[name]] = v
    ts, ti, tr = _fit_lines(x, times)
    ms, mi, mr = _fit_lines(x, mems)
    models = choose_time_models(names, batches, times) if time_model == "choose" else None
    return CostFits(tuple(names), tuple(batches), ts, ti, ms, mi, tr, mr, time_models=models)


def _fit_lines(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least-squares slope, intercept and R² per column of ``y`` (NaN = missing point)."""
    seen = ~np.isnan(y)
    count = seen.sum(axis=0)
    xs = np.where(seen, x[:, None], 0.0)
    ys = np.where(seen, y, 0.0)
    safe = np.maximum(count, 1)
    mean_x = xs.sum(axis=0) / safe
    mean_y = ys.sum(axis=0) / safe
    dx = np.where(seen, x[:, None] - mean_x, 0.0)
    dy = np.where(seen, y - mean_y, 0.0)
    sxx = (dx * dx).sum(axis=0)
    sxy = (dx * dy).sum(axis=0)
    syy = (dy * dy).sum(axis=0)
    slope = np.where(sxx > 0, sxy / np.where(sxx > 0, sxx, 1.0), 0.0)
    intercept = mean_y - slope * mean_x
    with np.errstate(invalid="ignore", divide="ignore"):
        r2 = np.where((sxx > 0) & (syy > 0), sxy * sxy / (sxx * syy), np.nan)
    return slope, intercept, r2


@dataclass(frozen=True)
class Deviation:
    """Relative deviations ``|estimate − actual| / actual`` of one quantity over comparable ops."""

    quantity: str
    names: tuple[str, ...]
    values: np.ndarray

    @property
    def mean(self) -> float:
        """Mean relative deviation (0.05 = 5 %); NaN when no op is comparable."""
        return float(self.values.mean()) if len(self.values) else float("nan")

    def cdf(self, points: Sequence[float] = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)) -> dict[float, float]:
        """Share of ops whose deviation is at most each point."""
        if not len(self.values):
            return {p: float("nan") for p in points}
        return {p: float((self.values <= p + 1e-12).mean()) for p in points}


def relative_deviation(quantity: str, estimate: Mapping[str, float], actual: Mapping[str, float],
                       *, floor: float = 0.0) -> Deviation:
    """Per op in both maps whose actual value exceeds ``floor``: ``|e − a| / a``.

    Parameters
    ----------
    quantity : str
        What is compared (``"time_us"``, ``"memory_bytes"``), recorded in the result.
    estimate, actual : mapping of str to float
        Per op: the estimated and the measured value.
    floor : float, optional
        Ops whose actual value is at most this are left out (default 0: only positive ones).

    Returns
    -------
    Deviation
        The comparable ops (sorted by name) and their relative deviations; ``mean`` and ``cdf``
        summarise them (the paper's "Estimation Accuracy").

    Examples
    --------
    >>> from celeritas_core import relative_deviation
    >>> deviation = relative_deviation("time_us", {"conv": 660.0, "relu": 60.0, "pool": 5.0},
    ...                                {"conv": 600.0, "relu": 50.0, "pool": 0.0})
    >>> deviation.names, deviation.values.tolist(), round(deviation.mean, 3)
    (('conv', 'relu'), [0.1, 0.2], 0.15)
    >>> deviation.cdf([0.1, 0.2])   # share of ops within 10 % and 20 %
    {0.1: 0.5, 0.2: 1.0}
    """
    names = tuple(sorted(n for n in set(estimate) & set(actual) if actual[n] > floor))
    e = np.asarray([estimate[n] for n in names], dtype=np.float64)
    a = np.asarray([actual[n] for n in names], dtype=np.float64)
    return Deviation(quantity, names, np.abs(e - a) / a if len(names) else np.zeros(0))

