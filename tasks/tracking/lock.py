"""A store-wide lock the tracking store provides, for promotions and for starting a job's run.

Registering a model name is atomic (names are unique in every MLflow store), so creating the
registered model ``celeritas-lock-<hash of the name>`` takes the lock and deleting it releases
it. A lock whose holder is gone is broken: at once when the holder ran on this host and its
process has ended (a worker killed in the middle of a promotion, retried on the same node), else
once its lease has expired.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

from tasks.tracking.store import TransientTrackingError, tracking_uri

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger(__name__)

LOCK_PREFIX = "celeritas-lock-"
LOCK_LEASE_S = 120.0
LOCK_WAIT_S = 60.0
_LOCK_OWNER = "celeritas.lock_owner"
_LOCK_EXPIRES = "celeritas.lock_expires"


def _owner_token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _holder_ended(owner: str) -> bool:
    """Whether the lock holder ``host:pid:nonce`` ran on this host in a process that has ended."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _lock_expired(client: MlflowClient, lock: str) -> bool:
    """Whether the lock ``lock`` exists with a holder that is gone: its process ended on this host
    (:func:`_holder_ended`), or its lease expired."""
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
    from mlflow.exceptions import MlflowException

    try:
        tags = client.get_registered_model(lock).tags
    except MlflowException:
        return False
    if _holder_ended(tags.get(_LOCK_OWNER, "")):
        return True
    try:
        return float(tags.get(_LOCK_EXPIRES, "inf")) < time.time()
    except ValueError:
        return True


@contextmanager
def _registry_lock(client: MlflowClient, name: str, *, lease_s: float = LOCK_LEASE_S,
                   wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the store-wide lock ``name`` during the block (see the module's docstring).

    Waits up to ``wait_s`` (then :class:`TransientTrackingError`: a retry may find it free); a
    lock older than its lease ``lease_s`` is taken to belong to a killed process and broken.
    """
    # lazy: mlflow loads only when the store is used, so DAG files parse without it
    from mlflow.exceptions import MlflowException

    lock = LOCK_PREFIX + hashlib.sha256(name.encode()).hexdigest()[:24]
    token = _owner_token()
    deadline, delay = time.monotonic() + wait_s, 0.02
    while True:
        try:
            lease = {_LOCK_OWNER: token, _LOCK_EXPIRES: str(time.time() + lease_s)}
            client.create_registered_model(lock, tags=lease,
                                           description=f"celeritas lock for {name} (deleted when released)")
            break
        except MlflowException as exc:
            # taken; or taken and released at once: the store reports a duplicate by reading the
            # existing row back, which is gone if its holder deleted it meanwhile
            if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST"):
                raise
        if _lock_expired(client, lock):
            log.warning("breaking the expired lock %s (for %s)", lock, name)
            with suppress(MlflowException):
                client.delete_registered_model(lock)
            continue
        if time.monotonic() > deadline:
            raise TransientTrackingError(tracking_uri(), f"lock for {name} still held after {wait_s:.0f} s")
        time.sleep(delay * (1.0 + random.random()))
        delay = min(delay * 2.0, 0.5)
    try:
        yield
    finally:
        with suppress(MlflowException):
            if client.get_registered_model(lock).tags.get(_LOCK_OWNER) == token:
                client.delete_registered_model(lock)
