"""What a check reports: one finding per judgement, gathered in a report.

Kept apart from the checks so each family of checks (input settings, loss inputs,
token-level data) can live in its own module and report the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "warn", "info", "skip"]
"""``info`` states a fact a user may want (text round-trip differences) without
judging the data; it never fails a run."""


@dataclass
class Finding:
    check: str
    status: Status
    detail: str
    where: str = ""
    """The first offender: group key, trajectory, sample and token position."""


@dataclass
class CheckReport:
    source: str
    kind: Literal["trajectories", "samples"]
    findings: list[Finding] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(f.status == "fail" for f in self.findings)

    def by_check(self, name: str) -> list[Finding]:
        return [f for f in self.findings if f.check == name]

    def status(self, name: str) -> Status:
        statuses = {f.status for f in self.by_check(name)}
        for status in ("fail", "warn", "pass", "info"):
            if status in statuses:
                return status  # type: ignore[return-value]
        return "skip"
