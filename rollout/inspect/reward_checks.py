"""``check`` on rewards: which code computed them, and whether judged ones were read.

Two silent ways a reward misleads: its code changed between runs (so two runs'
curves compare different functions), or an LLM judge's verdict could not be read
(so the reward is a fallback nobody gave). Records carry each reward component's
identity (``provenance.reward.components``, ``envs/rewards/identity.py``) and each
judged episode's verdict status (step log ``judge/status``); these checks read them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from agentenvs.envs.rewards.identity import RewardIdentity, recorded_components
from agentenvs.envs.rewards.verdict import FAILED_STATUSES, LOG_PREFIX
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.inspect.findings import Check, Finding

STATUS_LOG = f"{LOG_PREFIX}status"
VERDICT_LOG = f"{LOG_PREFIX}verdict"


@dataclass(frozen=True)
class _Seen:
    identity: RewardIdentity
    where: str


def _where(record: GroupRecord) -> str:
    run = str(record.run.get("fingerprint", "")) or "?"
    return f"group {record.key} (run {run})"


def reward_identities(records: Sequence[GroupRecord]) -> dict[tuple[str, str], _Seen]:
    """The first identity recorded per (env, component), with the record that carried it."""
    seen: dict[tuple[str, str], _Seen] = {}
    for record in records:
        for component in recorded_components(record.provenance):
            seen.setdefault((record.env, component.name), _Seen(component, _where(record)))
    return seen


def check_reward_identity(records: Sequence[GroupRecord]) -> Finding:
    """Fail when a reward component's function, version, code hash, libraries or settings
    differ between records of one store (a run resumed or appended after an edit)."""
    seen: dict[tuple[str, str], _Seen] = {}
    unnamed = 0
    for record in records:
        components = recorded_components(record.provenance)
        if not components:
            unnamed += 1
            continue
        for component in components:
            key = (record.env, component.name)
            first = seen.setdefault(key, _Seen(component, _where(record)))
            changes = first.identity.differences(component)
            if changes:
                return Finding(
                    Check.REWARDS,
                    "fail",
                    f"reward component {component.name!r} of {record.env or 'the env'} changed "
                    f"within the store ({'; '.join(changes)}); first recorded by {first.where}: "
                    "rewards of the two parts come from different code",
                    _where(record),
                )
    if not seen:
        return Finding(
            Check.REWARDS, "warn", "no reward identity recorded (a store from before it was)"
        )
    named = ", ".join(
        f"{name}@{s.identity.version} ({s.identity.code_sha256})" for (_, name), s in seen.items()
    )
    if unnamed:
        return Finding(
            Check.REWARDS,
            "warn",
            f"{unnamed} of {len(records)} groups name no reward code; the others: {named}",
        )
    return Finding(Check.REWARDS, "pass", f"one identity per reward component: {named}")


def check_judge_verdicts(records: Sequence[GroupRecord]) -> list[Finding]:
    """Fail when a judged episode's verdict failed (no score, out of range, empty, HTTP
    error); the first offender's raw verdict text is quoted. Nothing for unjudged runs."""
    statuses: Counter[str] = Counter()
    first: tuple[str, str, str] | None = None
    for record in records:
        assert record.group is not None
        for t, traj in enumerate(record.group.trajectories):
            for turn, transition in enumerate(traj.transitions):
                status = transition.logs.get(STATUS_LOG)
                if status is None:
                    continue
                statuses[str(status)] += 1
                if first is None and status in FAILED_STATUSES:
                    text = str(transition.logs.get(VERDICT_LOG, ""))
                    where = f"{record.env} group {record.key} traj {t} turn {turn}"
                    first = (where, str(status), text)
    if not statuses:
        return []
    failed = sum(n for status, n in statuses.items() if status in FAILED_STATUSES)
    judged = sum(n for status, n in statuses.items() if status != "not_judged")
    findings = []
    if failed:
        assert first is not None
        counts = ", ".join(f"{s} {n}" for s, n in sorted(statuses.items()) if s in FAILED_STATUSES)
        excerpt = first[2][:120].replace("\n", " ")
        findings.append(
            Finding(
                Check.REWARDS,
                "fail",
                f"{failed} of {judged} judged episodes have no usable verdict ({counts}); their "
                f"reward is the failure reward. First: {first[1]}, verdict {excerpt!r}",
                first[0],
            )
        )
    else:
        findings.append(
            Finding(Check.REWARDS, "pass", f"{judged} judged episodes, every verdict parsed")
        )
    if statuses.get("not_judged"):
        findings.append(
            Finding(
                Check.REWARDS,
                "info",
                f"{statuses['not_judged']} episodes ended by a shared limit were not judged",
            )
        )
    return findings


def check_rewards(records: Sequence[GroupRecord]) -> list[Finding]:
    """Every reward check on a store's ok records."""
    return [check_reward_identity(records), *check_judge_verdicts(records)]


def compare_reward_identities(
    records: Sequence[GroupRecord], others: Sequence[GroupRecord], other_source: str
) -> list[Finding]:
    """``check A --against B``: fail where a reward component of A differs from B's, or
    exists in one store only."""
    mine, theirs = reward_identities(records), reward_identities(others)
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
