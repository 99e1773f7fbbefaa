"""The API server checks a placement trigger's parameters and answers in sentences.

Airflow validates a trigger's ``conf`` against the DAG's Param schemas and answers a failure with
jsonschema's full report (the failing schema, the instance, the regular expression). This ASGI
middleware runs first on ``POST /api/v2/dags/celeritas_placement/dagRuns`` and refuses a bad
``conf`` with HTTP 400 and one sentence from :func:`tasks.params.trigger_problem`, the message the
CLI gives for the same mistake; nothing is created. It checks what ``prepare`` would refuse: every
field's type and range (the trigger form's number boxes no longer clamp them, see
:func:`tasks.params.form_schema`), the model (zoo name and knobs, a ``.keras`` file under the models
root, an allowed module prefix) and the run directory. The trigger form shows the sentence in the
error box at the top of its dialog (Airflow 3's form shows no server error at a field). It also
refuses the trigger when the GPU tasks' pool (``CELERITAS_GPU_POOL``, default ``gpu``) does not
exist: Airflow would accept the run and leave its GPU tasks "scheduled" forever with empty logs.
Every other request passes through.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from tasks.params import DEFAULT_GPU_POOL, GPU_POOL_ENV, PLACEMENT_DAG_ID, trigger_problem

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The trigger endpoint of the placement DAG (with any base-URL prefix before it).
TRIGGER_PATH = re.compile(rf"/api/v2/dags/{re.escape(PLACEMENT_DAG_ID)}/dagRuns/?$")
#: Bodies larger than this are left to Airflow (bytes; a trigger body is a few hundred).
MAX_CHECKED_BODY = 1 << 20


def gpu_pool_exists(name: str) -> bool:
    """Whether Airflow's metadata database has pool ``name`` (the API server has the database)."""
    # lazy: Airflow loads plugins while it starts; its models load only when a trigger is checked
    from airflow.models.pool import Pool

    return Pool.get_pool(name) is not None


def missing_pool_problem(pool_exists: Callable[[str], bool] = gpu_pool_exists) -> str | None:
    """The sentence refusing a trigger whose GPU tasks could never run, or None when the pool exists."""
    name = os.environ.get(GPU_POOL_ENV) or DEFAULT_GPU_POOL
    if pool_exists(name):
        return None
    return (f"Airflow pool {name!r} does not exist, so the GPU tasks would wait forever: create it with "
            f"`airflow pools set {name} 1 'Celeritas GPU nodes'` (one slot per GPU node; docs/deploy.md)")


class TriggerParamsCheck:
    """ASGI middleware: a bad placement trigger gets HTTP 400 with one sentence; the rest pass."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]],
                 pool_exists: Callable[[str], bool] = gpu_pool_exists) -> None:
        self.app = app
        self.pool_exists = pool_exists

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" \
                or not TRIGGER_PATH.search(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        messages, body = await _read_body(receive)
        # lazy: only the API server runs this middleware (the plugin loads in every Airflow process)
        from starlette.concurrency import run_in_threadpool

        # in a thread: the model check may read a .keras file's zip directory
        problem = await run_in_threadpool(trigger_problem, body) if len(body) <= MAX_CHECKED_BODY else None
        if problem is None:
            try:
                problem = await run_in_threadpool(missing_pool_problem, self.pool_exists)
            except Exception:  # the database is Airflow's to report on; never block a trigger on it
                problem = None
        if problem is not None:
            await _answer(send, 400, {"detail": problem})
            return
        await self.app(scope, _replay(messages, receive), send)


async def _read_body(receive: Receive) -> tuple[list[Message], bytes]:
    """Every request message up to the last body chunk, and the body they carry."""
    messages: list[Message] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            break
    return messages, b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives the already-read messages again, then the real ones."""
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


async def _answer(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class CeleritasPlugin(AirflowPlugin):
    """Registers :class:`TriggerParamsCheck` on the API server."""

    name = "celeritas"
    fastapi_root_middlewares = [  # noqa: RUF012 (Airflow reads this class attribute)
        {"middleware": TriggerParamsCheck, "args": [], "kwargs": {},
         "name": "Celeritas: placement trigger parameters in sentences"},
    ]
