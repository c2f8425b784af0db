"""ReTool's code tags: ``<code>```python ...```</code>`` runs the code interpreter.

The sampler stops on ``</code>``, so a block ends at the first ``</code>`` after its
start and the *last* ``<code>`` before that closing tag opens it (a model that
reopened the tag meant the second one). The code is the body of the block's fenced
block (an unterminated fence is fine), or the block itself without a fence. An empty
program is ``invalid_argument``; ``<code>`` the text ends inside is ``truncated``;
``</code>`` with no ``<code>`` before it is ``malformed_markup``.
"""

from __future__ import annotations

import re

from agentenvs.envs.tool_calls.schema import Tools, limit_calls, validate
from agentenvs.envs.tool_calls.types import CallFormat, ParseStatus, ToolCallAttempt

FORMAT = CallFormat.RETOOL_CODE
OPEN, CLOSE = "<code>", "</code>"
TOOL_NAME = "code_interpreter"
ARGUMENT = "code"

_FENCE = re.compile(r"```[ \t]*(?:python3|python|py)?[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)


def extract_fenced(block: str) -> str:
    """The code in a fenced block, or the block itself when there is no fence.

    An unterminated fence is tolerated: the model was cut at ``</code>``.
    """
    match = _FENCE.search(block)
    return (match.group(1) if match else block).strip("\n").rstrip()


def parse(
    text: str,
    *,
    tools: Tools | None = None,
    max_calls: int | None = None,
    stopped_on_sequence: bool = False,
) -> list[ToolCallAttempt]:
    attempts: list[ToolCallAttempt] = []
    position = 0
    while (close := text.find(CLOSE, position)) >= 0:
        end = close + len(CLOSE)
        start = text.rfind(OPEN, position, close)
        if start < 0:
            detail = f"{CLOSE} without {OPEN}"
            attempts.append(
                ToolCallAttempt(FORMAT, ParseStatus.MALFORMED_MARKUP, (close, end), detail=detail)
            )
        else:
            code = extract_fenced(text[start + len(OPEN) : close])
            attempts.append(_attempt((start, end), code, closed=True))
        position = end
    start = text.find(OPEN, position)
    if start >= 0:
        code = extract_fenced(text[start + len(OPEN) :])
        attempts.append(_attempt((start, len(text)), code, closed=stopped_on_sequence))
    return limit_calls([validate(a, tools) for a in attempts], max_calls)


def _attempt(span: tuple[int, int], code: str, *, closed: bool) -> ToolCallAttempt:
    arguments = {ARGUMENT: code}
    if not closed:
        detail = f"{OPEN} was never closed"
        return ToolCallAttempt(FORMAT, ParseStatus.TRUNCATED, span, TOOL_NAME, arguments, detail)
    if not code.strip():
        detail = "the code block is empty"
        return ToolCallAttempt(
            FORMAT, ParseStatus.INVALID_ARGUMENT, span, TOOL_NAME, arguments, detail
        )
    return ToolCallAttempt(FORMAT, ParseStatus.OK, span, TOOL_NAME, arguments)
