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

Protocol = Literal["tag", "tool"]

TOOL_NAME = "alfworld_step"
ACTION_STOP = "</action>"
TOOL_CALL_STOP = "</tool_call>"

_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
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
    if protocol == "tag":
        found = _ACTION.findall(text)
        if not found:
            return None
        command = found[-1].strip()
        return command or None
    match = _TOOL_CALL.search(text)
    if match is None:
        return None
    try:
        call = json.loads(match.group(1).strip())
    except ValueError:
        return None
    if not isinstance(call, dict) or call.get("name") != TOOL_NAME:
        return None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    action = arguments.get("action") if isinstance(arguments, dict) else None
    if not isinstance(action, str) or not action.strip():
        return None
    return action.strip()


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
