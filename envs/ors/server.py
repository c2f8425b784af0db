"""Registered text environments served as ORS environments, with the SDK's own server.

:func:`ors_app` builds one ``openreward.environments.Environment`` subclass per
registered environment and hands them to the SDK's ``Server``, so the routes, the
sessions (``/create_session``, ``/create``, ``/ping``, ``/delete``), the SSE tool
calls and their resumption by ``task_id`` are whatever the installed SDK speaks, and
the SDK's clients play Search-R1, ReTool or ALFWorld unchanged.

How a text environment becomes a tool environment: our tasks read the model's whole
reply as text (their own tool-call formats, ``<guess>``, ``<search>``, inside it), so
each served environment has one tool, ``act``, whose input is that text (and the
sampler's stop reason). Its output is the environment's answer: the observation as
text blocks, the step's ``reward`` (ORS rewards arrive with each tool output), and
``finished`` when the episode is over; ``metadata`` carries the rest (the answer as
chat messages, metrics, logs, the next stop sequences, the turn, the stop reason).
The prompt is served as role-tagged messages (``/messages``; ``/prompt`` is the SDK's
flattening of them), the first message's ``detail`` holding the task's own tool specs
and stop sequences for a harness that renders them.

Tasks: split ``s`` of the environment lists ``{"task_index": i, "split": s,
"task_id": "s/i"}`` for each of its tasks. The limits that can be judged on text
apply (:class:`~agentenvs.envs.serving.text_episode.TextEpisode`); the token limits
stay with whoever tokenizes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentenvs.envs.ors.sdk import load_sdk

load_sdk()

from fastapi import FastAPI  # noqa: E402
from openreward.environments import (  # noqa: E402
    Environment,
    Server,
    Split,
    TextBlock,
    ToolOutput,
    tool,
)
from openreward.environments import Message as ORSMessage  # noqa: E402

from agentenvs.envs.config import EnvConfig  # noqa: E402
from agentenvs.envs.openenv.running import RunningServer, serve_app  # noqa: E402
from agentenvs.envs.serving.text_episode import (  # noqa: E402
    EpisodeRefused,
    TextEpisode,
    as_messages,
    plain_text,
)
from agentenvs.envs.text import Message  # noqa: E402

ACT_TOOL = "act"
ORS_ROLES = ("system", "user", "assistant")


class ActInput(BaseModel):
    """Your reply to the environment."""

    text: str = Field(..., description="Your reply to the environment, as you wrote it.")
    stop_reason: Literal["stop", "eos", "length"] = Field(
        "stop",
        description="Why sampling stopped: a stop sequence, end of sequence, or the token "
        "cap (length: the reply was cut off).",
    )


def _content_text(message: Message) -> str:
    content = message.get("content", "")
    return content if isinstance(content, str) else str(content)


def ors_messages(messages: Sequence[Message], detail: Mapping[str, Any]) -> list[ORSMessage]:
    """Our chat messages as ORS messages; a role ORS lacks (``tool``) becomes a user turn
    whose ``detail`` keeps the original role."""
    out = []
    for index, message in enumerate(messages):
        role = message.get("role", "user")
        extra: dict[str, Any] = dict(detail) if index == 0 else {}
        if role not in ORS_ROLES:
            extra["role"] = role
            role = "user"
        out.append(
            ORSMessage(
                role=role,
                blocks=[TextBlock(text=_content_text(message))],
                detail=extra or None,
            )
        )
    return out


def _split_type(name: str) -> Literal["train", "validation", "test"]:
    if name in ("train", "test"):
        return name  # type: ignore[return-value]
    return "validation"


def ors_environment(env_name: str, config: EnvConfig) -> type[Environment]:
    """An SDK ``Environment`` class playing ``config``'s tasks (see the module docstring)."""

    class ServedTextEnvironment(Environment):
        __doc__ = (type(config).__doc__ or f"agentenvs environment {env_name}").strip()

        def __init__(self, task_spec: Mapping[str, Any] | None = None, secrets: Any = None) -> None:
            super().__init__(dict(task_spec or {}), dict(secrets or {}))
            self.episode = TextEpisode(config)

        @classmethod
        def name(cls) -> str:
            return env_name

        @classmethod
        def list_splits(cls) -> list[Split]:
            return [Split(name=s, type=_split_type(s)) for s in type(config).splits]

        @classmethod
        def list_tasks(cls, split: str) -> list[dict[str, Any]]:
            return [
                {"task_index": i, "split": split, "task_id": config.task_id(i, split)}
                for i in range(config.num_tasks(split))
            ]

        async def setup(self) -> None:
            spec = self.task_spec
            await self.episode.start(int(spec["task_index"]), str(spec["split"]))

        async def teardown(self) -> None:
            await self.episode.close()

        async def get_messages(self) -> list[ORSMessage]:
            episode = self.episode
            detail = {"tools": episode.tools, "stop": list(episode.stops),
                      "renderer": config.renderer_kind, "task_id": episode.task_id}  # fmt: skip
            return ors_messages(episode.messages, detail)

        @tool
        async def act(self, params: ActInput) -> ToolOutput:
            """Send your reply to the environment: its answer, the step's reward, and finished once the episode is over."""
            return await answer(self.episode, params)

    ServedTextEnvironment.__name__ = f"ORS_{env_name}"
    return ServedTextEnvironment


async def answer(episode: TextEpisode, params: ActInput) -> ToolOutput:
    """One step of ``episode`` as an ORS tool output."""
    try:
        played = await episode.step(params.text, params.stop_reason)
    except EpisodeRefused as err:  # the model's call, answered rather than raised
        return ToolOutput(blocks=[TextBlock(text=f"Error: {err}")], finished=episode.done)
    step = played.step
    messages = as_messages(step.observation)
    text = plain_text(step.observation)
    metadata = {
        "messages": messages,
        "raw_text": isinstance(step.observation, str),
        "metrics": {k: float(v) for k, v in step.metrics.items()},
        "logs": dict(step.logs),
        "stop": played.stops,
        "turn": played.turn,
        "stop_reason": played.stop_reason,
        "task_id": episode.task_id,
    }
    return ToolOutput(
        blocks=[TextBlock(text=text)],
        metadata=metadata,
        reward=float(step.reward),
        finished=played.done,
    )


def ors_app(env_names: Sequence[str], configs: Mapping[str, Mapping[str, Any]] | None = None,
            ) -> FastAPI:  # fmt: skip
    """The SDK's FastAPI app serving ``env_names`` (each with its validated config, presets
    included). ``app.state.agentenvs_configs`` holds the configs; :func:`release_app`
    releases what they hold (ALFWorld's workers)."""
    from agentenvs.envs.registry import make

    made = {name: make(name, **dict((configs or {}).get(name) or {})) for name in env_names}
    server = Server([ors_environment(name, config) for name, config in made.items()])
    app = server.app
    app.title = f"agentenvs {', '.join(env_names)} (ORS)"
    app.state.agentenvs_configs = list(made.values())
    return app


def release_app(app: FastAPI) -> None:
    """Release what the served configs hold (:meth:`EnvConfig.shutdown`); idempotent."""
    served: list[EnvConfig] = app.state.agentenvs_configs
    for config in served:
        config.shutdown()


@contextmanager
def serve_ors(
    env_names: Sequence[str],
    configs: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
) -> Iterator[RunningServer]:
    """:func:`ors_app` served on ``host:port`` while the block runs (tests, one process)."""
    app = ors_app(env_names, configs)
    try:
        with serve_app(app, host, port) as running:
            yield running
    finally:
        release_app(app)
