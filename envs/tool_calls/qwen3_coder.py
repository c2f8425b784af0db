"""Qwen3-Coder's XML tool calls (vLLM's ``qwen3_coder`` parser, the model's template)::

    <tool_call>
    <function=run_python>
    <parameter=code>
    print(1)
    </parameter>
    </function>
    </tool_call>

Values are text: one newline after ``>`` and one before ``</parameter>`` belong to the
layout and are dropped; a string-typed argument is kept verbatim, others are read as
JSON (:func:`schema.convert_text_value`). A value runs to the first ``</parameter>``,
so code may hold ``</tool_call>``. Anything but parameters inside ``<function=...>``,
or text between ``</function>`` and ``</tool_call>``, is ``malformed_markup``.
"""

from __future__ import annotations

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

FORMAT = CallFormat.QWEN3_CODER
OPEN, CLOSE = "<tool_call>", "</tool_call>"
FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"
STRAYS = [(CLOSE, f"{CLOSE} without {OPEN}"), (FUNCTION, f"{FUNCTION}...> outside {OPEN}")]
"""Each tag found outside every call is a ``malformed_markup`` attempt with this detail."""


def _read(text: str, start: int, tools: Tools | None, stopped: bool) -> ToolCallAttempt:
    index = skip_space(text, start + len(OPEN))
    if cut_inside(text, index, FUNCTION):
        return failed(FORMAT, start, truncated(text, OPEN), None)
    if not text.startswith(FUNCTION, index):
        return failed(
            FORMAT, start, malformed(text, index, f"no {FUNCTION}name> in the call", CLOSE), None
        )
    index += len(FUNCTION)
    bracket = text.find(">", index)
    if bracket < 0:
        return failed(FORMAT, start, truncated(text, "the function name"), None)
    name = text[index:bracket].strip()
    if not TOOL_NAME.fullmatch(name):
        return failed(
            FORMAT, start, malformed(text, index, f"bad function name {name!r}", CLOSE), None
        )
    arguments: dict[str, Any] = {}
    error: CallError = None
    index = bracket + 1
    while True:
        index = skip_space(text, index)
        if cut_inside(text, index, PARAMETER, FUNCTION_END):
            return failed(FORMAT, start, truncated(text, f"{FUNCTION}{name}>"), name)
        if text.startswith(PARAMETER, index):
            got = _parameter(text, index + len(PARAMETER), name, tools)
            if isinstance(got, Failure):
                return failed(FORMAT, start, got, name)
            key, value, problem, index = got
            error = add_argument(arguments, key, value, problem, error, "parameter")
            continue
        if not text.startswith(FUNCTION_END, index):
            detail = f"unexpected text inside {FUNCTION}{name}>"
            return failed(FORMAT, start, malformed(text, index, detail, CLOSE), name)
        index = skip_space(text, index + len(FUNCTION_END))
        if text.startswith(CLOSE, index):
            end = index + len(CLOSE)
        elif index >= len(text) and stopped:
            end = len(text)
        elif cut_inside(text, index, CLOSE):
            return failed(FORMAT, start, truncated(text, OPEN), name)
        else:
            detail = f"text between {FUNCTION_END} and {CLOSE}"
            return failed(FORMAT, start, malformed(text, index, detail, CLOSE), name)
        status, detail = error or (ParseStatus.OK, "")
        return ToolCallAttempt(FORMAT, status, (start, end), name, arguments, detail)


def _parameter(
    text: str, index: int, name: str, tools: Tools | None
) -> Failure | tuple[str, Any, str, int]:
    bracket = text.find(">", index)
    if bracket < 0:
        return truncated(text, "a parameter name")
    key = text[index:bracket].strip()
    if not TOOL_NAME.fullmatch(key):
        return malformed(text, index, f"bad parameter name {key!r}", CLOSE)
    end = text.find(PARAMETER_END, bracket + 1)
    if end < 0:
        return truncated(text, f"{PARAMETER}{key}>")
    raw = text[bracket + 1 : end]
    raw = raw[1:] if raw.startswith("\n") else raw
    raw = raw[:-1] if raw.endswith("\n") else raw
    value, problem = convert_text_value(raw, argument_type(tools, name, key))
    return key, value, problem, end + len(PARAMETER_END)


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """A well-formed call, laid out as the Qwen3-Coder template writes one."""
    import json

    parts = [f"{OPEN}\n{FUNCTION}{name}>\n"]
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{PARAMETER}{key}>\n{shown}\n{PARAMETER_END}\n")
    parts.append(f"{FUNCTION_END}\n{CLOSE}")
    return "".join(parts)


parse = scanner(OPEN, FORMAT, _read, STRAYS)
