"""``agentenvs check`` on tool calls: runs whose tools never fired fail, healthy ones pass.

The store-level tests build records the way the collector stores them (attempts in the
step logs); the end-to-end tests run the real ReTool environment on the local
bubblewrap sandbox through the real CLI, with the scripted policy that never writes a
call that parses (``variant=malformed``) and with the oracle.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentenvs.envs.tool_calls import CallFormat, ParseStatus, ToolCallAttempt, ToolOutcome
from agentenvs.envs.tool_calls.record import step_logs
from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.check import Check, check_records
from agentenvs.rollout.inspect.tool_checks import (
    check_tools,
    describe_counts,
    episode_tool_counts,
    tool_summary,
)

AGENTENVS = str(Path(sys.executable).parent / "agentenvs")
HERMES = [CallFormat.HERMES]


def attempt(
    status: str = "ok", outcome: str = "ok", fmt: CallFormat = CallFormat.HERMES
) -> ToolCallAttempt:
    return ToolCallAttempt(fmt, ParseStatus(status), (0, 5), "run", {}, "", ToolOutcome(outcome))


def record(
    key: str, turns: list[list[ToolCallAttempt]], env: str = "toolenv", actions=None
) -> GroupRecord:
    transitions = [
        Transition(
            [1, 2],
            TokensWithLogprobs(list(actions[i]) if actions else [3], None, "stop"),
            0.0,
            i == len(turns) - 1,
            logs=step_logs(found, HERMES, "<tool_response>"),
        )
        for i, found in enumerate(turns)
    ]
    group = TrajectoryGroup([Trajectory(transitions, stop_reason="completed")], [0.0], [{}])
    return GroupRecord(key, env, key, group)


def fails(findings) -> list[str]:
    return [f.detail for f in findings if f.status == "fail"]


def test_a_run_with_no_successful_call_fails_naming_env_share_and_episode() -> None:
    records = [
        record("0:a", [[attempt("ok", "not_run")]]),  # parsed, never ran
        record("1:b", [[attempt("malformed_json", "not_run")], [attempt("truncated", "not_run")]]),
    ]
    messages = fails(check_tools(records))
    assert len(messages) == 2, messages
    zero, share = messages
    assert zero.startswith("toolenv: 0 of 3 tool-call attempts succeeded in 2 episode(s)")
    assert "group 1:b traj 0 turn 0" in zero
    assert share.startswith("toolenv: 66.7% of 3 tool-call attempts failed to parse (max 2.0%)")
    assert "malformed_json 1" in share and "truncated 1" in share


def test_a_tool_env_that_never_tried_fails_too() -> None:
    [message] = fails(check_tools([record("0:a", [[], []])]))
    assert message == "toolenv: no tool call attempted in 1 episode(s); first: group 0:a traj 0"


def test_the_parse_failure_threshold_is_settable() -> None:
    good = [attempt() for _ in range(19)]
    records = [record("0:a", [[*good, attempt("unknown_tool", "not_run")]])]  # 5% failed
    assert fails(check_tools(records)) == [
        "toolenv: 5.0% of 20 tool-call attempts failed to parse (max 2.0%): unknown_tool 1; "
        "first: group 0:a traj 0 turn 0 (unknown_tool (hermes))"
    ]
    assert fails(check_tools(records, max_parse_failures=0.05)) == []
    with pytest.raises(ValueError, match="share in"):
        check_tools(records, max_parse_failures=5)


def test_calls_in_an_undeclared_format_fail() -> None:
    foreign = attempt("ok", "not_run", CallFormat.QWEN3_CODER)
    records = [record("0:a", [[attempt(), foreign]])]
    [message] = fails(check_tools(records))
    assert message.startswith(
        "toolenv: 1 call(s) in qwen3_coder, which the template did not declare (declared: hermes)"
    )
    # Foreign calls are not counted as the declared format's parse failures.
    assert tool_summary(records)["toolenv"]["attempts"] == 1


def test_a_tool_result_in_sampled_tokens_fails(tokenizer) -> None:
    clean = tokenizer.encode("<tool_call>{}</tool_call>", add_special_tokens=False)
    folded = tokenizer.encode("<tool_response>42</tool_response>", add_special_tokens=False)
    healthy = [record("0:a", [[attempt()]], actions=[clean])]
    assert fails(check_tools(healthy, tokenizer)) == []
    spoiled = [record("0:a", [[attempt()], [attempt()]], actions=[clean, folded])]
    findings = [f for f in check_tools(spoiled, tokenizer) if f.status == "fail"]
    assert [f.where for f in findings] == ["group 0:a traj 0 turn 1"]
    assert "'<tool_response>', a tool result the loss mask does not exclude" in findings[0].detail
    skipped = check_tools(spoiled)[-1]
    assert skipped.status == "skip"


def test_stores_without_tool_logs_have_nothing_to_audit() -> None:
    plain = GroupRecord(
        "0:a",
        "guess",
        "a",
        TrajectoryGroup(
            [Trajectory([Transition([1], TokensWithLogprobs([2]), 1.0, True)])], [0.0], [{}]
        ),
    )
    assert check_tools([plain]) == []
    assert episode_tool_counts(plain.group.trajectories[0]) is None  # type: ignore[union-attr]


def test_counts_per_episode() -> None:
    rec = record("0:a", [[attempt(), attempt("truncated", "not_run")], [attempt("ok", "error")]])
    counts = episode_tool_counts(rec.group.trajectories[0])  # type: ignore[union-attr]
    assert counts == {"calls": 3, "ok": 1, "failures": {"truncated": 1}}
    assert describe_counts(counts) == "3 tool calls (1 ok; truncated 1)"


def test_the_rollout_summary_shows_calls_per_episode_and_failures_by_status() -> None:
    from rich.console import Console

    from agentenvs.rollout.cli.summary import summary_table, tool_calls_summary

    records = [
        record("0:a", [[attempt(), attempt("truncated", "not_run")]]),
        record("1:b", [[attempt("ok", "error")], [attempt("malformed_json", "not_run")]]),
    ]
    summary = tool_calls_summary(records)
    assert summary["tool_calls"]["toolenv"] == {
        "episodes": 2,
        "attempts": 4,
        "calls_per_episode": 2.0,
        "succeeded": 1,
        "failures": {"truncated": 1, "malformed_json": 1},
        "undeclared": {},
    }
    console = Console(width=200, record=True)
    console.print(summary_table(summary))
    shown = console.export_text()
    assert "tool calls" in shown
    assert "toolenv: 2.00/episode, 1 of 4 ok; failures: malformed_json 1, truncated 1" in shown
    assert tool_calls_summary([]) == {}  # no tool environment: no row


def test_check_records_reports_under_the_tool_calls_check() -> None:
    report = check_records([record("0:a", [[attempt("malformed_json", "not_run")]])])
    assert report.status(Check.TOOL_CALLS) == "fail" and not report.ok


# ---- end to end: the real ReTool environment, sandbox and CLI --------------------------
def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env_vars = {"AGENTENVS_PROGRESS_SECONDS": "0"}
    return subprocess.run(
        [AGENTENVS, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**__import__("os").environ, **env_vars},
    )


def collect(tmp_path: Path, name: str, *options: str) -> Path:
    out = tmp_path / f"{name}.jsonl"
    done = run(
        "rollout", "retool", "--groups", "2", "--group-size", "2", "--out", str(out),
        "--json-summary", "--no-progress", *options, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0
    return out


def tool_findings(store: Path, *options: str) -> tuple[int, list[dict]]:
    done = run("check", str(store), "--json", *options, cwd=store.parent)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    findings = json.loads(done.stdout)["findings"]
    return done.returncode, [f for f in findings if f["check"] == "tool_calls"]


@pytest.mark.parametrize("protocol", ["retool", "tool_call"])
def test_a_retool_run_whose_calls_never_parse_fails_check(tmp_path: Path, protocol: str) -> None:
    store = collect(
        tmp_path, "silent", "--policy-opt", "variant=malformed", "--set", f"protocol={protocol}"
    )
    code, findings = tool_findings(store)
    failed = [f for f in findings if f["status"] == "fail"]
    assert code == 1 and len(failed) == 2, findings
    zero, share = failed
    assert zero["detail"].startswith("retool: 0 of 8 tool-call attempts succeeded in 4 episode(s)")
    assert share["detail"].startswith("retool: 100.0% of 8 tool-call attempts failed to parse")
    first = json.loads(store.read_text().splitlines()[0])["key"]
    assert zero["where"] == share["where"] == f"group {first} traj 0 turn 0"
    assert f"first: group {first} traj 0 turn 0" in share["detail"]
    # The threshold only moves the share finding: zero successes still fail.
    code, findings = tool_findings(store, "--max-tool-parse-failures", "1.0")
    assert code == 1 and [f["detail"][:20] for f in findings if f["status"] == "fail"] == [
        "retool: 0 of 8 tool-"
    ]


def test_a_healthy_retool_run_passes_check(tmp_path: Path) -> None:
    store = collect(tmp_path, "healthy")
    code, findings = tool_findings(store)
    assert code == 0, findings
    assert [f["status"] for f in findings] == ["pass", "pass"]
    assert findings[0]["detail"].startswith("retool: 4 of 4 tool-call attempts succeeded")
    logs = json.loads(store.read_text().splitlines()[0])["trajectories"][0]["transitions"][0]
    stored = json.loads(logs["logs"]["tool_calls"])
    assert stored["declared"] == ["retool_code"] and stored["result_open"] == "<interpreter>"
    assert [(a["status"], a["outcome"]) for a in stored["attempts"]] == [("ok", "ok")]
