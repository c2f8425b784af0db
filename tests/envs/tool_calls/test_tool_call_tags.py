"""The tag formats: Search-R1's search, ALFWorld's action, ReTool's code blocks."""

from __future__ import annotations

import pytest

from agentenvs.envs.tool_calls import alfworld_action, retool_code, search_r1


@pytest.mark.parametrize(
    ("module", "text", "want"),
    [
        (search_r1, "<think>hm</think><search> capital of peru </search>", ["ok"]),
        (search_r1, "<search></search>", ["invalid_argument"]),
        (search_r1, "<search>capital of", ["truncated"]),
        (search_r1, "see </search>", ["malformed_markup"]),
        (search_r1, "<answer>Lima</answer>", []),
        (alfworld_action, "<action>go to desk 1</action>", ["ok"]),
        (alfworld_action, "<Action>  </ACTION>", ["invalid_argument"]),
        (alfworld_action, "<action>go to", ["truncated"]),
        (alfworld_action, "go</action>", ["malformed_markup"]),
        (retool_code, "<code>\n```python\nprint(1)\n```\n</code>", ["ok"]),
        (retool_code, "<code>\n```python\n```\n</code>", ["invalid_argument"]),
        (retool_code, "<code>\n```python\nprint(1)", ["truncated"]),
        (retool_code, "print(1)\n</code>", ["malformed_markup"]),
    ],
)
def test_each_status(module: object, text: str, want: list[str]) -> None:
    assert [str(a.status) for a in module.parse(text)] == want  # type: ignore[attr-defined]


def test_values_spans_and_limits() -> None:
    [search] = search_r1.parse("x <search> q </search>")
    assert search.arguments == {"query": "q"} and search.span == (2, 22)
    two = search_r1.parse("<search>a</search><search>b</search>", max_calls=1)
    assert [str(a.status) for a in two] == ["ok", "too_many_calls"]
    assert [str(a.status) for a in search_r1.parse("<search>a", stopped_on_sequence=True)] == ["ok"]
    [code] = retool_code.parse("<code>a <code>\n```py\nprint(2)\n```\n</code>")
    assert code.arguments == {"code": "print(2)"}  # the last opening tag opens the block
