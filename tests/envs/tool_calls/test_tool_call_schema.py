"""Tool tables from OpenAI specs; validation and value conversion shared by formats."""

from __future__ import annotations

import pytest

from agentenvs.envs.retool.protocol import tool_spec
from agentenvs.envs.tool_calls import ParseStatus, ToolCallAttempt, ToolSchema, tools_of
from agentenvs.envs.tool_calls.schema import convert_text_value, limit_calls, validate
from agentenvs.envs.tool_calls.types import CallFormat


def attempt(name: str, **arguments: object) -> ToolCallAttempt:
    return ToolCallAttempt(CallFormat.HERMES, ParseStatus.OK, (0, 1), name, dict(arguments))


def test_openai_spec_becomes_a_schema() -> None:
    table = tools_of([tool_spec("Run Python.")])
    assert table["code_interpreter"] == ToolSchema(
        "code_interpreter", ("code",), {"code": "string"}
    )
    with pytest.raises(ValueError, match="not an OpenAI function tool"):
        ToolSchema.from_openai({"type": "function", "function": {"description": "x"}})


def test_validation_order_and_types() -> None:
    tools = {"f": ToolSchema("f", ("a",), {"a": "integer", "b": "number"})}
    assert validate(attempt("g", a=1), tools).status == ParseStatus.UNKNOWN_TOOL
    assert validate(attempt("f", b=1), tools).status == ParseStatus.MISSING_ARGUMENT
    assert validate(attempt("f", a=True), tools).status == ParseStatus.INVALID_ARGUMENT
    assert validate(attempt("f", a=1, b=2.5), tools).status == ParseStatus.OK
    assert validate(attempt("g"), None).status == ParseStatus.OK  # no table: no judgement


def test_text_values() -> None:
    assert convert_text_value("007", "string") == ("007", "")
    assert convert_text_value("7", "integer") == (7, "")
    assert convert_text_value("null", "integer") == (None, "")
    assert convert_text_value("seven", "integer")[1]
    assert convert_text_value("[1]", "object")[1] == "must be object"
    assert convert_text_value("some words", None) == ("some words", "")


def test_limit_counts_readable_calls_only() -> None:
    bad = ToolCallAttempt(CallFormat.HERMES, ParseStatus.MALFORMED_JSON, (0, 1))
    limited = limit_calls([bad, attempt("f"), attempt("f")], 1)
    assert [str(a.status) for a in limited] == ["malformed_json", "ok", "too_many_calls"]
