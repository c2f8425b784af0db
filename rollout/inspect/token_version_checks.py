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

import json
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


def check_rule_as_declared(
    extras: Sequence[Mapping[str, Any]], records: Sequence[Any]
) -> Finding | None:
    """The rule a hand-off states is the one its run declared (``provenance["off_policy"]``
    of the store's records): a converter that relabels a masked run as ``importance``, or
    loosens ``max_staleness``, would otherwise pass every token under its own rule."""
    declared = {
        json.dumps(rule.to_json(), sort_keys=True): rule
        for rule in (OffPolicyRule.of_provenance(r.provenance or {}) for r in records)
        if rule is not None
    }
    stated = stated_rule(extras)
    if not declared:
        if stated is None:
            return None
        detail = (
            f"the hand-off states the off-policy rule {stated[0].to_json()}; its run declared none"
        )
        return Finding(Check.COMPLETION_BOUNDARIES, "info", detail)
    if stated is None:
        (first, *_) = declared.values()
        detail = f"the run declared the off-policy rule {first.to_json()}; the hand-off states none"
        return Finding(Check.COMPLETION_BOUNDARIES, "fail", detail)
    if stated[0] not in declared.values():
        wanted = " or ".join(str(r.to_json()) for r in declared.values())
        detail = (
            f"the hand-off states the off-policy rule {stated[0].to_json()}, "
            f"but its run declared {wanted}"
        )
        return Finding(Check.COMPLETION_BOUNDARIES, "fail", detail)
    detail = f"the hand-off states the off-policy rule its run declared ({stated[0].to_json()})"
    return Finding(Check.COMPLETION_BOUNDARIES, "pass", detail)
