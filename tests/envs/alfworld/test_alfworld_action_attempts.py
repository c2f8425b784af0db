"""ALFWorld's action reading goes through the shared parsers and classifies every attempt."""

from __future__ import annotations

from agentenvs.envs.alfworld.actions import action_attempts, extract_action, format_action


def statuses(text: str, protocol: str, **kwargs) -> tuple[list[str], int | None]:
    attempts, chosen = action_attempts(text, protocol, **kwargs)  # type: ignore[arg-type]
    return [str(a.status) for a in attempts], chosen


def test_tag_protocol_plays_the_last_complete_action() -> None:
    text = "<action>look</action> no, <action>go to desk 1</action>"
    assert statuses(text, "tag") == (["too_many_calls", "ok"], 1)
    assert extract_action(text, "tag") == "go to desk 1"
    assert statuses(text, "tag", pick="first") == (["ok", "too_many_calls"], 0)
    assert statuses("<action> </action>", "tag") == (["invalid_argument"], None)
    assert extract_action("<action> </action>", "tag") is None


def test_tool_protocol_plays_the_first_call_closed_or_not() -> None:
    call = format_action("open drawer 1", "tool")
    assert statuses(call, "tool") == (["ok"], 0)
    unclosed = call[: -len("</tool_call>")]
    assert extract_action(unclosed, "tool") == "open drawer 1"  # as before: it is played
    assert statuses(unclosed, "tool", stopped_on_sequence=False) == (["truncated"], 0)
    assert statuses(call + call, "tool") == (["ok", "too_many_calls"], 0)
    bad = '<tool_call>{"name": "alfworld_step", "arguments": {}}</tool_call>'
    assert statuses(bad, "tool") == (["missing_argument"], None)
    other = '<tool_call>{"name": "shell", "arguments": {"action": "ls"}}</tool_call>'
    assert statuses(other, "tool") == (["unknown_tool"], None)
    assert statuses("<tool_call>{oops}</tool_call>", "tool") == (["malformed_json"], None)
