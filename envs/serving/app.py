"""``agentenvs serve``: registered environments as an HTTP service, token for token.

One process hosts the environments it was started with. A client asks for a
dataset's descriptions, opens a group session (one builder, its G envs made on the
server), plays each env's episode turn by turn, has the group scored, and closes
it. Endpoints (the wire format is in docs/env-servers.md):

- ``GET /health`` (never needs the token), ``GET /metrics`` (Prometheus text),
  ``GET /v1/info`` (served envs, tokenizer key, limits);
- ``POST /v1/datasets``: the groups' descriptions (task id, config, split, size);
- ``POST /v1/groups``: open a group; ``DELETE /v1/groups/{id}``: close it;
  ``POST /v1/groups/{id}/rewards``: the builder's group rewards;
- ``POST /v1/envs/{id}/initial_observation``, ``/step``, ``/fork``,
  ``/scripted_action``, ``/close``; ``GET /v1/envs/{id}`` (its state and last answer).

Environment code runs in shielded tasks: a request cancelled by a client that
went away does not cancel the step, whose answer is kept for the client's retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.responses import Response

from agentenvs.envs.serving.errors import (
    BadRequest,
    EnvCodeError,
    EpisodeFinished,
    ForkRefused,
    OutOfOrder,
    install_error_handlers,
)
from agentenvs.envs.serving.gate import Gate
from agentenvs.envs.serving.metrics import ServerMetrics
from agentenvs.envs.serving.served import ServedEnvs
from agentenvs.envs.serving.sessions import EnvSession, GroupSession, SessionLimits, SessionTable
from agentenvs.envs.serving.wire import (
    API_VERSION,
    DatasetRequest,
    GroupRequest,
    RewardsRequest,
    ScriptedRequest,
    StepRequest,
    dumps,
)
from agentenvs.envs.serving.ws import install_ws
from agentenvs.envs.types import EnvGroupBuilder, ForkUnsupported, ScriptedActions

T = TypeVar("T")


def _reply(data: Any) -> Response:
    return Response(dumps(data), media_type="application/json")


async def _shielded(work: Awaitable[T]) -> T:
    """Run ``work`` to its end even if this request is cancelled (its client left)."""
    return await asyncio.shield(asyncio.ensure_future(work))


async def _env_code(where: str, call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except (ForkUnsupported, EpisodeFinished, OutOfOrder):
        raise
    except Exception as err:
        raise EnvCodeError(err, where) from err


def _env_entry(session: EnvSession) -> dict[str, Any]:
    env = session.env
    return {
        "env_id": session.env_id,
        "label": env.label(),
        "max_response_tokens": env.max_response_tokens(),
        "max_action_tokens": env.max_action_tokens(),
        "scripted": isinstance(env, ScriptedActions),
    }


def _description(builder: EnvGroupBuilder) -> dict[str, Any]:
    described = builder.describe()
    return {
        "task_id": described.task_id,
        "env_name": described.env_name,
        "config": dict(described.config),
        "split": described.split,
        "group_size": described.group_size,
        "env_version": described.env_version,
        "renderer": described.renderer,
        "protocol": described.protocol,
        "tool_format": described.tool_format,
        "data": dict(described.data),  # hashed here, where the files are
        "logging_tags": list(builder.logging_tags()),
    }


def create_app(
    served: ServedEnvs, limits: SessionLimits | None = None, *, token: str | None = None
) -> FastAPI:
    """The env server's app; ``token``, when given, is required on every endpoint but
    ``/health`` as ``Authorization: Bearer <token>``."""
    table = SessionTable(limits or SessionLimits())
    metrics = ServerMetrics(table)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        sweeper = asyncio.create_task(table.sweep_forever())
        try:
            async with contextlib.AsyncExitStack() as stack:
                for sub in app.state.sub_apps:  # mounted apps' lifespans (Starlette skips them)
                    await stack.enter_async_context(sub.router.lifespan_context(sub))
                yield
        finally:
            sweeper.cancel()
            await table.close_all()
            served.shutdown()
            for hook in app.state.shutdown_hooks:
                with contextlib.suppress(Exception):
                    hook()

    app = FastAPI(title="agentenvs env server", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.table = table
    app.state.shutdown_hooks = []  # callables run when the server stops (mounted apps')
    app.state.sub_apps = []  # mounted apps whose lifespan runs inside ours (ORS)
    install_error_handlers(app)
    app.add_middleware(Gate, metrics=metrics, token=token)

    @app.get("/health")
    async def health() -> Response:
        return _reply({"status": "ok", "envs": list(served.names), "groups": len(table.groups)})

    @app.get("/metrics")
    async def metrics_text() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/info")
    async def info() -> Response:
        from agentenvs.envs.tokenizer_fingerprint import tokenizer_key

        return _reply(
            {
                "api_version": API_VERSION,
                "envs": list(served.names),
                "tokenizer": tokenizer_key(served.tokenizer),
                "tokenizer_spec": served.tokenizer_spec,
                "limits": vars(table.limits),
                # which event loop runs this server (``uvloop`` or ``asyncio``: run.py)
                "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            }
        )

    @app.post("/v1/datasets")
    async def dataset(body: DatasetRequest) -> Response:
        from agentenvs.envs.tokenizer_fingerprint import tokenizer_key

        builders = served.builders(body)
        return _reply(
            {
                "env": body.env,
                "tokenizer": tokenizer_key(served.tokenizer),
                "groups": [_description(b) for b in builders],
            }
        )

    @app.post("/v1/groups")
    async def open_group(body: GroupRequest) -> Response:
        builders = served.builders(body.spec())
        if body.index >= len(builders):
            raise BadRequest(f"body.index: {body.index} is past the dataset's last group "
                             f"({len(builders) - 1})")  # fmt: skip
        group = table.open_group(builders[body.index], body.env)

        async def make() -> list[EnvSession]:
            envs = await _env_code("make_envs", group.builder.make_envs)
            return [table.add_env(group, env, root=True) for env in envs]

        try:
            sessions = await _shielded(make())
        except BaseException:
            await table.close_group(group.group_id, "closed: make_envs failed")
            raise
        return _reply({"group_id": group.group_id, "envs": [_env_entry(s) for s in sessions]})

    @app.delete("/v1/groups/{group_id}")
    async def close_group(group_id: str) -> Response:
        table.group(group_id)  # 404 for an unknown one
        await _shielded(table.close_group(group_id))
        return _reply({"closed": group_id})

    @app.post("/v1/groups/{group_id}/rewards")
    async def rewards(group_id: str, body: RewardsRequest) -> Response:
        from agentenvs.envs.wire import trajectory_from_json

        group = table.group(group_id)
        if len(body.env_ids) != len(body.trajectories):
            raise BadRequest(f"body.env_ids: {len(body.env_ids)} ids for "
                             f"{len(body.trajectories)} trajectories")  # fmt: skip
        envs = [_env_of(group, env_id).env for env_id in body.env_ids]
        try:
            trajectories = [trajectory_from_json(t) for t in body.trajectories]
        except (KeyError, TypeError, ValueError) as err:
            raise BadRequest(f"body.trajectories: not the store's trajectory form: {err}") from None
        scored = await _shielded(
            _env_code(
                "compute_group_rewards",
                lambda: group.builder.compute_group_rewards(trajectories, envs),
            )
        )
        return _reply({"rewards": [[float(r), dict(m)] for r, m in scored]})

    @app.get("/v1/envs/{env_id}")
    async def env_state(env_id: str) -> Response:
        session = table.env(env_id)
        return _reply(
            {**_env_entry(session), "turns": session.turns, "done": session.done,
             "closed": session.closed, "last_answer": session.last_answer}
        )  # fmt: skip

    @app.post("/v1/envs/{env_id}/initial_observation")
    async def initial_observation(env_id: str) -> Response:
        return _reply(await _shielded(_initial(table.env(env_id))))

    @app.post("/v1/envs/{env_id}/step")
    async def step(env_id: str, body: StepRequest) -> Response:
        session = table.env(env_id)
        answer = await _shielded(_step(session, body, table.limits.max_steps_per_env))
        metrics.steps += 1
        return _reply(answer)

    def count_step() -> None:
        metrics.steps += 1

    install_ws(
        app,
        table,
        step=lambda s, body: _step(s, body, table.limits.max_steps_per_env),
        initial=_initial,
        on_step=count_step,
    )

    @app.post("/v1/envs/{env_id}/fork")
    async def fork(env_id: str) -> Response:
        session = table.env(env_id)

        async def run() -> dict[str, Any]:
            async with session.lock:
                _check_live(session)
                try:
                    clone = await _env_code("fork", session.env.fork)
                except ForkUnsupported as err:
                    raise ForkRefused(str(err)) from None
                child = table.add_env(session.group, clone, root=False)
                child.last_ob, child.turns = session.last_ob, session.turns
                child.last_action, child.last_answer = session.last_action, session.last_answer
                return {**_env_entry(child), "turns": child.turns}

        return _reply(await _shielded(run()))

    @app.post("/v1/envs/{env_id}/scripted_action")
    async def scripted(env_id: str, body: ScriptedRequest) -> Response:
        session = table.env(env_id)
        env = session.env
        if not isinstance(env, ScriptedActions):
            return _reply({"answer": None})

        async def ask() -> Any:
            answer = env.scripted_action(body.variant)
            return await answer if inspect.isawaitable(answer) else answer

        answer = await _env_code("scripted_action", ask)
        if answer is None:
            return _reply({"answer": None})
        tokens, stop_reason = answer
        return _reply({"answer": {"tokens": list(tokens), "stop_reason": stop_reason}})

    @app.post("/v1/envs/{env_id}/close")
    async def close_env(env_id: str) -> Response:
        session = table.env(env_id)
        await _shielded(table.close_env(session))
        return _reply({"closed": env_id})

    return app


def _env_of(group: GroupSession, env_id: str) -> EnvSession:
    session = group.envs.get(env_id)
    if session is None:
        raise BadRequest(f"body.env_ids: {env_id} is not an env of group {group.group_id}")
    return session


async def _initial(session: EnvSession) -> dict[str, Any]:
    """The env's first observation; asked again before any step, the same answer."""
    async with session.lock:
        _check_live(session)
        if session.last_ob is not None:
            if session.turns:
                raise OutOfOrder(f"env {session.env_id} is at turn {session.turns}; "
                                 "its initial observation was given before")  # fmt: skip
            return session.last_answer or {}
        ob, stop = await _env_code("initial_observation", session.env.initial_observation)
        session.last_ob = list(ob)
        session.last_answer = {
            "observation": session.last_ob,
            "stop_condition": list(stop),
            "max_action_tokens": session.env.max_action_tokens(),
        }
        return session.last_answer


def _check_live(session: EnvSession) -> None:
    if session.closed:
        raise EpisodeFinished(f"env {session.env_id} is closed")


async def _step(session: EnvSession, body: StepRequest, max_steps: int) -> dict[str, Any]:
    async with session.lock:
        replay = body.turn == session.turns - 1 and body.action == session.last_action
        if replay and session.last_answer is not None:
            return session.last_answer  # the client lost this answer: the same one again
        _check_live(session)
        if session.done:
            raise EpisodeFinished(f"env {session.env_id}'s episode is over "
                                  f"(it ended at turn {session.turns})")  # fmt: skip
        if session.last_ob is None:
            raise OutOfOrder(f"env {session.env_id}: ask initial_observation before step")
        if body.turn != session.turns:
            raise OutOfOrder(f"body.turn: {body.turn} sent, env {session.env_id} is at turn "
                             f"{session.turns}")  # fmt: skip
        if session.turns >= max_steps:
            raise EpisodeFinished(f"env {session.env_id} took its {max_steps} steps "
                                  "(max_steps_per_env)")  # fmt: skip
        context = session.last_ob + body.action
        extra = {"stop_reason": body.stop_reason}
        result = await _env_code("step", lambda: session.env.step(body.action, extra=extra))  # type: ignore[arg-type]
        ob = list(result.next_observation)
        n = len(context)
        keep = n if len(ob) >= n and ob[:n] == context else 0
        answer = {
            "reward": result.reward,
            "episode_done": bool(result.episode_done),
            "keep": keep,
            "new": ob[keep:],
            "next_stop_condition": list(result.next_stop_condition),
            "metrics": dict(result.metrics),
            "logs": dict(result.logs),
            "max_action_tokens": session.env.max_action_tokens(),
            "turn": session.turns,
        }
        session.turns += 1
        session.last_ob, session.last_action, session.last_answer = ob, list(body.action), answer
        session.done = bool(result.episode_done)
        return answer
