"""``check`` of per-token weights versions and the declared off-policy rule.

In a store: an action whose tokens span several versions keeps them as runs
(:mod:`agentenvs.rollout.weights.token_versions`); runs that do not sum to the
action, go back to an older version, start elsewhere than the turn's stamp, or name
a version the record does not know were rewritten or broken, and fail.

In a hand-off: each sample's ``token_versions`` must match its tokens, and when the
hand-off states its off-policy rule (``extra["off_policy"]``: the rule and the
``trained_version``, :mod:`agentenvs.rollout.data.off_policy`), every trained token
must be one the rule allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentenvs.rollout.data.off_policy import RULE_KEY, OffPolicyRule, rule_violations
from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.inspect.findings import Check, Finding
from agentenvs.rollout.weights.token_versions import RUNS_LOG, parse_runs, runs_problem


def store_runs_problem(
    record: Any, trajectories: Iterable[tuple[int, Any]]
) -> tuple[str, int, int] | None:
    """The first turn of a record whose version runs cannot be true: (why, trajectory, turn)."""
    policy = record.provenance.get("policy") or {}
    known = policy.get("weights_versions") or [policy.get("weights_version")]
    for t, traj in trajectories:
        for turn, tr in enumerate(traj.transitions):
            if RUNS_LOG not in tr.logs:
                continue
            problem = runs_problem(tr)
            if problem is None:
                unknown = [
                    r.version for r in parse_runs(tr.logs[RUNS_LOG]) if r.version not in known
                ]
                if unknown:
                    problem = f"its version runs name {unknown[0]!r}, a version its record does not ({known})"
            if problem is not None:
                return problem, t, turn
    return None


def stated_rule(extras: Sequence[Mapping[str, Any]]) -> tuple[OffPolicyRule, Any] | None:
    """The off-policy rule and trained version a hand-off states, if it states one."""
    for extra in extras:
        stated = (extra or {}).get(RULE_KEY)
        if isinstance(stated, Mapping):
            return OffPolicyRule.from_json(stated), stated.get("trained_version")
    return None


def rule_excuses(extras: Sequence[Mapping[str, Any]]):
    """For the collected-record check: whether the stated rule takes token ``i`` out of
    the loss (None when no rule, or no trained version, is stated)."""
    rule = stated_rule(extras)
    if rule is None or rule[1] is None:
        return None
    declared, trained = rule

    def excused(sample: TrainingSample, i: int) -> bool:
        versions = sample.token_versions
        return bool(versions) and not declared.allows(versions[i], trained, sample.has_logprobs)

    return excused


def check_token_versions(
    samples: Sequence[TrainingSample], extras: Sequence[Mapping[str, Any]]
) -> list[Finding]:
    for index, sample in enumerate(samples):
        if sample.token_versions and len(sample.token_versions) != len(sample.tokens):
            detail = (
                f"sample {index} has {len(sample.tokens)} tokens but "
                f"{len(sample.token_versions)} per-token versions"
            )
            return [Finding(Check.COMPLETION_BOUNDARIES, "fail", detail)]
    rule = stated_rule(extras)
    if rule is None:
        if any(s.token_versions for s in samples):
            detail = "per-token versions, but no off-policy rule stated (extra['off_policy'])"
            return [Finding(Check.COMPLETION_BOUNDARIES, "warn", detail)]
        return []
    declared, trained = rule
    if trained is None:
        detail = f"the off-policy rule {declared.to_json()} names no trained_version"
        return [Finding(Check.COMPLETION_BOUNDARIES, "fail", detail)]
    broken = rule_violations(samples, declared, trained)
    if broken:
        first = broken[0]
        detail = (
            f"{len(broken)} samples train tokens outside the declared off-policy rule "
            f"{declared.to_json()} at version {trained!r} (first: sample {first.sample} token "
            f"{first.position}, sampled by version {first.version!r})"
        )
        return [Finding(Check.COMPLETION_BOUNDARIES, "fail", detail)]
    tokens = sum(sum(s.loss_mask) for s in samples if s.token_versions)
    detail = f"{tokens} trained tokens within the off-policy rule {declared.to_json()} at version {trained!r}"
    return [Finding(Check.COMPLETION_BOUNDARIES, "pass", detail)]
