"""tasks/tracking/ against a temporary SQLite store, a real ``mlflow server`` and a closed port."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mlflow")

from mlflow import MlflowClient

from celeritas_core.errors import CeleritasInputError
from tasks import tracking
from tests.mlflow_server import free_port, mlflow_server

MODEL = "resnet50"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh SQLite tracking store under tmp_path (the project home too)."""
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    return uri


def _client() -> MlflowClient:
    return MlflowClient(tracking_uri=tracking.tracking_uri())


def _artifact_names(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    return {Path(f.path).name for f in client.list_artifacts(run_id, path)}


def _parent_children_series(tmp_path: Path, job_id: str) -> tuple[str, dict[str, str]]:
    """The pipeline's logging flow; checks it through a plain MlflowClient; returns the run ids."""
    (tmp_path / "files").mkdir(exist_ok=True)
    placement = tmp_path / "files" / "placement.json"
    placement.write_text('{"assignment": {}}')
    charts = tmp_path / "files" / "charts"
    charts.mkdir(exist_ok=True)
    gantt = charts / "gantt.png"
    gantt.write_bytes(b"\x89PNG fake")
    long_value = "x" * 7000
    parent = tracking.start_parent_run(
        model=MODEL, run_name=f"{MODEL} b64 4dev", job_id=job_id,
        tags={"celeritas.batch_size": "64", "celeritas.devices": "4",
              "airflow.dag_id": "celeritas_placement"},
        params={"batch_size": 64, "placers": ["celeritas", "metis"], "notes": long_value, "seed": None})
    children = {}
    for i, placer in enumerate(("celeritas", "metis")):
        children[placer] = tracking.child_run(
            parent, placer, params={"placer": placer, "R": 3},
            metrics={"simulated_step_time_ms": 1.0 + i, "placement_time_s": 0.5 * (i + 1)},
            artifacts={"placement": str(placement), "": str(charts)})
    tracking.log_metrics(parent, {"best_simulated_step_time_ms": 1.0, "single_device_step_time_ms": 3.0})
    tracking.log_series(children["celeritas"], "validation_step_time_ms", [100 + i for i in range(50)])
    tracking.log_artifact(parent, str(gantt))
    tracking.set_tags(parent, {"celeritas.best_simulated_placer": "celeritas"})

    client = _client()
    p = client.get_run(parent)
    assert p.info.status == "RUNNING"
    # the name tells two runs of one model apart: the label, then the run id's first 6 hex digits
    assert p.info.run_name == f"{MODEL} b64 4dev {parent[:6]}"
    assert p.data.tags["celeritas.role"] == "parent"
    assert p.data.tags["celeritas.model"] == MODEL
    assert p.data.tags["celeritas.job_id"] == job_id
    assert p.data.tags["airflow.dag_id"] == "celeritas_placement"
    assert p.data.params["batch_size"] == "64"
    assert p.data.params["placers"] == '["celeritas", "metis"]'
    assert p.data.params["seed"] == "None"
    assert len(p.data.params["notes"]) == tracking.MAX_PARAM_VALUE
    assert p.data.metrics["best_simulated_step_time_ms"] == 1.0
    assert _artifact_names(client, parent) == {"gantt.png"}
    for i, (placer, run_id) in enumerate(children.items()):
        c = client.get_run(run_id)
        assert c.info.run_name == f"{placer} · {MODEL} b64 4dev {parent[:6]}"
        assert c.info.status == "FINISHED"
        assert c.info.experiment_id == p.info.experiment_id
        assert c.data.tags["mlflow.parentRunId"] == parent
        assert c.data.tags["celeritas.placer"] == placer
        assert c.data.tags["celeritas.model"] == MODEL
        assert c.data.params == {"placer": placer, "R": "3"}
        assert c.data.metrics["simulated_step_time_ms"] == 1.0 + i
        assert _artifact_names(client, run_id, "placement") == {"placement.json"}
        # a folder given for the root ("") lands at the top, where MLflow's compare view looks
        assert {(f.path, f.is_dir) for f in client.list_artifacts(run_id)} == {("gantt.png", False),
                                                                            ("placement", True)}
    history = client.get_metric_history(children["celeritas"], "validation_step_time_ms")
    assert sorted(m.step for m in history) == list(range(50))
    assert {m.step: m.value for m in history}[49] == pytest.approx(149)
    tracking.end_run(parent, "FINISHED")
    assert client.get_run(parent).info.status == "FINISHED"
    return parent, children


def test_parent_and_child_runs_on_sqlite(store: str, tmp_path: Path) -> None:
    parent, children = _parent_children_series(tmp_path, "manual__2024-06-01T00:00:00+00:00")
    assert len({parent, *children.values()}) == 3
    # artifacts of experiments created on a SQLite store live next to the database, never in ./mlruns
    stored = {p.name for p in (tmp_path / "mlruns" / "artifacts").rglob("*") if p.is_file()}
    assert stored == {"placement.json", "gantt.png"}


def test_log_series_and_steps(store: str) -> None:
    run = tracking.start_parent_run(model=MODEL, run_name="series", job_id="series", tags={}, params={})
    values = [0.01 * (i % 7) + 0.2 for i in range(50)]
    tracking.log_series(run, "validation_step_time_s", values)
    tracking.log_metrics(run, {"loss": 1.5}, step=3)
    tracking.log_metrics(run, {"loss": 1.25, "nan_metric": float("nan")}, step=4)
    client = _client()
    history = client.get_metric_history(run, "validation_step_time_s")
    assert len(history) == 50
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(50))
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(values)
    assert [(m.step, m.value) for m in client.get_metric_history(run, "loss")] == [(3, 1.5), (4, 1.25)]
    assert "nan_metric" not in client.get_run(run).data.metrics


def test_retries_reuse_parent_and_child(store: str) -> None:
    kwargs = {"model": MODEL, "run_name": "job-1", "job_id": "job-1", "tags": {"celeritas.devices": "4"}}
    first = tracking.start_parent_run(**kwargs, params={"batch_size": 64, "R": 3})
    again = tracking.start_parent_run(**kwargs, params={"batch_size": 64, "R": 4, "extra": 1})
    assert again == first
    client = _client()
    assert client.get_run(first).info.run_name == f"job-1 {first[:6]}"  # reused: the same name
    exp = tracking.experiment_id()
    parents = client.search_runs([exp], "tags.`celeritas.role` = 'parent'")
    assert [r.info.run_id for r in parents] == [first]
    assert parents[0].data.params == {"batch_size": "64", "R": "3", "extra": "1"}  # params never overwritten
    assert tracking.start_parent_run(**{**kwargs, "job_id": "job-2"}) != first

    # the placer's child: place.py then validate.py (or a retry) log into one child run
    c1 = tracking.child_run(first, "celeritas", params={"placer": "celeritas"},
                            metrics={"simulated_step_time_us": 900.0})
    c2 = tracking.child_run(first, "celeritas", params={"placer": "celeritas"},
                            metrics={"measured_mean_step_time_s": 0.12})
    assert c1 == c2
    children = client.search_runs([exp], f"tags.`mlflow.parentRunId` = '{first}'")
    assert [r.info.run_id for r in children] == [c1]
    assert children[0].info.status == "FINISHED"
    assert children[0].data.metrics == {"simulated_step_time_us": 900.0, "measured_mean_step_time_s": 0.12}
    assert tracking.child_run(first, "metis", metrics={}) != c1

    # a failed job's id runs again in its parent run (one parent run per job, whatever happened)
    tracking.end_run(first, "FAILED")
    assert client.get_run(first).info.status == "FAILED"
    assert tracking.start_parent_run(**kwargs) == first
    assert client.get_run(first).info.status == "RUNNING"


REGISTERED = "celeritas-resnet50-b64-0123456789abcdef"
CONFIG = '{"key": "0123456789abcdef", "description": "batch 64, 4 x 16 GiB"}'


def _promote(run_id: str, expected: str | None, folder: Path, body: str, step_s: float,
             registered: str = REGISTERED) -> tracking.Promotion:
    """Promote ``run_id``'s placement (a file holding ``body``) if ``expected`` is the champion."""
    folder.mkdir(parents=True, exist_ok=True)
    placement = folder / f"{run_id}.json"
    placement.write_text(body)
    return tracking.promote_if_current(
        registered_model=registered, model=MODEL, config_key="0123456789abcdef", configuration=CONFIG,
        run_id=run_id, expected_version=expected, published={"placement.json": str(placement)},
        tags={"celeritas.placer": "celeritas", "celeritas.step_time_s": step_s}, reason=f"{body} wins")


def test_champion_is_a_compare_and_set_in_the_model_registry(store: str, tmp_path: Path) -> None:
    assert tracking.champion(REGISTERED) is None and tracking.champions(MODEL) == []
    first = tracking.start_parent_run(model=MODEL, run_name="a", job_id="a")
    promoted = _promote(first, None, tmp_path / "p", '{"assignment": {"a": 0}}', 0.2)
    assert promoted.promoted and promoted.champion is not None
    champion = tracking.champion(REGISTERED)
    assert champion == promoted.champion
    assert (champion.version, champion.run_id, champion.placer, champion.step_time_s) == ("1", first,
                                                                                          "celeritas", 0.2)
    assert champion.config_key == "0123456789abcdef" and champion.model == MODEL and champion.job_id == "a"
    # the published placement is a copy in the run's artifacts, not the run directory's file
    (tmp_path / "p" / f"{first}.json").write_text("rewritten by a later run")
    local = tracking.download_published(champion.placement_uri, tmp_path / "dl")
    assert local.read_text() == '{"assignment": {"a": 0}}'
    assert champion.placement_sha256 == hashlib.sha256(local.read_bytes()).hexdigest()
    # a retried publish of the same run returns the same version, never a second one
    again = _promote(first, None, tmp_path / "p", '{"assignment": {"a": 0}}', 0.2)
    assert again.promoted and again.champion.version == "1"
    # a run that measured against no champion (a stale read) does not replace version 1
    stale = tracking.start_parent_run(model=MODEL, run_name="b", job_id="b")
    lost = _promote(stale, None, tmp_path / "p", '{"assignment": {"a": 1}}', 0.1)
    assert not lost.promoted and "champion changed" in lost.reason and lost.champion.version == "1"
    second = tracking.start_parent_run(model=MODEL, run_name="c", job_id="c")
    won = _promote(second, "1", tmp_path / "p", '{"assignment": {"a": 2}}', 0.15)
    assert won.promoted and won.champion.version == "2" and tracking.champion(REGISTERED).run_id == second
    tags = {r: _client().get_run(r).data.tags for r in (first, second)}
    assert tags[first]["celeritas.production"] == "false" and tags[first]["celeritas.superseded_by"] == second
    assert tags[second]["celeritas.production"] == "true" and tags[second]["celeritas.model_version"] == "2"
    # version 1's artifacts are untouched by the promotion of version 2
    assert tracking.download_published(champion.placement_uri, tmp_path / "dl2").read_text() == \
        '{"assignment": {"a": 0}}'
    assert [c.version for c in tracking.champions(MODEL)] == ["2"] and tracking.champions("bert") == []
    assert not [m for m in _client().search_registered_models() if m.name.startswith(tracking.LOCK_PREFIX)]


@pytest.mark.parametrize(("used", "reason", "shown"), [
    ("calibrated", "the fit measured a transfer (slope > 0, R² 0.999 >= 0.98)", "calibrated transfers"),
    ("default", "the calibration measured nothing useful (R² 0.410 below 0.98)",
     "default transfer model (calibration not used: the calibration measured nothing useful (R² 0.410 "
     "below 0.98))"),
], ids=["calibration-used", "calibration-rejected"])
def test_production_show_says_which_transfer_model_the_champion_ran_with(
        store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        used: str, reason: str, shown: str) -> None:
    from celeritas_cli.main import main
    from tasks.configuration import configuration_of, configuration_to_json, model_identity
    from tasks.params import resolve_params

    monkeypatch.delenv("CELERITAS_CLUSTER_NAME", raising=False)
    params = resolve_params({"model": MODEL, "batch_size": 16, "num_devices": 4, "device_memory": "64MiB",
                             "calibrate_comm": True})
    config = configuration_to_json(configuration_of(params, model_identity("zoo", MODEL)))
    run = tracking.start_parent_run(model=MODEL, run_name="calibrated?", job_id="transfers")
    # what calibrate_comm records on the parent run
    tracking.set_tags(run, {tracking.TAG_TRANSFER_MODEL: used, tracking.TAG_TRANSFER_REASON: reason})
    placement = tmp_path / "placement.json"
    placement.write_text('{"assignment": {}}')
    assert tracking.promote_if_current(
        registered_model=config["registered_model"], model=MODEL, config_key=config["key"],
        configuration=json.dumps(config, sort_keys=True), run_id=run, expected_version=None,
        published={"placement.json": str(placement)},
        tags={"celeritas.placer": "m-topo", "celeritas.step_time_s": 0.01}, reason="first").promoted
    (champion,) = tracking.champions(MODEL)
    assert (champion.transfer_model, champion.transfer_reason) == (used, reason)
    assert main(["production", "show", "--model", MODEL]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (f"{config['key']}: batch 16, 4 x 64.0 MiB, {shown}, "
                                                        "cluster 'default'")
    assert main(["production", "show", "--model", MODEL, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["transfer_model"] == used
    # and the training consumer's banner (celeritas train --champion) says the same
    from tasks.training import PublishedPlacement
    banner = PublishedPlacement(registered_model=config["registered_model"], version="1", placer="m-topo",
                                placement_uri=champion.placement_uri, placement={}, configuration=config,
                                transfer_model=champion.transfer_model,
                                transfer_reason=champion.transfer_reason).describe()
    assert banner.endswith(f"batch 16, 4 x 64.0 MiB, {shown}, cluster 'default')")


def test_a_run_link_says_how_to_serve_a_ui_unless_told_not_to(store: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tracking.MLFLOW_UI_URL_ENV, raising=False)
    run = tracking.start_parent_run(model=MODEL, run_name="link", job_id="link")
    full, short = tracking.run_link(run), tracking.run_link(run, serve_hint=False)
    # a child run's link, under its parent's: no second copy of how to serve a UI
    assert short.startswith(f"run {run} in experiment ") and "serve it" not in short
    assert full.startswith(short + " (serve it with `mlflow ui --backend-store-uri ")
    monkeypatch.setenv(tracking.MLFLOW_UI_URL_ENV, "http://ui.example:5000")
    assert tracking.run_link(run) == tracking.run_link(run, serve_hint=False)
    assert tracking.run_link(run).startswith("http://ui.example:5000/#/experiments/")


def test_decisions_are_recorded_in_order(store: str) -> None:
    assert tracking.decision_history(MODEL) == []
    runs = []
    for i, (decision, gain) in enumerate((("promoted", None), ("kept", 0.01), ("promoted", 0.2))):
        run = tracking.start_parent_run(model=MODEL, run_name=f"d{i}", job_id=f"d{i}")
        tracking.set_tags(run, {"celeritas.best_measured_placer": "metis"})
        unit, scale = ("s", 1.0) if i == 2 else ("ms", 1e3)  # the last as logged when times were in s
        metrics = {f"challenger_median_step_time_{unit}": (0.1 - i / 100) * scale}
        if gain is not None:
            metrics.update({"gain_vs_champion": gain, "ab_p_value": 0.01,
                            f"champion_median_step_time_{unit}": 0.1 * scale})
        tracking.record_decision(run, decision, f"reason {i}", config_key="0123456789abcdef", metrics=metrics,
                                 note=f"Kept: note {i}" if i == 1 else None)
        runs.append(run)
        time.sleep(0.01)
    history = tracking.decision_history(MODEL)
    assert [d.run_id for d in history] == runs
    assert [d.decision for d in history] == ["promoted", "kept", "promoted"]
    assert history[0].gain is None and history[2].gain == pytest.approx(0.2)
    assert history[1].reason == "reason 1" and history[1].placer == "metis"
    assert history[1].step_time_s == pytest.approx(0.09) and history[1].version is None
    assert history[1].champion_step_time_s == pytest.approx(0.1)  # Decision keeps seconds
    assert (history[2].step_time_s, history[2].champion_step_time_s) == pytest.approx((0.08, 0.1))
    # the note is the run's description in MLflow's UI
    assert _client().get_run(runs[1]).data.tags["mlflow.note.content"] == "Kept: note 1"
    assert "mlflow.note.content" not in _client().get_run(runs[0]).data.tags
    assert history[0].decided_at < history[1].decided_at < history[2].decided_at
    assert tracking.decision_history("bert") == []


def test_the_same_job_id_at_once_is_refused_and_a_finished_job_is_not_rerun(store: str) -> None:
    kwargs = {"model": MODEL, "run_name": "j", "job_id": "twice"}
    run = tracking.start_parent_run(**kwargs)
    code = ("import sys; from tasks import tracking\n"
            "try:\n    tracking.start_parent_run(model=sys.argv[1], run_name='j', job_id='twice')\n"
            "except Exception as exc:\n    print(exc)")
    out = subprocess.run([sys.executable, "-c", code, MODEL], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert out.stdout.strip() == (f"job 'twice' is already running (MLflow run {run}, process "
                                  f"{socket.gethostname()}:{os.getpid()}); wait for it to end or use "
                                  "another job id")
    tracking.end_run(run, "FAILED")  # a failed job may run again: it reuses its parent run
    assert tracking.start_parent_run(**kwargs) == run
    tracking.end_run(run, "FINISHED")
    with pytest.raises(CeleritasInputError, match=f"^job 'twice' already finished \\(MLflow run {run}\\)"):
        tracking.start_parent_run(**kwargs)
    assert tracking.start_parent_run(**kwargs, reopen=True) == run  # a cleared Airflow task reopens it


def _promoting_worker(uri: str, worker: int, rounds: int, barrier: Any, results: Any, folder: str) -> None:
    """One of several processes that, every round, read the champion, wait for the others, then
    all try to promote their own run against what they read."""
    os.environ["MLFLOW_TRACKING_URI"] = uri
    from tasks import tracking as tr

    for r in range(rounds):
        run = tr.start_parent_run(model=MODEL, run_name=f"w{worker}r{r}", job_id=f"w{worker}-r{r}")
        current = tr.champion(REGISTERED)
        barrier.wait(timeout=60)
        try:
            outcome = _promote(run, current.version if current else None, Path(folder),
                               f'{{"worker": {worker}, "round": {r}}}', 0.1)
            results.put((r, worker, run, outcome.promoted, outcome.champion.version))
        except Exception as exc:  # reported, so that the test fails with the cause
            results.put((r, worker, run, None, repr(exc)))
        barrier.wait(timeout=60)


@pytest.mark.parametrize("processes", [2, 4])
def test_parallel_promotions_leave_exactly_one_champion(store: str, tmp_path: Path, processes: int) -> None:
    import multiprocessing

    rounds = 6
    tracking.experiment_id()  # the store's tables exist before the workers race on them
    assert tracking.champion(REGISTERED) is None
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    workers = [ctx.Process(target=_promoting_worker, args=(store, w, rounds, barrier, results, str(tmp_path)))
               for w in range(processes)]
    for w in workers:
        w.start()
    rows = [results.get(timeout=120) for _ in range(rounds * processes)]
    for w in workers:
        w.join(timeout=60)
    assert all(w.exitcode == 0 for w in workers)
    assert not [row for row in rows if row[3] is None], rows
    for r in range(rounds):
        winners = [row for row in rows if row[0] == r and row[3]]
        assert len(winners) == 1, (r, rows)  # exactly one promotion per round, never zero, never two
        assert {row[4] for row in rows if row[0] == r} == {str(r + 1)}  # everyone sees the winner's version
    versions = _client().search_model_versions(f"name = '{REGISTERED}'")
    assert len(versions) == rounds
    last_winner = next(row[2] for row in rows if row[0] == rounds - 1 and row[3])
    assert tracking.champion(REGISTERED).run_id == last_winner
    producing = _client().search_runs([tracking.experiment_id()], "tags.`celeritas.production` = 'true'")
    assert [run.info.run_id for run in producing] == [last_winner]


def test_recent_runs_and_table(store: str) -> None:
    ids = []
    for i, batch in enumerate((32, 64, 128)):
        run = tracking.start_parent_run(model=MODEL, run_name=f"r{i}", job_id=f"r{i}",
                                        tags={"celeritas.batch_size": str(batch), "celeritas.devices": "4"})
        if i == 0:  # a run logged before the metric names ended in their unit
            tracking.child_run(run, "celeritas", metrics={"placement_seconds": 1.5, "speedup_vs_single": 2.0})
            old = {"best_simulated_step_time_us": 1000.0, "single_device_time_us": 3000.0}
            tracking.log_metrics(run, {"best_measured_step_time_s": 0.1, **old})
        elif i == 1:  # a run logged when step times were in seconds
            tracking.child_run(run, "celeritas", metrics={"placement_time_s": 2.5, "speedup_vs_single": 2.0})
            seconds = {"best_measured_step_time_s": 0.11, "best_simulated_step_time_s": 1.001e-3}
            tracking.log_metrics(run, {**seconds, "single_device_step_time_s": 0.003})
        else:
            tracking.child_run(run, "celeritas", metrics={"placement_time_s": 3.5, "speedup_vs_single": 2.0})
            ms = {"best_measured_step_time_ms": 120.0, "best_simulated_step_time_ms": 1.002}
            tracking.log_metrics(run, {**ms, "single_device_step_time_ms": 3.0})
        tracking.set_tags(run, {"celeritas.best_measured_placer": "celeritas"})
        ids.append(run)
        time.sleep(0.01)
    other = tracking.start_parent_run(model="bert", run_name="o", job_id="o")
    tracking.end_run(ids[2], "FINISHED")
    rows = tracking.recent_runs(MODEL, 2)
    assert [r["run_id"] for r in rows] == [ids[2], ids[1]]
    assert other not in [r["run_id"] for r in tracking.recent_runs(MODEL, 10)]
    top = rows[0]
    keys = ("status", "batch_size", "devices", "placer")
    assert [top[k] for k in keys] == ["FINISHED", "128", "4", "celeritas"]
    assert top["best_measured_step_time_ms"] == pytest.approx(120.0)
    assert top["speedup_vs_single"] == pytest.approx(3.0 / 1.002)  # from the parent's metrics
    assert top["placement_time_s"] == 3.5  # from the winner's child run
    # runs logged under the older names read the same, in ms
    assert rows[1]["best_measured_step_time_ms"] == pytest.approx(110.0)
    assert rows[1]["best_simulated_step_time_ms"] == pytest.approx(1.001)
    oldest = tracking.recent_runs(MODEL, 3)[2]
    assert oldest["placement_time_s"] == 1.5 and oldest["best_simulated_step_time_ms"] == pytest.approx(1.0)
    assert oldest["best_measured_step_time_ms"] == pytest.approx(100.0)
    assert oldest["speedup_vs_single"] == pytest.approx(3.0)
    table = tracking.format_runs_table(rows).splitlines()
    assert len(table) == 3
    assert table[0].split()[:3] == ["started", "(UTC)", "run_id"]
    assert table[0].split()[7:9] == ["measured_ms", "simulated_ms"]
    assert ids[2] in table[1] and ids[1] in table[2]
    assert table[1].split()[3:10] == ["FINISHED", "128", "4", "celeritas", "120.000", "1.002", "2.99"]
    assert "3.50" in table[1] and "110.000" in table[2]
    assert tracking.recent_runs("unknown-model") == []
    assert tracking.format_runs_table([]) == "no runs"
    with pytest.raises(CeleritasInputError):
        tracking.recent_runs(MODEL, 0)


def test_bad_input_is_one_line_input_error(store: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    run = tracking.start_parent_run(model=MODEL, run_name="bad", job_id="bad")
    cases = [
        lambda: tracking.end_run(run, "DONE"),
        lambda: tracking.log_metrics(run, {"x": "fast"}),
        lambda: tracking.log_series(run, "x", [1.0, None]),
        lambda: tracking.log_artifact(run, str(tmp_path / "missing.json")),
        lambda: tracking.child_run(run, "metis", artifacts={"placement": str(tmp_path / "missing.json")}),
        lambda: tracking.set_tags("0" * 32, {"a": "b"}),
        lambda: tracking.child_run("0" * 32, "metis"),
        lambda: tracking.start_parent_run(model=MODEL, run_name="q", job_id="it's \"quoted\""),
        lambda: tracking.start_parent_run(model="", run_name="q", job_id="q"),
        lambda: tracking.start_parent_run(model=MODEL, run_name="q", job_id="q",
                                          tags={"celeritas.role": "child"}),
    ]
    for case in cases:
        with pytest.raises(CeleritasInputError) as info:
            case()
        assert "\n" not in str(info.value)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(tmp_path / "mlruns"))
    with pytest.raises(CeleritasInputError, match="file store"):
        tracking.tracking_uri()


def test_default_store_under_project_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    db = tmp_path.resolve() / "build" / "mlflow" / "mlflow.db"
    assert tracking.tracking_uri() == f"sqlite:///{db}"
    assert db.parent.is_dir()
    assert tracking.artifact_root(tracking.tracking_uri()) == (db.parent / "artifacts").as_uri()
    assert tracking.artifact_root("http://127.0.0.1:5000") is None


def test_importing_tracking_does_not_import_mlflow() -> None:
    code = "import sys, tasks.tracking; assert 'mlflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("fast", [True, False], ids=["no-retries", "module-defaults"])
def test_unreachable_server_is_transient(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    for name in tracking.store._HTTP_DEFAULTS:  # restored after the test, whatever the module sets
        monkeypatch.delenv(name, raising=False)
    if fast:
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    start = time.monotonic()
    with pytest.raises(tracking.TransientTrackingError) as info:
        tracking.start_parent_run(model=MODEL, run_name="x", job_id="x")
    assert time.monotonic() - start < (3 if fast else 15)
    message = str(info.value)
    assert url in message and "\n" not in message
    assert isinstance(info.value, RuntimeError) and not isinstance(info.value, CeleritasInputError)
    assert str(pickle.loads(pickle.dumps(info.value))) == message  # crosses process boundaries intact
    with pytest.raises(tracking.TransientTrackingError):
        tracking.champions(MODEL)


@pytest.mark.slow
def test_real_mlflow_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same flow against ``mlflow server`` (REST API + proxied artifacts) started for this test."""
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    for name in tracking.store._HTTP_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    with mlflow_server(tmp_path / "server") as url:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        parent, children = _parent_children_series(tmp_path, "scheduled__2024-06-01")
        assert tracking.child_run(parent, "metis") == children["metis"]
        promoted = _promote(parent, None, tmp_path / "p", '{"assignment": {"a": 0}}', 0.2)
        assert promoted.promoted and tracking.champion(REGISTERED).run_id == parent
        assert promoted.champion.placement_uri.startswith("mlflow-artifacts:")
        local = tracking.download_published(promoted.champion.placement_uri, tmp_path / "dl")
        assert local.read_text() == '{"assignment": {"a": 0}}'
        assert [r["run_id"] for r in tracking.recent_runs(MODEL)] == [parent]
        stored = {p.name for p in (tmp_path / "server" / "artifacts").rglob("*") if p.is_file()}
        assert stored == {"placement.json", "gantt.png"}
    assert not (tmp_path / "build").exists()  # nothing fell back to a local store
