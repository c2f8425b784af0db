"""The ASGI layer in front of every endpoint: the bearer token and the metrics.

Plain ASGI rather than an ``@app.middleware`` function: that one wraps each request
in extra tasks and streams, which cost more per step than the step of a small env.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from agentenvs.envs.serving.errors import unauthorized
from agentenvs.envs.serving.metrics import ServerMetrics

OPEN_PATHS = frozenset({"/health"})
"""Answered without the token: a load balancer's probe must not need a secret."""


class Gate:
    """Refuse requests without the token (401), and count every answer."""

    def __init__(self, app: Any, metrics: ServerMetrics, token: str | None) -> None:
        self.app = app
        self.metrics = metrics
        self.expected = f"Bearer {token}".encode() if token else None
        self.api_key = token.encode() if token else None
        """ORS clients send the key as ``X-API-Key`` (the ``openreward`` SDK's header)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        if self.expected is not None and scope.get("path") not in OPEN_PATHS:
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"authorization", b"")
            key = headers.get(b"x-api-key", b"")
            if not (
                secrets.compare_digest(given, self.expected)
                or secrets.compare_digest(key, self.api_key or b"")
            ):
                self.metrics.count_status(401)
                if kind == "websocket":  # a mounted OpenEnv app's /ws: refused the same
                    await send({"type": "websocket.close", "code": 1008})
                else:
                    await unauthorized()(scope, receive, send)
                return
        if kind == "websocket":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def counting_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe(route, status[0], time.perf_counter() - started)
