"""DeepSeek V3/R1 calls: the per-call markers decide; each status."""

from __future__ import annotations

import pytest

from agentenvs.envs.tool_calls import ToolSchema, deepseek

TOOLS = {"run": ToolSchema("run", ("code",), {"code": "string"})}
B, E, S = deepseek.CALL_BEGIN, deepseek.CALL_END, deepseek.SEP


def statuses(text: str, **kwargs: object) -> list[str]:
    return [str(a.status) for a in deepseek.parse(text, tools=TOOLS, **kwargs)]  # type: ignore[arg-type]


def test_the_template_layout_reads_back() -> None:
    text = deepseek.format_call("run", {"code": "print('日本')"})
    [attempt] = deepseek.parse(text, tools=TOOLS)
    assert attempt.parsed and attempt.arguments == {"code": "print('日本')"}
    assert text[attempt.span[0] : attempt.span[1]].endswith(E)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (f'{B}function{S}run\n```json\n{{"code": "x"}}\n```{E}', ["ok"]),
        (f'{B}function{S}run\n{{"code": "x"}}{E}', ["ok"]),
        (f'{B}function{S}zap\n```json\n{{"code": "x"}}\n```{E}', ["unknown_tool"]),
        (f"{B}function{S}run\n```json\n{{}}\n```{E}", ["missing_argument"]),
        (f'{B}function{S}run\n```json\n{{"code": 1}}\n```{E}', ["invalid_argument"]),
        (f"{B}function{S}run\n```json\n{{code}}\n```{E}", ["malformed_json"]),
        (f"{B}function run\n{E}", ["malformed_markup"]),
        (f'{B}function{S}run\n```json\n{{"code": "x"', ["truncated"]),
        (f"text{E}", ["malformed_markup"]),
    ],
)
def test_each_status(text: str, want: list[str]) -> None:
    assert statuses(text) == want


def test_limits() -> None:
    one = f'{B}function{S}run\n```json\n{{"code": "x"}}\n```{E}'
    assert statuses(deepseek.CALLS_BEGIN + one * 2, max_calls=1) == ["ok", "too_many_calls"]
