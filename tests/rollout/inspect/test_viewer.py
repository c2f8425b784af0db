"""The viewer's pieces: decoding tokens for display, spotting restarts, escaping."""

from __future__ import annotations

import io
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.terminal_view import render_terminal
from agentenvs.rollout.inspect.viewer import (
    decode_pieces,
    overview,
    render_html,
    trajectory_view,
)


def enc(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=40))
def test_pieces_concatenate_to_the_decoding(tokenizer, text) -> None:
    ids = enc(tokenizer, text)
    pieces = decode_pieces(tokenizer, ids)
    assert [t for p in pieces for t in p.token_ids] == ids
    assert "".join(p.text for p in pieces) == tokenizer.decode(ids)


def test_split_characters_are_shown_whole(tokenizer) -> None:
    ids = enc(tokenizer, "a日本b")
    pieces = decode_pieces(tokenizer, ids, [-0.5] * len(ids))
    texts = [p.text for p in pieces]
    assert "日" in texts and "本" in texts and "\ufffd" not in "".join(texts)
    grouped = next(p for p in pieces if p.text == "日")
    assert len(grouped.token_ids) > 1  # byte-level: one character, several tokens
    assert grouped.title().count("logprob -0.5000") == len(grouped.token_ids)


def test_special_tokens_are_marked(tokenizer) -> None:
    pieces = decode_pieces(tokenizer, enc(tokenizer, "hi<|im_end|>"))
    assert [(p.text, p.special) for p in pieces][-1] == ("<|im_end|>", True)
    assert not pieces[0].special


def _record(tokenizer) -> GroupRecord:
    prompt = enc(tokenizer, "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n")
    a1 = enc(tokenizer, "<think>x</think>1<|im_end|>")
    obs = enc(tokenizer, "\n<|im_start|>user\n<script>alert(1)</script><|im_end|>\n")
    rebuilt = enc(tokenizer, "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n1")
    a2 = enc(tokenizer, "2<|im_end|>")
    traj = Trajectory(
        [
            Transition(prompt, TokensWithLogprobs(a1, [-0.1] * len(a1), "eos"), 0.0, False),
            Transition(prompt + a1 + obs, TokensWithLogprobs(a1, None, "eos"), 0.5, False),
            Transition(rebuilt, TokensWithLogprobs(a2, [-1.0] * len(a2), "eos"), 1.0, True,
                       metrics={"stop/completed": 1}),
        ],
        stop_reason="completed",
    )  # fmt: skip
    group = TrajectoryGroup([traj], [0.25], [{"judge": 1}])
    return GroupRecord("0:t", "demo_env", "t", group)


def test_trajectory_view_marks_env_tokens_and_restarts(tokenizer) -> None:
    record = _record(tokenizer)
    view = trajectory_view(tokenizer, record.group.trajectories[0], 0, 0.25)
    kinds = [(s.kind, s.restart) for s in view.spans]
    assert kinds == [
        ("prompt", False),
        ("sampled", False),
        ("env", False),
        ("sampled", False),
        ("prompt", True),
        ("sampled", False),
    ]
    assert view.samples == 2
    assert [row.restart for row in view.turns] == [False, False, True]
    assert view.turns[1].mean_logprob is None and view.turns[2].mean_logprob == -1.0
    assert view.total_reward == 1.75
    assert view.sampled_tokens == sum(r.action_tokens for r in view.turns)


def page_json(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.DOTALL)
    assert match, "the page carries its data"
    return json.loads(match.group(1))


def test_html_carries_escaped_data_and_shows_failures(tokenizer) -> None:
    failed = GroupRecord("1:t", "demo_env", "t", None, status="failed", error="boom <b>x</b>")
    record = _record(tokenizer)
    record.extra = {"advantages": [0.5], "advantage_estimator": {"estimator": "rloo"}}
    page = render_html([record, failed], tokenizer, source="mem")
    assert page.count("</script>") == 2  # only the page's own: the env's text cannot close one
    assert "<script>alert(1)" not in page.split('id="data">')[0]
    data = page_json(page)
    ok, bad = data["groups"]
    assert bad["error"] == "boom <b>x</b>" and bad["status"] == "failed" and bad["key"] == "1:t"
    spans = ok["trajs"][0]["spans"]
    assert "<script>alert(1)</script>" in "".join(s["t"] for s in spans)
    assert [s.get("restart", False) for s in spans] == [False] * 4 + [True, False]
    assert [s.get("turn") for s in spans] == [0, 0, 1, 1, 2, 2]
    traj = record.group.trajectories[0]
    sampled = "".join(s["t"] for s in spans if s["k"] == "s")
    assert sampled == "".join(tokenizer.decode(t.ac.tokens) for t in traj.transitions)
    for span in spans:  # piece ends index the text, and every token id is carried
        assert span["e"][-1] == len(span["t"].encode("utf-16-le")) // 2
        assert sum(span.get("n", [1] * len(span["e"]))) == len(span["ids"])
    assert spans[-1]["lp"] == [-1.0] * len(spans[-1]["ids"])
    assert ok["trajs"][0]["adv"] == 0.5 and ok["est"] == {"estimator": "rloo"}
    assert ok["gm"] == [{"judge": 1}] and ok["metrics"]["stop/completed"] == 1
    assert data["summary"]["estimators"] == ["rloo"]


def test_offsets_count_utf16_units_for_characters_outside_the_bmp(tokenizer) -> None:
    """JavaScript slices strings in UTF-16 units: an emoji takes two."""
    from agentenvs.rollout.inspect.decode import decode_span
    from agentenvs.rollout.inspect.page_data import span_data
    from agentenvs.rollout.inspect.viewer import Span

    ids = enc(tokenizer, "a😀b")
    data = span_data(Span("sampled", decode_span(tokenizer, ids)))
    assert data["t"] == "a😀b" and data["e"][-1] == 4


def test_select_by_key_index_and_limit(tokenizer) -> None:
    from agentenvs.rollout.inspect.viewer import ViewerError, select_groups

    records = [GroupRecord(f"{i}:k", "e", "t", None, status="failed", error="x") for i in range(5)]
    assert [i for i, _ in select_groups(records, "3:k")] == [3]
    assert [i for i, _ in select_groups(records, "2")] == [2]
    assert [i for i, _ in select_groups(records, None, 2)] == [0, 1]
    with pytest.raises(ViewerError, match="no group 9"):
        select_groups(records, "9")
    with pytest.raises(ViewerError, match="--limit"):
        select_groups(records, None, 0)


def test_terminal_view(tokenizer) -> None:
    failed = GroupRecord("1:t", "demo_env", "t", None, status="failed", error="boom [red]x")
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, color_system=None)
    render_terminal([_record(tokenizer), failed], tokenizer, console, source="mem")
    text = buffer.getvalue()
    assert "[new training sample]" in text
    assert "boom [red]x" in text  # user text is not taken as markup
    assert "(failed)" in text and "2 training samples" in text
    assert "mean logprob" in text and "-1.0000" in text  # the column docs/cli.md promises
    assert "[turn 0]" in text and "[turn 2]" in text


def test_overview_counts(tokenizer) -> None:
    failed = GroupRecord("1:t", "demo_env", "t", None, status="failed", error="x")
    summary = overview([_record(tokenizer), failed])
    assert summary == {
        "groups": 2,
        "ok": 1,
        "failed": 1,
        "trajectories": 1,
        "mean_reward": 1.75,
        "stop_reasons": {"completed": 1},
        "envs": ["demo_env"],
        "estimators": [],
    }


def test_the_end_of_turn_note_counts_what_was_sampled(tokenizer) -> None:
    """The legend says whether the end-of-turn token carries loss, from the file's actions."""
    from agentenvs.rollout.inspect.viewer import end_of_turn

    record = _record(tokenizer)  # each action ends with the sampled <|im_end|>
    counted = end_of_turn([record], tokenizer)
    assert (counted.sampled, counted.turns) == (3, 3)
    assert counted.note().endswith("sampled at the end of every action, so trained")
    first = record.group.trajectories[0].transitions[0]
    first.ac = TokensWithLogprobs(first.ac.tokens[:-1], None, "stop")  # a stop string ended it
    assert "sampled (trained) in 2 of 3 turns" in end_of_turn([record], tokenizer).note()
    for tr in record.group.trajectories[0].transitions:
        tr.ac = TokensWithLogprobs(tr.ac.tokens[:-1], None, "stop")
    note = end_of_turn([record], tokenizer).note()
    assert "<|im_end|>: never sampled here, so it is never trained" in note
    page = page_json(render_html([record], tokenizer))
    assert page["eot"] == note


def test_html_carries_a_failed_groups_traceback(tokenizer) -> None:
    trace = 'Traceback (most recent call last):\n  File "env.py", line 3, in step\nKeyError: 1\n'
    failed = GroupRecord("1:t", "demo_env", "t", None, status="failed", error="x", traceback=trace)
    data = page_json(render_html([_record(tokenizer), failed], tokenizer))
    assert data["groups"][1]["traceback"] == trace and data["groups"][0]["traceback"] is None
