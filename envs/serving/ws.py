"""The env server's fast path: one WebSocket per client connection, many episodes on it.

An HTTP request per step costs more than the step of a small environment: the client's
request machinery, the server's routing, validation and response objects. Over
``/v1/ws`` a client sends one JSON message per call and reads one back, with no
per-message HTTP work on either side::

    -> {"id": 7, "op": "step", "env_id": "e-...", "body": {"action": [..], "stop_reason": "eos", "turn": 3}}
    <- {"id": 7, "ok": {... the same answer as POST /v1/envs/{env_id}/step ...}}
    <- {"id": 7, "error": {"detail": "...", "error": "bad_request", "status": 422, ...}}

``op`` is ``step`` or ``initial_observation``; everything else stays on HTTP. Messages
on one socket are handled concurrently (each in its own task, answers sent as they
finish, matched by ``id``), so a client may multiplex every env of a group on one
socket. The guarantees are the HTTP endpoints': the same step code (a step re-sent
after a lost connection, same ``turn``, is answered from the kept answer, never
played twice; environment code runs shielded from a dropped socket), the same limits,
the same errors with the same statuses, the bearer token checked at the handshake.
Token ids are checked before any environment code: a negative id or one past int64
is a 422 naming the field (``body.action.3``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from agentenvs.envs.serving.errors import BadRequest, ServingError, validation_message
from agentenvs.envs.serving.wire import StepRequest, dumps

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from fastapi import FastAPI

    from agentenvs.envs.serving.sessions import EnvSession, SessionTable

MAX_TOKEN_ID = 2**63 - 1
"""Token ids travel as int64 in every trainer we hand off to."""


def check_token_ids(action: list[int]) -> None:
    """Refuse an id no vocabulary has (negative, or past int64), naming its position."""
    for index, token in enumerate(action):
        if not 0 <= token <= MAX_TOKEN_ID:
            raise BadRequest(f"body.action.{index}: token id {token} is out of range "
                             f"(0 to {MAX_TOKEN_ID})")  # fmt: skip


def _error(err: BaseException) -> dict[str, Any]:
    if isinstance(err, ServingError):
        return {**err.payload(), "status": err.status}
    if isinstance(err, ValidationError):
        errors = [{**e, "loc": ("body", *e.get("loc", ()))} for e in err.errors()]
        fields = [".".join(str(p) for p in e["loc"]) for e in errors]
        return {"detail": validation_message(errors), "error": "bad_request", "status": 422,
                "fields": fields}  # fmt: skip
    return {"detail": f"{type(err).__name__}: {err}", "error": "server_error", "status": 500}


def install_ws(
    app: FastAPI,
    table: SessionTable,
    *,
    step: Callable[[EnvSession, StepRequest], Awaitable[dict[str, Any]]],
    initial: Callable[[EnvSession], Awaitable[dict[str, Any]]],
    on_step: Callable[[], None],
) -> None:
    """Add ``/v1/ws`` to ``app``; ``step`` and ``initial`` are the HTTP endpoints' own
    shielded calls, ``on_step`` counts a step for ``/metrics``."""

    async def handle(message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        session = table.env(str(message.get("env_id")))
        if op == "step":
            body = StepRequest.model_validate(message.get("body") or {})
            check_token_ids(body.action)
            answer = await step(session, body)
            on_step()
            return answer
        if op == "initial_observation":
            return await initial(session)
        raise BadRequest(f"op: {op!r} is not step or initial_observation")

    @app.websocket("/v1/ws")
    async def socket(websocket: WebSocket) -> None:
        await websocket.accept()
        sending = asyncio.Lock()
        pending: set[asyncio.Task[None]] = set()

        async def answer(message: dict[str, Any]) -> None:
            try:
                reply = {"id": message.get("id"), "ok": await handle(message)}
            except Exception as err:  # every refusal goes back to the caller, by id
                reply = {"id": message.get("id"), "error": _error(err)}
            async with sending:
                with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                    await websocket.send_bytes(dumps(reply))

        try:
            while True:
                received = await websocket.receive()
                if received["type"] == "websocket.disconnect":
                    break
                raw = received.get("bytes") or received.get("text") or b""
                try:
                    message = json.loads(raw)
                    if not isinstance(message, dict):
                        raise ValueError("a message is a JSON object")
                except ValueError as err:
                    async with sending:
                        await websocket.send_bytes(dumps({"id": None, "error": _error(
                            BadRequest(f"message: not JSON: {err}"))}))  # fmt: skip
                    continue
                task = asyncio.ensure_future(answer(message))
                pending.add(task)
                task.add_done_callback(pending.discard)
        except WebSocketDisconnect:
            pass  # the steps in flight finish (shielded) and keep their answers for a retry
