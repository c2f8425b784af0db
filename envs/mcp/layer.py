"""The MCP tool layer: tool calls in an action, run on MCP servers, answered as tool turns.

Any :class:`TextEnv` can hold one: its ``tools()`` returns :attr:`MCPToolLayer.specs`
(the chat template renders them into the prompt) and its ``step`` first asks
:meth:`MCPToolLayer.respond`, which parses the action with the shared hermes parser
(``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
:mod:`agentenvs.envs.tool_calls.hermes`), runs each call with its own timeout and
returns the results as ``tool`` messages. The renderer tokenizes those as world text
appended after the sampled action, so they are observation tokens: masked, never
trained. Every call is recorded: the shared ``tool_calls`` log (status and outcome of
each attempt, which ``agentenvs check`` reads), a per-call log line naming server,
outcome and seconds, and ``tool/*`` metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.mcp.client import MCPToolbox, ToolResult
from agentenvs.envs.text import Message
from agentenvs.envs.tool_calls import CallFormat, ToolOutcome, hermes, tools_of
from agentenvs.envs.tool_calls.record import step_logs
from agentenvs.envs.types import Logs, Metrics

_OUTCOMES = {"ok": ToolOutcome.OK, "error": ToolOutcome.ERROR, "timeout": ToolOutcome.TIMEOUT}


@dataclass
class ToolTurn:
    """The layer's answer to an action that called tools."""

    messages: list[Message]
    metrics: Metrics = field(default_factory=dict)
    logs: Logs = field(default_factory=dict)
    calls: int = 0
    """Calls run (parsed ones); unparsable attempts are answered but not counted."""


@dataclass
class MCPToolLayer:
    """Parses, runs and answers tool calls against an open :class:`MCPToolbox`."""

    toolbox: MCPToolbox
    call_timeout: float = 10.0
    max_calls_per_turn: int = 4

    @property
    def specs(self) -> list[dict[str, Any]]:
        return list(self.toolbox.specs)

    async def respond(
        self, action_text: str, *, stopped_on_sequence: bool = False
    ) -> ToolTurn | None:
        """The tool turn for ``action_text``, or None when it calls no tool (an answer)."""
        attempts = hermes.parse(
            action_text,
            tools=tools_of(self.specs),
            max_calls=self.max_calls_per_turn,
            stopped_on_sequence=stopped_on_sequence,
        )
        if not attempts:
            return None
        messages: list[Message] = []
        metrics: Metrics = {"tool/calls": 0, "tool/ok": 0, "tool/errors": 0, "tool/timeouts": 0}
        metrics["tool/parse_errors"] = 0
        logs: Logs = {}
        seconds = 0.0
        recorded = []
        for index, attempt in enumerate(attempts):
            if not attempt.parsed or attempt.name is None:
                metrics["tool/parse_errors"] += 1
                text = f"Error: could not read the tool call ({attempt.status}): {attempt.detail}"
                messages.append({"role": "tool", "content": text})
                logs[f"tool_call_{index}"] = f"unparsed: {attempt.status}"
                recorded.append(attempt)
                continue
            result = await self.toolbox.call(
                attempt.name, dict(attempt.arguments or {}), self.call_timeout
            )
            metrics["tool/calls"] += 1
            metrics[_metric_of(result)] += 1
            seconds += result.seconds
            messages.append({"role": "tool", "content": result.text})
            server = self.toolbox.server_of(attempt.name) or "?"
            logs[f"tool_call_{index}"] = (
                f"{server}/{attempt.name}: {result.outcome} in {result.seconds:.3f}s"
                + (f" ({result.detail})" if result.detail else "")
            )
            recorded.append(attempt.with_outcome(_OUTCOMES[result.outcome], result.detail or None))
        metrics["tool/seconds"] = round(seconds, 6)
        logs.update(step_logs(recorded, [CallFormat.HERMES]))
        return ToolTurn(messages, metrics, logs, calls=int(metrics["tool/calls"]))


def _metric_of(result: ToolResult) -> str:
    return {"ok": "tool/ok", "error": "tool/errors", "timeout": "tool/timeouts"}[result.outcome]
