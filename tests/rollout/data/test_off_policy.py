"""The declared off-policy rule: what it masks, what it keeps, and what breaks it."""

from __future__ import annotations

import pytest

from agentenvs.rollout.data.off_policy import OffPolicyRule, apply_rule, rule_violations
from agentenvs.rollout.data.samples import TrainingSample


def _sample(versions: list, has_logprobs: bool = True) -> TrainingSample:
    n = len(versions)
    mask = [0 if v is None else 1 for v in versions]
    return TrainingSample(
        tokens=list(range(n)), loss_mask=mask, logprobs=[-0.1 * m for m in mask],
        advantages=[1.0 * m for m in mask], group_index=0, traj_index=0, sample_index=0,
        reward=1.0, has_logprobs=has_logprobs, token_versions=versions,
    )  # fmt: skip


def test_mask_takes_tokens_older_than_max_staleness_out_of_the_loss_and_keeps_the_rest():
    sample = _sample([None, 3, 3, 4, 5, 5])
    assert apply_rule([sample], OffPolicyRule("mask", max_staleness=1), trained=5) == 2
    assert sample.loss_mask == [0, 0, 0, 1, 1, 1]
    assert sample.advantages == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert sample.logprobs[1] == pytest.approx(-0.1)  # the behaviour logprob stays
    assert rule_violations([sample], OffPolicyRule("mask", 1), 5) == []
    sample.loss_mask[2] = 1  # a version-3 token trained again
    (broken,) = rule_violations([sample], OffPolicyRule("mask", 1), 5)
    assert (broken.position, broken.version) == (2, 3)
    assert rule_violations([sample], OffPolicyRule("mask", 2), 5) == []  # within a looser rule


def test_importance_keeps_every_token_with_behaviour_logprobs_and_needs_them():
    sample = _sample([None, 1, 2, 5])
    assert apply_rule([sample], OffPolicyRule("importance"), trained=5) == 0
    assert rule_violations([sample], OffPolicyRule("importance"), 5) == []
    bare = _sample([None, 1, 5], has_logprobs=False)
    assert len(rule_violations([bare], OffPolicyRule("importance"), 5)) == 1


def test_a_rule_is_stated_in_json_and_refuses_nonsense():
    rule = OffPolicyRule("mask", 2)
    assert OffPolicyRule.from_json(rule.to_json()) == rule
    with pytest.raises(ValueError, match="mode"):
        OffPolicyRule("clip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_staleness"):
        OffPolicyRule("mask", -1)
    # A label version cannot be compared: only the trained version itself passes.
    assert OffPolicyRule("mask", 3).allows("v-a", "v-a", True)
    assert not OffPolicyRule("mask", 3).allows("v-a", "v-b", True)
