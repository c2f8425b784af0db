"""The HTTP side of a served policy: connections, retries, and which server gets a request.

Connection errors, timeouts, 429 and 5xx answers are retried with exponential
backoff; anything else, or running out of attempts, is a :class:`PolicyError`
naming the URL. Requests in flight are bounded by ``concurrency``.

Several servers of one model (``url`` as a list, or comma-separated) share the
sampling requests (:class:`LeastBusy`); a retry goes to another server than the
one that just failed; so does model discovery (every server serves the same
model). Admin requests (a weight sync's) go to the server they name, the first
by default.

Every request in flight keeps its HTTP connection alive between turns (the pool
keeps ``concurrency`` of them, and a few for admin requests), so no turn opens a
new one. A connection that fails (refused, reset, closed early) is reported to
``on_connection_lost``: the server may be a new instance now, which the weights'
custody must hear of (:mod:`agentenvs.rollout.weights.custody`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx

from agentenvs.rollout.policies.base import PolicyError

logger = logging.getLogger(__name__)

_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_POOL_CONNECTIONS = 8
"""Sampling connections per httpx pool. httpcore walks every connection of a pool
(and polls each idle one's socket) whenever a request starts or ends, so one pool of
32 connections costs the client about 16 times the walking of four pools of 8; at
concurrency 32 that walk was the largest part of the client's CPU (issue 32)."""
_ADMIN_CONNECTIONS = 4
"""Connections beyond ``concurrency`` for requests outside the sampling slots (a weight
sync's, a probe's, model discovery)."""
answered_by: ContextVar[str | None] = ContextVar("agentenvs_answered_by", default=None)
"""The server that answered this task's latest sampling request (for its trace span)."""


@dataclass(frozen=True)
class Transport:
    """How requests travel: time limits, retries, how many at once, the credentials."""

    timeout: float = 120.0
    connect_timeout: float = 5.0
    retries: int = 3
    backoff: float = 0.5
    concurrency: int = 32
    api_key: str | None = None

    def __post_init__(self) -> None:
        if self.retries < 0 or self.concurrency < 1 or self.timeout <= 0:
            raise ValueError("need retries >= 0, concurrency >= 1 and timeout > 0")


class LeastBusy:
    """Which server a sampling request goes to: the one with the fewest of this
    client's requests in flight, ties taken in turn. Equal servers share the load
    evenly, and a slow one, whose requests pile up, is given fewer."""

    def __init__(self, urls: Sequence[str]) -> None:
        self.in_flight: dict[str, int] = dict.fromkeys(urls, 0)
        self.sent: dict[str, int] = dict.fromkeys(urls, 0)
        """Requests sent to each server so far: sampling and model discovery, retries
        included."""
        self._turn = itertools.count()

    def pick(self, avoid: str | None = None) -> str:
        """A server, other than ``avoid`` (the one that just failed) when there is one."""
        candidates = [u for u in self.in_flight if u != avoid] or list(self.in_flight)
        fewest = min(self.in_flight[u] for u in candidates)
        tied = [u for u in candidates if self.in_flight[u] == fewest]
        return tied[next(self._turn) % len(tied)]

    @contextmanager
    def using(self, url: str) -> Iterator[None]:
        self.in_flight[url] += 1
        self.sent[url] += 1
        try:
            yield
        finally:
            self.in_flight[url] -= 1


class ServerPool:
    """The servers of one policy and the HTTP connections to them."""

    def __init__(
        self,
        url: str | Sequence[str],
        transport: Transport,
        on_connection_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.urls = base_urls(url)
        self.url = self.urls[0]
        """The first server: admin requests go there unless they name another."""
        self.servers = LeastBusy(self.urls)
        self.transport = transport
        self.timeout = httpx.Timeout(
            transport.timeout, connect=min(transport.connect_timeout, transport.timeout)
        )
        self.headers = {"Authorization": f"Bearer {transport.api_key}"} if transport.api_key else {}
        self.on_connection_lost = on_connection_lost
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pools: list[httpx.AsyncClient] = []
        self._pool_load: list[int] = []
        self._slots: asyncio.Semaphore | None = None
        self.discovery: asyncio.Lock | None = None
        """Held while the served model's name is asked, so it is asked once."""

    def slots(self) -> asyncio.Semaphore:
        """The sampling slots, and the connection pools, bound to the running event
        loop (made on first use)."""
        loop = asyncio.get_running_loop()
        if not self._pools or self._loop is not loop:
            self._loop = loop
            concurrency = self.transport.concurrency
            pools = -(-concurrency // _POOL_CONNECTIONS)
            # Every request in flight keeps its connection alive between turns: with
            # fewer kept (httpx keeps 20), each turn past them opens a new connection.
            kept = -(-concurrency // pools) + _ADMIN_CONNECTIONS
            limits = httpx.Limits(max_connections=max(100, kept), max_keepalive_connections=kept)
            self._pools = [
                httpx.AsyncClient(
                    timeout=self.timeout,
                    headers=self.headers,
                    limits=limits,
                    verify=_tls_context(),
                )
                for _ in range(pools)
            ]
            self._pool_load = [0] * pools
            self._slots = asyncio.Semaphore(concurrency)
            self.discovery = asyncio.Lock()
        assert self._slots is not None
        return self._slots

    @contextlib.asynccontextmanager
    async def least_busy_client(self) -> AsyncIterator[httpx.AsyncClient]:
        loads = self._pool_load  # the pools of this session, even if closed meanwhile
        index = min(range(len(loads)), key=loads.__getitem__)
        loads[index] += 1
        try:
            yield self._pools[index]
        finally:
            loads[index] -= 1

    def admin_client(self) -> httpx.AsyncClient:
        self.slots()
        return self._pools[0]

    async def aclose(self) -> None:
        pools, self._pools, self._pool_load = self._pools, [], []
        for pool in pools:
            await pool.aclose()

    async def send(
        self,
        client: httpx.AsyncClient,
        method: str,
        path: str,
        body: dict | None,
        *,
        plain_text_ok: bool = False,
        spread: bool = False,
        to: str | None = None,
    ) -> dict[str, Any]:
        """One request with retries. ``spread``: to whichever server :attr:`servers`
        picks (a sampling request), else to ``to`` (default: the first)."""
        server = to or self.url
        url = server + path
        last = ""
        retries, backoff = self.transport.retries, self.transport.backoff
        for attempt in range(retries + 1):
            if attempt:
                delay = backoff * 2 ** (attempt - 1) * (1 + 0.25 * random.random())
                logger.warning("retrying %s in %.2fs after: %s", url, delay, last)
                await asyncio.sleep(delay)
            if spread:
                server = self.servers.pick(avoid=server if attempt else None)
                url = server + path
            try:
                with self.servers.using(server) if spread else contextlib.nullcontext():
                    response = await client.request(method, url, json=body)
            except httpx.TimeoutException as err:
                last = f"timed out ({type(err).__name__})"
                continue
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
                # Refused, reset or closed early: the server may be a new instance now.
                if self.on_connection_lost is not None:
                    self.on_connection_lost(f"{server}: {last}")
                continue
            if response.status_code in _RETRY_STATUS:
                last = f"HTTP {response.status_code}: {_snippet(response)}"
                continue
            if response.status_code >= 400:
                raise PolicyError(
                    f"policy server {url} rejected the request: "
                    f"HTTP {response.status_code}: {_snippet(response)}",
                    status=response.status_code,
                )
            if spread:
                answered_by.set(server)
            try:
                return response.json()
            except ValueError:
                if plain_text_ok:
                    return {"text": response.text}
                raise PolicyError(
                    f"policy server {url} answered with something that is not JSON: "
                    f"{_snippet(response)}"
                ) from None
        attempts = retries + 1
        raise PolicyError(
            f"policy server {url} did not answer after {attempts} "
            f"attempt{'s' if attempts > 1 else ''}: {last}"
        )


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verifying context, made once per process: each client would
    otherwise load the CA bundle again (37 ms here, more than a turn's client work)."""
    return httpx.create_ssl_context()


def base_urls(url: str | Sequence[str]) -> tuple[str, ...]:
    """One or several servers: a list, or one string with commas between them."""
    given = url.split(",") if isinstance(url, str) else list(url)
    urls = tuple(dict.fromkeys(_base_url(str(u).strip()) for u in given if str(u).strip()))
    if not urls:
        raise ValueError(f"url must name at least one server, got {url!r}")
    return urls


def _base_url(url: str) -> str:
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _snippet(response: httpx.Response, limit: int = 300) -> str:
    text = response.text.strip().replace("\n", " ")
    return text[:limit] + ("..." if len(text) > limit else "")
