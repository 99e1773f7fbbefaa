"""What the pipeline does when its tracking server or object store fails for a while, against the
real servers (``mlflow server``, moto's S3) behind the fault-injecting proxy of the integration
tests (:mod:`tests.faulty_proxy`): a tracked call waits for the server within its budget and logs
each point once; a lock whose holder was killed is broken at once; a published file whose bytes
changed is refused. The deployment-wide faults (killed workers, a full disk, a cleared run) are in
``tests/integration/test_faults.py``."""

from __future__ import annotations

import hashlib
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from mlflow import MlflowClient

from celeritas_core.errors import CeleritasInputError
from tasks import storage, tracking
from tasks.contracts import PlacementValidation
from tasks.publish import _check_timed_bytes
from tasks.tracking.lock import _LOCK_EXPIRES, _LOCK_OWNER, LOCK_PREFIX, _registry_lock
from tests.faulty_proxy import FaultyProxy
from tests.mlflow_server import mlflow_server
from tests.s3_server import moto_s3_env, moto_s3_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as url:
        yield url


@pytest.fixture
def proxied(server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FaultyProxy]:
    """The tracking URI through a fault-injecting proxy to the real server; no wait by default."""
    proxy = FaultyProxy(int(server.rsplit(":", 1)[1]))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", proxy.url)
    monkeypatch.setenv("CELERITAS_HOME", str(tmp_path))
    for name in tracking.store._HTTP_DEFAULTS:  # restored after the test, whatever the module sets
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    try:
        yield proxy
    finally:
        tracking.wait_for_server(0)
        proxy.close()


def test_a_call_waits_for_the_server_and_logs_each_point_once(proxied: FaultyProxy,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    run_id = tracking.start_parent_run(model="mlp", run_name="waits", job_id=f"waits-{time.time()}")
    tracking.wait_for_server(30)
    proxied.fail("reset", 3)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="tasks.tracking.store"):
        tracking.log_series(run_id, "step_time_ms", [1.0, 2.0, 3.0])
    assert time.monotonic() - started >= 2.5  # it waited out the fault, then logged
    assert proxied.injected["reset"] > 0
    assert "trying again in" in caplog.text and proxied.url in caplog.text
    history = MlflowClient(tracking_uri=proxied.url).get_metric_history(run_id, "step_time_ms")
    assert sorted((m.step, m.value) for m in history) == [(0, 1.0), (1, 2.0), (2, 3.0)]


def test_a_repeated_call_logs_identical_points_the_store_keeps_once(proxied: FaultyProxy) -> None:
    run_id = tracking.start_parent_run(model="mlp", run_name="once", job_id=f"once-{time.time()}")
    calls = []
    original = tracking.store._log_batch

    def lost_answer(client: object, run: str, **batch: object) -> None:
        """The first batch reaches the server, but its answer is lost: the call is repeated."""
        original(client, run, **batch)
        calls.append(run)
        if len(calls) == 1:
            raise ConnectionError("the answer was lost")

    tracking.wait_for_server(10)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tracking.store, "_log_batch", lost_answer)
        patch.setattr(tracking.runs, "_log_batch", lost_answer)
        tracking.log_metrics(run_id, {"loss": 0.5})
    assert len(calls) == 2
    history = MlflowClient(tracking_uri=proxied.url).get_metric_history(run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 0.5)]


def test_a_retried_task_logs_the_points_of_its_first_try_once(proxied: FaultyProxy) -> None:
    run_id = tracking.start_parent_run(model="mlp", run_name="retried", job_id=f"retried-{time.time()}")
    tracking.pin_metric_time(1_795_000_000_000)  # what the DAG's tasks pin: their DAG run's start
    try:
        for _ in ("first try", "retry"):
            tracking.log_metrics(run_id, {"spearman": 0.5})
            tracking.log_series(run_id, "step_time_ms", [1.0, 2.0])
    finally:
        tracking.pin_metric_time(None)
    mlflow = MlflowClient(tracking_uri=proxied.url)
    assert [(m.step, m.value) for m in mlflow.get_metric_history(run_id, "spearman")] == [(0, 0.5)]
    assert sorted((m.step, m.value) for m in mlflow.get_metric_history(run_id, "step_time_ms")) == \
        [(0, 1.0), (1, 2.0)]
    with pytest.raises(CeleritasInputError, match="expected ms since the epoch"):
        tracking.pin_metric_time(-1)


def test_without_a_wait_or_past_it_the_call_fails_in_one_line_naming_the_server(proxied: FaultyProxy) -> None:
    proxied.fail("reset", 60)
    started = time.monotonic()
    with pytest.raises(tracking.TransientTrackingError) as at_once:
        tracking.champions("mlp")
    assert time.monotonic() - started < 5
    tracking.wait_for_server(2)
    with pytest.raises(tracking.TransientTrackingError) as waited:
        tracking.champions("mlp")
    for error in (at_once.value, waited.value):
        assert str(error).startswith(f"MLflow tracking server {proxied.url} unreachable: ")
        assert "\n" not in str(error)
    assert str(waited.value).endswith("(for 2 s)")
    with pytest.raises(CeleritasInputError, match="expected seconds >= 0"):
        tracking.wait_for_server(-1)


def test_a_task_waits_as_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tracking.WAIT_ENV, raising=False)
    assert tracking.task_wait_s() == tracking.DEFAULT_TASK_WAIT_S == 120
    monkeypatch.setenv(tracking.WAIT_ENV, "10")
    assert tracking.task_wait_s() == 10
    monkeypatch.setenv(tracking.WAIT_ENV, "two minutes")
    with pytest.raises(CeleritasInputError, match="_WAIT_S='two minutes': expected seconds"):
        tracking.task_wait_s()


def test_a_lock_whose_holder_was_killed_on_this_host_is_broken_at_once(proxied: FaultyProxy) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    client = MlflowClient(tracking_uri=proxied.url)
    name = f"configuration-{time.time()}"
    lock = LOCK_PREFIX + hashlib.sha256(name.encode()).hexdigest()[:24]
    far = str(time.time() + 3600)  # the lease alone would hold it for an hour
    client.create_registered_model(lock, tags={_LOCK_OWNER: f"{socket.gethostname()}:{dead.pid}:0",
                                               _LOCK_EXPIRES: far})
    started = time.monotonic()
    with _registry_lock(client, name, wait_s=5):
        assert time.monotonic() - started < 3
    # a holder on another host is trusted until its lease ends
    client.create_registered_model(lock, tags={_LOCK_OWNER: f"elsewhere:{dead.pid}:0", _LOCK_EXPIRES: far})
    with pytest.raises(tracking.TransientTrackingError, match="still held"), \
            _registry_lock(client, name, wait_s=1):
        pass
    client.delete_registered_model(lock)


def test_a_published_file_whose_bytes_changed_is_refused(proxied: FaultyProxy, tmp_path: Path) -> None:
    run_id = tracking.start_parent_run(model="mlp", run_name="published", job_id=f"pub-{time.time()}")
    placement = tmp_path / "placement.json"
    placement.write_text('{"assignment": {"a": 0}}')
    promoted = tracking.promote_if_current(
        registered_model=f"celeritas-test-{time.time()}", model="mlp", config_key="0123456789abcdef",
        configuration="{}", run_id=run_id, expected_version=None,
        published={"placement.json": str(placement)}, tags={}, reason="first")
    champion = promoted.champion
    assert champion is not None
    got = tracking.download_published(champion.placement_uri, tmp_path / "ok",
                                      expected_sha256=champion.placement_sha256)
    assert got.read_bytes() == placement.read_bytes()
    with pytest.raises(CeleritasInputError, match="was changed since; refusing it"):
        tracking.download_published(champion.placement_uri, tmp_path / "bad", expected_sha256="0" * 64)


def test_publish_promotes_only_the_bytes_validate_timed() -> None:
    timed = b'{"assignment": {"a": 0}}'
    validation = PlacementValidation(
        placer="celeritas", placement_uri="runs/x/placements/celeritas.json", validation_uri="v.json",
        step_seconds=(0.1,), champion_version=None, champion_step_seconds=(), champion_error=None,
        mean_s=0.1, median_s=0.1, p90_s=0.1, blocks=1, placement_sha256=hashlib.sha256(timed).hexdigest())
    _check_timed_bytes(validation, timed)
    with pytest.raises(CeleritasInputError, match=r"changed since validate timed it .* production unchanged"):
        _check_timed_bytes(validation, timed + b" ")


def test_the_object_store_failing_is_one_retried_line_and_never_a_partial_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with moto_s3_server() as endpoint:
        proxy = FaultyProxy(int(endpoint.rsplit(":", 1)[1]))
        try:
            for name, value in moto_s3_env(proxy.url).items():
                monkeypatch.setenv(name, value)
            storage.reset_clients()
            storage.s3_client().create_bucket(Bucket="faults")
            uri = "s3://faults/run/placement.json"
            storage.write_json(uri, {"v": 1})
            big = {"v": 2, "pad": "x" * 3_000_000}  # several chunks: a reset cuts the upload short
            for mode in ("error", "reset"):
                proxy.fail(mode, 60)
                with pytest.raises(storage.TransientStorageError) as info:
                    storage.write_json(uri, big)
                assert uri in str(info.value) and "\n" not in str(info.value)
                proxy.heal()
                assert storage.read_json(uri) == {"v": 1}  # the object as it was: nothing partial
            proxy.fail("reset", 60, times=1)  # a blip of one request: boto3's standard retries absorb it
            storage.write_json(uri, big)
            assert storage.read_json(uri) == big
            assert proxy.injected["error"] > 0 and proxy.injected["reset"] > 0
        finally:
            proxy.close()
            storage.reset_clients()
