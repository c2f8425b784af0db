"""DeepSeek V3 / R1 tool calls (vLLM's ``deepseek_v3`` parser, the models' templates)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Beijing"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Each ``<｜tool▁call▁begin｜>`` ... ``<｜tool▁call▁end｜>`` is one attempt: the call type
(``function``), the separator, the name up to the newline, then the arguments as a JSON
object in a ```json fence (bare JSON is read too). The outer calls-begin/end markers
are not required: the per-call markers decide.
"""

from __future__ import annotations

import json
from typing import Any

from agentenvs.envs.tool_calls.hermes import loads
from agentenvs.envs.tool_calls.markup import TOOL_NAME, Failure, failed, scanner, truncated
from agentenvs.envs.tool_calls.schema import Tools
from agentenvs.envs.tool_calls.types import CallFormat, ParseStatus, ToolCallAttempt

FORMAT = CallFormat.DEEPSEEK
CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
FENCE = "```json"
STRAYS = [(CALL_END, f"{CALL_END} without {CALL_BEGIN}")]
"""Each tag found outside every call is a ``malformed_markup`` attempt with this detail."""


def _read(text: str, start: int, tools: Tools | None, stopped: bool) -> ToolCallAttempt:
    """One call; ``tools`` is not needed here: JSON arguments carry their own types."""
    index = start + len(CALL_BEGIN)
    end = text.find(CALL_END, index)
    nested = text.find(CALL_BEGIN, index)
    if 0 <= nested < (end if end >= 0 else len(text)):
        detail = f"{CALL_BEGIN} inside another call"
        return failed(FORMAT, start, Failure(ParseStatus.MALFORMED_MARKUP, detail, nested), None)
    if end < 0 and not stopped:
        return failed(FORMAT, start, truncated(text, "the call"), None)
    stop = len(text) if end < 0 else end
    span_end = len(text) if end < 0 else end + len(CALL_END)
    body = text[index:stop]
    sep = body.find(SEP)
    if sep < 0:
        detail = f"no {SEP} in the call"
        return failed(FORMAT, start, Failure(ParseStatus.MALFORMED_MARKUP, detail, span_end), None)
    kind = body[:sep].strip()
    rest = body[sep + len(SEP) :]
    newline = rest.find("\n")
    name = (rest if newline < 0 else rest[:newline]).strip()
    if kind != "function" or not TOOL_NAME.fullmatch(name):
        detail = f"expected function{SEP}<name>, got {kind[:20]!r} / {name[:40]!r}"
        return failed(FORMAT, start, Failure(ParseStatus.MALFORMED_MARKUP, detail, span_end), None)
    raw = "" if newline < 0 else rest[newline + 1 :].strip()
    if raw.startswith(FENCE):
        if not raw.endswith("```") or len(raw) < len(FENCE) + 3:
            detail = f"the {FENCE} fence is not closed"
            failure = Failure(ParseStatus.MALFORMED_MARKUP, detail, span_end)
            return failed(FORMAT, start, failure, name)
        raw = raw[len(FENCE) : -3].strip()
    arguments, error = loads(raw) if raw else ({}, "")
    if error or not isinstance(arguments, dict):
        detail = f"the arguments are {error or 'not a JSON object'}"
        failure = Failure(ParseStatus.MALFORMED_JSON, detail, span_end)
        return failed(FORMAT, start, failure, name)
    return ToolCallAttempt(FORMAT, ParseStatus.OK, (start, span_end), name, arguments)


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """A well-formed single call, wrapped as the DeepSeek V3 template writes it."""
    payload = json.dumps(arguments, ensure_ascii=False)
    call = f"{CALL_BEGIN}function{SEP}{name}\n{FENCE}\n{payload}\n```{CALL_END}"
    return f"{CALLS_BEGIN}{call}{CALLS_END}"


parse = scanner(CALL_BEGIN, FORMAT, _read, STRAYS)
