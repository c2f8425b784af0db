"""Tool calls as data: one parser per wire format, the attempt type, the step log.

Every parser module has ``parse(text, *, tools=None, max_calls=None,
stopped_on_sequence=False) -> list[ToolCallAttempt]`` and never raises on any text;
:func:`parse` picks one by format. See ``docs/check.md`` for what ``agentenvs check``
does with the recorded attempts.
"""

from __future__ import annotations

from typing import Any

from agentenvs.envs.references import Registry
from agentenvs.envs.tool_calls.record import TOOL_CALLS_LOG, ToolCallLog, step_logs
from agentenvs.envs.tool_calls.schema import Tools, ToolSchema, tools_of
from agentenvs.envs.tool_calls.types import (
    PARSE_FAILURES,
    CallFormat,
    ParseStatus,
    ToolCallAttempt,
    ToolOutcome,
)

__all__ = [
    "PARSERS",
    "PARSE_FAILURES",
    "TOOL_CALLS_LOG",
    "CallFormat",
    "ParseStatus",
    "ToolCallAttempt",
    "ToolCallLog",
    "ToolOutcome",
    "ToolSchema",
    "Tools",
    "parse",
    "parser_module",
    "step_logs",
    "tools_of",
]

PARSERS = Registry(
    "tool-call format",
    {
        CallFormat.HERMES: "agentenvs.envs.tool_calls.hermes",
        CallFormat.QWEN3_CODER: "agentenvs.envs.tool_calls.qwen3_coder",
        CallFormat.DEEPSEEK: "agentenvs.envs.tool_calls.deepseek",
        CallFormat.GLM45: "agentenvs.envs.tool_calls.glm45",
        CallFormat.SEARCH_R1: "agentenvs.envs.tool_calls.search_r1",
        CallFormat.RETOOL_CODE: "agentenvs.envs.tool_calls.retool_code",
        CallFormat.ALFWORLD_ACTION: "agentenvs.envs.tool_calls.alfworld_action",
    },
)
"""Each call format's parser module (its ``parse``), imported when the format is used."""


def parser_module(fmt: CallFormat | str) -> Any:
    """The module that reads ``fmt`` (a :class:`CallFormat` or its name)."""
    try:
        known = CallFormat(fmt)
    except ValueError:
        formats = ", ".join(str(f) for f in CallFormat)
        raise ValueError(f"unknown tool-call format {fmt!r}; known: {formats}") from None
    return PARSERS.load(known)


def parse(
    text: str,
    fmt: CallFormat | str,
    *,
    tools: Tools | None = None,
    max_calls: int | None = None,
    stopped_on_sequence: bool = False,
) -> list[ToolCallAttempt]:
    """The attempts in ``text`` read as ``fmt``."""
    return parser_module(fmt).parse(
        text, tools=tools, max_calls=max_calls, stopped_on_sequence=stopped_on_sequence
    )
