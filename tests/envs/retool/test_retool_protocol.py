"""ReTool's two wire protocols: parsing what a model writes, formatting what it reads."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentenvs.envs.retool.protocol import (
    TOOL_NAME,
    code_action,
    extract_fenced,
    interpreter_block,
    parse_action,
    parse_retool,
    parse_tool_calls,
    tool_spec,
)


def test_retool_code_block_is_extracted_from_the_fence():
    text = "Let me check.\n<code>\n```python\nx = 2**10\nprint(x)\n```\n</code>"
    parsed = parse_retool(text)
    assert parsed.kind == "code"
    assert parsed.codes == ["x = 2**10\nprint(x)"]


def test_retool_block_without_fence_is_taken_verbatim():
    assert parse_retool("<code>\nprint(3)\n</code>").codes == ["print(3)"]


def test_retool_unterminated_fence_is_tolerated():
    assert parse_retool("<code>\n```python\nprint(4)\n</code>").codes == ["print(4)"]


def test_retool_uses_the_block_closed_first():
    text = (
        "<code>\n```python\nprint(1)\n```\n</code> then <code>\n```python\nprint(2)\n```\n</code>"
    )
    assert parse_retool(text).codes == ["print(1)"]


def test_retool_answer_without_code_is_final():
    assert parse_retool("So it is 5.\n<answer>\\boxed{5}</answer>").kind == "final"
    assert parse_retool("no idea").kind == "final"


def test_retool_malformed_blocks_are_named():
    empty = parse_retool("<code>\n```python\n\n```\n</code>")
    assert (empty.kind, empty.problem) == ("malformed", "empty_code")
    orphan = parse_retool("```python\nprint(1)\n```\n</code>")
    assert (orphan.kind, orphan.problem) == ("malformed", "parse_error")
    unclosed = parse_retool("<code>\n```python\nprint(1)\n```")
    assert (unclosed.kind, unclosed.problem) == ("malformed", "parse_error")


def test_interpreter_block_layout_matches_retool():
    assert interpreter_block("42") == "\n<interpreter>\n42\n</interpreter>\n\n"


def test_tool_call_is_parsed():
    text = 'Compute.\n<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(1)"}}\n</tool_call>'
    parsed = parse_tool_calls(text)
    assert parsed.kind == "code" and parsed.codes == ["print(1)"]


def test_tool_call_with_string_arguments_and_fenced_code():
    args = json.dumps({"code": "```python\nprint(2)\n```"})
    text = f'<tool_call>{{"name": "code_interpreter", "arguments": {json.dumps(args)}}}</tool_call>'
    assert parse_tool_calls(text).codes == ["print(2)"]


def test_several_tool_calls_run_in_order():
    text = code_action("print(1)", protocol="tool_call") + code_action(
        "print(2)", protocol="tool_call"
    )
    assert parse_tool_calls(text).codes == ["print(1)", "print(2)"]


def test_bad_tool_calls_are_malformed_not_errors():
    cases = {
        "<tool_call>{not json}</tool_call>": "parse_error",
        '<tool_call>{"name": "search", "arguments": {"code": "1"}}</tool_call>': "parse_error",
        '<tool_call>{"name": "code_interpreter", "arguments": {}}</tool_call>': "parse_error",
        '<tool_call>{"name": "code_interpreter", "arguments": {"code": "  "}}</tool_call>': "empty_code",
        '<tool_call>{"name": "code_interpreter"': "parse_error",
        "<tool_call>[1, 2]</tool_call>": "parse_error",
    }
    for text, problem in cases.items():
        parsed = parse_tool_calls(text)
        assert (parsed.kind, parsed.problem) == ("malformed", problem), text
        assert parsed.detail


def test_tool_call_code_may_contain_the_closing_tag():
    code = "print('</tool_call>')"
    text = code_action(code, protocol="tool_call") + code_action("print(2)", protocol="tool_call")
    assert parse_tool_calls(text).codes == [code, "print(2)"]


def test_tool_call_turn_without_call_is_final():
    assert parse_tool_calls("The answer is \\boxed{3}.").kind == "final"


def test_tool_spec_names_the_tool():
    spec = tool_spec("runs code")
    assert spec["function"]["name"] == TOOL_NAME
    assert spec["function"]["parameters"]["required"] == ["code"]


_code = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="`"), max_size=200
).filter(lambda s: s.strip() and "</code>" not in s and "<code>" not in s)


@settings(max_examples=150, deadline=None)
@given(code=_code)
def test_what_a_well_behaved_model_writes_parses_back(code):
    expected = code.strip("\n").rstrip()
    assert parse_action(code_action(code), "retool").codes == [expected]
    assert parse_action(code_action(code, protocol="tool_call"), "tool_call").codes == [code]


def test_extract_fenced_accepts_common_language_tags():
    for tag in ("python", "py", "python3", ""):
        assert extract_fenced(f"```{tag}\nprint(5)\n```") == "print(5)"
