"""One env server as the client sees it: requests, retries, and errors in our terms.

What a refusal becomes decides what the collector does with the group:

* the server cannot be reached (refused, reset, timed out) after a few quick tries:
  :class:`ServerUnavailable`, transient, so the group is tried again with fresh envs
  (on the next server, when there are several);
* the session is gone (the server restarted, or dropped it after its idle timeout):
  :class:`SessionLost`, transient as well: a fresh group will do;
* the environment raised on the server: :class:`RemoteEnvError` naming the error
  type, where it was raised and the server, transient only when the server says
  the error was (the same rule as in process: :func:`~agentenvs.envs.errors.is_transient`);
* a fork the env does not offer: :class:`~agentenvs.envs.types.ForkUnsupported`, as in process;
* anything else (a bad request, a wrong token): :class:`RemoteEnvError`, not retried.

A step carries its turn number, so retrying one whose answer was lost is safe: the
server answers it from its copy instead of playing it twice.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import ssl
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from agentenvs.envs.errors import RETRYABLE_STATUS, AgentEnvsError, TransientError
from agentenvs.envs.remote.sharing import PerLoop
from agentenvs.envs.types import ForkUnsupported

if TYPE_CHECKING:
    from agentenvs.envs.remote.socket import StepSocket

DEFAULT_TIMEOUT = 300.0
"""Seconds a request may take (a slow engine step included)."""
CONNECT_TIMEOUT = 5.0
BACKOFF = 0.25


class RemoteEnvError(AgentEnvsError, RuntimeError):
    """The env server refused or the environment on it raised (not worth retrying)."""


class RemoteTransientError(TransientError):
    """The env server or the environment on it failed for the moment."""


class SessionLost(RemoteTransientError):
    """The server no longer holds the session (it restarted, or the session idled out)."""


class ServerUnavailable(RemoteTransientError, ConnectionError):
    """The env server could not be reached."""


def _message(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase, {}
    if isinstance(data, dict):
        return str(data.get("detail", data)), data
    return str(data)[:300], {}


def raise_for(response: httpx.Response, url: str, what: str) -> None:
    """Raise the error a non-2xx answer means (see the module docstring)."""
    status = response.status_code
    if status < 400:
        return
    detail, data = _message(response)
    raise_refusal(status, detail, data, url, what)


def raise_refusal(status: int, detail: str, data: dict[str, Any], url: str, what: str) -> None:
    """Raise what a refusal (its status and JSON payload) means, HTTP or WebSocket."""
    kind = data.get("error", "")
    where = f"{what} on env server {url}"
    if status == 404 and kind == "unknown_session":
        raise SessionLost(f"{detail} ({where})", status=status)
    if status == 409 and kind == "fork_unsupported":
        raise ForkUnsupported(detail)
    if kind == "env_error":
        raised = f"{detail} (raised in {data.get('where', what)} on env server {url})"
        if data.get("transient"):
            raise RemoteTransientError(raised, status=status)
        raise RemoteEnvError(raised)  # no status: a 500 would read as retryable
    if status == 401:
        raise RemoteEnvError(f"env server {url} refused the bearer token: {detail}", status=401)
    if status in RETRYABLE_STATUS:
        raise RemoteTransientError(f"{detail} ({where}, HTTP {status})", status=status)
    raise RemoteEnvError(f"{detail} ({where}, HTTP {status})", status=status)


def decode(response: httpx.Response) -> Any:
    """The answer's JSON (stdlib: NaN and exact floats read back as sent)."""
    return json.loads(response.content)


def headers_for(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def unreachable(url: str, what: str, error: BaseException, tries: int) -> ServerUnavailable:
    return ServerUnavailable(
        f"env server {url} is unreachable ({what}, {tries} tries): "
        f"{type(error).__name__}: {error}".rstrip(": ")
    )


async def _close_socket(socket: StepSocket) -> None:
    await socket.close()


_SOCKETS: PerLoop[StepSocket] = PerLoop(_close_socket)


@dataclass
class ServerConnection:
    """Requests to one env server from one event loop (made where it is used). Its socket
    is the one this loop shares to the server (:mod:`agentenvs.envs.remote.sharing`);
    its HTTP client is its own (one pool per group: a pool shared by many groups' steps
    costs more per request than it saves), made with the process's TLS context."""

    url: str
    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    retries: int = 2
    transport: str = "ws"
    """``ws``: steps and initial observations over the loop's WebSocket (``/v1/ws``, the
    fast path); ``http``: every call a request."""
    _client: httpx.AsyncClient | None = field(default=None, repr=False)
    _socket: StepSocket | None = field(default=None, repr=False)

    def _socket_key(self) -> tuple[str, str | None, int]:
        return (self.url.rstrip("/"), self.token, self.retries)

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.url.rstrip("/"),
                headers=headers_for(self.token),
                timeout=httpx.Timeout(self.timeout, connect=CONNECT_TIMEOUT),
                verify=tls_context(),
            )
        return self._client

    async def call(self, method: str, path: str, body: Any = None, *, what: str) -> Any:
        """The answer of ``method path``; transport failures are retried ``retries``
        times with a short backoff, then raised as :class:`ServerUnavailable`."""
        content = None if body is None else json.dumps(body, allow_nan=True).encode()
        headers = {"content-type": "application/json"} if content is not None else None
        for attempt in range(self.retries + 1):
            try:
                response = await self.client().request(
                    method, path, content=content, headers=headers
                )
                break
            except httpx.TransportError as err:
                if attempt == self.retries:
                    raise unreachable(self.url, what, err, attempt + 1) from err
                await asyncio.sleep(BACKOFF * 2**attempt)
        raise_for(response, self.url, what)
        return decode(response)

    async def env_call(self, op: str, env_id: str, body: Any = None) -> Any:
        """``op`` (``step`` or ``initial_observation``) on env ``env_id``: over the
        loop's socket to the server with ``transport="ws"``, else as
        ``POST /v1/envs/{env_id}/{op}``."""
        if self.transport == "ws" and self._socket is None:
            if websockets_available():
                from agentenvs.envs.remote.socket import StepSocket  # imports this module

                self._socket = _SOCKETS.acquire(
                    self._socket_key(), lambda: StepSocket(self.url, self.token, self.retries)
                )
            else:
                self.transport = "http"
        if self._socket is None:
            return await self.call("POST", f"/v1/envs/{env_id}/{op}", body, what=op)
        return await self._socket.call(op, env_id, body, self.timeout)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        socket, self._socket = self._socket, None
        try:
            if socket is not None:
                await _SOCKETS.release(self._socket_key(), socket)
        finally:
            if client is not None:
                await client.aclose()


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (its CA bundle, ``SSL_CERT_FILE``), made once: making
    it reads the CA bundle, about 24 ms of CPU, which every client paid (one a group)."""
    return httpx.create_ssl_context()


def websockets_available() -> bool:
    """The WebSocket client (the ``server`` extra's ``websockets``) is installed."""
    return importlib.util.find_spec("websockets") is not None


def call_sync(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    what: str,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = 2,
) -> Any:
    """:meth:`ServerConnection.call` for code outside an event loop (opening a dataset)."""
    with httpx.Client(
        base_url=url.rstrip("/"),
        headers=headers_for(token),
        timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT),
    ) as client:
        for attempt in range(retries + 1):
            try:
                response = client.request(method, path, json=body)
                break
            except httpx.TransportError as err:
                if attempt == retries:
                    raise unreachable(url, what, err, attempt + 1) from err
                time.sleep(BACKOFF * 2**attempt)
    raise_for(response, url, what)
    return decode(response)
