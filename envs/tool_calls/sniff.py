"""Calls written in a format the environment did not declare.

A model trained on another template keeps writing that template's calls: a Qwen3-Coder
checkpoint in a Hermes environment writes ``<function=...>`` blocks, which the declared
parser reads as broken JSON (or not at all), and the run looks like a model that never
calls tools. Each chat-template format has a marker no other format writes; where one
shows up in a format not declared, the text is read in that format too, and the calls
found are recorded (never run) so ``agentenvs check`` can name the mismatch.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from agentenvs.envs.tool_calls.schema import Tools
from agentenvs.envs.tool_calls.types import CallFormat, ParseStatus, ToolCallAttempt

MARKERS: dict[CallFormat, re.Pattern[str]] = {
    CallFormat.HERMES: re.compile(r"<tool_call>\s*\{"),
    CallFormat.QWEN3_CODER: re.compile(r"<tool_call>\s*<function="),
    CallFormat.GLM45: re.compile(r"<tool_call>[A-Za-z0-9_.\-]+\s*<arg_key>"),
    CallFormat.DEEPSEEK: re.compile("<｜tool▁call▁begin｜>"),
}
"""The chat-template formats and the text that gives each away."""


def foreign_attempts(
    text: str, declared: Collection[CallFormat], tools: Tools | None = None
) -> list[ToolCallAttempt]:
    """Readable calls in ``text`` in chat-template formats outside ``declared``."""
    from agentenvs.envs.tool_calls import parse  # the registry imports the parsers

    found: list[ToolCallAttempt] = []
    for fmt, marker in MARKERS.items():
        if fmt in declared or marker.search(text) is None:
            continue
        found += [
            a
            for a in parse(text, fmt, tools=tools)
            if a.status not in (ParseStatus.MALFORMED_MARKUP, ParseStatus.MALFORMED_JSON)
        ]
    return found
