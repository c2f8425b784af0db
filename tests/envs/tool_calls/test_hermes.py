"""Hermes JSON calls: every status, the block-end rules, and text that must not raise."""

from __future__ import annotations

import json

import pytest

from agentenvs.envs.tool_calls import ToolSchema, hermes

TOOLS = {"run": ToolSchema("run", ("code",), {"code": "string", "timeout": "integer"})}


def call(body: object) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return f"<tool_call>\n{text}\n</tool_call>"


def statuses(text: str, **kwargs: object) -> list[str]:
    return [str(a.status) for a in hermes.parse(text, tools=TOOLS, **kwargs)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (call({"name": "run", "arguments": {"code": "x"}}), ["ok"]),
        (call("{'name': 'run'}"), ["malformed_json"]),
        (call({"name": "run", "arguments": "not json"}), ["malformed_json"]),
        ("done</tool_call>", ["malformed_markup"]),
        (call({"name": "rm", "arguments": {}}), ["unknown_tool"]),
        (call({"name": "run", "arguments": {"timeout": 1}}), ["missing_argument"]),
        (call({"name": "run", "arguments": {"code": "x", "timeout": "1"}}), ["invalid_argument"]),
        ('<tool_call>{"name": "run", "arguments": {"code": "pri', ["truncated"]),
        ("no call at all", []),
    ],
)
def test_each_status(text: str, want: list[str]) -> None:
    assert statuses(text) == want


def test_too_many_calls_past_the_limit() -> None:
    one = call({"name": "run", "arguments": {"code": "x"}})
    assert statuses(one * 3, max_calls=2) == ["ok", "ok", "too_many_calls"]
    # Only readable calls count towards the limit.
    assert statuses(call("{bad") + one, max_calls=1) == ["malformed_json", "ok"]


def test_a_closing_tag_inside_a_code_string_keeps_the_call_whole() -> None:
    code = 'print("</tool_call>")'
    text = hermes.format_call("run", {"code": code})
    [attempt] = hermes.parse(text, tools=TOOLS)
    assert attempt.parsed and attempt.arguments == {"code": code}
    assert attempt.span == (0, len(text))


def test_a_cut_inside_a_string_holding_the_closing_tag_is_truncated() -> None:
    text = hermes.format_call("run", {"code": 'print("</tool_call> and more")'})
    cut = text.index("and more")
    assert statuses(text[:cut]) == ["truncated"]
    # ReTool's reading (no such rule) ends the block at that tag instead.
    [block] = hermes.find_blocks(text[:cut], cut_json_runs_on=False)
    assert block.closed


def test_stop_sequence_left_out_completes_the_last_call() -> None:
    text = call({"name": "run", "arguments": {"code": "x"}})[: -len(hermes.CLOSE)]
    assert statuses(text) == ["truncated"]
    assert statuses(text, stopped_on_sequence=True) == ["ok"]


def test_spans_point_at_the_calls() -> None:
    one = call({"name": "run", "arguments": {"code": "x"}})
    text = f"first {one} then {one}"
    spans = [a.span for a in hermes.parse(text)]
    assert [text[a:b] for a, b in spans] == [one, one]


def test_decode_accepts_double_encoding_and_the_parameters_spelling() -> None:
    assert hermes.decode_call('{"name": "run", "arguments": "{\\"code\\": 1}"}')[1] == {"code": 1}
    assert hermes.decode_call('{"name": "run", "parameters": {"code": 1}}')[1] == {"code": 1}
    assert hermes.decode_call('{"name": "run"}') == ("run", {}, "")


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>" + "[" * 200_000,
        "<tool_call>" + "[" * 50_000 + "]" * 50_000 + "</tool_call>",
        "<tool_call>\ud800</tool_call>",
        "<tool_call>" * 1000,
        "</tool_call>" * 1000,
        "<tool_call>\x00\x1f{}</tool_call>",
    ],
)
def test_hostile_text_is_classified_not_raised(text: str) -> None:
    attempts = hermes.parse(text, tools=TOOLS)
    assert attempts and all(not a.parsed for a in attempts)
