"""``agentenvs check`` on tool calls: runs whose tools never fired, or fired in vain.

A run whose tool calls never parse trains as happily as a healthy one: the model
answers without the tool, or every turn is "final", and the reward curve says nothing
until it collapses (or climbs on a shortcut). The environments record every attempt
in the step logs (:mod:`agentenvs.envs.tool_calls.record`); this module reads them per
environment and fails a run when

* no call of a tool environment's run succeeded (parsed and ran without error),
* the share of attempts that failed to parse is above a threshold (default 2%),
* calls were written in a format the template or prompt did not declare,
* sampled tokens (trained on) hold the text that opens a tool result: a tool's output
  inside the loss mask, where an agent loop folded it into the completion.

Each message names the environment, the share and the first offending episode.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.tool_calls.record import ToolCallLog, episode_attempts
from agentenvs.envs.tool_calls.types import ParseStatus, ToolCallAttempt
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.codec import Codec
from agentenvs.rollout.inspect.findings import Check, Finding, health
from agentenvs.rollout.inspect.groups import FirstFailure, GroupView
from agentenvs.rollout.inspect.options import DEFAULT_MAX_PARSE_FAILURES

__all__ = ["DEFAULT_MAX_PARSE_FAILURES", "ToolsCheck", "check_tools", "tool_stats", "tool_summary"]


@dataclass
class EnvToolStats:
    """What one environment's records say about its tool calls."""

    env: str
    episodes: int = 0
    attempts: int = 0
    succeeded: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    foreign: Counter[str] = field(default_factory=Counter)
    declared: set[str] = field(default_factory=set)
    first_failure: tuple[str, str] = ("", "")
    """Where the first failed attempt is, and what it was."""
    first_foreign: tuple[str, str] = ("", "")
    first_episode: str = ""

    @property
    def failures(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != ParseStatus.OK)

    def share(self) -> float:
        return self.failures / self.attempts if self.attempts else 0.0

    def failure_counts(self) -> str:
        failed = {s: n for s, n in self.statuses.items() if s != ParseStatus.OK}
        return ", ".join(f"{s} {n}" for s, n in sorted(failed.items(), key=lambda kv: -kv[1]))


def where(record: GroupRecord, traj: int, turn: int | None = None) -> str:
    place = f"group {record.key} traj {traj}"
    return place if turn is None else f"{place} turn {turn}"


def _describe(attempt: ToolCallAttempt) -> str:
    detail = f": {attempt.detail}" if attempt.detail else ""
    return f"{attempt.status} ({attempt.format}){detail}"


def tool_stats(records: Iterable[GroupRecord]) -> dict[str, EnvToolStats]:
    """Per environment with a tool log, its attempts counted (read errors raise
    ``ValueError`` naming the record)."""
    stats: dict[str, EnvToolStats] = {}
    for record in records:
        count_record(stats, record)
    return stats


def count_record(stats: dict[str, EnvToolStats], record: GroupRecord) -> None:
    """Add one record's tool calls to ``stats``."""
    if record.group is None:
        return
    for t, traj in enumerate(record.group.trajectories):
        seen = False
        for turn, transition in enumerate(traj.transitions):
            try:
                log = ToolCallLog.from_logs(transition.logs)
            except ValueError as err:
                raise ValueError(f"{where(record, t, turn)}: {err}") from None
            if log is None:
                continue
            env = stats.setdefault(record.env or "(unnamed env)", EnvToolStats(record.env))
            if not seen:
                env.episodes += 1
                env.first_episode = env.first_episode or where(record, t)
                seen = True
            declared = {str(f) for f in log.declared}
            env.declared |= declared
            for attempt in log.attempts:
                _count(env, attempt, declared, where(record, t, turn))


def _count(env: EnvToolStats, attempt: ToolCallAttempt, declared: set[str], place: str) -> None:
    if declared and str(attempt.format) not in declared:
        env.foreign[str(attempt.format)] += 1
        env.first_foreign = (
            env.first_foreign if env.first_foreign[0] else (place, _describe(attempt))
        )
        return
    env.attempts += 1
    env.statuses[str(attempt.status)] += 1
    env.outcomes[str(attempt.outcome)] += 1
    env.succeeded += int(attempt.succeeded)
    if not attempt.parsed and not env.first_failure[0]:
        env.first_failure = (place, _describe(attempt))


class ToolsCheck:
    """The tool-call findings for a store's ok records (nothing when no environment
    recorded tool calls: a run without tools has nothing to audit here). Whether calls
    fire and parse is run health; a tool result in sampled tokens is integrity."""

    def __init__(
        self, tokenizer: Any = None, max_parse_failures: float = DEFAULT_MAX_PARSE_FAILURES
    ) -> None:
        if not 0.0 <= max_parse_failures <= 1.0:
            raise ValueError(f"max_parse_failures must be a share in [0, 1], not {max_parse_failures}")  # fmt: skip
        self.limit = max_parse_failures
        self.stats: dict[str, EnvToolStats] = {}
        self.masking = ResultMasking(tokenizer)

    def add(self, view: GroupView) -> None:
        self.add_record(view.record)

    def add_record(self, record: GroupRecord) -> None:
        count_record(self.stats, record)
        self.masking.add_record(record)

    def findings(self) -> list[Finding]:
        findings: list[Finding] = []
        for name, env in sorted(self.stats.items()):
            findings += _env_findings(name, env, self.limit)
        if self.stats:
            findings.append(self.masking.finding())
        return findings


def check_tools(
    records: Iterable[GroupRecord],
    tokenizer: Any = None,
    *,
    max_parse_failures: float = DEFAULT_MAX_PARSE_FAILURES,
) -> list[Finding]:
    """:class:`ToolsCheck` over a list of ok records."""
    check = ToolsCheck(tokenizer, max_parse_failures)
    for record in records:
        check.add_record(record)
    return check.findings()


def _env_findings(name: str, env: EnvToolStats, limit: float) -> list[Finding]:
    found: list[Finding] = []
    counts = env.failure_counts()
    place, what = env.first_failure
    first = f"; first: {place} ({what})" if place else ""
    if env.succeeded == 0:
        if env.attempts == 0:
            detail = (
                f"{name}: no tool call attempted in {env.episodes} episode(s); "
                f"first: {env.first_episode}"
            )
            found.append(health(Check.TOOL_CALLS, "fail", detail, env.first_episode))
        else:
            detail = (
                f"{name}: 0 of {env.attempts} tool-call attempts succeeded in {env.episodes} "
                f"episode(s) (parse failures {env.share():.0%}: {counts or 'none'}; "
                f"outcomes: {_counter(env.outcomes)}){first or '; first: ' + env.first_episode}"
            )
            found.append(health(Check.TOOL_CALLS, "fail", detail, place or env.first_episode))
    if env.attempts and env.share() > limit:
        detail = (
            f"{name}: {env.share():.1%} of {env.attempts} tool-call attempts failed to parse "
            f"(max {limit:.1%}): {counts}{first}"
        )
        found.append(health(Check.TOOL_CALLS, "fail", detail, place))
    if env.foreign:
        total = sum(env.foreign.values())
        formats = ", ".join(sorted(env.foreign))
        where_, what_ = env.first_foreign
        detail = (
            f"{name}: {total} call(s) in {formats}, which the template did not declare "
            f"(declared: {', '.join(sorted(env.declared)) or 'none'}); first: {where_} ({what_})"
        )
        found.append(health(Check.TOOL_CALLS, "fail", detail, where_))
    if not found:
        detail = (
            f"{name}: {env.succeeded} of {env.attempts} tool-call attempts succeeded in "
            f"{env.episodes} episode(s); parse failures {env.share():.1%} (max {limit:.1%})"
        )
        found.append(health(Check.TOOL_CALLS, "pass", detail))
    return found


def _counter(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(counter.items(), key=lambda kv: -kv[1]))


class ResultMasking:
    """Sampled tokens never hold the text that opens a tool result (``result_open`` in
    the step log): the loss would train the model to write the tool's output."""

    def __init__(self, tokenizer: Any) -> None:
        self.codec = Codec.of(tokenizer) if tokenizer is not None else None
        self.checked = 0
        self.first = FirstFailure()

    def add_record(self, record: GroupRecord) -> None:
        if self.codec is None or record.group is None or self.first.found:
            return
        for t, traj in enumerate(record.group.trajectories):
            for turn, transition in enumerate(traj.transitions):
                log = ToolCallLog.from_logs(transition.logs)
                if log is None or not log.result_open:
                    continue
                self.checked += 1
                if log.result_open in self.codec.decode(transition.ac.tokens):
                    detail = (
                        f"{record.env}: sampled tokens hold {log.result_open!r}, a tool result "
                        "the loss mask does not exclude"
                    )
                    self.first.keep(
                        Finding(Check.TOOL_CALLS, "fail", detail, where(record, t, turn))
                    )
                    return

    def finding(self) -> Finding:
        if self.first.finding is not None:
            return self.first.finding
        if self.codec is None:
            detail = "no tokenizer (pass --tokenizer) to look for tool results"
            return Finding(Check.TOOL_CALLS, "skip", detail)
        if not self.checked:
            detail = "no tool environment here names the text that opens its results"
            return Finding(Check.TOOL_CALLS, "skip", detail)
        detail = f"{self.checked} sampled turn(s) of tool environments hold no tool result"
        return Finding(Check.TOOL_CALLS, "pass", detail)


def tool_summary(records: Iterable[GroupRecord]) -> dict[str, dict[str, Any]]:
    """Per environment: calls per episode and failures by status (the summary table
    and the viewers show these)."""
    summary = {}
    for name, env in tool_stats(records).items():
        summary[name] = {
            "episodes": env.episodes,
            "attempts": env.attempts,
            "calls_per_episode": round(env.attempts / env.episodes, 2) if env.episodes else 0.0,
            "succeeded": env.succeeded,
            "failures": {s: n for s, n in env.statuses.items() if s != ParseStatus.OK},
            "undeclared": dict(env.foreign),
        }
    return summary


def episode_tool_counts(trajectory: Any) -> dict[str, Any] | None:
    """One episode's calls: how many, how many succeeded, failures by status (None for
    an episode without tool logs)."""
    attempts, seen = episode_attempts(trajectory.transitions)
    if not seen:
        return None
    failures = Counter(str(a.status) for a in attempts if not a.parsed)
    return {
        "calls": len(attempts),
        "ok": sum(1 for a in attempts if a.succeeded),
        "failures": dict(sorted(failures.items())),
    }


def describe_counts(counts: dict[str, Any] | None) -> str:
    """``3 tool calls (2 ok; malformed_json 1)``, or "" for an episode without tools."""
    if counts is None:
        return ""
    failed = "".join(f"; {status} {n}" for status, n in counts["failures"].items())
    return f"{counts['calls']} tool calls ({counts['ok']} ok{failed})"


def describe_summary(summary: dict[str, dict[str, Any]]) -> str:
    """One line per environment for a summary table: calls per episode, failures."""
    lines = []
    for env, row in sorted(summary.items()):
        failed = ", ".join(f"{s} {n}" for s, n in sorted(row["failures"].items())) or "none"
        lines.append(
            f"{env}: {row['calls_per_episode']:.2f}/episode, {row['succeeded']} of "
            f"{row['attempts']} ok; failures: {failed}"
        )
    return "\n".join(lines)
