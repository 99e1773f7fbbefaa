"""Communication calibration: the measurement runs, the fit is right, bad arguments are refused, and a
fit that measured nothing useful gives way to the default transfer model, loudly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from celeritas_cli.main import main
from celeritas_core.errors import CeleritasInputError
from celeritas_core.graphs.cluster import DEFAULT_INTERCEPT_US, DEFAULT_SLOPE_US_PER_BYTE
from celeritas_core.readwrite.formats import load_cluster
from celeritas_tf import calibrate
from celeritas_tf.calibrate import (
    MIN_R2,
    CommCalibration,
    calibrate_comm,
    calibrated_cluster,
    choose_transfer_model,
    fit_transfer_model,
    rejection,
)

#: What logical CPU devices measure: a hand-off latency, no slope (the issue's case).
CPU_LIKE = CommCalibration(0.0, 101.4, [(4096, 99.0), (1 << 20, 104.0), (1 << 26, 101.2)], 0.0)
DEFAULT = (DEFAULT_SLOPE_US_PER_BYTE, DEFAULT_INTERCEPT_US)
#: A real copy: about 10 GB/s and 12 µs.
GPU_LIKE = CommCalibration(1e-4, 12.0, [(4096, 12.4), (1 << 20, 117.0), (1 << 26, 6723.0)], 0.9999)


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


@pytest.mark.parametrize("calibration,why", [
    (CPU_LIKE, "slope 0 µs/B"),
    (CommCalibration(0.0, 4.0, [(1, 4.0), (2, 4.0)], 1.0), "slope 0 µs/B"),  # a perfect constant: R² 1
    (CommCalibration(2e-5, 30.0, [(1, 1.0), (2, 9.0)], 0.42), "R² 0.420 below 0.98"),
    (CommCalibration(2e-5, 30.0, [(1, 1.0), (2, 9.0)], math.nan), "R² nan below 0.98"),
])
def test_a_fit_that_measured_nothing_useful_gives_the_default_model(calibration, why):
    choice = choose_transfer_model(calibration)
    assert choice.source == "default" and why in choice.reason
    assert choice.reason.startswith("the calibration measured nothing useful")
    assert (choice.slope_us_per_byte, choice.intercept_us) == DEFAULT
    cluster = calibrated_cluster(calibration, 4, 8e9)
    assert (cluster.slope_us_per_byte, cluster.intercept_us) == DEFAULT
    assert choice.describe().endswith("(the default model)")


def test_the_threshold_is_the_one_the_help_and_the_docs_state(capsys):
    with pytest.raises(SystemExit):
        main(["calibrate-comm", "--help"])
    assert f"R² below {MIN_R2:g}" in " ".join(capsys.readouterr().out.split())
    docs = (Path(__file__).resolve().parents[2] / "docs" / "tensorflow.md").read_text(encoding="utf-8")
    assert f"`MIN_R2` = {MIN_R2:g}" in docs


def test_a_fit_that_measured_a_transfer_is_used_down_to_the_threshold():
    for r2 in (GPU_LIKE.r2, MIN_R2):
        fit = CommCalibration(GPU_LIKE.slope_us_per_byte, GPU_LIKE.intercept_us, GPU_LIKE.samples, r2)
        choice = choose_transfer_model(fit)
        assert (choice.source, choice.reason) == ("calibrated", None) and rejection(fit) is None
        assert (choice.slope_us_per_byte, choice.intercept_us) == (1e-4, 12.0)
    just_below = CommCalibration(1e-4, 12.0, GPU_LIKE.samples, math.nextafter(MIN_R2, 0))
    assert choose_transfer_model(just_below).source == "default"
    assert choose_transfer_model(just_below, min_r2=0.5).source == "calibrated"


def _run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[dict, str, str]:
    out_file = tmp_path / "cluster.json"
    code = main(["calibrate-comm", "--devices", "4", "--device-memory", "1GiB", "--out", str(out_file),
                 *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out_file.read_text()), out, err


def test_cli_says_when_it_falls_back_to_the_default_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(calibrate, "calibrate_comm", lambda *args, **kwargs: CPU_LIKE)
    doc, out, err = _run_cli(tmp_path, capsys)
    assert "celeritas: warning: the calibration measured nothing useful" in err and "R² 0.000" in err
    assert "fit: t = 0 µs/B · bytes + 101.4 µs, R² 0.000 over 3 sizes" in out
    assert "transfer model used: t = 0.0001 µs/B · bytes + 25 µs (the default model)" in out
    comm = doc["comm"]
    assert (comm["slope_us_per_byte"], comm["intercept_us"], comm["source"]) == (1e-4, 25.0, "default")
    assert comm["calibration"]["intercept_us"] == 101.4 and comm["calibration"]["r2"] == 0.0
    assert "slope 0" in comm["calibration"]["rejected"] and comm["calibration"]["min_r2"] == MIN_R2
    assert load_cluster(tmp_path / "cluster.json").intercept_us == 25.0  # readers take the used model


def test_cli_writes_a_fit_that_measured_a_transfer(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(calibrate, "calibrate_comm", lambda *args, **kwargs: GPU_LIKE)
    doc, out, err = _run_cli(tmp_path, capsys)
    assert "warning" not in err
    assert "transfer model used: t = 0.0001 µs/B · bytes + 12 µs (calibrated)" in out
    assert doc["comm"]["source"] == "calibrated" and doc["comm"]["calibration"]["rejected"] is None
    assert doc["comm"]["intercept_us"] == 12.0


def test_cli_on_logical_cpu_devices_is_honest_about_what_it_measured(tmp_path, capsys):
    """A real calibration here: whatever it measures, the file uses the fit only when it passed."""
    doc, _, err = _run_cli(tmp_path, capsys, "--sizes", "4KiB,1MiB,16MiB", "--repeats", "3")
    comm = doc["comm"]
    fit = comm["calibration"]
    if comm["source"] == "default":
        assert fit["rejected"] and "warning: the calibration measured nothing useful" in err
        assert (comm["slope_us_per_byte"], comm["intercept_us"]) == DEFAULT
    else:
        assert fit["slope_us_per_byte"] > 0 and fit["r2"] >= MIN_R2 and "warning" not in err
        assert comm["slope_us_per_byte"] == fit["slope_us_per_byte"]



# ---------------------------------------------------------------------------- each class of pair
def _preset_topology(text: str):
    from celeritas_core.graphs.topology import parse_preset

    preset = parse_preset(text)
    return preset.topology([f"gpu:{i}" for i in range(preset.num_devices)])


def test_each_link_in_use_is_measured_on_its_first_pair():
    from celeritas_tf.calibrate import link_classes

    topology = _preset_topology("2x4:nvlink,ib")
    names = [x.name for x in topology.links]
    assert link_classes(topology) == {names.index("nvlink4"): (0, 1), names.index("ib-ndr"): (0, 4)}
    islands = _preset_topology("1x2x2:nvlink3,pcie3")
    assert sorted(link_classes(islands).values()) == [(0, 1), (0, 2)]


def test_a_link_keeps_its_preset_figures_when_its_fit_measured_nothing_useful(monkeypatch):
    from celeritas_core.graphs.topology import Link
    from celeritas_tf.calibrate import calibrate_topology

    measured = []

    def fake(num_devices, *args, pair=(0, 1), **kwargs):
        measured.append((num_devices, pair))
        return GPU_LIKE if pair == (0, 1) else CPU_LIKE

    monkeypatch.setattr(calibrate, "calibrate_comm", fake)
    topology, results = calibrate_topology(_preset_topology("2x2:nvlink,ib"), sizes=(4096,), repeats=1)
    assert measured == [(4, (0, 1)), (4, (0, 2))]
    nvlink, ib = results
    assert (nvlink.source, nvlink.reason) == ("calibrated", None)
    assert topology.links[0] == Link("nvlink4", GPU_LIKE.slope_us_per_byte, GPU_LIKE.intercept_us)
    assert ib.source == "preset" and ib.reason.startswith("the calibration measured nothing useful")
    assert topology.links[1] == Link.preset("ib-ndr")
    record = ib.record(["a", "b", "c", "d"])
    assert record["source"] == "preset" and record["calibration"]["pair"] == ["a", "c"]
    assert record["calibration"]["intercept_us"] == CPU_LIKE.intercept_us


def test_a_link_no_pair_uses_is_not_measured(monkeypatch):
    from celeritas_tf.calibrate import calibrate_topology

    monkeypatch.setattr(calibrate, "calibrate_comm", lambda *args, **kwargs: GPU_LIKE)
    _, results = calibrate_topology(_preset_topology("2x1:nvlink,ib"), sizes=(4096,), repeats=1)
    assert [(r.link.name, r.source, r.pair) for r in results] == [("nvlink4", "preset", None),
                                                                  ("ib-ndr", "calibrated", (0, 1))]
    assert results[0].reason == "no pair of devices uses this link"


def test_cli_topology_writes_a_cluster_2_with_a_warning_per_rejected_link(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(calibrate, "calibrate_comm", lambda *args, **kwargs: CPU_LIKE)
    out_file = tmp_path / "cluster.json"
    code = main(["calibrate-comm", "--topology", "2x2:nvlink,ib", "--device-memory", "1GiB",
                 "--out", str(out_file)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err.count("celeritas: warning: link") == 2 and "it keeps the preset's figures" in err
    doc = json.loads(out_file.read_text())
    assert doc["format"] == "celeritas-cluster/2"
    assert {name: link["source"] for name, link in doc["topology"]["links"].items()} == {
        "nvlink4": "preset", "ib-ndr": "preset"}
    cluster = load_cluster(out_file)
    assert cluster.topology.describe().startswith("2 nodes x 2 devices") and "wrote" in out


@pytest.mark.parametrize("argv,needle", [
    (["--topology", "2x2:nvlink,ib", "--devices", "3"],
     "--devices 3 but --topology 2x2:nvlink,ib has 4 devices"),
    (["--topology", "16x8:nvlink,ib"], "--topology: 128 devices to measure on, at most 64 logical devices"),
    (["--topology", "2x2:nvlink"], "--topology: 2 nodes need a network link"),
])
def test_cli_topology_errors_exit_2(tmp_path, capsys, argv, needle):
    code = main(["calibrate-comm", "--device-memory", "1GiB", "--out", str(tmp_path / "c.json"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1


def test_the_pair_must_be_two_devices_of_the_calibration():
    for pair in ((0, 0), (0, 2), (1,), [0, 1]):
        with pytest.raises(CeleritasInputError, match="pair must be two different device indices below 2"):
            calibrate_comm(2, pair=pair)


def test_cli_topology_on_logical_cpu_devices_measures_each_class(tmp_path, capsys):
    """A real calibration of both classes: each link is its fit only where the fit passed."""
    out_file = tmp_path / "cluster.json"
    code = main(["calibrate-comm", "--topology", "2x2:nvlink,ib", "--device-memory", "1GiB", "--sizes",
                 "4KiB,1MiB", "--repeats", "2", "--out", str(out_file)])
    _, err = capsys.readouterr()
    assert code == 0, err
    links = json.loads(out_file.read_text())["topology"]["links"]
    assert links["nvlink4"]["calibration"]["pair"] == ["gpu:0", "gpu:1"]
    assert links["ib-ndr"]["calibration"]["pair"] == ["gpu:0", "gpu:2"]
    from celeritas_core.graphs.topology import Link

    for name, link in links.items():
        fit = link["calibration"]
        if link["source"] == "preset":
            assert fit["rejected"] and f"warning: link {name}" in err
            preset = Link.preset(name)
            assert (link["slope_us_per_byte"], link["intercept_us"]) == (preset.slope_us_per_byte,
                                                                         preset.intercept_us)
        else:
            assert fit["slope_us_per_byte"] > 0 and fit["r2"] >= MIN_R2
