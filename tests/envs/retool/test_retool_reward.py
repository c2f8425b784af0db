"""ReTool's grading: the last \\boxed{}, math-verify equivalence, DAPO strict box, shaping, pass@k."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentenvs.envs.retool.reward import (
    grade,
    last_boxed,
    pass_at_k,
    shaped_reward,
    strict_box_correct,
)


def test_last_boxed_balances_braces_and_takes_the_last():
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{3}{4}}") == "\\frac{3}{4}"
    assert last_boxed("nothing here") is None
    # An unclosed last box falls back to the last complete one.
    assert last_boxed("\\boxed{7} and \\boxed{oops") == "7"


@pytest.mark.parametrize(
    ("predicted", "truth"),
    [
        ("0.5", "\\frac{1}{2}"),
        ("\\frac{1}{2}", "\\frac{1}{2}"),
        ("1/2", "\\frac{1}{2}"),
        ("3/4", "\\frac{3}{4}"),
        ("1366", "1366"),
        ("1881675396328097070926028", "1881675396328097070926028"),
        ("\\dfrac{100}{101}", "\\frac{100}{101}"),
    ],
)
def test_math_verify_accepts_equivalent_answers(predicted, truth):
    assert grade(f"so <answer>\\boxed{{{predicted}}}</answer>", truth).correct


@pytest.mark.parametrize(
    ("predicted", "truth"),
    [
        ("0.51", "\\frac{1}{2}"),
        ("1365", "1366"),
        # One unit off in the 25th digit: big integers are compared exactly.
        ("1881675396328097070926029", "1881675396328097070926028"),
        ("1000000000040", "1000000000039"),
    ],
)
def test_math_verify_rejects_different_answers(predicted, truth):
    result = grade(f"\\boxed{{{predicted}}}", truth)
    assert not result.correct and result.predicted == predicted


def test_no_box_is_wrong_and_reports_no_prediction():
    result = grade("The answer is 12.", "12")
    assert not result.correct and result.predicted is None


def test_strict_box_is_exact_and_looks_only_at_the_end():
    assert strict_box_correct("work... \\boxed{12}", "12") == (True, "12")
    assert strict_box_correct("\\boxed{12.0}", "12")[0] is False
    assert grade("\\boxed{12.0}", "12", "strict_box").correct is False
    assert grade("\\boxed{12.0}", "12", "math_verify").correct is True
    far = "\\boxed{12}" + "x" * 150
    assert strict_box_correct(far, "12") == (False, None)


def test_shaping_follows_the_verl_recipe():
    kwargs = {"correct_reward": 1.0, "incorrect_reward": -1.0, "per_call": 0.1, "cap": 0.4}
    assert shaped_reward(True, tool_calls=0, shaping=True, **kwargs) == 1.0
    assert shaped_reward(False, tool_calls=3, shaping=False, **kwargs) == -1.0
    assert shaped_reward(False, tool_calls=2, shaping=True, **kwargs) == pytest.approx(-0.8)
    # verl: min(-0.6, -1 + 0.1 * calls): capped at -0.6.
    for calls in range(12):
        verl = min(-0.6, -1.0 + calls * 0.1)
        assert shaped_reward(False, tool_calls=calls, shaping=True, **kwargs) == pytest.approx(verl)


@given(n=st.integers(1, 8), data=st.data())
def test_pass_at_k_matches_enumeration(n, data):
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    expected = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    assert math.isclose(pass_at_k(n, c, k), expected)


def test_pass_at_k_rejects_impossible_k():
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
