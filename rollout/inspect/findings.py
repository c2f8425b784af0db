"""What a check reports: one finding per judgement, gathered in a report.

Kept apart from the checks so each family of checks (input settings, loss inputs,
token-level data) can live in its own module and report the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal


class Check(StrEnum):
    """The five questions ``agentenvs check`` answers; every finding belongs to one.

    A ``StrEnum`` so a finding's ``check`` is written to JSON, tables and the docs
    as the plain name (``"fixed_input"``) and compares equal to it."""

    FIXED_INPUT = "fixed_input"
    """One tokenizer, template, renderer, env config and sampling setting throughout."""
    FIXED_TRAJECTORY = "fixed_trajectory"
    """Tokens, masks and logprobs line up and match what the policy saw and sampled."""
    LOSS_INPUTS = "loss_inputs"
    """Advantages are the ones the recorded estimator gives, on sampled tokens only."""
    COMPLETION_BOUNDARIES = "completion_boundaries"
    """Which weights sampled each group, and whether they are fresh enough."""
    RE_RENDERING = "re_rendering"
    """Samples break only where the context stopped extending; text round-trips."""
    REWARDS = "rewards"
    """Each reward names the code that computed it, unchanged across the store; every
    judged reward has a parsed verdict (``inspect/reward_checks.py``)."""
    TOOL_CALLS = "tool_calls"
    """Tool environments' calls parse and run, in the declared format, and no tool result
    sits in sampled tokens (``inspect/tool_checks.py``)."""


Status = Literal["pass", "fail", "warn", "info", "skip"]
"""``info`` states a fact a user may want (text round-trip differences) without
judging the data; it never fails a run."""

Kind = Literal["integrity", "health"]
"""What a finding is about. ``integrity``: whether the data is what was collected and
what a trainer should train on (tokens, masks, logprobs, versions, rewards, coverage).
``health``: whether the run went well (no tool call attempted, many parse failures,
groups without a learning signal, judges without a verdict): the data is faithful,
the run may not be worth training on. Both fail by default; ``--health warn``
downgrades health failures to warnings."""

HEALTH_DOWNGRADED = " (run health; downgraded to a warning by --health warn)"


@dataclass
class Finding:
    check: Check
    status: Status
    detail: str
    where: str = ""
    """The first offender: group key, trajectory, sample and token position."""
    tokens: tuple[int, int] | None = None
    """First and last token of the span the offender is in, when a check can narrow it
    only that far (a digest says a span changed, not which of its tokens)."""
    kind: Kind = "integrity"


def health(check: Check, status: Status, detail: str, where: str = "") -> Finding:
    """A run-health finding (see :data:`Kind`)."""
    return Finding(check, status, detail, where, kind="health")


@dataclass
class CheckReport:
    source: str
    kind: Literal["trajectories", "samples"]
    findings: list[Finding] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(f.status == "fail" for f in self.findings)

    def failed_kinds(self) -> dict[str, int]:
        """Failures per kind, integrity first: what the summary says failed."""
        counts = {kind: 0 for kind in ("integrity", "health")}
        for finding in self.findings:
            if finding.status == "fail":
                counts[finding.kind] += 1
        return {kind: n for kind, n in counts.items() if n}

    def downgrade_health(self) -> None:
        """Turn health failures into warnings (``--health warn``), saying so in each."""
        for finding in self.findings:
            if finding.kind == "health" and finding.status == "fail":
                finding.status = "warn"
                finding.detail += HEALTH_DOWNGRADED

    def by_check(self, name: Check) -> list[Finding]:
        return [f for f in self.findings if f.check == name]

    def status(self, name: Check) -> Status:
        statuses = {f.status for f in self.by_check(name)}
        for status in ("fail", "warn", "pass", "info"):
            if status in statuses:
                return status  # type: ignore[return-value]
        return "skip"
