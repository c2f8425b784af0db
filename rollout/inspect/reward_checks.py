"""``check`` on rewards: which code computed them, and whether judged ones were read.

Two silent ways a reward misleads: its code changed between runs (so two runs'
curves compare different functions), or an LLM judge's verdict could not be read
(so the reward is a fallback nobody gave). Records carry each reward component's
identity (``provenance.reward.components``, ``envs/rewards/identity.py``) and each
judged episode's verdict status (step log ``judge/status``); these checks read them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from agentenvs.envs.rewards.identity import (
    RewardIdentity,
    recorded_components,
    reward_components,
)
from agentenvs.envs.rewards.verdict import FAILED_STATUSES, LOG_PREFIX
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.env_configs import stored_config
from agentenvs.rollout.inspect.findings import Check, Finding, health
from agentenvs.rollout.inspect.groups import FirstFailure, GroupView

STATUS_LOG = f"{LOG_PREFIX}status"
VERDICT_LOG = f"{LOG_PREFIX}verdict"


@dataclass(frozen=True)
class _Seen:
    identity: RewardIdentity
    where: str


def _where(record: GroupRecord) -> str:
    run = str(record.run.get("fingerprint", "")) or "?"
    return f"group {record.key} (run {run})"


def reward_identities(records: Iterable[GroupRecord]) -> dict[tuple[str, str], _Seen]:
    """The first identity recorded per (env, component), with the record that carried it."""
    seen: dict[tuple[str, str], _Seen] = {}
    for record in records:
        for component in recorded_components(record.provenance):
            seen.setdefault((record.env, component.name), _Seen(component, _where(record)))
    return seen


class RewardsCheck:
    """Reward code identity (one per component across the store) and judge verdicts."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], _Seen] = {}
        self.unnamed = self.groups = 0
        self.changed = FirstFailure()
        self.statuses: Counter[str] = Counter()
        self.first_verdict: tuple[str, str, str] | None = None

    def add(self, view: GroupView) -> None:
        self.add_record(view.record)

    def add_record(self, record: GroupRecord) -> None:
        self.groups += 1
        components = recorded_components(record.provenance)
        if not components:
            self.unnamed += 1
        for component in components:
            key = (record.env, component.name)
            first = self.seen.setdefault(key, _Seen(component, _where(record)))
            changes = first.identity.differences(component)
            if changes and not self.changed.found:
                self.changed.keep(
                    Finding(
                        Check.REWARDS,
                        "fail",
                        f"reward component {component.name!r} of {record.env or 'the env'} "
                        f"changed within the store ({'; '.join(changes)}); first recorded by "
                        f"{first.where}: rewards of the two parts come from different code",
                        _where(record),
                    )
                )
        self._verdicts(record)

    def _verdicts(self, record: GroupRecord) -> None:
        assert record.group is not None
        for t, traj in enumerate(record.group.trajectories):
            for turn, transition in enumerate(traj.transitions):
                status = transition.logs.get(STATUS_LOG)
                if status is None:
                    continue
                self.statuses[str(status)] += 1
                if self.first_verdict is None and status in FAILED_STATUSES:
                    text = str(transition.logs.get(VERDICT_LOG, ""))
                    where = f"{record.env} group {record.key} traj {t} turn {turn}"
                    self.first_verdict = (where, str(status), text)

    def findings(self) -> list[Finding]:
        return [self._identity(), *self._verdict_findings()]

    def _identity(self) -> Finding:
        if self.changed.finding is not None:
            return self.changed.finding
        if not self.seen:
            detail = "no reward identity recorded (a store from before it was)"
            return Finding(Check.REWARDS, "warn", detail)
        named = ", ".join(
            f"{name}@{s.identity.version} ({s.identity.code_sha256})"
            for (_, name), s in self.seen.items()
        )
        if self.unnamed:
            return Finding(
                Check.REWARDS,
                "warn",
                f"{self.unnamed} of {self.groups} groups name no reward code; the others: {named}",
            )
        return Finding(Check.REWARDS, "pass", f"one identity per reward component: {named}")

    def _verdict_findings(self) -> list[Finding]:
        """A judged episode whose verdict failed (no score, out of range, empty, HTTP
        error) is a run-health failure; the first offender's verdict text is quoted."""
        statuses = self.statuses
        if not statuses:
            return []
        failed = sum(n for status, n in statuses.items() if status in FAILED_STATUSES)
        judged = sum(n for status, n in statuses.items() if status != "not_judged")
        findings = []
        if failed:
            assert self.first_verdict is not None
            where, status, text = self.first_verdict
            counts = ", ".join(
                f"{s} {n}" for s, n in sorted(statuses.items()) if s in FAILED_STATUSES
            )
            excerpt = text[:120].replace("\n", " ")
            findings.append(
                health(
                    Check.REWARDS,
                    "fail",
                    f"{failed} of {judged} judged episodes have no usable verdict ({counts}); "
                    f"their reward is the failure reward. First: {status}, verdict {excerpt!r}",
                    where,
                )
            )
        else:
            detail = f"{judged} judged episodes, every verdict parsed"
            findings.append(health(Check.REWARDS, "pass", detail))
        if statuses.get("not_judged"):
            detail = f"{statuses['not_judged']} episodes ended by a shared limit were not judged"
            findings.append(Finding(Check.REWARDS, "info", detail))
        return findings


def check_rewards(records: Iterable[GroupRecord]) -> list[Finding]:
    """Every reward check on a store's ok records."""
    check = RewardsCheck()
    for record in records:
        check.add_record(record)
    return check.findings()


@dataclass(frozen=True)
class InstalledChange:
    """A reward component whose installed code is not the code a record names."""

    name: str
    recorded: RewardIdentity | None
    installed: RewardIdentity | None
    changes: tuple[str, ...]

    def accepted_by(self, against: str | None) -> bool:
        """``--against VERSION`` (or ``NAME@VERSION``) names the installed version."""
        if against is None or self.installed is None:
            return False
        name, _, version = against.rpartition("@")
        return version == self.installed.version and name in ("", self.name)


def installed_differences(record: GroupRecord) -> list[InstalledChange]:
    """Each reward component whose installed code differs from the code ``record``
    names, is no longer declared, or is declared now and was not recorded."""
    installed = {c.name: c for c in reward_components(record.env, stored_config(record))}
    found = []
    for component in recorded_components(record.provenance):
        now = installed.pop(component.name, None)
        if now is None:
            found.append(InstalledChange(component.name, component, None, ("not installed",)))
        elif changes := component.differences(now):
            found.append(InstalledChange(component.name, component, now, tuple(changes)))
    for now in installed.values():
        found.append(InstalledChange(now.name, None, now, ("installed now, not recorded",)))
    return found


def compare_reward_identities(
    records: Iterable[GroupRecord], others: Iterable[GroupRecord], other_source: str
) -> list[Finding]:
    """``check A --against B``: fail where a reward component of A differs from B's, or
    exists in one store only."""
    return compare_seen(reward_identities(records), reward_identities(others), other_source)


def compare_seen(
    mine: dict[tuple[str, str], _Seen], theirs: dict[tuple[str, str], _Seen], other_source: str
) -> list[Finding]:
    """:func:`compare_reward_identities` on identities already gathered."""
    if not mine and not theirs:
        return [Finding(Check.REWARDS, "warn", f"neither store (nor {other_source}) names reward code")]  # fmt: skip
    findings = []
    for key in sorted(set(mine) | set(theirs)):
        env, name = key
        label = f"reward component {name!r} of {env or 'the env'}"
        if key not in theirs:
            findings.append(
                Finding(Check.REWARDS, "fail", f"{label} is not in {other_source}", mine[key].where)
            )
        elif key not in mine:
            findings.append(
                Finding(Check.REWARDS, "fail", f"{label} is only in {other_source}", theirs[key].where)
            )  # fmt: skip
        else:
            changes = theirs[key].identity.differences(mine[key].identity)
            if changes:
                findings.append(
                    Finding(
                        Check.REWARDS,
                        "fail",
                        f"{label} differs from {other_source} ({'; '.join(changes)}; "
                        "theirs -> this store's)",
                        mine[key].where,
                    )
                )
    if not findings:
        findings.append(
            Finding(Check.REWARDS, "pass", f"every reward component matches {other_source}")
        )
    return findings
