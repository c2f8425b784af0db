"""Search-R1 records every search attempt in its step logs, under either protocol."""

from __future__ import annotations

import pytest
from support.search_r1_helpers import drive

from agentenvs.envs.search_r1.config import SearchR1Config
from agentenvs.envs.tool_calls import CallFormat, ToolCallLog


def logged(ep) -> list[ToolCallLog]:
    logs = [ToolCallLog.from_logs(step.logs) for step in ep.steps]
    assert all(log is not None for log in logs)
    return logs  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("protocol", "fmt", "opener"),
    [
        ("tags", CallFormat.SEARCH_R1, "<information>"),
        ("tool_call", CallFormat.HERMES, "<tool_response>"),
    ],
)
async def test_the_oracle_searches_succeed(tokenizer, protocol, fmt, opener) -> None:
    ep = await drive(SearchR1Config(protocol=protocol).make_env(0, tokenizer), "oracle")
    logs = logged(ep)
    assert {log.declared for log in logs} == {(fmt,)} and logs[0].result_open == opener
    attempts = [a for log in logs for a in log.attempts]
    assert attempts and all(a.succeeded for a in attempts)


@pytest.mark.parametrize("protocol", ["tags", "tool_call"])
async def test_malformed_turns_record_no_success(tokenizer, protocol) -> None:
    ep = await drive(
        SearchR1Config(protocol=protocol, max_turns=2).make_env(0, tokenizer), "malformed"
    )
    attempts = [a for log in logged(ep) for a in log.attempts]
    assert not any(a.succeeded for a in attempts)
