"""The template checker on the test tokenizer, with a template that extends and one that strips."""

from __future__ import annotations

import pytest

from agentenvs.rollout.inspect.template_check import check_template
from agentenvs.rollout.tokenizer import CHATML_TEMPLATE, train_chatml_tokenizer

_PLAIN_TURN = "{{ '<|im_start|>' + message.role + nl + message.content + '<|im_end|>' + nl }}"
# Drops the reasoning of every assistant turn that is not the last message, as
# several reasoning models' templates do.
_STRIPPING_TURN = (
    "{%- set c = message.content -%}"
    "{%- if message.role == 'assistant' and not loop.last and '</think>' in c -%}"
    "{%- set c = c.split('</think>')[-1] -%}{%- endif -%}"
    "{{ '<|im_start|>' + message.role + nl + c + '<|im_end|>' + nl }}"
)


@pytest.fixture(scope="module")
def stripping_tokenizer():
    assert _PLAIN_TURN in CHATML_TEMPLATE
    return train_chatml_tokenizer(
        chat_template=CHATML_TEMPLATE.replace(_PLAIN_TURN, _STRIPPING_TURN)
    )


def test_builtin_template_extends_every_turn(tokenizer):
    report = check_template(tokenizer)
    assert report.extends
    names = {c.name for c in report.conversations}
    assert names == {"multi_turn", "tool_call", "thinking"}
    for conv in report.conversations:
        assert conv.turns, conv.name
        assert conv.token_exact, conv.name
        assert all(t.collector_action.startswith("merge") for t in conv.turns)


def test_stripping_template_is_caught_at_each_thinking_turn(stripping_tokenizer):
    report = check_template(stripping_tokenizer)
    assert not report.extends
    by_name = {c.name: c for c in report.conversations}
    assert by_name["multi_turn"].extends
    assert by_name["tool_call"].extends
    thinking = by_name["thinking"]
    assert [t.extends for t in thinking.turns] == [False, False]
    first = thinking.turns[0]
    assert first.collector_action.startswith("split")
    assert "<think>" in first.detail
    assert first.divergence is not None and first.divergence > 0
