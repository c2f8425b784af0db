"""Reading the model's action out of its reply, and matching it to a game command.

Two protocols: the tag protocol (``<action>go to fridge 1</action>``; reasoning
may come before it) and the chat tool protocol (a ``<tool_call>`` holding
``{"name": "alfworld_step", "arguments": {"action": "go to fridge 1"}}``, the
Hermes/Qwen convention). Matching is forgiving about case, spacing and a trailing
full stop, and accepts ALFWorld's older ``put X in/on Y`` wording for the current
``move X to Y``; anything else the game does not list is an invalid action.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any, Literal

from agentenvs.envs.tool_calls import alfworld_action, hermes
from agentenvs.envs.tool_calls.types import CallFormat, ParseStatus, ToolCallAttempt

Protocol = Literal["tag", "tool"]

TOOL_NAME = "alfworld_step"
ACTION_STOP = "</action>"
TOOL_CALL_STOP = "</tool_call>"

_PUT = re.compile(r"^put (.+?) (?:in|on|in/on|into|onto) (.+)$")


TOOL_DESCRIPTION = "Send one text command to the household game and get what happens."
TOOL_ACTION_DESCRIPTION = "One admissible command, e.g. 'go to fridge 1'."


def tool_spec(
    description: str = TOOL_DESCRIPTION, action_description: str = TOOL_ACTION_DESCRIPTION
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {
                        "type": "string",
                        "description": action_description,
                    }
                },
                "required": ["action"],
            },
        },
    }


def extract_action(text: str, protocol: Protocol) -> str | None:
    """The command the reply asks for, or None if it is not in the protocol's form."""
    attempts, chosen = action_attempts(text, protocol)
    if chosen is None:
        return None
    return str((attempts[chosen].arguments or {})[_ARGUMENT[protocol]])


_ARGUMENT: dict[Protocol, str] = {"tag": alfworld_action.ARGUMENT, "tool": "action"}
FORMATS: dict[Protocol, CallFormat] = {"tag": CallFormat.ALFWORLD_ACTION, "tool": CallFormat.HERMES}
"""The tool-call format each protocol declares to the model."""


def action_attempts(
    text: str, protocol: Protocol, *, stopped_on_sequence: bool = True, pick: str = "last"
) -> tuple[list[ToolCallAttempt], int | None]:
    """Every attempt at an action in the reply, and the index of the one played (None:
    no usable action).

    ``tag``: the last complete ``<action>`` block is played (``pick="first"``: the
    first), an empty one plays nothing; any other readable block is one too many.
    ``tool``: the first ``<tool_call>`` is played, closed or not (the sampler stops on
    ``</tool_call>``); ``stopped_on_sequence`` only decides whether an unclosed one is
    recorded as ``truncated``.
    """
    if protocol == "tag":
        attempts = alfworld_action.parse(text)
        complete = [
            i
            for i, a in enumerate(attempts)
            if a.status in (ParseStatus.OK, ParseStatus.INVALID_ARGUMENT)
        ]
        if not complete:
            return attempts, None
        chosen = complete[0] if pick == "first" else complete[-1]
        for index in complete:
            if index != chosen and attempts[index].parsed:
                detail = f"only the {pick} <action> is played"
                attempts[index] = attempts[index].with_status(ParseStatus.TOO_MANY_CALLS, detail)
        return attempts, (chosen if attempts[chosen].parsed else None)
    blocks = hermes.find_blocks(text, cut_json_runs_on=False)
    if not blocks:
        return [], None
    first = _tool_attempt(blocks[0], stopped_on_sequence)
    rest = [hermes.attempt_of(block) for block in blocks[1:]]
    extra = [
        a.with_status(ParseStatus.TOO_MANY_CALLS, "one command per turn") if a.parsed else a
        for a in rest
    ]
    usable = first.arguments is not None
    return [first, *extra], (0 if usable else None)


def _tool_attempt(block: hermes.Block, stopped_on_sequence: bool) -> ToolCallAttempt:
    """The first call, read by this environment's rules (no ``parameters`` alias)."""
    span = (block.start, block.end)
    unclosed = not stopped_on_sequence and not block.closed
    call, error = hermes.loads(block.body.strip())

    def failed(status: ParseStatus, detail: str) -> ToolCallAttempt:
        return ToolCallAttempt(CallFormat.HERMES, status, span, detail=detail)

    if error or not isinstance(call, dict):
        status = ParseStatus.TRUNCATED if unclosed else ParseStatus.MALFORMED_JSON
        return failed(status, f"the tool call is {error or 'not a JSON object'}")
    if call.get("name") != TOOL_NAME:
        return failed(ParseStatus.UNKNOWN_TOOL, f"unknown tool {call.get('name')!r}")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        arguments, error = hermes.loads(arguments)
        if error:
            return failed(ParseStatus.MALFORMED_JSON, f"the arguments are {error}")
    if not isinstance(arguments, dict) or "action" not in arguments:
        return failed(ParseStatus.MISSING_ARGUMENT, 'the arguments need "action"')
    action = arguments.get("action")
    if not isinstance(action, str) or not action.strip():
        return failed(ParseStatus.INVALID_ARGUMENT, '"action" must be a non-empty string')
    status = ParseStatus.TRUNCATED if unclosed else ParseStatus.OK
    detail = "<tool_call> was never closed" if unclosed else ""
    arguments = {"action": action.strip()}
    return ToolCallAttempt(CallFormat.HERMES, status, span, TOOL_NAME, arguments, detail)


def format_action(command: str, protocol: Protocol) -> str:
    """How a scripted policy writes ``command`` under the protocol."""
    if protocol == "tag":
        return f"<action>{command}</action>"
    call = {"name": TOOL_NAME, "arguments": {"action": command}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def normalize(command: str) -> str:
    return " ".join(command.strip().lower().split()).rstrip(".").strip()


def match_command(command: str, admissible: Collection[str]) -> str | None:
    """The admissible game command ``command`` means, or None."""
    wanted = normalize(command)
    if wanted in admissible:
        return wanted
    put = _PUT.match(wanted)
    if put is not None:
        moved = f"move {put.group(1)} to {put.group(2)}"
        if moved in admissible:
            return moved
    return None


_CJK = re.compile("[\u4e00-\u9fff]")
TAIL_CHARS = 30
"""verl-agent sends the last 30 characters of a reply with no action to the game."""


def first_action_lowercased(text: str) -> str | None:
    """verl-agent's ``alfworld_projection``: the text between the first ``<action>`` and
    the first ``</action>`` of the lower-cased reply, stripped; None without both tags."""
    lowered = text.lower()
    start, end = lowered.find("<action>"), lowered.find("</action>")
    if start < 0 or end < 0:
        return None
    return lowered[start + len("<action>") : end].strip()


def reply_tail(text: str) -> str:
    """What verl-agent plays for a reply without an action: its lower-cased last characters."""
    return text.lower()[-TAIL_CHARS:]


def has_think(text: str) -> bool:
    """Both ``<think>`` and ``</think>`` appear (verl-agent checks no more than that)."""
    return "<think>" in text and "</think>" in text


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None
