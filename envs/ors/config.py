"""``ors``: any ORS environment server, registered like our own environments.

``agentenvs rollout ors --set url=http://127.0.0.1:8080 --set environment=mathenv``
plays the tasks of that ORS environment under our collector, renderers, masks and
limits (see :mod:`agentenvs.envs.ors.adapter`). Task ``i`` of our split ``train`` is
task ``i`` of the server's split ``train_split`` (``test``: ``test_split``); the task
count and the environment's name are asked of the server when first needed.

This module imports pydantic and httpx only; the ``openreward`` SDK is imported when
an episode starts.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, PrivateAttr, field_validator

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import RendererKind, Tokenizer, make_renderer
from agentenvs.envs.requirements import Requirement, extra
from agentenvs.envs.text import TextEnv
from agentenvs.envs.tool_calls import CallFormat

DEFAULT_INSTRUCTIONS = (
    "You are acting in an environment through its tools. Call a tool by writing "
    '<tool_call>{"name": NAME, "arguments": {...}}</tool_call>; each result comes back as '
    "a tool message. A reply without a tool call ends the episode."
)


class ORSServerError(AgentEnvsError, RuntimeError):
    """The ORS server refused a request or answered with something we cannot read."""


class ORSConfig(EnvConfig):
    """Any ORS environment (its sessions and tools), played by a tool-calling model."""

    env_name: ClassVar[str] = "ors"
    gym_name: ClassVar[str] = "ORS"
    default_renderer: ClassVar[RendererKind] = "chat"
    needs_external_server: ClassVar[bool] = True
    """Its episodes play on an ORS server someone else starts: ``agentenvs demo``
    leaves it out unless asked for by name (``--env ors``)."""
    requires: ClassVar[tuple[Requirement, ...]] = extra("ors", "aiohttp", "openreward")
    """The SDK's client and what it runs on. The ``ors`` extra brings its needs; the SDK
    itself goes in with ``--no-deps`` (``make install``; README, "Set-up"), since its
    wheel pins an sse-starlette older than the ``mcp`` extra's."""

    url: str = Field("http://127.0.0.1:8080", description="Base URL of the ORS server.")
    environment: str | None = Field(
        None,
        description="The environment's name on the server; None takes the first one its "
        "/list_environments names.",
    )
    train_split: str = Field("train", description="The server's split played as our train.")
    test_split: str = Field("test", description="The server's split played as our test.")
    tool_format: CallFormat = Field(
        CallFormat.HERMES,
        description="How the model writes tool calls (the parser that reads them; recorded).",
    )
    instructions: str = Field(
        DEFAULT_INSTRUCTIONS,
        description="A system message placed before the task's own messages ('' for none).",
    )
    max_calls_per_turn: int = Field(4, ge=1, description="Tool calls run per reply.")
    episodes: int | None = Field(
        None, ge=1, description="Tasks per split; None: the server's task count."
    )
    token: str | None = Field(None, description="Sent as X-API-Key (an ORS server's key).")
    call_timeout: float = Field(300.0, gt=0, description="Seconds one tool call may take.")
    script: list[str] = Field(
        default_factory=list,
        description="Actions the scripted policy plays, one per turn (an ORS environment has "
        "no oracle of ours).",
    )
    limits: Limits = Field(default_factory=lambda: Limits(max_turns=8))
    _facts: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def tool_call_format(self) -> str:
        return str(self.tool_format)

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url {url!r} must start with http:// or https://")
        return url.rstrip("/")

    def server_split(self, split: str) -> str:
        self.check_split(split)
        return self.test_split if split == "test" else self.train_split

    def environment_name(self) -> str:
        """The environment played: the configured one, or the server's first."""
        if self.environment is not None:
            return self.environment
        if "environment" not in self._facts:
            names = self._ask("GET", "/list_environments")
            if not isinstance(names, list) or not names:
                raise ORSServerError(f"ORS server {self.url} lists no environments: {names!r}")
            self._facts["environment"] = str(names[0])
        return self._facts["environment"]

    def num_tasks(self, split: str = "train") -> int:
        if self.episodes is not None:
            self.check_split(split)
            return self.episodes
        key = f"num_tasks/{split}"
        if key not in self._facts:
            path = f"/{self.environment_name()}/num_tasks"
            answer = self._ask("POST", path, {"split": self.server_split(split)})
            self._facts[key] = int(answer["num_tasks"])
        return self._facts[key]

    def _ask(self, method: str, path: str, body: Any = None) -> Any:
        import httpx

        headers = {"X-API-Key": self.token} if self.token else {}
        try:
            response = httpx.request(
                method, f"{self.url}{path}", json=body, headers=headers, timeout=30
            )
        except httpx.HTTPError as err:
            raise ORSServerError(f"ORS server {self.url}: {method} {path} failed: {err}") from err
        if response.status_code >= 400:
            raise ORSServerError(f"ORS server {self.url}: {method} {path} answered "
                                 f"{response.status_code}: {response.text[:300]}")  # fmt: skip
        return response.json()

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        from agentenvs.envs.ors.adapter import ORSTextEnv

        return ORSTextEnv(self, self.server_split(split), task_index)

    def make_env(self, task_index: int, tokenizer: Tokenizer, split: str = "train") -> RenderedEnv:
        from agentenvs.envs.ors.adapter import ORSRenderedEnv

        renderer = make_renderer(self.renderer_kind, tokenizer)
        return ORSRenderedEnv(self.make_text_env(task_index, split), renderer, self.limits)
