"""One registered text environment served over OpenEnv's HTTP/WebSocket protocol.

The routes are OpenEnv's own: :func:`openenv_app` hands a factory of
:class:`TextEnvironment` (an OpenEnv ``Environment`` over our ``TextEnv``) to
``openenv.core.env_server.http_server.create_fastapi_app``, so ``/reset``, ``/step``,
``/state``, ``/schema``, ``/health`` and the ``/ws`` session are whatever the installed
OpenEnv speaks, and OpenEnv's clients (``GenericEnvClient`` or a typed ``EnvClient``)
drive Search-R1, ReTool or ALFWorld unchanged.

What it is and is not: the wire is text. Actions arrive as decoded text and
observations leave as text and chat messages; the token ids, masks and per-token
limits stay with whoever renders the text (our :class:`RenderedEnv` does, on the
client side, in :mod:`agentenvs.envs.openenv.adapter`). The server applies the
limits that can be judged on text: ``limits.max_turns`` and a cut-off action
(``stop_reason="length"`` with ``on_truncated_action="end"``).

Sessions: OpenEnv keeps state only in a WebSocket session (one episode at a time per
connection, a new ``reset`` starts the next). Its HTTP ``/reset`` makes a fresh env
and closes it after answering, so it shows a prompt; HTTP ``/step`` has no episode to
step and answers 409 saying so. A session whose client leaves mid-step is cancelled
(:class:`_SessionGuard`): its step stops and its env is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from uuid import uuid4

from fastapi import FastAPI, HTTPException
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata, State

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.openenv.models import TextAction, TextObservation
from agentenvs.envs.openenv.running import RunningServer, serve_app
from agentenvs.envs.serving.text_episode import EpisodeRefused, TextEpisode, as_messages, plain_text

logger = logging.getLogger(__name__)

DEFAULT_MAX_SESSIONS = 64


class OpenEnvRequestError(AgentEnvsError, ValueError):
    """A reset or step the served environment cannot take; the message says why."""


class TextEnvironment(Environment[TextAction, TextObservation, State]):
    """An OpenEnv ``Environment`` playing episodes of one registered :class:`TextEnv`.

    The episode's rules (start, the text limits, the ending) are the shared
    :class:`~agentenvs.envs.serving.text_episode.TextEpisode`'s, as on the ORS wire;
    this class speaks OpenEnv around it. OpenEnv calls the factory in a worker thread
    and for every stateless request (``/state``, ``/metadata``, ``/reset``), so
    construction only stores the config; the task is made by :meth:`reset_async`, on
    the server's event loop, where the task's async clients (a sandbox pool, a
    retriever) live.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, config: EnvConfig, env_name: str, split: str = "train") -> None:
        super().__init__()
        self.config = config
        self.env_name = env_name
        self.split = split
        self.episode = TextEpisode(config)
        self._episode_id: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- OpenEnv's async entry points (the server prefers these) -----------------
    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_index: int | None = None,
        split: str | None = None,
        **unknown: Any,
    ) -> TextObservation:
        """Start an episode of task ``task_index`` (or ``seed`` modulo the task count)."""
        if unknown:
            raise OpenEnvRequestError(
                f"reset got unknown field(s) {sorted(unknown)}; it takes seed, episode_id, "
                "task_index, split"
            )
        split = split or self.split
        self.config.check_split(split)
        index = task_index if task_index is not None else (seed or 0) % self.config.num_tasks(split)
        self._loop = asyncio.get_running_loop()
        self._episode_id = episode_id or str(uuid4())
        try:
            messages = await self.episode.start(index, split)
        except EpisodeRefused as err:
            raise OpenEnvRequestError(f"{self.env_name}: {err}") from None
        return TextObservation(
            text=plain_text(messages),
            messages=messages,
            tools=self.episode.tools,
            stop=list(self.episode.stops),
            renderer=self.config.renderer_kind,
            task_id=self.episode.task_id,
        )

    async def step_async(
        self, action: TextAction, timeout_s: float | None = None, **kwargs: Any
    ) -> TextObservation:
        episode = self.episode
        if episode.done:
            raise HTTPException(409, f"episode {episode.task_id} is over; reset to start another")
        if episode.task is None:
            raise HTTPException(
                409,
                "no episode to step: OpenEnv's HTTP /step is stateless; play an episode "
                "over the WebSocket session (/ws), reset first",
            )
        played = await episode.step(action.text, action.stop_reason)
        result = played.step
        return TextObservation(
            text=plain_text(result.observation),
            messages=as_messages(result.observation),
            raw_text=isinstance(result.observation, str),
            stop=played.stops,
            renderer=self.config.renderer_kind,
            task_id=episode.task_id,
            turn=played.turn,
            stop_reason=played.stop_reason,
            metrics={k: float(v) for k, v in result.metrics.items()},
            logs=dict(result.logs),
            reward=float(result.reward),
            done=played.done,
        )

    # ---- the sync API OpenEnv's base class requires ---------------------------------
    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> TextObservation:
        return asyncio.run(self.reset_async(seed=seed, episode_id=episode_id, **kwargs))

    def step(
        self, action: TextAction, timeout_s: float | None = None, **kwargs: Any
    ) -> TextObservation:
        raise OpenEnvRequestError("TextEnvironment is driven by the server's async step_async")

    @property
    def state(self) -> State:
        return State(
            episode_id=self._episode_id,
            step_count=self.episode.turns,
            env_name=self.env_name,
            task_id=self.episode.task_id,
            done=self.episode.done,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        doc = (type(self.config).__doc__ or "").strip().splitlines()
        return EnvironmentMetadata(
            name=self.env_name,
            description=doc[0] if doc else f"agentenvs environment {self.env_name}",
            version=type(self.config).version,
            author="agentenvs",
        )

    def close(self) -> None:
        """OpenEnv closes synchronously, from its loop or a worker thread; the task's
        close is async, so it is scheduled on the loop the episode ran on."""
        task = self.episode.release()
        if task is None:
            return
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            running.create_task(task.close())
        elif loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(task.close(), loop)
        else:
            asyncio.run(task.close())


class _SessionGuard:
    """Around OpenEnv's ``/ws`` handler: a session ends when its client leaves.

    OpenEnv's handler awaits a whole step before it reads the socket again, so a client
    that left mid-step (closed, crashed, cut off) went unnoticed until the step ended:
    a ReTool program of minutes ran to its end for nobody. Here the socket is read
    ahead; a disconnect that arrives while the handler is busy cancels it, so the step
    is cancelled (a sandbox program is stopped with its worker) and OpenEnv's own
    cleanup closes the session. A disconnect the handler is waiting for is delivered
    as usual, and the ``WebSocketDisconnect`` OpenEnv raises closing an already closed
    socket at the end of every session is dropped (the session is over either way).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        from starlette.websockets import WebSocketDisconnect

        inbox: asyncio.Queue = asyncio.Queue()
        waiting = 0  # the handler is blocked reading the socket
        left = False

        async def queued_receive() -> Any:
            nonlocal waiting
            waiting += 1
            try:
                return await inbox.get()
            finally:
                waiting -= 1

        async def guarded() -> None:
            with contextlib.suppress(WebSocketDisconnect):
                await self.app(scope, queued_receive, send)

        handler = asyncio.ensure_future(guarded())

        async def read_ahead() -> None:
            nonlocal left
            while True:
                message = await receive()
                inbox.put_nowait(message)
                if message["type"] == "websocket.disconnect":
                    if not waiting and not handler.done():
                        left = True
                        handler.cancel()  # the step in flight is for nobody now
                    return

        reader = asyncio.ensure_future(read_ahead())
        try:
            await asyncio.wait([handler])
            if not left:
                handler.result()  # the handler's own errors stand
            elif not handler.cancelled() and handler.exception() is not None:
                logger.debug("a session whose client left ended with %r", handler.exception())
        finally:
            for task in (handler, reader):
                task.cancel()
            await asyncio.gather(handler, reader, return_exceptions=True)


def openenv_app(
    env_name: str,
    config: Mapping[str, Any] | None = None,
    *,
    split: str = "train",
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout: float | None = None,
) -> FastAPI:
    """OpenEnv's FastAPI app serving ``env_name`` (validated ``config``, presets included).

    Works at the root and mounted (``parent.mount("/openenv/retool", app)``): OpenEnv's
    client appends ``/ws`` to whatever base URL it is given. One config object serves
    every session, so shared parts (ALFWorld's worker pool, a retriever) are shared;
    ``app.state.agentenvs_config`` holds it, and the app's shutdown releases it (a
    parent that mounts the app should call :func:`release_app` on its own shutdown).
    """
    from agentenvs.envs.registry import make

    made = make(env_name, **dict(config or {}))
    made.check_split(split)
    app = create_fastapi_app(
        lambda: TextEnvironment(made, env_name, split),
        TextAction,
        TextObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=session_timeout
        ),
    )
    app.add_middleware(_SessionGuard)
    app.title = f"agentenvs {env_name} (OpenEnv protocol)"
    app.state.agentenvs_config = made
    app.router.on_shutdown.append(lambda: release_app(app))
    return app


def release_app(app: FastAPI) -> None:
    """Release what the served config holds (ALFWorld's workers, say); idempotent."""
    made: EnvConfig = app.state.agentenvs_config
    made.shutdown()


@contextmanager
def serve_openenv(
    env_name: str,
    config: Mapping[str, Any] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    **options: Any,
) -> Iterator[RunningServer]:
    """:func:`openenv_app` for ``env_name``, served on ``host:port`` while the block runs."""
    app = openenv_app(env_name, config, **options)
    try:
        with serve_app(app, host, port) as running:
            yield running
    finally:
        release_app(app)


def main(argv: list[str] | None = None) -> None:
    """``python -m agentenvs.envs.openenv.server ENV [--port N] [--set key=json ...]``."""
    import argparse
    import json

    import uvicorn

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("env_name")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--split", default="train")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON")
    args = parser.parse_args(argv)
    from agentenvs.envs.serving.run import is_loopback

    if not is_loopback(args.host):  # this entry point has no token to ask for
        parser.error(
            f"--host {args.host} is reachable beyond this machine and OpenEnv's wire carries "
            "no credential: serve it with `agentenvs serve ENV --openenv --host H --token T`"
        )
    config: dict[str, Any] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            config[key] = json.loads(value)
        except json.JSONDecodeError:
            config[key] = value
    app = openenv_app(args.env_name, config, split=args.split)
    # asyncio's own loop: a ReTool env starts sandbox workers as another user (uvloop cannot)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", loop="asyncio")


if __name__ == "__main__":
    main()
