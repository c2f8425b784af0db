"""Calls in formats the environment did not declare are found (and only those)."""

from __future__ import annotations

from agentenvs.envs.tool_calls import CallFormat, deepseek, glm45, hermes, qwen3_coder
from agentenvs.envs.tool_calls.sniff import foreign_attempts


def test_each_chat_format_is_found_outside_its_declaration() -> None:
    writers = {
        CallFormat.HERMES: hermes.format_call,
        CallFormat.QWEN3_CODER: qwen3_coder.format_call,
        CallFormat.GLM45: glm45.format_call,
        CallFormat.DEEPSEEK: deepseek.format_call,
    }
    for fmt, write in writers.items():
        text = "sure: " + write("run", {"code": "print(1)"})
        assert foreign_attempts(text, {fmt}) == []  # declared: nothing foreign
        others = [f for f in writers if f != fmt]
        found = foreign_attempts(text, others)
        assert [a.format for a in found] == [fmt], fmt


def test_plain_prose_and_tag_formats_are_not_chat_calls() -> None:
    text = "<search>q</search> <code>print(1)</code> <action>look</action>"
    assert foreign_attempts(text, {CallFormat.HERMES}) == []
