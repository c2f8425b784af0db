"""Answer scoring: SQuAD normalisation, exact match, F1, format-aware reward."""

from __future__ import annotations

import pytest

from agentenvs.envs.search_r1.reward import (
    exact_match,
    extract_answer,
    normalize_answer,
    score_response,
    token_f1,
)


def test_normalisation_follows_squad():
    assert normalize_answer("  The  River, Sella! ") == "river sella"
    assert normalize_answer("An Apple a day") == "apple day"
    assert normalize_answer("Port-Avelin") == "portavelin"  # punctuation is dropped, not spaced


def test_last_answer_block_is_scored():
    text = "<answer> wrong </answer> then <answer> Brightholm </answer>"
    assert extract_answer(text) == "Brightholm"
    assert extract_answer("no tags here") is None
    assert extract_answer("<answer>\n multi\nline </answer>") == "multi\nline"


@pytest.mark.parametrize(
    ("prediction", "golden", "expected"),
    [
        ("the River Sella", ["River Sella", "Sella"], 1.0),
        ("sella", ["Sella River"], 0.0),
        ("1342", ["1342"], 1.0),
        ("1342.", ["1342"], 1.0),
        ("1343", ["1342"], 0.0),
    ],
)
def test_exact_match_against_any_golden(prediction, golden, expected):
    assert exact_match(prediction, golden) == expected


def test_f1_is_partial_credit():
    assert token_f1("Liesl Ashgrove", ["Liesl Ashgrove"]) == 1.0
    assert token_f1("Ashgrove", ["Liesl Ashgrove"]) == pytest.approx(2 / 3)
    assert token_f1("nobody", ["Liesl Ashgrove"]) == 0.0
    assert token_f1("", ["x"]) == 0.0


def test_reward_modes_on_right_wrong_and_malformed():
    right = "<think>.</think><answer> Brightholm </answer>"
    wrong = "<answer> Kavesh </answer>"
    golden = ["Brightholm"]
    assert score_response(right, golden).reward == 1.0
    assert score_response(wrong, golden).reward == 0.0
    assert score_response("Brightholm", golden).reward == 0.0  # no tags: no answer
    assert score_response(right, golden, mode="f1").reward == 1.0
    fmt = {"mode": "format", "format_weight": 0.25}
    assert score_response(right, golden, well_formed=True, **fmt).reward == 1.0
    assert score_response(right, golden, well_formed=False, **fmt).reward == 0.75
    assert score_response(wrong, golden, well_formed=True, **fmt).reward == 0.25
    assert score_response(wrong, golden, well_formed=False, **fmt).reward == 0.0
    assert score_response("Brightholm", golden, well_formed=True, **fmt).reward == 0.0
