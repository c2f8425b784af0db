"""The step-log form of attempts: a round trip, and clear errors on a corrupt entry."""

from __future__ import annotations

import json

import pytest

from agentenvs.envs.tool_calls import CallFormat, ToolCallLog, ToolOutcome, hermes, step_logs
from agentenvs.envs.tool_calls.record import TOOL_CALLS_LOG, episode_attempts
from agentenvs.envs.types import TokensWithLogprobs, Transition


def test_round_trip_keeps_all_but_the_argument_values() -> None:
    text = hermes.format_call("run", {"code": "print(1)" * 1000}) + "</tool_call>"
    attempts = hermes.parse(text)
    attempts[0] = attempts[0].with_outcome(ToolOutcome.TIMEOUT)
    logs = step_logs(attempts, [CallFormat.HERMES], "<tool_response>")
    assert set(logs) == {TOOL_CALLS_LOG} and isinstance(logs[TOOL_CALLS_LOG], str)
    assert len(logs[TOOL_CALLS_LOG]) < 600  # the code stays in the tokens, not the log
    back = ToolCallLog.from_logs(logs)
    assert back is not None and back.result_open == "<tool_response>"
    assert back.declared == (CallFormat.HERMES,)
    assert [(a.status, a.span, a.outcome, a.name) for a in back.attempts] == [
        (a.status, a.span, a.outcome, a.name) for a in attempts
    ]
    assert back.attempts[0].arguments == {"code": None}  # the keys survive


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        json.dumps({"attempts": [{"format": "smoke_signals", "status": "ok", "span": [0, 1]}]}),
        json.dumps({"attempts": [{"format": "hermes", "status": "ok"}]}),
        json.dumps({"declared": ["hermes"], "attempts": "many"}),
    ],
)
def test_corrupt_entries_say_so(raw: str) -> None:
    with pytest.raises(ValueError, match="unreadable 'tool_calls' log"):
        ToolCallLog.from_logs({TOOL_CALLS_LOG: raw})


def test_episode_attempts_tell_tool_envs_from_others() -> None:
    def transition(logs: dict) -> Transition:
        return Transition([1], TokensWithLogprobs([2]), 0.0, False, logs=logs)

    plain = [transition({"feedback": "x"})]
    assert episode_attempts(plain) == ([], False)
    empty = [transition(step_logs([], [CallFormat.HERMES]))]
    assert episode_attempts(empty) == ([], True)
