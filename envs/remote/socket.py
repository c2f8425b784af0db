"""The client side of the env server's WebSocket fast path (``/v1/ws``).

One socket per :class:`~agentenvs.envs.remote.client.ServerConnection` (one group),
every env of the group multiplexed on it: each call is a message with an ``id``; a
reader task hands each answer to the call that waits for it. A socket that breaks
(the server restarted, the network dropped) is reopened and the calls that had no
answer are sent again: a step carries its ``turn``, so the server answers a step it
already played from its copy instead of playing it twice. Past ``retries`` failed
reopenings the calls fail with :class:`ServerUnavailable` (transient, as over HTTP);
refusals are raised exactly as the HTTP answers with the same status are.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from typing import Any

from agentenvs.envs.remote.client import BACKOFF, CONNECT_TIMEOUT, raise_refusal, unreachable


class StepSocket:
    """Calls over one WebSocket to one env server (see the module docstring)."""

    def __init__(self, url: str, token: str | None, timeout: float, retries: int) -> None:
        base = url.rstrip("/")
        self.url = base
        self.ws_url = "ws" + base[4:] + "/v1/ws" if base.startswith("http") else base
        self.token, self.timeout, self.retries = token, timeout, retries
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._sent: dict[int, bytes] = {}
        self._socket: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._opening = asyncio.Lock()
        self._closed = False

    async def call(self, op: str, env_id: str, body: Any) -> Any:
        ident = next(self._ids)
        payload = json.dumps({"id": ident, "op": op, "env_id": env_id, "body": body},
                             allow_nan=True).encode()  # fmt: skip
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[ident], self._sent[ident] = future, payload
        try:
            socket = await self._open()
            with contextlib.suppress(Exception):  # a broken socket: the reader resends
                await socket.send(payload)
            reply = await asyncio.wait_for(future, self.timeout)
        finally:
            self._waiting.pop(ident, None)
            self._sent.pop(ident, None)
        if "error" in reply:
            data = reply["error"]
            raise_refusal(int(data.get("status", 500)), str(data.get("detail")), data,
                          self.url, op)  # fmt: skip
        return reply["ok"]

    async def _open(self) -> Any:
        if self._socket is not None:
            return self._socket
        async with self._opening:
            if self._socket is None:
                self._socket = await self._connect()
                self._reader = asyncio.ensure_future(self._read())
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

    async def _read(self) -> None:
        """Hand answers to their calls; on a broken socket, reopen and resend the rest."""
        while not self._closed:
            socket = self._socket
            try:
                async for raw in socket:
                    reply = json.loads(raw)
                    future = self._waiting.get(reply.get("id"))
                    if future is not None and not future.done():
                        future.set_result(reply)
                if self._closed:
                    return
            except Exception:
                pass
            self._socket = None
            try:
                self._socket = await self._connect()
                for ident, payload in list(self._sent.items()):
                    if ident in self._waiting:
                        await self._socket.send(payload)
            except Exception as err:
                for future in self._waiting.values():
                    if not future.done():
                        future.set_exception(err)
                return

    async def close(self) -> None:
        self._closed = True
        socket, self._socket = self._socket, None
        if socket is not None:
            with contextlib.suppress(Exception):
                await socket.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
