"""The text side of both protocols: parsing actions, formatting passages, capping."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentenvs.envs.search_r1.protocol import (
    fit_to_budget,
    format_passages,
    information_wrapper,
    parse_tags,
    parse_tool_turn,
    tags_turn_well_formed,
    tokenizer_counter,
    tool_result_body,
    tool_turn_well_formed,
)
from agentenvs.envs.search_r1.retrievers.base import Passage

PASSAGES = [
    Passage("1", '"Peverell"\nPeverell is a town on Brightholm.', 3.0),
    Passage("2", '"River Sella"\nThe River Sella flows past Peverell.\nSecond line.', 2.0),
]


def test_first_search_or_answer_block_decides():
    assert parse_tags("<think>x</think>\n<search> a b </search>").content == "a b"
    action = parse_tags("<answer> A </answer> <search> q </search>")
    assert (action.kind, action.content) == ("answer", "A")
    action = parse_tags("<search> q </search> <answer> A </answer>")
    assert (action.kind, action.content) == ("search", "q")
    assert parse_tags("I will answer A").kind == "invalid"
    assert parse_tags("<search> never closed").kind == "invalid"


def test_unclosed_block_counts_when_the_sampler_stopped_on_it():
    # A server that honours the </search> stop but leaves it out of the output.
    action = parse_tags("<think>hm</think> <search> q1", stopped_on_sequence=True)
    assert (action.kind, action.content) == ("search", "q1")


def test_passages_use_search_r1_layout():
    text = format_passages(PASSAGES)
    assert text == (
        'Doc 1(Title: "Peverell") Peverell is a town on Brightholm.\n'
        'Doc 2(Title: "River Sella") The River Sella flows past Peverell.\nSecond line.\n'
    )
    wrapped = information_wrapper()(text)
    assert wrapped.startswith("\n\n<information>Doc 1(Title:")
    assert wrapped.endswith("Second line.</information>\n\n")


def test_turn_format_check():
    assert tags_turn_well_formed("<think>a</think>\n<search> q </search>")
    assert tags_turn_well_formed("<answer> A </answer>")
    assert not tags_turn_well_formed("chatter <search> q </search>")
    assert not tags_turn_well_formed("<search> q </search><search> r </search>")
    assert tool_turn_well_formed('<think>a</think><tool_call>{"name": "search"}</tool_call>')
    assert not tool_turn_well_formed("just text")


def test_tool_calls_are_parsed_like_verl_search_tool():
    text = (
        '<tool_call>{"name": "search", "arguments": {"query_list": ["a", "b"]}}</tool_call>\n'
        '<tool_call>{"name": "search", "arguments": "{\\"query_list\\": [\\"c\\"]}"}</tool_call>'
        "<tool_call>{not json}</tool_call>"
        '<tool_call>{"name": "browse", "arguments": {}}</tool_call>'
    )
    turn = parse_tool_turn(text)
    assert turn.kind == "search"
    assert [c.queries for c in turn.calls[:2]] == [["a", "b"], ["c"]]
    assert "JSON" in turn.calls[2].error
    assert "unknown tool" in turn.calls[3].error
    answer = parse_tool_turn("<think>x</think><answer> Kavesh </answer>")
    assert (answer.kind, answer.answer) == ("answer", "Kavesh")
    assert parse_tool_turn("hello").kind == "invalid"


def test_tool_result_body_matches_verl_layout():
    body = tool_result_body([PASSAGES[:1], []])
    assert body.startswith('Doc 1 (Title: "Peverell")\nPeverell is a town')
    assert "\n---\n" in body


def test_cap_cuts_the_body_and_keeps_the_tags(tokenizer):
    count = tokenizer_counter(tokenizer)
    body = format_passages(PASSAGES) * 20
    wrap = information_wrapper("hint\n")
    full, cut = fit_to_budget(body, wrap, None, count)
    assert not cut and full == wrap(body)
    capped, cut = fit_to_budget(body, wrap, 60, count)
    assert cut and count(capped) <= 60
    assert capped.startswith("\n\n<information>Doc 1")
    assert capped.endswith("</information>\n\nhint\n")
    # Maximal: one more character of the body would not fit.
    body_len = len(capped) - len(wrap(""))
    assert count(wrap(body[: body_len + 1])) > 60 or body_len == len(body.strip())


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=0, max_size=400), st.integers(min_value=1, max_value=80))
def test_cap_never_exceeds_budget(tokenizer, text, budget):
    count = tokenizer_counter(tokenizer)
    wrap = information_wrapper()
    out, _ = fit_to_budget(text, wrap, budget, count)
    assert count(out) <= budget or out == wrap("")
    assert out.endswith("</information>\n\n")


def test_tool_result_is_json():
    body = tool_result_body([PASSAGES])
    assert json.loads(json.dumps({"result": body}))["result"] == body
