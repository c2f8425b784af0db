"""Request bodies: capped in size, bounded in number, read within a deadline.

Why: uvicorn and FastAPI read a body of any size into memory before validation starts,
so a field cap alone (``code`` at most 1 MiB) would still let one request make the server
buffer gigabytes. This middleware refuses a declared ``Content-Length`` over the cap at
once and stops reading a chunked body when it passes the cap, answering 413.

Issue #40, class 6: a cap per body is not a cap on the server: eight concurrent 38 MiB
bodies took it from 62 to 551 MB. So every request first reserves its body's size (its
``Content-Length``, or the cap when the body is chunked) from one budget for the whole
server (:class:`BodyBudget`) and holds it until its answer is sent: the validated
request, the decoded files and the run all live within it. A request that cannot get its
share within ``admit_seconds`` is answered 503 and nothing of its body is read (the
kernel and uvicorn's flow control hold what the client already sent). A body that does
not arrive within ``timeout`` (``BODY_SECONDS``) is answered 408.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentenvs.sandbox.server.connections import BODY_SECONDS


class BodyBudget:
    """Bytes of request bodies the server holds at once, shared by every request."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self.in_use = 0
        self.peak = 0
        """The most bytes held at once so far (what the tests and the benchmark read)."""
        self._changed = asyncio.Condition()

    async def take(self, size: int, timeout: float) -> bool:
        """Reserve ``size`` bytes (at most ``total_bytes``); False if not within ``timeout``."""
        size = min(size, self.total_bytes)
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.in_use + size <= self.total_bytes),
                    timeout,
                )
            except TimeoutError:
                return False
            self.in_use += size
            self.peak = max(self.peak, self.in_use)
            return True

    async def give_back(self, size: int) -> None:
        size = min(size, self.total_bytes)
        async with self._changed:
            self.in_use -= size
            self._changed.notify_all()


class BodySizeLimit:
    """ASGI middleware: bodies over ``max_bytes`` get a 413 and never reach the app; every
    body is admitted from ``budget`` and read within ``timeout`` seconds."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        budget: BodyBudget | None = None,
        timeout: float = BODY_SECONDS,
        admit_seconds: float | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.budget = budget or BodyBudget(4 * max_bytes)
        self.timeout = timeout
        self.admit_seconds = timeout if admit_seconds is None else admit_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _refuse(
                send, 413, "too_large", f"larger than the server's cap of {self.max_bytes} bytes"
            )
            return
        share = int(declared) if declared is not None and declared.isdigit() else self.max_bytes
        if not await self.budget.take(share, self.admit_seconds):
            await _refuse(
                send, 503, "busy", "the server holds as many request bodies as it may; retry"
            )
            return
        try:
            body = await self._read(receive, send, self.timeout)
            if body is not None:
                replay, body = _replay(body, receive), None  # the app holds the only copy
                await self.app(scope, replay, send)
        finally:
            await self.budget.give_back(share)

    async def _read(self, receive: Receive, send: Send, seconds: float) -> bytes | None:
        """The whole body, or ``None`` once a refusal was sent (or the client left)."""
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(max(seconds, 0.001)):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_bytes:
                        await _refuse(
                            send,
                            413,
                            "too_large",
                            f"larger than the server's cap of {self.max_bytes} bytes",
                        )
                        return None
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            await _refuse(send, 408, "too_slow", f"not received within {self.timeout:g} s")
            return None


async def _refuse(send: Send, status: int, kind: str, why: str) -> None:
    body: dict[str, Any] = {
        "detail": [{"loc": ["body"], "field": "body", "type": kind}],
        "message": f"invalid request: body: {why}",
    }
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then defers to the client.

    The body is handed over, not kept: once the app has it, this closure no longer holds a
    reference (one copy less for the request's whole life)."""
    held: list[bytes] = [body]

    async def replay() -> Message:
        if held:
            return {"type": "http.request", "body": held.pop(), "more_body": False}
        return await receive()

    return replay
