"""Qwen3-Coder XML calls: layout, value conversion by schema, each status."""

from __future__ import annotations

import pytest

from agentenvs.envs.tool_calls import ToolSchema, qwen3_coder

TOOLS = {"run": ToolSchema("run", ("code",), {"code": "string", "n": "integer", "o": "object"})}


def one(name: str, body: str) -> str:
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def param(key: str, value: str) -> str:
    return f"<parameter={key}>\n{value}\n</parameter>\n"


def statuses(text: str, **kwargs: object) -> list[str]:
    return [str(a.status) for a in qwen3_coder.parse(text, tools=TOOLS, **kwargs)]  # type: ignore[arg-type]


def test_values_follow_the_schema_types() -> None:
    text = one("run", param("code", "  print(1)\n") + param("n", "3") + param("o", '{"a": [1]}'))
    [attempt] = qwen3_coder.parse(text, tools=TOOLS)
    assert attempt.parsed
    # The newline after ">" and before "</parameter>" is layout; the rest is kept.
    assert attempt.arguments == {"code": "  print(1)\n", "n": 3, "o": {"a": [1]}}


def test_without_a_schema_json_values_are_read_and_text_kept() -> None:
    text = one("f", param("a", "[1, 2]") + param("b", "plain words"))
    [attempt] = qwen3_coder.parse(text)
    assert attempt.arguments == {"a": [1, 2], "b": "plain words"}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (one("run", param("code", "x")), ["ok"]),
        (one("nope", param("code", "x")), ["unknown_tool"]),
        (one("run", param("n", "1")), ["missing_argument"]),
        (one("run", param("code", "x") + param("n", "one")), ["invalid_argument"]),
        (one("run", param("code", "x") + param("o", "{bad")), ["invalid_argument"]),
        (one("run", "free text\n"), ["malformed_markup"]),
        ('<tool_call>\n{"name": "run"}\n</tool_call>', ["malformed_markup"]),
        ("<function=run>\n</function>", ["malformed_markup"]),
        ("<tool_call>\n<function=run>\n<parameter=code>\npri", ["truncated"]),
    ],
)
def test_each_status(text: str, want: list[str]) -> None:
    assert statuses(text) == want


def test_limits_and_stop_sequences() -> None:
    call = one("run", param("code", "x"))
    assert statuses(call * 2, max_calls=1) == ["ok", "too_many_calls"]
    unclosed = call[: -len("</tool_call>")]
    assert statuses(unclosed) == ["truncated"]
    assert statuses(unclosed, stopped_on_sequence=True) == ["ok"]


def test_code_may_hold_the_call_closing_tag() -> None:
    text = qwen3_coder.format_call("run", {"code": 'print("</tool_call>")'})
    [attempt] = qwen3_coder.parse(text, tools=TOOLS)
    assert attempt.parsed and attempt.arguments == {"code": 'print("</tool_call>")'}
