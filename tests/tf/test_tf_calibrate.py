"""Communication calibration: the measurement runs, the fit is right, bad arguments are refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from celeritas_core.errors import CeleritasInputError
from celeritas_tf.calibrate import (
    CommCalibration,
    calibrate_comm,
    calibrated_cluster,
    fit_transfer_model,
)


def test_calibration_runs_and_returns_one_sample_per_size():
    lines: list[str] = []
    sizes = (4096, 1 << 20)
    cal = calibrate_comm(2, sizes=sizes, repeats=3, warmup=1, progress=lines.append)
    assert isinstance(cal, CommCalibration)
    assert [d for d, _ in cal.samples] == list(sizes)
    assert all(math.isfinite(t) and t >= 0 for _, t in cal.samples)
    assert cal.slope_us_per_byte >= 0 and cal.intercept_us >= 0
    assert math.isfinite(cal.slope_us_per_byte) and math.isfinite(cal.intercept_us)
    assert math.isfinite(cal.r2)
    assert len(lines) == 2 and all("bytes" in line for line in lines)
    assert len(cal.details["cross_us"]) == len(cal.details["local_us"]) == 2
    doc = cal.to_json()
    assert doc["samples"] == [[d, t] for d, t in cal.samples]


def test_sizes_are_rounded_up_to_whole_float32s():
    cal = calibrate_comm(3, sizes=(6,), repeats=1, warmup=0)
    assert [d for d, _ in cal.samples] == [8]
    assert cal.slope_us_per_byte == 0.0  # one size: a constant


def test_fit_recovers_a_known_line():
    k, b = 2.5e-4, 30.0
    d = np.array([4096, 16384, 65536, 1 << 20, 1 << 24], dtype=float)
    rng = np.random.default_rng(0)
    t = k * d + b + rng.normal(0, 0.01, d.size)
    fk, fb, r2 = fit_transfer_model(list(zip(d, t, strict=True)))
    assert fk == pytest.approx(k, rel=1e-3)
    assert fb == pytest.approx(b, abs=0.05)
    assert r2 == pytest.approx(1.0, abs=1e-6)


def test_fit_exact_line_and_constant():
    assert fit_transfer_model([(0, 1.0), (10, 3.0), (20, 5.0)]) == pytest.approx((0.2, 1.0, 1.0))
    k, b, r2 = fit_transfer_model([(1, 4.0), (2, 4.0), (3, 4.0)])
    assert (k, b, r2) == pytest.approx((0.0, 4.0, 1.0))


def test_fit_clips_negative_slope_and_intercept():
    # decreasing samples: slope clipped to 0, intercept the mean
    k, b, r2 = fit_transfer_model([(100, 9.0), (200, 6.0), (300, 3.0)])
    assert k == 0.0 and b == pytest.approx(6.0)
    assert r2 == pytest.approx(0.0)
    # a line with a negative intercept: refitted through the origin
    k, b, _ = fit_transfer_model([(100, 0.0), (200, 10.0), (300, 20.0)])
    assert b == 0.0 and k > 0
    assert k == pytest.approx((200 * 10 + 300 * 20) / (100**2 + 200**2 + 300**2))
    # all zero: a well-defined zero model
    assert fit_transfer_model([(4096, 0.0), (8192, 0.0)]) == (0.0, 0.0, 1.0)


def test_fit_single_size_is_a_constant():
    assert fit_transfer_model([(4096, 3.0), (4096, 5.0)]) == (0.0, 4.0, pytest.approx(0.0))


def test_fit_rejects_bad_samples():
    with pytest.raises(CeleritasInputError):
        fit_transfer_model([])
    with pytest.raises(CeleritasInputError):
        fit_transfer_model([(1, float("nan")), (2, 1.0)])


def test_calibrated_cluster_carries_the_fit():
    cal = CommCalibration(3e-5, 12.0, [(4096, 12.1), (8192, 12.2)], 0.99)
    cluster = calibrated_cluster(cal, 4, 8e9)
    assert cluster.num_devices == 4
    assert cluster.slope_us_per_byte == 3e-5 and cluster.intercept_us == 12.0
    assert list(cluster.memory_bytes) == [8e9] * 4
    assert cluster.comm_time_us(1000) == pytest.approx(3e-5 * 1000 + 12.0)


@pytest.mark.parametrize("kwargs,match", [
    ({"num_devices": 1}, "num_devices >= 2"),
    ({"num_devices": True}, "num_devices >= 2"),
    ({"sizes": ()}, "sizes is empty"),
    ({"sizes": (4096, 0)}, "positive"),
    ({"sizes": (-4,)}, "positive"),
    ({"sizes": (4.5,)}, "positive"),
    ({"repeats": 0}, "repeats"),
    ({"warmup": -1}, "warmup"),
])
def test_bad_arguments_raise(kwargs, match):
    args = {"num_devices": 2, "sizes": (4096,), "repeats": 1, "warmup": 0, **kwargs}
    with pytest.raises(CeleritasInputError, match=match):
        calibrate_comm(**args)
