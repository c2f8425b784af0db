"""GLM-4.5's tool calls (vLLM's ``glm45`` parser, the model's chat template)::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Beijing</arg_value>
    </tool_call>

The name runs from ``<tool_call>`` to the first newline (or ``<arg_key>``); each
``<arg_key>`` is followed, after optional whitespace, by its ``<arg_value>``. Values are
stripped text, converted as the schema types them (:func:`schema.convert_text_value`).
A body that starts with ``{`` is a Hermes call in the wrong template: its "name" is no
tool name, so it is ``malformed_markup``.
"""

from __future__ import annotations

import json
from typing import Any

from agentenvs.envs.tool_calls.markup import (
    TOOL_NAME,
    CallError,
    Failure,
    add_argument,
    cut_inside,
    failed,
    malformed,
    scanner,
    skip_space,
    truncated,
)
from agentenvs.envs.tool_calls.schema import Tools, argument_type, convert_text_value
from agentenvs.envs.tool_calls.types import CallFormat, ParseStatus, ToolCallAttempt

FORMAT = CallFormat.GLM45
OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_END = "<arg_key>", "</arg_key>"
VALUE, VALUE_END = "<arg_value>", "</arg_value>"
STRAYS = [(CLOSE, f"{CLOSE} without {OPEN}"), (KEY, f"{KEY} outside {OPEN}")]
"""Each tag found outside every call is a ``malformed_markup`` attempt with this detail."""


def _name_end(text: str, index: int) -> int:
    ends = [i for i in (text.find(t, index) for t in ("\n", KEY, CLOSE)) if i >= 0]
    return min(ends) if ends else -1


def _read(text: str, start: int, tools: Tools | None, stopped: bool) -> ToolCallAttempt:
    index = start + len(OPEN)
    end = _name_end(text, index)
    if end < 0:
        return failed(FORMAT, start, truncated(text, "the tool name"), None)
    name = text[index:end].strip()
    if not TOOL_NAME.fullmatch(name):
        shown = name[:40]
        return failed(
            FORMAT, start, malformed(text, index, f"bad tool name {shown!r}", CLOSE), None
        )
    arguments: dict[str, Any] = {}
    error: CallError = None
    index = end
    while True:
        index = skip_space(text, index)
        if text.startswith(CLOSE, index):
            status, detail = error or (ParseStatus.OK, "")
            span = (start, index + len(CLOSE))
            return ToolCallAttempt(FORMAT, status, span, name, arguments, detail)
        if cut_inside(text, index, CLOSE, KEY):
            if stopped and index >= len(text):
                status, detail = error or (ParseStatus.OK, "")
                return ToolCallAttempt(FORMAT, status, (start, len(text)), name, arguments, detail)
            return failed(FORMAT, start, truncated(text, OPEN), name)
        if not text.startswith(KEY, index):
            detail = f"unexpected text in the call to {name}"
            return failed(FORMAT, start, malformed(text, index, detail, CLOSE), name)
        got = _pair(text, index + len(KEY), name, tools)
        if isinstance(got, Failure):
            return failed(FORMAT, start, got, name)
        key, value, problem, index = got
        error = add_argument(arguments, key, value, problem, error)


def _pair(
    text: str, index: int, name: str, tools: Tools | None
) -> Failure | tuple[str, Any, str, int]:
    key_end = text.find(KEY_END, index)
    if key_end < 0:
        return truncated(text, KEY)
    key = text[index:key_end].strip()
    if not key:
        return malformed(text, index, "an empty argument name", CLOSE)
    index = skip_space(text, key_end + len(KEY_END))
    if cut_inside(text, index, VALUE):
        return truncated(text, f"the argument {key!r}")
    if not text.startswith(VALUE, index):
        return malformed(text, index, f"{KEY}{key}{KEY_END} without {VALUE}", CLOSE)
    value_end = text.find(VALUE_END, index + len(VALUE))
    if value_end < 0:
        return truncated(text, VALUE)
    raw = text[index + len(VALUE) : value_end].strip()
    value, problem = convert_text_value(raw, argument_type(tools, name, key))
    return key, value, problem, value_end + len(VALUE_END)


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """A well-formed call, laid out as the GLM-4.5 template writes one."""
    parts = [f"{OPEN}{name}\n"]
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{KEY}{key}{KEY_END}\n{VALUE}{shown}{VALUE_END}\n")
    parts.append(CLOSE)
    return "".join(parts)


parse = scanner(OPEN, FORMAT, _read, STRAYS)
