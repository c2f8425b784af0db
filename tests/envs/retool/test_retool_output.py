"""What the model reads back from the interpreter: result text and truncation policies.

The ExecResults here are plain data records of the sandbox contract (no sandbox
runs): the env tests drive the real sandbox.
"""

from __future__ import annotations

from agentenvs.envs.retool.output import (
    MIDDLE_MARKER,
    OutputPolicy,
    render_result,
    truncate,
)
from agentenvs.sandbox.base import ExecResult, ExecStatus

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "<cell>", line 1, in <module>\n'
    "ZeroDivisionError: division by zero\n"
)


def test_ok_output_is_stdout():
    assert render_result(ExecResult(ExecStatus.OK, stdout="42\n"), OutputPolicy(), 5) == "42"


def test_silent_program_gets_a_hint():
    policy = OutputPolicy()
    assert render_result(ExecResult(ExecStatus.OK), policy, 5) == policy.empty_output


def test_errors_show_last_line_or_traceback():
    result = ExecResult(ExecStatus.ERROR, stdout="partial\n", stderr=TRACEBACK, return_code=1)
    short = render_result(result, OutputPolicy(error_detail="last_line"), 5)
    assert short == "partial\nZeroDivisionError: division by zero"
    full = render_result(result, OutputPolicy(error_detail="traceback"), 5)
    assert full == "partial\n" + TRACEBACK.rstrip("\n")


def test_timeout_memory_and_output_limit_are_explained():
    policy = OutputPolicy()
    timeout = render_result(ExecResult(ExecStatus.TIMEOUT), policy, 2.5)
    assert timeout.startswith("TimeoutError") and "2.5 seconds" in timeout
    assert render_result(ExecResult(ExecStatus.MEMORY), policy, 1).startswith("MemoryError")
    flood = render_result(ExecResult(ExecStatus.OUTPUT_LIMIT, stdout="AAAA"), policy, 1)
    assert flood.startswith("AAAA\nOutputLimitError")


def test_head_tail_keeps_200_plus_200():
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    cut, was_cut = truncate(text, OutputPolicy(truncation="head_tail"))
    assert was_cut and cut == text[:200] + "..." + text[-200:]
    same, was_cut = truncate(text[:400], OutputPolicy(truncation="head_tail"))
    assert not was_cut and same == text[:400]


def test_middle_truncation_matches_verl_at_256():
    text = "x" * 100 + "y" * 300
    cut, was_cut = truncate(text, OutputPolicy(truncation="middle"))
    assert was_cut and cut == text[:128] + MIDDLE_MARKER + text[-128:]
    assert truncate("z" * 256, OutputPolicy(truncation="middle")) == ("z" * 256, False)


def test_token_budget_uses_the_policy_tokenizer(tokenizer):
    text = " ".join(f"value {i}" for i in range(400))
    policy = OutputPolicy(truncation="tokens", max_output_tokens=40)
    cut, was_cut = truncate(text, policy, tokenizer)
    assert was_cut and MIDDLE_MARKER in cut
    head, tail = cut.split(MIDDLE_MARKER)
    assert len(tokenizer.encode(head, add_special_tokens=False)) <= 21
    assert len(tokenizer.encode(tail, add_special_tokens=False)) <= 21
    assert text.startswith(head) and text.endswith(tail)
    short = "value 1"
    assert truncate(short, policy, tokenizer) == (short, False)


def test_token_budget_without_tokenizer_estimates_by_characters():
    policy = OutputPolicy(truncation="tokens", max_output_tokens=10)
    cut, was_cut = truncate("q" * 100, policy, None)
    assert was_cut and cut == "q" * 20 + MIDDLE_MARKER + "q" * 20


def test_none_keeps_everything():
    assert truncate("w" * 10_000, OutputPolicy(truncation="none")) == ("w" * 10_000, False)
