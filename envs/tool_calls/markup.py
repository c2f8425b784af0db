"""Small cursor helpers the tag-structured formats (Qwen3-Coder, GLM, DeepSeek) share."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.envs.tool_calls.schema import Tools, limit_calls, validate
from agentenvs.envs.tool_calls.types import CallFormat, Parse, ParseStatus, ToolCallAttempt

TOOL_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
"""What a tool name may be (OpenAI's rule, plus dots): a name with spaces or braces
means the body is some other format."""


def skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def resync(text: str, index: int, close: str) -> int:
    """Where reading goes on after a broken call: past its closing tag, or the end."""
    found = text.find(close, index)
    return len(text) if found < 0 else found + len(close)


@dataclass
class Failure:
    """Why a call could not be read, and where reading goes on."""

    status: ParseStatus
    detail: str
    end: int


def truncated(text: str, what: str) -> Failure:
    """The text ended inside ``what``: nothing is left to read."""
    return Failure(ParseStatus.TRUNCATED, f"the text ended inside {what}", len(text))


def malformed(text: str, index: int, detail: str, close: str) -> Failure:
    """Bad markup at ``index``; reading goes on past the call's ``close`` tag."""
    return Failure(ParseStatus.MALFORMED_MARKUP, detail, resync(text, index, close))


CallError = tuple[ParseStatus, str] | None
"""The first thing wrong with a call's arguments, or None while there is none."""


def add_argument(
    arguments: dict[str, Any],
    key: str,
    value: Any,
    problem: str,
    error: CallError,
    noun: str = "argument",
) -> CallError:
    """Stores ``key`` (a repeat overwrites the earlier value) and returns the call's error:
    the first one stays, else a repeated ``noun`` or the value's ``problem``."""
    if key in arguments and error is None:
        error = (ParseStatus.INVALID_ARGUMENT, f"{noun} {key!r} given twice")
    if problem and error is None:
        error = (ParseStatus.INVALID_ARGUMENT, f"argument {key!r} {problem}")
    arguments[key] = value
    return error


def failed(fmt: CallFormat, start: int, failure: Failure, name: str | None) -> ToolCallAttempt:
    return ToolCallAttempt(fmt, failure.status, (start, failure.end), name, None, failure.detail)


def stray(
    text: str, token: str, fmt: CallFormat, covered: list[tuple[int, int]], detail: str
) -> list[ToolCallAttempt]:
    """An attempt for each ``token`` outside every ``covered`` span."""
    found, position = [], 0
    while (index := text.find(token, position)) >= 0:
        if not any(a <= index < b for a, b in covered):
            span = (index, index + len(token))
            found.append(ToolCallAttempt(fmt, ParseStatus.MALFORMED_MARKUP, span, detail=detail))
        position = index + len(token)
    return found


def cut_inside(text: str, index: int, *tags: str) -> bool:
    """The text ends at ``index`` or part-way into one of ``tags``: it was cut there,
    not written wrong."""
    rest = text[index:]
    return not rest or any(tag.startswith(rest) for tag in tags)


Reader = Callable[[str, int, Tools | None, bool], ToolCallAttempt]
"""Reads the call that starts at an index: ``(text, start, tools, stopped_on_sequence)``."""


def scanner(
    open_tag: str, fmt: CallFormat, read: Reader, strays: Sequence[tuple[str, str]]
) -> Parse:
    """The ``parse`` of a format whose calls start at ``open_tag``.

    ``read`` reads each call; reading goes on after its span (at least past the tag).
    Each ``(token, detail)`` of ``strays`` outside every call is a ``malformed_markup``
    attempt. Attempts come in text order, judged against ``tools`` and limited to
    ``max_calls``.
    """

    def parse(
        text: str,
        *,
        tools: Tools | None = None,
        max_calls: int | None = None,
        stopped_on_sequence: bool = False,
    ) -> list[ToolCallAttempt]:
        attempts: list[ToolCallAttempt] = []
        position = 0
        while (start := text.find(open_tag, position)) >= 0:
            attempt = read(text, start, tools, stopped_on_sequence)
            attempts.append(attempt)
            position = max(attempt.span[1], start + len(open_tag))
        covered = [a.span for a in attempts]
        for token, detail in strays:
            attempts += stray(text, token, fmt, covered, detail)
        attempts.sort(key=lambda a: a.span)
        return limit_calls([validate(a, tools) for a in attempts], max_calls)

    return parse
