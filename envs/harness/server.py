"""The HTTP face of the gateway: the three APIs over one session store.

Routes (each also under ``/s/{session}``, the per-episode path prefix a harness's base
URL points at; without it the ``X-Agentenvs-Session`` header names the session)::

    POST /v1/chat/completions        OpenAI Chat Completions
    POST /v1/responses               OpenAI Responses
    POST /v1/messages                Anthropic Messages
    POST /v1/messages/count_tokens   Anthropic token count (nothing is sampled)
    GET  /v1/models                  the one model served

A request is read into the conversation form, rendered into its session's segment tree
(:mod:`~agentenvs.envs.harness.segments`), and its turn handed to the session's
:class:`TurnRunner`: the standalone gateway samples it from a policy, a
:class:`~agentenvs.envs.harness.env.HarnessEnv` hands it to the collector as the next
observation. Sampling runs shielded from the client: a client that hangs up mid-turn
does not stop the turn from being recorded, since its tokens were sampled.

A bad request is answered in the API's own error shape with status 400 and nothing is
sampled; a failure of the policy is a 502 in that shape, and never leaves a session
half-updated (the turn is only recorded once its tokens exist).

Plain Starlette (no request models): what the gateway adds to a turn's latency is
measured (``benchmarks/bench_gateway.py``), and FastAPI's validation layer would add to
it for nothing the API modules do not already check.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentenvs.envs.harness.apis import Api
from agentenvs.envs.harness.apis.anthropic_messages import Messages
from agentenvs.envs.harness.apis.openai_chat import ChatCompletions
from agentenvs.envs.harness.apis.openai_responses import Responses
from agentenvs.envs.harness.conversation import Reply, RequestError
from agentenvs.envs.harness.segments import SegmentTree, Turn

SESSION_HEADER = "x-agentenvs-session"
KEEPALIVE_SECONDS = 10.0
"""A stream sends the API's keep-alive this often while the policy samples."""
KEEP_ALIVE_SECONDS = 75
"""How long an idle client connection stays open: longer than a harness spends running a
tool between two requests, so it does not reuse a connection the server has just closed
(uvicorn's default is 5 s)."""

log = logging.getLogger(__name__)


class TurnRunner(Protocol):
    """Samples one prepared turn and records it in the tree (``tree.complete``)."""

    async def run(self, tree: SegmentTree, turn: Turn) -> Reply: ...


@dataclass
class GatewaySession:
    """One episode: its segment tree and how its turns are sampled."""

    key: str
    tree: SegmentTree
    runner: TurnRunner


class SessionSource(Protocol):
    """Finds (or opens) the session a request belongs to; ``key`` is None when the
    request named none. Raises :class:`RequestError` (404) for one it will not serve."""

    def session(self, key: str | None) -> GatewaySession: ...

    @property
    def model_name(self) -> str: ...


APIS: dict[str, Api] = {"chat": ChatCompletions(), "responses": Responses(), "messages": Messages()}


def _json(data: Any, status: int = 200) -> Any:
    from starlette.responses import Response

    return Response(json.dumps(data, ensure_ascii=False), status, media_type="application/json")


async def _body(request: Any) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RequestError(f"the request body is not JSON ({err})") from None


def _key(request: Any) -> str | None:
    return request.path_params.get("session") or request.headers.get(SESSION_HEADER)


def _start(session: GatewaySession, turn: Turn) -> asyncio.Future[Reply]:
    """The turn's sampling as a task of its own: a client that hangs up cancels its
    handler, not the sampling, so the turn is still recorded (and a failure nobody
    waits for any more is logged once, not reported as never retrieved)."""
    task = asyncio.ensure_future(session.runner.run(session.tree, turn))
    task.add_done_callback(_consume)
    return task


def _consume(task: asyncio.Future[Reply]) -> None:
    if not task.cancelled():
        task.exception()


def _failure(err: BaseException) -> tuple[int, str]:
    if isinstance(err, RequestError):
        return int(err.status or 400), str(err)
    log.warning("gateway: sampling failed: %r", err)
    return 502, f"the policy behind the gateway failed: {type(err).__name__}: {err}"


def build_app(source: SessionSource, extra_routes: Sequence[Any] = ()) -> Any:
    """The Starlette app serving ``source``'s sessions (plus ``extra_routes``)."""
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def answer(request: Any, api: Api) -> Any:
        try:
            session = source.session(_key(request))
            chat = api.parse(await _body(request))
            chat.model = chat.model or source.model_name
            turn = session.tree.prepare(chat)
        except RequestError as err:
            return _json(api.error(int(err.status or 400), str(err)), int(err.status or 400))
        if not chat.stream:
            try:
                reply = await asyncio.shield(_start(session, turn))
            except Exception as err:
                status, message = _failure(err)
                return _json(api.error(status, message), status)
            return _json(api.response(reply, chat))
        stream = api.stream(chat, turn.answer_id, len(turn.tokens))

        async def frames() -> AsyncIterator[str]:
            for frame in stream.opening():
                yield frame
            task = _start(session, turn)
            while not task.done():  # asyncio.wait never cancels what it waits for
                await asyncio.wait({task}, timeout=KEEPALIVE_SECONDS)
                if not task.done():
                    yield stream.keepalive()
            try:
                reply = task.result()
            except Exception as err:
                for frame in stream.failure(*_failure(err)):
                    yield frame
                return
            for frame in stream.closing(reply):
                yield frame

        return StreamingResponse(frames(), media_type="text/event-stream")

    def endpoint(name: str) -> Any:
        api = APIS[name]

        async def handle(request: Any) -> Any:
            return await answer(request, api)

        return handle

    async def count_tokens(request: Any) -> Any:
        api = APIS["messages"]
        try:
            session = source.session(_key(request))
            chat = Messages().parse(await _body(request), counting=True)
            return _json({"input_tokens": session.tree.measure(chat)})
        except RequestError as err:
            return _json(api.error(int(err.status or 400), str(err)), int(err.status or 400))

    async def models(request: Any) -> Any:
        name = source.model_name
        return _json(
            {
                "object": "list",
                "data": [{"id": name, "object": "model", "created": 0, "owned_by": "agentenvs"}],
            }
        )

    routes = []
    for prefix in ("", "/s/{session}"):
        routes += [
            Route(f"{prefix}/v1/chat/completions", endpoint("chat"), methods=["POST"]),
            Route(f"{prefix}/v1/responses", endpoint("responses"), methods=["POST"]),
            Route(f"{prefix}/v1/messages", endpoint("messages"), methods=["POST"]),
            Route(f"{prefix}/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route(f"{prefix}/v1/models", models, methods=["GET"]),
        ]
    return Starlette(routes=[*routes, *extra_routes])
