"""tasks.storage: local and S3 (moto server) round trips, atomic writes, URI parsing, error classes."""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.formats import load_graph, save_graph
from tasks import storage
from tasks.storage import ArtifactNotFound, StorageConfigError, TransientStorageError
from tests.conftest import make_graph
from tests.s3_server import AWS_ENV_TO_CLEAR, free_port, moto_s3_env, moto_s3_server

BUCKET = "celeritas-test"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server with bucket BUCKET; the AWS environment points at it for the module."""
    pytest.importorskip("boto3")
    pytest.importorskip("moto.server")
    with moto_s3_server() as endpoint, pytest.MonkeyPatch.context() as mp:
        for name in AWS_ENV_TO_CLEAR:
            mp.delenv(name, raising=False)
        for name, value in moto_s3_env(endpoint).items():
            mp.setenv(name, value)
        storage.reset_clients()
        storage.s3_client().create_bucket(Bucket=BUCKET)
        yield endpoint
    storage.reset_clients()


@pytest.fixture
def s3_run(s3_endpoint: str, request: pytest.FixtureRequest) -> str:
    """A run-directory URI in the moto bucket, unique to the test."""
    return f"s3://{BUCKET}/runs/{request.node.name}"


@pytest.fixture(params=["local", "s3"])
def run_dir(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A run-directory URI: a local directory, or a prefix in the moto bucket."""
    if request.param == "local":
        return str(tmp_path / "run")
    return request.getfixturevalue("s3_run")


def _raw_listing(run_dir: str) -> list[str]:
    """Everything physically under run_dir, temporary files included."""
    if storage.is_s3(run_dir):
        bucket, key = storage.parse_s3(run_dir)
        resp = storage.s3_client().list_objects_v2(Bucket=bucket, Prefix=key + "/")
        return sorted(o["Key"] for o in resp.get("Contents", ()))
    root = Path(run_dir)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


# ---------------------------------------------------------------------------- URIs
@pytest.mark.parametrize(("base", "parts", "expected"), [
    ("s3://bkt/run", ("graph.json",), "s3://bkt/run/graph.json"),
    ("s3://bkt/run/", ("/a/", "b.json"), "s3://bkt/run/a/b.json"),
    ("s3://bkt", ("a",), "s3://bkt/a"),
    ("s3://bkt/", (), "s3://bkt"),
    ("/data/run/", ("x//y",), "/data/run/x/y"),
    ("/", ("a", "b"), "/a/b"),
    ("runs", ("r1", "g.json"), "runs/r1/g.json"),
    ("", ("a", "b"), "a/b"),
    ("file:///data/", ("a",), "file:///data/a"),
])
def test_join(base: str, parts: tuple[str, ...], expected: str) -> None:
    assert storage.join(base, *parts) == expected


def test_parse_s3() -> None:
    assert storage.parse_s3("s3://bkt/a/b.json") == ("bkt", "a/b.json")
    assert storage.parse_s3("s3://bkt") == ("bkt", "")
    assert storage.is_s3("s3://bkt/x") and not storage.is_s3("/tmp/x") and not storage.is_s3("gs://b/x")


@pytest.mark.parametrize(("uri", "fragment"), [
    ("s3://", "no bucket"),
    ("s3:///key", "no bucket"),
    ("gs://bucket/key", "unsupported URI scheme"),
    ("s3:/bucket/key", "malformed S3 URI"),
    ("s3://Bad_Bucket/key", "invalid S3 bucket name"),
    ("s3://bkt", "names no object"),
    ("s3://bkt/dir/", "names no object"),
    ("", "empty"),
])
def test_malformed_uris(uri: str, fragment: str) -> None:
    with pytest.raises(CeleritasInputError, match=fragment) as info:
        storage.read_bytes(uri)
    assert "\n" not in str(info.value)
    with pytest.raises(CeleritasInputError):
        storage.write_text(uri, "x")


def test_bad_bucket_name_is_config_error() -> None:
    with pytest.raises(StorageConfigError, match="invalid S3 bucket name"):
        storage.parse_s3("s3://ab/key")
    with pytest.raises(CeleritasInputError, match="unsupported URI scheme"):
        storage.join("gs://bucket", "x")


# ---------------------------------------------------------------------------- round trips
def test_round_trips(run_dir: str) -> None:
    doc = {"format": "celeritas-graph/1", "nodes": [{"name": "a", "time_us": 1.5}], "ü": "ß"}
    uris = [
        storage.write_bytes(storage.join(run_dir, "blob.bin"), b"\x00\xffbytes"),
        storage.write_text(storage.join(run_dir, "notes", "a.txt"), "héllo\nworld"),
        storage.write_json(storage.join(run_dir, "graph.json"), doc),
    ]
    assert storage.read_bytes(uris[0]) == b"\x00\xffbytes"
    assert storage.read_text(uris[1]) == "héllo\nworld"
    assert storage.read_json(uris[2]) == doc
    assert storage.read_text(uris[2]) == json.dumps(doc, indent=1) + "\n"
    assert storage.list_uris(run_dir) == sorted(uris)
    assert storage.list_uris(run_dir + "/") == sorted(uris)
    assert storage.list_uris(storage.join(run_dir, "notes")) == [uris[1]]
    assert storage.list_uris(storage.join(run_dir, "nothing-here")) == []
    assert all(storage.exists(u) for u in uris)
    assert not storage.exists(storage.join(run_dir, "missing.json"))

    storage.delete(uris[0])
    storage.delete(uris[0])  # missing is fine
    assert not storage.exists(uris[0])
    assert storage.list_uris(run_dir) == sorted(uris[1:])


def test_upload_file(run_dir: str, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"payload" * 1000)
    uri = storage.upload_file(src, storage.join(run_dir, "up", "copy.bin"))
    assert storage.read_bytes(uri) == b"payload" * 1000
    with pytest.raises(ArtifactNotFound, match=r"missing\.bin"):
        storage.upload_file(tmp_path / "missing.bin", storage.join(run_dir, "never.bin"))
    assert not storage.exists(storage.join(run_dir, "never.bin"))


def test_overwrite_replaces_cleanly(run_dir: str) -> None:
    uri = storage.join(run_dir, "placement.json")
    storage.write_json(uri, {"v": 1, "padding": "x" * 500})
    storage.write_json(uri, {"v": 2})
    assert storage.read_json(uri) == {"v": 2}
    assert storage.list_uris(run_dir) == [uri]
    assert len(_raw_listing(run_dir)) == 1  # no temporary files left behind


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), object()], ids=["nan", "inf", "object"])
def test_failed_json_serialization_writes_nothing(run_dir: str, bad: object) -> None:
    fresh = storage.join(run_dir, "fresh.json")
    existing = storage.write_json(storage.join(run_dir, "existing.json"), {"keep": True})
    for uri in (fresh, existing):
        with pytest.raises((ValueError, TypeError)) as info:
            storage.write_json(uri, {"ok": 1, "bad": [bad]})
        assert any(uri in note for note in getattr(info.value, "__notes__", []))
    assert not storage.exists(fresh)
    assert storage.read_json(existing) == {"keep": True}
    assert storage.list_uris(run_dir) == [existing]
    assert _raw_listing(run_dir) == [storage.parse_s3(existing)[1] if storage.is_s3(existing)
                                     else "existing.json"]


def test_local_write_is_atomic_with_plain_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "deep" / "dir" / "out.json"
    storage.write_json(str(target), {"a": 1})
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask

    # a write that dies mid-way (after the temp file exists) leaves the old file and no temp file
    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    full = r"out\.json: No space left on device; nothing was written"
    with pytest.raises(storage.StorageFullError, match=full):
        storage.write_text(str(target), "new")
    assert json.loads(target.read_text()) == {"a": 1}
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]


def test_local_path(run_dir: str, tmp_path: Path) -> None:
    graph = make_graph([("a", "b", 8.0), ("b", "c", 4.0)], name="tiny")
    uri = storage.upload_file(save_graph(graph, tmp_path / "graph.json"), storage.join(run_dir, "graph.json"))
    with storage.local_path(uri) as path:
        assert path.is_file() and path.name == "graph.json"
        assert load_graph(path).node_names == graph.node_names
    if storage.is_s3(uri):
        assert not path.exists() and not path.parent.exists()
    else:
        assert path == Path(uri) and path.exists()
    with pytest.raises(ArtifactNotFound), storage.local_path(storage.join(run_dir, "nope.json")):
        pass


# ---------------------------------------------------------------------------- errors
def test_missing_artifact(run_dir: str) -> None:
    uri = storage.join(run_dir, "missing.json")
    for read in (storage.read_bytes, storage.read_text, storage.read_json):
        with pytest.raises(ArtifactNotFound, match=r"missing\.json: artifact not found") as info:
            read(uri)
        assert info.value.uri == uri and isinstance(info.value, CeleritasInputError)


def test_invalid_json_is_input_error(run_dir: str) -> None:
    uri = storage.write_text(storage.join(run_dir, "broken.json"), '{"a": ')
    with pytest.raises(CeleritasInputError, match="not valid JSON"):
        storage.read_json(uri)


def test_missing_bucket_is_config_error(s3_endpoint: str) -> None:
    with pytest.raises(StorageConfigError, match="does not exist"):
        storage.read_bytes("s3://no-such-bucket-here/x.json")
    with pytest.raises(StorageConfigError, match="does not exist"):
        storage.write_text("s3://no-such-bucket-here/x.json", "x")


def test_unreachable_endpoint_is_transient_and_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("boto3")
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    for name in AWS_ENV_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)
    for name, value in moto_s3_env("http://127.0.0.1:9").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CELERITAS_S3_ENDPOINT_URL", endpoint)  # the override wins over AWS_ENDPOINT_URL
    storage.reset_clients()
    uri = f"s3://{BUCKET}/run/graph.json"
    try:
        for op in (storage.read_bytes, lambda u: storage.write_text(u, "x"), storage.exists):
            start = time.monotonic()
            with pytest.raises(TransientStorageError) as info:
                op(uri)
            assert time.monotonic() - start < 5.0
            message = str(info.value)
            assert "\n" not in message and uri in message and endpoint in message
            assert not isinstance(info.value, CeleritasInputError)
    finally:
        storage.reset_clients()


def test_client_error_classification() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

    def client_error(code: str, status: int) -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": f"{code}\nmsg"},
                            "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")

    uri = "s3://bkt/k"
    expected = [
        (client_error("NoSuchKey", 404), ArtifactNotFound),
        (client_error("404", 404), ArtifactNotFound),
        (client_error("NoSuchBucket", 404), StorageConfigError),
        (client_error("AccessDenied", 403), StorageConfigError),
        (client_error("InvalidAccessKeyId", 403), StorageConfigError),
        (client_error("InternalError", 500), TransientStorageError),
        (client_error("SomethingNew", 503), TransientStorageError),
        (client_error("SlowDown", 503), TransientStorageError),
        (client_error("Throttling", 400), TransientStorageError),
        (EndpointConnectionError(endpoint_url="http://x"), TransientStorageError),
        (ReadTimeoutError(endpoint_url="http://x"), TransientStorageError),
        (ConnectionResetError(104, "reset"), TransientStorageError),
    ]
    for exc, cls in expected:
        translated = storage._translate(exc, uri)
        assert type(translated) is cls, (exc, translated)
        assert "\n" not in str(translated) and uri in str(translated)


def test_errors_pickle() -> None:
    for exc in (ArtifactNotFound("s3://bkt/a"), TransientStorageError("s3://bkt/a", "boom"),
                StorageConfigError("denied", source="s3://bkt/a")):
        clone = pickle.loads(pickle.dumps(exc))
        assert type(clone) is type(exc) and str(clone) == str(exc)


def test_client_cache_and_reset(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    first = storage.s3_client()
    assert storage.s3_client() is first
    assert first.meta.endpoint_url == s3_endpoint
    monkeypatch.setenv("CELERITAS_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    assert storage.s3_client().meta.endpoint_url == "http://127.0.0.1:9"
    monkeypatch.delenv("CELERITAS_S3_ENDPOINT_URL")
    assert storage.s3_client() is first
    storage.reset_clients()
    assert storage.s3_client() is not first
