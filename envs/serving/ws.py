"""The env server's fast path: one WebSocket per client process, many episodes on it.

An HTTP request per step costs more than the step of a small environment: the client's
request machinery, the server's routing, validation and response objects. Over
``/v1/ws`` a client sends one JSON message per call and reads one back, with no
per-message HTTP work on either side::

    -> {"id": 7, "op": "step", "env_id": "e-...", "body": {"action": [..], "stop_reason": "eos", "turn": 3}}
    <- {"id": 7, "ok": {... the same answer as POST /v1/envs/{env_id}/step ...}}
    <- {"id": 7, "error": {"detail": "...", "error": "bad_request", "status": 422, ...}}

``op`` is ``step`` or ``initial_observation``; everything else stays on HTTP. Messages
on one socket are handled concurrently (each in its own task, answers sent as they
finish, matched by ``id``), so a client may multiplex every env it plays on one socket.

Batches: a frame may hold a JSON array of messages. A client that sends one gets its
answers in arrays too: the answers that are ready when the socket is free to write go
out as one frame. On two cores a frame costs more than a small env's step (a write, a
read, the WebSocket framing, the event loop's reader switched off and on again), so a
client that gathers the calls of one moment into one frame (ours does:
:mod:`agentenvs.envs.remote.socket`) pays that once per batch, not once per step.

The guarantees are the HTTP endpoints': the same step code (a step re-sent after a lost
connection, same ``turn``, is answered from the kept answer, never played twice;
environment code runs to its end when the socket drops: nothing cancels a message's
task), the same limits, the same errors with the same statuses, the bearer token checked
at the handshake. A body is checked by the HTTP endpoint's own model before any
environment code: a negative token id or one past int64 is a 422 naming the field
(``body.action.3``).
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


def _error(err: BaseException) -> dict[str, Any]:
    if isinstance(err, ServingError):
        return {**err.payload(), "status": err.status}
    if isinstance(err, ValidationError):
        errors = [{**e, "loc": ("body", *e.get("loc", ()))} for e in err.errors()]
        fields = [".".join(str(p) for p in e["loc"]) for e in errors]
        return {"detail": validation_message(errors), "error": "bad_request", "status": 422,
                "fields": fields}  # fmt: skip
    return {"detail": f"{type(err).__name__}: {err}", "error": "server_error", "status": 500}


def _messages(raw: bytes | str) -> tuple[list[Any], bool]:
    """The messages of one frame and whether it was a batch (a JSON array)."""
    data = json.loads(raw)
    if isinstance(data, list):
        return data, True
    return [data], False


class _Outbox:
    """Answers waiting for the socket: whatever is ready when it is free goes in one frame
    (an array for a client that batches, one object per frame for one that does not).

    An answer that is alone (no other message in flight, none waiting, no write under
    way) is written by its own message task: a lone step then costs no hand-over to the
    writer task, one event-loop turn less per round trip. Answers of concurrent messages
    go through the writer, which runs after the loop turn that made them and so sends
    together the ones that finished together."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket
        self.batches = False
        self.ready: list[dict[str, Any]] = []
        self.wake = asyncio.Event()
        self.writing = False
        self.in_flight = 0
        """Messages read and not yet answered (their tasks run)."""

    def put(self, reply: dict[str, Any]) -> None:
        self.ready.append(reply)
        self.wake.set()

    async def send_alone(self, reply: dict[str, Any]) -> None:
        """``reply`` now, from the caller's task, when nothing else waits or is being
        written; otherwise to the writer, behind the others."""
        if self.writing or self.ready:
            self.put(reply)
            return
        self.writing = True
        try:
            await self._send([reply])
        finally:
            self.writing = False
        if self.ready:
            self.wake.set()  # what came in while this one was written

    async def _send(self, replies: list[dict[str, Any]]) -> None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            if self.batches:
                await self.websocket.send_bytes(dumps(replies))
                return
            for reply in replies:
                await self.websocket.send_bytes(dumps(reply))

    async def run(self) -> None:
        """Write until the socket goes (the answers it held are kept by the sessions)."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.writing or not self.ready:
                continue  # a lone answer is being written: it wakes this again after
            replies, self.ready = self.ready, []
            self.writing = True
            try:
                await self._send(replies)
            finally:
                self.writing = False


def install_ws(
    app: FastAPI,
    table: SessionTable,
    *,
    step: Callable[[EnvSession, StepRequest], Awaitable[dict[str, Any]]],
    initial: Callable[[EnvSession], Awaitable[dict[str, Any]]],
    on_step: Callable[[], None],
) -> None:
    """Add ``/v1/ws`` to ``app``; ``step`` and ``initial`` play a step and give the first
    observation as the HTTP endpoints do (a message's task is never cancelled, so they
    need no shield here), ``on_step`` counts a step for ``/metrics``."""

    async def handle(message: Any) -> dict[str, Any]:
        if not isinstance(message, dict):
            raise BadRequest("message: a message is a JSON object")
        op = message.get("op")
        session = table.env(str(message.get("env_id")))
        if op == "step":
            body = StepRequest.model_validate(message.get("body") or {})
            answer = await step(session, body)
            on_step()
            return answer
        if op == "initial_observation":
            return await initial(session)
        raise BadRequest(f"op: {op!r} is not step or initial_observation")

    async def answer(message: Any, outbox: _Outbox) -> None:
        ident = message.get("id") if isinstance(message, dict) else None
        try:
            reply = {"id": ident, "ok": await handle(message)}
        except Exception as err:  # every refusal goes back to the caller, by id
            reply = {"id": ident, "error": _error(err)}
        outbox.in_flight -= 1
        if not outbox.in_flight:  # no other message of this socket is being answered
            await outbox.send_alone(reply)
        else:
            outbox.put(reply)

    @app.websocket("/v1/ws")
    async def socket(websocket: WebSocket) -> None:
        await websocket.accept()
        outbox = _Outbox(websocket)
        writer = asyncio.ensure_future(outbox.run())
        pending: set[asyncio.Task[None]] = set()
        try:
            while True:
                received = await websocket.receive()
                if received["type"] == "websocket.disconnect":
                    break
                try:
                    messages, batch = _messages(
                        received.get("bytes") or received.get("text") or b""
                    )
                except ValueError as err:
                    outbox.put(
                        {"id": None, "error": _error(BadRequest(f"message: not JSON: {err}"))}
                    )
                    continue
                outbox.batches = outbox.batches or batch
                for message in messages:
                    outbox.in_flight += 1
                    task = asyncio.ensure_future(answer(message, outbox))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
        except WebSocketDisconnect:
            pass  # the steps in flight finish and keep their answers for a retry
        finally:
            writer.cancel()
