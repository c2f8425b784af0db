"""GLM-4.5 calls: name line, key/value pairs, conversion by schema, each status."""

from __future__ import annotations

import pytest

from agentenvs.envs.tool_calls import ToolSchema, glm45

TOOLS = {"run": ToolSchema("run", ("code",), {"code": "string", "n": "integer"})}


def statuses(text: str, **kwargs: object) -> list[str]:
    return [str(a.status) for a in glm45.parse(text, tools=TOOLS, **kwargs)]  # type: ignore[arg-type]


def test_a_call_as_the_template_writes_it() -> None:
    text = "ok.\n<tool_call>run\n<arg_key>code</arg_key>\n<arg_value>print(1)</arg_value>\n"
    text += "<arg_key>n</arg_key>\n<arg_value>4</arg_value>\n</tool_call>"
    [attempt] = glm45.parse(text, tools=TOOLS)
    assert attempt.parsed and attempt.name == "run"
    assert attempt.arguments == {"code": "print(1)", "n": 4}
    assert text[attempt.span[0] :].startswith("<tool_call>run")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (glm45.format_call("run", {"code": "x"}), ["ok"]),
        (glm45.format_call("other", {"code": "x"}), ["unknown_tool"]),
        (glm45.format_call("run", {"n": 1}), ["missing_argument"]),
        (glm45.format_call("run", {"code": "x", "n": "many"}), ["invalid_argument"]),
        ("<tool_call>run\n<arg_key>code</arg_key>\n</tool_call>", ["malformed_markup"]),
        ('<tool_call>{"name": "run"}\n</tool_call>', ["malformed_markup"]),
        ("<tool_call>run\n<arg_key>code</arg_key>\n<arg_value>pri", ["truncated"]),
        ("<arg_key>code</arg_key>", ["malformed_markup"]),
    ],
)
def test_each_status(text: str, want: list[str]) -> None:
    assert statuses(text) == want


def test_limits_and_stop_sequences() -> None:
    call = glm45.format_call("run", {"code": "x"})
    assert statuses(call * 3, max_calls=2) == ["ok", "ok", "too_many_calls"]
    assert statuses(call[: -len("</tool_call>")], stopped_on_sequence=True) == ["ok"]
