"""The host's byte pipe to a container's stdin/stdout: Docker's attach stream.

``POST /containers/{id}/attach`` (through the SDK's ``attach_socket``) upgrades an HTTP
connection into a raw duplex stream: what we send is the container's stdin; what we
receive is its stdout and stderr, multiplexed (no TTY) in frames of an 8-byte header
(stream type, three zero bytes, big-endian length) and a payload. This module turns that
into an ``asyncio.StreamReader`` of stdout (what the warm-worker protocol reads frames
from) plus a bounded tail of stderr (for error messages).

Both Docker Engine and podman's compatible service speak this. Attaching happens before
the container starts, so not a byte of output can be missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Any

from agentenvs.envs.errors import AgentEnvsError

STDOUT, STDERR = 1, 2
STDERR_TAIL_BYTES = 8192
RECV_BYTES = 1 << 16


class AttachClosed(AgentEnvsError, ConnectionError):
    """The attach stream ended (the container exited or the engine went away)."""


def raw_socket(attached: Any) -> Any:
    """The socket under whatever ``attach_socket`` returned (SocketIO for unix/tcp)."""
    return getattr(attached, "_sock", attached)


class AttachStream:
    """Asynchronous stdin writer + demultiplexed stdout reader over one attach socket."""

    def __init__(self, attached: Any) -> None:
        self._attached = attached  # keeps the HTTP response (and so the socket) alive
        self.sock = raw_socket(attached)
        # Plain sockets (unix, tcp) go through the event loop; anything else (TLS to a
        # remote engine) is served by blocking calls in a thread.
        self._native = type(self.sock) is socket.socket
        if self._native:
            self.sock.setblocking(False)
        self.stdout = asyncio.StreamReader(limit=1 << 20)
        self._stderr = bytearray()
        self._task: asyncio.Task | None = None
        self.closed = False

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._pump())

    async def _recv(self) -> bytes:
        if self._native:
            return await asyncio.get_running_loop().sock_recv(self.sock, RECV_BYTES)
        return await asyncio.to_thread(self.sock.recv, RECV_BYTES)

    async def write(self, data: bytes) -> None:
        if self.closed:
            raise AttachClosed("the attach stream is closed")
        try:
            if self._native:
                await asyncio.get_running_loop().sock_sendall(self.sock, data)
            else:
                await asyncio.to_thread(self.sock.sendall, data)
        except OSError as exc:
            raise AttachClosed(f"writing to the container failed: {exc}") from exc

    async def _pump(self) -> None:
        buffer = bytearray()
        try:
            while True:
                chunk = await self._recv()
                if not chunk:
                    break
                buffer += chunk
                while len(buffer) >= 8:
                    kind = buffer[0]
                    (size,) = struct.unpack(">I", buffer[4:8])
                    if len(buffer) < 8 + size:
                        break
                    payload = bytes(buffer[8 : 8 + size])
                    del buffer[: 8 + size]
                    if kind == STDERR:
                        self._stderr += payload
                        del self._stderr[:-STDERR_TAIL_BYTES]
                    else:
                        self.stdout.feed_data(payload)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self.stdout.feed_eof()

    def stderr_tail(self) -> str:
        return bytes(self._stderr).decode(errors="replace").strip()[-2000:]

    async def close(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        self._unregister()
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(Exception):
            self._attached.close()

    def close_now(self) -> None:
        """Synchronous close, safe inside a cancelled task."""
        self.closed = True
        if self._task is not None:
            self._task.cancel()
        self._unregister()
        with contextlib.suppress(OSError):
            self.sock.close()

    def _unregister(self) -> None:
        """Drop the event loop's interest in the socket before its descriptor is closed."""
        if not self._native:
            return
        with contextlib.suppress(Exception):
            fd = self.sock.fileno()
            if fd >= 0:
                loop = asyncio.get_running_loop()
                loop.remove_reader(fd)
                loop.remove_writer(fd)
