"""The pipeline's one storage module: read and write artifacts under a local path or an S3 URI.

Every pipeline task reads and writes its artifacts under one *run directory* URI, either a local
path (``runs/2024-06-01``, ``/data/run``, ``file:///data/run``) or ``s3://bucket/prefix``. The
functions here take such URIs and hide the difference:

* local files go through the project's one hardened I/O layer, :mod:`celeritas_core.readwrite.safe_io`:
  a write is staged in a temporary file in the same directory, fsynced and renamed into place
  (:class:`~celeritas_core.readwrite.safe_io.OutputSet`, a set of one, so it lands at once even inside
  ``staged_outputs``), and only ever replaces a regular file; a read
  (:func:`~celeritas_core.readwrite.safe_io.read_input_bytes`) refuses FIFOs, devices and files above the
  input limit. An S3 object is written with one ``PutObject`` (readers never see a partial
  object). JSON is serialized fully before anything is written, so a document that cannot be
  serialized leaves the destination untouched.
* errors are classified so the Airflow DAG can retry only what may succeed on a retry:
  :class:`ArtifactNotFound` (a missing file or object) and :class:`StorageConfigError` (bad
  bucket name, missing bucket, access denied, rejected credentials) derive from
  :class:`CeleritasInputError` and are deterministic; :class:`TransientStorageError` (network,
  endpoint, timeout, throttling, S3 5xx, credentials that could not be fetched) is a
  :class:`RuntimeError` worth retrying, and so is :class:`StorageFullError` (no space left on a
  local file system: it says to free space). Every message is one line naming the URI.

The S3 client is ``boto3``'s, configured from the standard environment (``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_MAX_ATTEMPTS``, ``AWS_RETRY_MODE``) plus one
override, ``CELERITAS_S3_ENDPOINT_URL``, which takes precedence over the AWS endpoint variables
(e.g. to point only this pipeline at MinIO). With a custom endpoint, path-style addressing is
used. Retries default to botocore's ``standard`` mode with 3 attempts; connections time out
after 3 s and reads after 30 s. Clients are cached per (endpoint, region); call
:func:`reset_clients` after changing the environment (tests do). boto3 is imported lazily, so
local-only use and DAG parsing do not need it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Any

from celeritas_core.errors import CeleritasInputError
from celeritas_core.readwrite.safe_io import OutputSet, read_input_bytes

ENDPOINT_ENV = "CELERITAS_S3_ENDPOINT_URL"
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 30.0
DEFAULT_MAX_ATTEMPTS = 3

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IPV4_RE = re.compile(r"\d+\.\d+\.\d+\.\d+")
_CHUNK = 1 << 20

# S3 error codes: missing object; deterministic configuration problems; worth a retry.
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_TRANSIENT_CODES = frozenset({
    "InternalError", "ServiceUnavailable", "SlowDown", "Throttling", "ThrottlingException",
    "ThrottledException", "RequestThrottled", "RequestThrottledException", "TooManyRequestsException",
    "RequestLimitExceeded", "BandwidthLimitExceeded", "RequestTimeout", "RequestTimeoutException",
    "PriorRequestNotComplete", "EC2ThrottledException", "ExpiredToken", "ExpiredTokenException",
    "RequestExpired", "RequestTimeTooSkewed", "TokenRefreshRequired", "OperationAborted",
})
_TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.EAGAIN, errno.ETIMEDOUT, errno.ESTALE, errno.EINTR})
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})

_clients: dict[tuple[str | None, str | None], Any] = {}
_clients_lock = threading.Lock()


# ---------------------------------------------------------------------------- errors
class ArtifactNotFound(CeleritasInputError):
    """A file or S3 object that should exist does not."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        super().__init__("artifact not found", source=uri)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.uri,))


class StorageConfigError(CeleritasInputError):
    """A deterministic storage problem: bad bucket name, missing bucket, access denied, bad credentials."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_config_error, (self.message, self.source))


def _config_error(message: str, source: str | None) -> StorageConfigError:
    return StorageConfigError(message, source=source)


class TransientStorageError(RuntimeError):
    """A storage failure that may succeed on a retry (network, endpoint, timeout, throttling, 5xx)."""

    def __init__(self, uri: str, cause: str) -> None:
        self.uri = uri
        self.cause = cause
        super().__init__(f"{uri}: transient storage error: {cause}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.uri, self.cause))


class StorageFullError(TransientStorageError):
    """No space left where a local artifact is written (ENOSPC, EDQUOT): nothing was written there
    (the staged file is removed), and a retry succeeds once space is freed."""

    def __init__(self, uri: str, cause: str) -> None:
        super().__init__(uri, cause)
        self.args = (f"{uri}: {cause}; nothing was written: free space on its file system, then clear "
                     "the failed task",)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


# ---------------------------------------------------------------------------- URIs
def _scheme(uri: str) -> str | None:
    m = _SCHEME_RE.match(uri)
    return m.group(1).lower() if m else None


def is_s3(uri: str) -> bool:
    """Whether ``uri`` is an ``s3://`` URI (anything else is treated as a local path)."""
    return _scheme(os.fspath(uri)) == "s3"


def parse_s3(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/key`` into ``(bucket, key)``; the key may be empty."""
    s = os.fspath(uri)
    scheme = _scheme(s)
    if scheme != "s3":
        if scheme is not None:
            raise CeleritasInputError(f"unsupported URI scheme '{scheme}://' (expected s3://bucket/key)",
                                      source=s)
        raise CeleritasInputError("not an S3 URI (expected s3://bucket/key)", source=s)
    bucket, _, key = s[len("s3://"):].partition("/")
    if not bucket:
        raise CeleritasInputError("S3 URI has no bucket (expected s3://bucket/key)", source=s)
    if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket or _IPV4_RE.fullmatch(bucket):
        raise StorageConfigError(f"invalid S3 bucket name '{bucket}' (3-63 characters: a-z, 0-9, '.', '-')",
                                 source=s)
    return bucket, key


def _local(uri: str) -> Path:
    """The local path a non-S3 URI names; rejects other schemes and malformed S3 URIs."""
    s = os.fspath(uri)
    if not s:
        raise CeleritasInputError("empty path or URI")
    scheme = _scheme(s)
    if scheme == "file":
        parsed = urllib.parse.urlsplit(s)
        if parsed.netloc not in ("", "localhost"):
            raise CeleritasInputError("file:// URI with a remote host is not supported", source=s)
        return Path(urllib.parse.unquote(parsed.path))
    if scheme is not None:
        raise CeleritasInputError(
            f"unsupported URI scheme '{scheme}://' (expected a local path or s3://bucket/key)", source=s)
    if s[:3].lower() == "s3:":
        raise CeleritasInputError("malformed S3 URI (expected s3://bucket/key)", source=s)
    return Path(s)


def _object(uri: str) -> tuple[str, str]:
    """``(bucket, key)`` of an S3 URI that must name an object (non-empty key, no trailing '/')."""
    bucket, key = parse_s3(uri)
    if not key or key.endswith("/"):
        raise CeleritasInputError("S3 URI names no object (expected s3://bucket/key)", source=os.fspath(uri))
    return bucket, key


def _file(uri: str) -> Path:
    """The local path of a URI that must name a file (no trailing '/')."""
    s = os.fspath(uri)
    if s.endswith(("/", os.sep)):
        raise CeleritasInputError("names a directory, expected a file", source=s)
    return _local(s)


def join(base: str, *parts: str) -> str:
    """Join path segments onto a local path or S3 URI with '/', never doubling slashes."""
    base = os.fspath(base)
    if is_s3(base):
        parse_s3(base)
    elif base:
        _local(base)  # rejects unsupported schemes and malformed s3: URIs
    m = _SCHEME_RE.match(base)
    prefix = m.group(0) if m else ""
    rest = base[len(prefix):]
    head = rest.rstrip("/")
    root = "/" if rest.startswith("/") and not head else ""
    segments = [seg for part in parts for seg in os.fspath(part).split("/") if seg]
    if not segments:
        return prefix + (head or root)
    return prefix + (head + "/" if head else root) + "/".join(segments)


# ---------------------------------------------------------------------------- S3 client
def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def s3_client() -> Any:
    """The cached boto3 S3 client for the current environment's endpoint and region."""
    override = _env(ENDPOINT_ENV)
    endpoint = override or _env("AWS_ENDPOINT_URL_S3") or _env("AWS_ENDPOINT_URL")
    region = _env("AWS_REGION") or _env("AWS_DEFAULT_REGION")
    cache_key = (endpoint, region)
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is not None:
            return client
        # lazy: boto3 (about 0.25 s) loads only for s3:// URIs, not for local runs or the DAG file
        import boto3
        from botocore.config import Config

        try:
            max_attempts = int(_env("AWS_MAX_ATTEMPTS") or DEFAULT_MAX_ATTEMPTS)
        except ValueError:
            raise StorageConfigError(f"AWS_MAX_ATTEMPTS is not an integer: {os.environ['AWS_MAX_ATTEMPTS']!r}"
                                     ) from None
        options: dict[str, Any] = {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "read_timeout": READ_TIMEOUT_S,
            "retries": {"mode": _env("AWS_RETRY_MODE") or "standard", "max_attempts": max_attempts},
        }
        if endpoint:
            options["s3"] = {"addressing_style": "path"}
        try:
            session = boto3.session.Session(region_name=region)
            client = session.client("s3", endpoint_url=override, config=Config(**options))
        except ValueError as exc:  # e.g. "Invalid endpoint: ..."
            raise StorageConfigError(f"cannot create the S3 client: {_one_line(exc)}") from None
        _clients[cache_key] = client
        return client


def reset_clients() -> None:
    """Forget cached S3 clients, so the next call reads the environment again."""
    with _clients_lock:
        _clients.clear()


def _translate(exc: BaseException, uri: str) -> BaseException:
    """Map a botocore/network exception to ArtifactNotFound, StorageConfigError or TransientStorageError."""
    # lazy: boto3 (about 0.25 s) loads only for s3:// URIs, not for local runs or the DAG file
    from botocore import exceptions as bx

    cause = f"{type(exc).__name__}: {_one_line(exc)}"
    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {}) or {}
        code = str(error.get("Code", ""))
        status = (exc.response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode") or 0
        message = _one_line(error.get("Message") or code or status)
        if code in _NOT_FOUND_CODES:
            return ArtifactNotFound(uri)
        if code in _TRANSIENT_CODES or status >= 500 or status == 429:
            return TransientStorageError(uri, f"S3 {code or status}: {message}")
        if code == "NoSuchBucket":
            return StorageConfigError(f"S3 bucket '{parse_s3(uri)[0]}' does not exist", source=uri)
        if code in ("AccessDenied", "403", "Forbidden", "AllAccessDisabled"):
            return StorageConfigError(f"S3 access denied: {message}", source=uri)
        return StorageConfigError(f"S3 request failed: {code or status}: {message}", source=uri)
    if isinstance(exc, bx.NoCredentialsError | bx.CredentialRetrievalError):
        return TransientStorageError(uri, cause)  # e.g. an instance-metadata or STS hiccup
    if isinstance(exc, bx.HTTPClientError | bx.ConnectionError | bx.IncompleteReadError
                  | ConnectionError | TimeoutError):
        return TransientStorageError(uri, cause)
    return StorageConfigError(f"S3 configuration problem: {cause}", source=uri)


@contextmanager
def _s3_errors(uri: str) -> Iterator[None]:
    # lazy: boto3 (about 0.25 s) loads only for s3:// URIs, not for local runs or the DAG file
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (BotoCoreError, ClientError, ConnectionError, TimeoutError) as exc:
        raise _translate(exc, os.fspath(uri)) from exc


def _classify(exc: OSError, uri: str) -> BaseException | None:
    """The storage error an OSError on the local path ``uri`` stands for (None: keep it)."""
    if isinstance(exc, FileNotFoundError):
        return ArtifactNotFound(uri)
    if isinstance(exc, IsADirectoryError):
        return CeleritasInputError("is a directory, expected a file", source=uri)
    if isinstance(exc, NotADirectoryError):
        return CeleritasInputError("a parent of this path is a file, not a directory", source=uri)
    if isinstance(exc, PermissionError):
        return StorageConfigError(f"permission denied ({exc.strerror})", source=uri)
    if exc.errno in _FULL_ERRNOS:
        return StorageFullError(uri, exc.strerror or type(exc).__name__)
    if isinstance(exc, ConnectionError | TimeoutError) or exc.errno in _TRANSIENT_ERRNOS:
        return TransientStorageError(uri, f"{type(exc).__name__}: {_one_line(exc)}")
    return None


@contextmanager
def _local_errors(uri: str) -> Iterator[None]:
    """Classify the errors of a local read or write: missing, deterministic or transient."""
    s = os.fspath(uri)
    try:
        yield
    except OSError as exc:
        error = _classify(exc, s)
        if error is None:
            raise
        raise error from (exc if isinstance(error, TransientStorageError) else None)
    except CeleritasInputError as exc:
        # safe_io reports an OSError it met as a one-line input error (raised in its except
        # block, so the OSError is the context): classify the OSError itself, so that a transient
        # one is retried and a missing file is ArtifactNotFound
        cause = exc.__context__
        flattened = type(exc) is CeleritasInputError and isinstance(cause, OSError)
        error = _classify(cause, s) if flattened else None
        if error is None:
            raise
        raise error from (cause if isinstance(error, TransientStorageError) else None)


# ---------------------------------------------------------------------------- writing
def _write_local_atomic(path: Path, fill: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` through ``fill(fh)`` atomically
    (:class:`celeritas_core.readwrite.safe_io.OutputSet`)."""
    with OutputSet() as outputs:
        outputs.add(path, fill, binary=True)


def _staging(name: str) -> bool:
    """Whether a file name is one of :class:`~celeritas_core.readwrite.safe_io.OutputSet`'s temporary
    files (``.NAME.XXXX.tmp``, or ``.NAME.XXXX.bak`` while a commit runs): a write in flight."""
    return name.startswith(".") and name.endswith((".tmp", ".bak"))


def _put(uri: str, data: bytes, content_type: str | None) -> str:
    s = os.fspath(uri)
    if is_s3(s):
        bucket, key = _object(s)
        extra = {"ContentType": content_type} if content_type else {}
        with _s3_errors(s):
            s3_client().put_object(Bucket=bucket, Key=key, Body=data, **extra)
    else:
        path = _file(s)
        with _local_errors(s):
            _write_local_atomic(path, lambda fh: fh.write(data))
    return s


def write_bytes(uri: str, data: bytes) -> str:
    """Write ``data`` atomically to ``uri``; returns ``uri``."""
    return _put(uri, bytes(data), None)


def write_text(uri: str, text: str) -> str:
    """Write ``text`` as UTF-8 atomically to ``uri``; returns ``uri``."""
    return _put(uri, text.encode("utf-8"), "text/plain; charset=utf-8")


def write_json(uri: str, doc: Any, indent: int | None = 1) -> str:
    """Serialize ``doc`` (no NaN/inf), then write it atomically to ``uri``; returns ``uri``."""
    try:
        text = json.dumps(doc, indent=indent, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        exc.add_note(f"while serializing JSON for {os.fspath(uri)} (nothing was written)")
        raise
    return _put(uri, text.encode("utf-8"), "application/json")


def upload_file(local_path: str | os.PathLike[str], uri: str) -> str:
    """Copy the local file ``local_path`` atomically to ``uri`` (local or S3); returns ``uri``."""
    src = _file(os.fspath(local_path))
    s = os.fspath(uri)
    with _local_errors(os.fspath(local_path)):
        fh = src.open("rb")
    with fh:
        if is_s3(s):
            bucket, key = _object(s)
            with _s3_errors(s):
                s3_client().put_object(Bucket=bucket, Key=key, Body=fh)
        else:
            dest = _file(s)
            with _local_errors(s):
                _write_local_atomic(dest, lambda out: shutil.copyfileobj(fh, out, _CHUNK))
    return s


# ---------------------------------------------------------------------------- reading
def read_bytes(uri: str) -> bytes:
    """The contents of the file or object at ``uri``."""
    s = os.fspath(uri)
    if is_s3(s):
        bucket, key = _object(s)
        with _s3_errors(s):
            response = s3_client().get_object(Bucket=bucket, Key=key)
            return response["Body"].read()
    path = _file(s)
    with _local_errors(s):
        return read_input_bytes(path)


def read_text(uri: str) -> str:
    """The UTF-8 text of the file or object at ``uri``."""
    data = read_bytes(uri)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CeleritasInputError("not UTF-8 text", source=os.fspath(uri)) from None


def read_json(uri: str) -> Any:
    """The parsed JSON document at ``uri``; syntax problems are one-line input errors."""
    s = os.fspath(uri)
    return parse_json(read_bytes(s), s)


def parse_json(data: bytes, uri: str) -> Any:
    """``data``, read from ``uri``, parsed as JSON; syntax problems are one-line input errors
    naming ``uri``."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise CeleritasInputError(f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                                  source=uri) from None
    except UnicodeDecodeError:
        raise CeleritasInputError("not valid JSON (not UTF-8 text)", source=uri) from None


def exists(uri: str) -> bool:
    """Whether a file (local) or object (S3) exists at ``uri``; directories and prefixes do not count."""
    s = os.fspath(uri)
    if is_s3(s):
        # lazy: boto3 (about 0.25 s) loads only for s3:// URIs, not for local runs or the DAG file
        from botocore.exceptions import ClientError

        bucket, key = _object(s)
        with _s3_errors(s):
            try:
                s3_client().head_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code", "")) in _NOT_FOUND_CODES:
                    return False
                raise
        return True
    path = _local(s)
    with _local_errors(s):
        return path.is_file()


def list_uris(prefix_uri: str) -> list[str]:
    """Sorted URIs of all files/objects under the directory or prefix ``prefix_uri`` (recursively)."""
    s = os.fspath(prefix_uri)
    if is_s3(s):
        bucket, key = parse_s3(s)
        prefix = key if not key or key.endswith("/") else key + "/"
        found: list[str] = []
        with _s3_errors(s):
            pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for page in pages:
                found.extend(f"s3://{bucket}/{obj['Key']}" for obj in page.get("Contents", ()))
        return sorted(found)
    root = _local(s)
    found = []
    with _local_errors(s):
        if not root.is_dir():
            return []
        for dirpath, _dirs, files in os.walk(root):
            rel = Path(dirpath).relative_to(root).as_posix()
            for name in files:
                if not _staging(name):  # a write in flight is not an artifact yet
                    found.append(join(s, rel, name) if rel != "." else join(s, name))
    return sorted(found)


def delete(uri: str) -> None:
    """Delete the file or object at ``uri``; a missing one is fine."""
    s = os.fspath(uri)
    if is_s3(s):
        bucket, key = _object(s)
        with _s3_errors(s):
            s3_client().delete_object(Bucket=bucket, Key=key)
        return
    path = _file(s)
    with _local_errors(s):
        path.unlink(missing_ok=True)


@contextmanager
def local_path(uri: str) -> Iterator[Path]:
    """A local file for ``uri`` during the block: the path itself, or a temporary download of an S3 object.

    The S3 copy is read-only in spirit: changes to it are not uploaded, and it is deleted when
    the block ends.
    """
    s = os.fspath(uri)
    if not is_s3(s):
        path = _local(s)
        if not path.exists():
            raise ArtifactNotFound(s)
        yield path
        return
    bucket, key = _object(s)
    with tempfile.TemporaryDirectory(prefix="celeritas-s3-") as tmp:
        dest = Path(tmp) / PurePosixPath(key).name
        with _s3_errors(s):
            body = s3_client().get_object(Bucket=bucket, Key=key)["Body"]
            with dest.open("wb") as fh:
                for chunk in body.iter_chunks(_CHUNK):
                    fh.write(chunk)
        yield dest
