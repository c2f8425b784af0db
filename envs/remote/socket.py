"""The client side of the env server's WebSocket fast path (``/v1/ws``).

One socket per env server and event loop, shared by every
:class:`~agentenvs.envs.remote.client.ServerConnection` (every group) that loop plays
there (:mod:`agentenvs.envs.remote.sharing`): each call is a message with an ``id``; a reader task hands each answer to the
call that waits for it. The calls made in one moment (the G envs of a group stepping
together, the groups of a collection) go out as one frame, a JSON array, and their
answers come back the same way: on a small machine a frame costs more than a small
env's step, so a batch pays it once (the server's side: :mod:`agentenvs.envs.serving.ws`).

A socket that breaks (the server restarted, the network dropped) is reopened and the
calls that had no answer are sent again: a step carries its ``turn``, so the server
answers a step it already played from its copy instead of playing it twice (a copy that
arrives twice is answered twice, the same answer). Past ``retries`` failed reopenings the
waiting calls fail with :class:`ServerUnavailable` (transient, as over HTTP); refusals
are raised exactly as the HTTP answers with the same status are.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from typing import Any

from agentenvs.envs.remote.client import BACKOFF, CONNECT_TIMEOUT, raise_refusal, unreachable

MAX_FRAME_BYTES = 1 << 20
"""A batch is cut into frames of about this size (the server takes up to 16 MiB a frame)."""


class StepSocket:
    """Calls over one WebSocket to one env server (see the module docstring)."""

    def __init__(self, url: str, token: str | None, retries: int) -> None:
        base = url.rstrip("/")
        self.url = base
        self.ws_url = "ws" + base[4:] + "/v1/ws" if base.startswith("http") else base
        self.token, self.retries = token, retries
        self.loop = asyncio.get_running_loop()
        self.closed = False
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._sent: dict[int, bytes] = {}
        self._outgoing: list[bytes] = []
        self._wake = asyncio.Event()
        self._socket: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._writing = False
        self._opening = asyncio.Lock()

    async def call(self, op: str, env_id: str, body: Any, timeout: float) -> Any:
        ident = next(self._ids)
        payload = json.dumps({"id": ident, "op": op, "env_id": env_id, "body": body},
                             allow_nan=True).encode()  # fmt: skip
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self._waiting[ident], self._sent[ident] = future, payload
        socket = self._socket
        if socket is not None and not self._outgoing and not self._writing:
            # Alone at this moment on an open socket: sent now, with no task between.
            with contextlib.suppress(Exception):  # a broken socket: the reader resends
                await socket.send(payload)
        else:
            self._send(payload)
        # A timer on the future itself, not ``wait_for`` (a waiter future and callbacks
        # more per call): the same TimeoutError when the answer is late.
        expiry = self.loop.call_later(timeout, _expire, future)
        try:
            reply = await future
        finally:
            expiry.cancel()
            self._waiting.pop(ident, None)
            self._sent.pop(ident, None)
        if "error" in reply:
            data = reply["error"]
            raise_refusal(int(data.get("status", 500)), str(data.get("detail")), data,
                          self.url, op)  # fmt: skip
        return reply["ok"]

    def _send(self, payload: bytes) -> None:
        self._outgoing.append(payload)
        self._wake.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        """Send what the calls queued, as few frames as fit; a send on a broken socket is
        left to the reader, which resends every unanswered call once it reopens."""
        while not self.closed:
            await self._wake.wait()
            self._wake.clear()
            payloads, self._outgoing = self._outgoing, []
            try:
                socket = await self._open()
            except Exception as err:  # unreachable after the retries: nobody gets an answer
                self._fail_waiting(err)
                continue
            self._writing = True
            try:
                with contextlib.suppress(Exception):
                    for frame in _frames(payloads):
                        await socket.send(frame)
            finally:
                self._writing = False

    async def _open(self) -> Any:
        if self._socket is not None:
            return self._socket
        async with self._opening:
            if self._socket is None:
                self._socket = await self._connect()
                self._reader = asyncio.ensure_future(self._read(self._socket))
        return self._socket

    async def _connect(self) -> Any:
        from websockets.asyncio.client import connect

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        for attempt in range(self.retries + 1):
            try:
                return await connect(self.ws_url, additional_headers=headers,
                                     open_timeout=CONNECT_TIMEOUT, max_size=None,
                                     compression=None)  # fmt: skip
            except (OSError, TimeoutError, Exception) as err:  # refused, reset, handshake
                if attempt == self.retries:
                    raise unreachable(self.url, "open socket", err, attempt + 1) from err
                await asyncio.sleep(BACKOFF * 2**attempt)
        raise AssertionError("unreachable")

    async def _read(self, socket: Any) -> None:
        """Hand answers to their calls; on a broken socket, reopen it and resend the rest."""
        with contextlib.suppress(Exception):
            async for raw in socket:
                data = json.loads(raw)
                for reply in data if isinstance(data, list) else [data]:
                    future = self._waiting.get(reply.get("id"))
                    if future is not None and not future.done():
                        future.set_result(reply)
        if self.closed or self._socket is not socket:
            return
        self._socket = None
        if not self._waiting:
            return  # reopened by the next call
        try:
            await self._open()
        except Exception as err:
            self._fail_waiting(err)
            return
        for ident, payload in list(self._sent.items()):
            if ident in self._waiting:
                self._send(payload)

    def _fail_waiting(self, err: BaseException) -> None:
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(err)

    async def close(self) -> None:
        self.closed = True
        socket, self._socket = self._socket, None
        if socket is not None:
            with contextlib.suppress(Exception):
                await socket.close()
        for task in (self._reader, self._writer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


def _frames(payloads: list[bytes]) -> list[bytes]:
    """The payloads as JSON-array frames of at most about :data:`MAX_FRAME_BYTES` each."""
    frames, batch, size = [], [], 0
    for payload in payloads:
        if batch and size + len(payload) > MAX_FRAME_BYTES:
            frames.append(b"[" + b",".join(batch) + b"]")
            batch, size = [], 0
        batch.append(payload)
        size += len(payload) + 1
    if batch:
        frames.append(b"[" + b",".join(batch) + b"]")
    return frames
