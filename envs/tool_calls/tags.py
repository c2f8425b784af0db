"""Calls written as a pair of tags around one value (``<search>q</search>``).

Search-R1's search and ALFWorld's action are read the same way: each ``<tag>...</tag>``
(the shortest one, as a regular expression reads it) is one attempt whose single
argument is the stripped text between the tags; an opening tag the text ends inside is
``truncated`` (complete when the sampler stopped on the closing tag and left it out);
a closing tag outside every pair is ``malformed_markup``; an empty value is
``invalid_argument``.
"""

from __future__ import annotations

import re

from agentenvs.envs.tool_calls.schema import Tools, limit_calls, validate
from agentenvs.envs.tool_calls.types import CallFormat, Parse, ParseStatus, ToolCallAttempt


def paired_parser(
    tag: str, fmt: CallFormat, *, name: str, argument: str, ignore_case: bool = False
) -> Parse:
    """The ``parse`` of a format whose calls are ``<tag>value</tag>``: :func:`paired`'s
    attempts, judged against ``tools`` and limited to ``max_calls``."""

    def parse(
        text: str,
        *,
        tools: Tools | None = None,
        max_calls: int | None = None,
        stopped_on_sequence: bool = False,
    ) -> list[ToolCallAttempt]:
        found = paired(
            text,
            tag,
            fmt,
            name=name,
            argument=argument,
            stopped_on_sequence=stopped_on_sequence,
            ignore_case=ignore_case,
        )
        return limit_calls([validate(a, tools) for a in found], max_calls)

    return parse


def paired(
    text: str,
    tag: str,
    fmt: CallFormat,
    *,
    name: str,
    argument: str,
    stopped_on_sequence: bool = False,
    ignore_case: bool = False,
) -> list[ToolCallAttempt]:
    """Every ``<tag>value</tag>`` attempt of ``text`` in order (see the module doc)."""
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    open_, close = f"<{tag}>", f"</{tag}>"
    pair = re.compile(rf"{re.escape(open_)}(.*?){re.escape(close)}", flags)
    attempts: list[ToolCallAttempt] = []
    covered: list[tuple[int, int]] = []
    end = 0
    for match in pair.finditer(text):
        covered.append(match.span())
        attempts.append(_attempt(fmt, match.span(), match.group(1), name, argument, True))
        end = match.end()
    opener = re.compile(re.escape(open_), flags)
    tail = opener.search(text, end)
    if tail is not None:
        span = (tail.start(), len(text))
        covered.append(span)
        value = text[tail.end() :]
        attempts.append(_attempt(fmt, span, value, name, argument, stopped_on_sequence))
    for match in re.finditer(re.escape(close), text, flags):
        if not any(a <= match.start() < b for a, b in covered):
            detail = f"{close} without {open_}"
            attempts.append(
                ToolCallAttempt(fmt, ParseStatus.MALFORMED_MARKUP, match.span(), detail=detail)
            )
    attempts.sort(key=lambda a: a.span)
    return attempts


def _attempt(
    fmt: CallFormat, span: tuple[int, int], raw: str, name: str, argument: str, closed: bool
) -> ToolCallAttempt:
    value = raw.strip()
    arguments = {argument: value}
    if not closed:
        detail = f"<{name}> block was never closed"
        return ToolCallAttempt(fmt, ParseStatus.TRUNCATED, span, name, arguments, detail)
    if not value:
        detail = f"the {argument} is empty"
        return ToolCallAttempt(fmt, ParseStatus.INVALID_ARGUMENT, span, name, arguments, detail)
    return ToolCallAttempt(fmt, ParseStatus.OK, span, name, arguments)
