"""Hermes JSON tool calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The format of Hermes 2 Pro and of the Qwen2.5/Qwen3 chat templates (vLLM's ``hermes``
parser reads it): one JSON object per block, several blocks per turn allowed. Two
details decide edge cases, and both are deliberate:

* A block ends at the ``</tool_call>`` that follows a complete JSON value, so code
  whose string holds ``"</tool_call>"`` stays whole; only when the body is not JSON
  closed by the tag does the block end at the next ``</tool_call>``.
* A block with no closing tag is ``truncated`` (its JSON is still read, for whoever
  wants to run it), unless the sampler stopped on the ``</tool_call>`` stop sequence and
  left it out (``stopped_on_sequence``): then the block is complete.

A ``</tool_call>`` outside every block is an attempt of its own (``malformed_markup``):
a model writing the closing tag alone was trying to call a tool.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentenvs.envs.tool_calls.schema import Tools, limit_calls, validate
from agentenvs.envs.tool_calls.types import CallFormat, ParseStatus, ToolCallAttempt

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FORMAT = CallFormat.HERMES

_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Block:
    """One ``<tool_call>`` block: its character range, body and whether it was closed."""

    start: int
    end: int
    body: str
    closed: bool


def find_blocks(
    text: str, *, stopped_on_sequence: bool = False, cut_json_runs_on: bool = True
) -> list[Block]:
    """Every ``<tool_call>`` block of ``text``, in order (see the module doc for where
    one ends).

    ``cut_json_runs_on``: when the rest of the text is JSON cut short (an open string
    or bracket), the block is unclosed even if a ``</tool_call>`` comes before the end
    (it is inside the cut string). ReTool's protocol predates the rule and turns it off
    so its replies to the model stay as they were.
    """
    blocks: list[Block] = []
    position = 0
    while (start := text.find(OPEN, position)) >= 0:
        body = start + len(OPEN)
        end = _json_end(text, body)
        if end is None:
            end = text.find(CLOSE, body)
            if end >= 0 and cut_json_runs_on and _cut_in_call(text, body):
                end = -1
        if end < 0:
            blocks.append(Block(start, len(text), text[body:], stopped_on_sequence))
            break
        blocks.append(Block(start, end + len(CLOSE), text[body:end], True))
        position = end + len(CLOSE)
    return blocks


_JSON_OUTSIDE_STRINGS = frozenset(" \t\r\n{}[],:-+.0123456789eEtruefalsn")
"""Every character JSON may hold outside its strings."""


def json_cut_short(raw: str) -> bool:
    """``raw`` reads as the start of a JSON object or array that the text ended inside:
    an open string or bracket at the end, no bracket closed out of order before it."""
    raw = raw.lstrip()
    if not raw.startswith(("{", "[")):
        return False
    stack: list[str] = []
    in_string = escaped = False
    for char in raw:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char not in _JSON_OUTSIDE_STRINGS:
            return False  # a tag or prose: the JSON ended broken, it was not cut
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if not stack or stack.pop() != char:
                return False
            if not stack:
                return False  # a complete value: whatever follows, it was not cut
    return in_string or bool(stack)


def stray_closes(text: str, blocks: list[Block]) -> list[int]:
    """Positions of ``</tool_call>`` tags that belong to no block."""
    found, position = [], 0
    while (index := text.find(CLOSE, position)) >= 0:
        if not any(b.start <= index < b.end for b in blocks):
            found.append(index)
        position = index + len(CLOSE)
    return found


def _cut_in_call(text: str, body: int) -> bool:
    """The text ends inside this call: inside its JSON, or after it, inside the tag."""
    if json_cut_short(text[body:]):
        return True
    after = _json_value_end(text, body)
    return after is not None and CLOSE.startswith(text[after:])


def _json_value_end(text: str, start: int) -> int | None:
    """Index after a JSON value starting at ``start`` and the whitespace after it."""
    index = start
    while index < len(text) and text[index].isspace():
        index += 1
    try:
        _, stop = _DECODER.raw_decode(text, index)
    except (json.JSONDecodeError, RecursionError):
        return None
    while stop < len(text) and text[stop].isspace():
        stop += 1
    return stop


def _json_end(text: str, start: int) -> int | None:
    """Index of the ``</tool_call>`` right after a JSON value starting at ``start``
    (whitespace allowed around it), or None."""
    stop = _json_value_end(text, start)
    return stop if stop is not None and text.startswith(CLOSE, stop) else None


def loads(raw: str) -> tuple[Any, str]:
    """``json.loads`` that never raises: the value, or ``None`` and the reason."""
    try:
        return json.loads(raw), ""
    except json.JSONDecodeError as err:
        return None, f"not valid JSON ({err.msg})"
    except RecursionError:
        return None, "not valid JSON (nested too deeply)"


def decode_call(body: str) -> tuple[str | None, dict[str, Any] | None, str]:
    """The name and arguments of one block's body, or the reason it cannot be read.

    ``arguments`` may be absent (``{}``), double-encoded as a JSON string, or given as
    ``parameters`` (an older spelling some models use).
    """
    raw = body.strip()
    if not raw:
        return None, None, "the tool call is empty"
    call, error = loads(raw)
    if error:
        return None, None, f"the tool call is {error}"
    if not isinstance(call, dict):
        return None, None, "the tool call must be a JSON object"
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return None, None, 'the tool call needs a string "name"'
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):
        arguments, error = loads(arguments)
        if error:
            return name, None, f"the arguments are {error}"
    if not isinstance(arguments, dict):
        return name, None, "the arguments must be a JSON object"
    return name, arguments, ""


def attempt_of(block: Block, tools: Tools | None = None) -> ToolCallAttempt:
    """One block read and judged (unknown tool, missing argument) into an attempt."""
    name, arguments, error = decode_call(block.body)
    span = (block.start, block.end)
    if not block.closed:
        detail = f"{OPEN} was never closed" + (f"; {error}" if error else "")
        return ToolCallAttempt(FORMAT, ParseStatus.TRUNCATED, span, name, arguments, detail)
    if error:
        return ToolCallAttempt(FORMAT, ParseStatus.MALFORMED_JSON, span, name, None, error)
    return validate(ToolCallAttempt(FORMAT, ParseStatus.OK, span, name, arguments), tools)


def parse(
    text: str,
    *,
    tools: Tools | None = None,
    max_calls: int | None = None,
    stopped_on_sequence: bool = False,
) -> list[ToolCallAttempt]:
    """Every attempt in ``text``: one per block, one per stray closing tag, in order.

    Never raises on any text. ``tools`` (name to :class:`ToolSchema`) marks unknown tools
    and missing arguments; ``max_calls`` marks readable calls past the limit.
    """
    blocks = find_blocks(text, stopped_on_sequence=stopped_on_sequence)
    attempts = [attempt_of(block, tools) for block in blocks]
    for index in stray_closes(text, blocks):
        span = (index, index + len(CLOSE))
        detail = f"{CLOSE} without {OPEN}"
        attempts.append(ToolCallAttempt(FORMAT, ParseStatus.MALFORMED_MARKUP, span, detail=detail))
    attempts.sort(key=lambda a: a.span)
    return limit_calls(attempts, max_calls)


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """A well-formed call, the way the Qwen templates write one."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{OPEN}\n{payload}\n{CLOSE}"
