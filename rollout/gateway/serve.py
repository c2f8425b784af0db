"""The standalone gateway server: the three APIs over a :class:`PolicyGateway`, plus
``POST /s/{key}/finish`` (body ``{"reward": R}``, optional) to store a session.

:class:`GatewayServer` runs uvicorn inside the caller's event loop (tests, benchmarks,
a training loop that drives harnesses itself); :func:`serve_forever` is what
``agentenvs gateway`` runs. On shutdown every session with finished turns is stored,
so a stopped gateway loses nothing it sampled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Coroutine
from typing import Any

from agentenvs.envs.harness.conversation import RequestError
from agentenvs.envs.harness.server import KEEP_ALIVE_SECONDS, build_app
from agentenvs.rollout.gateway.policy_gateway import PolicyGateway


def gateway_app(gateway: PolicyGateway) -> Any:
    """The gateway's Starlette app, with the finish route."""
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def finish(request: Any) -> Any:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw.strip() else {}
            reward = float(body.get("reward", 0.0)) if isinstance(body, dict) else None
        except (ValueError, TypeError):
            reward = None
        if reward is None:
            return JSONResponse(
                {"error": {"message": 'the body must be {"reward": <number>}'}}, 400
            )
        try:
            record = await gateway.finish(request.path_params["session"], reward)
        except RequestError as err:
            return JSONResponse({"error": {"message": str(err)}}, int(err.status or 400))
        trajectory = record.group.trajectories[0] if record.group else None
        turns = len(trajectory.transitions) if trajectory else 0
        return JSONResponse({"key": record.key, "turns": turns, "reward": reward})

    return build_app(gateway, [Route("/s/{session}/finish", finish, methods=["POST"])])


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0: any free port), bound before the server starts so
    the port is known and a port in use is one clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {err.strerror}") from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class GatewayServer:
    """uvicorn serving a gateway in the running event loop (an async context manager)."""

    def __init__(self, gateway: PolicyGateway, host: str = "127.0.0.1", port: int = 0) -> None:
        self.gateway = gateway
        self.sock = bind(host, port)
        self.host = host
        self.port = int(self.sock.getsockname()[1])
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def session_url(self, key: str, *, openai: bool = True) -> str:
        """A harness's base URL for session ``key`` (OpenAI clients add ``/v1`` to it)."""
        return f"{self.url}/s/{key}" + ("/v1" if openai else "")

    async def __aenter__(self) -> GatewayServer:
        import uvicorn

        config = uvicorn.Config(
            gateway_app(self.gateway),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[self.sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sock.close()
        await self.gateway.finish_all()


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run the serving coroutine on uvloop when it is installed (the ``gateway`` extra
    brings it and httptools, which uvicorn then parses HTTP with: both cut the gateway's
    CPU per request), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


async def serve_forever(gateway: PolicyGateway, host: str, port: int) -> None:
    """Serve until interrupted; open sessions are stored on the way out."""
    async with GatewayServer(gateway, host, port) as server:
        print(
            f"gateway listening on {server.url} (sessions at {server.url}/s/<episode>/v1)",
            flush=True,
        )
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
