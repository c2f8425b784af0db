"""``mcp_tools``: a tool environment whose tools come from MCP servers.

Each task is a question with an expected answer. The model may call the MCP servers'
tools (hermes ``<tool_call>`` blocks, answered as ``tool`` turns by
:class:`~agentenvs.envs.mcp.layer.MCPToolLayer`) and ends the episode with a reply
that calls no tool: reward 1 when it contains the expected answer (case and spacing
ignored). Each episode opens its own servers (a stdio server is a process per
episode), so no episode sees another's server state.

The config module imports pydantic only; the ``mcp`` SDK loads when an episode starts.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.mcp.client import MCPServerConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.envs.renderers import RendererKind
from agentenvs.envs.requirements import Requirement, extra
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.types import SamplerStopReason, StopReason

DEFAULT_SYSTEM = "Answer the question. Call the tools you need first; then reply with the answer."


class MCPTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str
    answer: str | None = Field(None, description="Expected in the final reply (None: unscored).")
    script: list[str] = Field(
        default_factory=list,
        description="Actions of the task's scripted policy, one per turn (demos and tests).",
    )


class MCPToolsConfig(EnvConfig):
    """Questions answered with tools from MCP servers (stdio or streamable HTTP)."""

    env_name: ClassVar[str] = "mcp_tools"
    gym_name: ClassVar[str] = "MCPTools"
    default_renderer: ClassVar[RendererKind] = "chat"
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    needs_external_server: ClassVar[bool] = True
    requires: ClassVar[tuple[Requirement, ...]] = extra("mcp", "mcp")
    """Its tools come from MCP server packages outside agentenvs: ``agentenvs demo``
    leaves it out unless asked for by name (``--env mcp_tools``)."""

    servers: list[MCPServerConfig] = Field(default_factory=list)
    tasks: list[MCPTask] = Field(default_factory=list)
    system_prompt: str = DEFAULT_SYSTEM
    call_timeout: float = Field(10.0, gt=0, description="Seconds per tool call.")
    connect_timeout: float = Field(30.0, gt=0, description="Seconds for a server to start.")
    max_calls_per_turn: int = Field(4, ge=1)
    max_tool_calls: int = Field(8, ge=1, description="Tool calls per episode.")
    limits: Limits = Field(default_factory=lambda: Limits(max_turns=6))

    @classmethod
    def demo_overrides(cls) -> dict[str, Any]:
        """The published ``mcp-server-time`` over stdio and one scripted question."""
        import sys

        call = '<tool_call>{"name": "convert_time", "arguments": {"source_timezone": "UTC", '
        call += '"time": "12:00", "target_timezone": "Asia/Tokyo"}}</tool_call>'
        server = {"name": "time", "command": sys.executable}
        server["args"] = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
        return {
            "servers": [server],
            "tasks": [
                {
                    "prompt": "What time is it in Tokyo when it is 12:00 in UTC?",
                    "answer": "21:00",
                    "script": [call, "When it is 12:00 in UTC it is 21:00 in Tokyo."],
                }
            ],
        }

    def num_tasks(self, split: str = "train") -> int:
        self.check_split(split)
        return len(self.tasks)

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        self.check_split(split)
        return MCPToolTask(self, self.tasks[task_index])


def _normal(text: str) -> str:
    return " ".join(text.casefold().split())


class MCPToolTask(TextEnv):
    """One question, with an MCP tool layer opened by :meth:`start`."""

    def __init__(self, config: MCPToolsConfig, task: MCPTask) -> None:
        self.config = config
        self.task = task
        self.layer = None
        self.calls = 0
        self.turn = 0

    async def start(self) -> None:
        from agentenvs.envs.mcp.client import MCPToolbox
        from agentenvs.envs.mcp.layer import MCPToolLayer

        box = await MCPToolbox(
            self.config.servers, connect_timeout=self.config.connect_timeout
        ).open()
        self.layer = MCPToolLayer(box, self.config.call_timeout, self.config.max_calls_per_turn)

    def tools(self) -> list[dict] | None:
        return self.layer.specs if self.layer is not None else None

    def initial_messages(self) -> list[Message]:
        messages: list[Message] = []
        if self.config.system_prompt:
            messages.append({"role": "system", "content": self.config.system_prompt})
        messages.append({"role": "user", "content": self.task.prompt})
        return messages

    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        self.turn += 1
        if self.layer is None:
            raise RuntimeError("MCPToolTask.start() must run before step()")
        turn = await self.layer.respond(action_text)
        if turn is None:
            return self._score(action_text)
        self.calls += turn.calls
        if self.calls > self.config.max_tool_calls:
            return TextStep(
                done=True,
                stop_reason=StopReason.MAX_TOOL_CALLS,
                metrics=turn.metrics,
                logs=turn.logs,
            )
        return TextStep(observation=turn.messages, metrics=turn.metrics, logs=turn.logs)

    def _score(self, reply: str) -> TextStep:
        expected = self.task.answer
        correct = expected is not None and _normal(expected) in _normal(reply)
        return TextStep(
            reward=1.0 if correct else 0.0,
            done=True,
            stop_reason=StopReason.COMPLETED,
            metrics={"correct": int(correct), "tool_calls": self.calls},
        )

    def scripted_action(self, variant: str = "oracle") -> str | None:
        if variant != "oracle" or self.turn >= len(self.task.script):
            return None
        return self.task.script[self.turn]

    async def close(self) -> None:
        layer, self.layer = self.layer, None
        if layer is not None:
            await layer.toolbox.close()
