"""Standard Evaluation's per-op regression and the estimation-accuracy figures (no TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.formats import fits_from_json, fits_to_json
from celeritas_core.statistics.regression import fit_costs, relative_deviation


def _profiles(rng, noise: float = 0.0):
    """Three ops with known lines; op 'c' is missing at one batch size."""
    lines = {"a": (2.0, 10.0, 400.0, 64.0), "b": (0.5, 3.0, 0.0, 4096.0), "c": (7.0, 0.0, 100.0, 0.0)}
    rows = []
    for batch in (2, 4, 8, 16):
        times, mems = {}, {}
        for name, (ts, ti, ms, mi) in lines.items():
            if name == "c" and batch == 4:
                continue
            times[name] = ts * batch + ti + noise * rng.standard_normal()
            mems[name] = ms * batch + mi
        rows.append((batch, times, mems))
    return lines, rows


def test_fit_recovers_known_lines(rng):
    lines, rows = _profiles(rng)
    fits = fit_costs(rows)
    assert fits.names == ("a", "b", "c") and fits.batch_sizes == (2, 4, 8, 16)
    for i, name in enumerate(fits.names):
        ts, ti, ms, mi = lines[name]
        assert fits.time_slope[i] == pytest.approx(ts) and fits.time_intercept[i] == pytest.approx(ti)
        assert fits.memory_slope[i] == pytest.approx(ms) and fits.memory_intercept[i] == pytest.approx(mi)
    t, m = fits.predict(512)
    assert t.tolist() == pytest.approx([2 * 512 + 10, 0.5 * 512 + 3, 7 * 512])
    assert m.tolist() == pytest.approx([400 * 512 + 64, 4096, 100 * 512])
    assert fits.memory_r2[0] == pytest.approx(1.0) and np.isnan(fits.memory_r2[1])  # constant: no R²


def test_noisy_fit_is_close_and_predictions_are_clipped(rng):
    _, rows = _profiles(rng, noise=0.05)
    fits = fit_costs(rows)
    assert fits.time_slope[0] == pytest.approx(2.0, abs=0.05)
    shrinking = fit_costs([(1, {"x": 10.0}, {"x": 5.0}), (2, {"x": 5.0}, {"x": 1.0})])
    t, m = shrinking.predict(100)
    assert t[0] == 0.0 and m[0] == 0.0


def test_single_batch_op_gets_slope_zero():
    fits = fit_costs([(2, {"x": 3.0}, {"x": 8.0}), (4, {"y": 1.0}, {"y": 1.0})])
    t, m = fits.predict(64)
    assert dict(zip(fits.names, t.tolist(), strict=True)) == {"x": 3.0, "y": 1.0}
    assert dict(zip(fits.names, m.tolist(), strict=True)) == {"x": 8.0, "y": 1.0}


def test_fit_errors():
    with pytest.raises(CeleritasInputError, match="no profiles"):
        fit_costs([])
    with pytest.raises(CeleritasInputError, match="repeat a batch size"):
        fit_costs([(2, {}, {}), (2, {}, {})])
    fits = fit_costs([(2, {"x": 1.0}, {"x": 1.0}), (4, {"x": 2.0}, {"x": 2.0})])
    with pytest.raises(CeleritasInputError, match="batch size must be positive"):
        fits.predict(0)


def test_json_round_trip_and_validation(rng):
    _, rows = _profiles(rng)
    fits = fit_costs(rows)
    back = fits_from_json(fits_to_json(fits))
    assert back.names == fits.names
    assert np.allclose(back.predict(100)[0], fits.predict(100)[0])
    doc = fits_to_json(fits)
    for broken, message in (({"format": "x"}, "celeritas-fits/1"),
                            ({**doc, "ops": {}}, "'ops'"),
                            ({**doc, "batch_sizes": [0]}, "'batch_sizes'"),
                            ({**doc, "ops": {"a": {"time_us": [1], "memory_bytes": [1, 2]}}}, "op 'a'"),
                            ({**doc, "ops": {"a": {"time_us": [1, float("inf")], "memory_bytes": [1, 2]}}},
                             "finite")):
        with pytest.raises(CeleritasInputError, match=message):
            fits_from_json(broken, source="f.json")


def test_relative_deviation_and_cdf():
    d = relative_deviation("memory", {"a": 110.0, "b": 50.0, "c": 7.0, "z": 1.0},
                           {"a": 100.0, "b": 50.0, "c": 0.0, "y": 3.0})
    assert d.names == ("a", "b")  # c has actual 0, y/z are not in both
    assert d.values.tolist() == pytest.approx([0.1, 0.0])
    assert d.mean == pytest.approx(0.05)
    cdf = d.cdf((0.0, 0.05, 0.1))
    assert cdf == {0.0: 0.5, 0.05: 0.5, 0.1: 1.0}
    assert np.isnan(relative_deviation("time", {}, {}).mean)
