"""Connections the server keeps: each must bring a request within a deadline, or go.

Issue #40, class 6: uvicorn closes a keep-alive connection idle after an answer, but
not one that never finishes its first request head (or stalls half-way through a later
one): 300 such connections were held for 21 s and more, each a socket and a protocol
object. :class:`HeadTimeoutProtocol` is uvicorn's h11 protocol with one more timer: from
the moment a connection may send a request (its opening, the end of each answer) until
that request's head is complete; when it fires, the connection is closed. The body has
its own deadline (``body.BODY_SECONDS``), and ``limit_concurrency`` bounds the
connections and requests the server serves at once (beyond it: 503).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_SECONDS = 10.0
"""A connection's request head must be complete within this."""
BODY_SECONDS = 30.0
"""A request's body must be admitted and read within this (``body.BodySizeLimit``)."""
MAX_CONNECTIONS = 512
"""Connections (and requests in progress) served at once; beyond it uvicorn answers 503."""


@dataclass(frozen=True)
class ClientLimits:
    """How long a client may take, and how many the server serves at once."""

    head_seconds: float = HEAD_SECONDS
    body_seconds: float = BODY_SECONDS
    max_connections: int = MAX_CONNECTIONS

    @classmethod
    def from_timeout(cls, seconds: float) -> ClientLimits:
        """``--client-timeout``: the head within ``seconds``, the body within 3x."""
        return cls(head_seconds=seconds, body_seconds=3 * seconds)

    def protocol(self) -> type[HeadTimeoutProtocol]:
        """uvicorn's ``http`` protocol class with this head deadline."""
        return type(
            "HeadTimeoutProtocol", (HeadTimeoutProtocol,), {"head_seconds": self.head_seconds}
        )


class HeadTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing connections whose request head does not come."""

    head_seconds = HEAD_SECONDS

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        waited_for = self.cycle
        super().data_received(data)
        if self.cycle is not waited_for:  # a request head was parsed: the app has it
            self._head_arrived()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._head_arrived()
        self._head_timer = self.loop.call_later(self.head_seconds, self._no_head)

    def _head_arrived(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _no_head(self) -> None:
        self._head_timer = None
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()
