"""Advantage estimators on hand-computed cases, plus properties over random groups."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tinker_cookbook.rl import data_processing as cookbook

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.advantages import (
    ESTIMATORS,
    compute_advantages,
    estimator_info,
    group_advantages,
    remove_constant_reward_groups,
)
from agentenvs.rollout.trainers.tinker.handoff import to_cookbook_group


def group_with(rewards, step_rewards=None) -> TrajectoryGroup:
    step_rewards = step_rewards or [0.0] * len(rewards)
    trajectories = [
        Trajectory([Transition([1], TokensWithLogprobs([2]), step, True)]) for step in step_rewards
    ]
    return TrajectoryGroup(trajectories, list(rewards), [{} for _ in rewards])


def close(a, b):
    return all(math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12) for x, y in zip(a, b, strict=True))


def test_grpo_divides_by_the_sample_std():
    # DeepSeekMath's GRPO. Rewards 1,0,0,1: mean 0.5, sample std sqrt(4 * 0.25 / 3) = 0.57735...
    std = math.sqrt(1 / 3)
    want = [0.5 / (std + 1e-6), -0.5 / (std + 1e-6), -0.5 / (std + 1e-6), 0.5 / (std + 1e-6)]
    assert close(group_advantages([1, 0, 0, 1], "grpo"), want)
    assert close(group_advantages([1, 0, 0, 1], "grpo", normalize_std=True), want)
    assert close(
        group_advantages([1, 0, 0, 1], "grpo", eps=0.5),
        [0.5 / (std + 0.5), -0.5 / (std + 0.5), -0.5 / (std + 0.5), 0.5 / (std + 0.5)],
    )
    # Rewards 3,1,2: mean 2, sample std 1 -> 1/(1+eps), -1/(1+eps), 0.
    assert close(group_advantages([3.0, 1.0, 2.0], "grpo"), [1 / (1 + 1e-6), -1 / (1 + 1e-6), 0.0])
    # A constant group has std 0: eps keeps it finite, and the advantages are 0.
    assert group_advantages([2.0, 2.0, 2.0], "grpo") == [0.0, 0.0, 0.0]


def test_grpo_without_the_std_is_asked_for_by_name():
    # verl's norm_adv_by_std_in_grpo=False / TRL's scale_rewards="none": centring only, recorded.
    assert group_advantages([1.0, 0.0, 0.0, 1.0], "grpo", normalize_std=False) == [
        0.5,
        -0.5,
        -0.5,
        0.5,
    ]
    assert estimator_info("grpo", normalize_std=False) == {
        "estimator": "grpo",
        "normalize_std": False,
    }


def test_grpo_matches_verl_core_algos():
    """verl 0.9.1's own GRPO outcome advantage on the same rewards (float32)."""
    import numpy as np
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards = [[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 2.0, 0.5], [0.2, 0.7]]
    flat = [r for group in rewards for r in group]
    index = np.array([str(g) for g, group in enumerate(rewards) for _ in group], dtype=object)
    scores = torch.zeros(len(flat), 3)
    scores[:, -1] = torch.tensor(flat)
    mask = torch.ones(len(flat), 3)
    for normalise in (True, False):
        theirs, _ = compute_grpo_outcome_advantage(
            scores, mask, index, norm_adv_by_std_in_grpo=normalise
        )
        ours = [
            a for group in rewards for a in group_advantages(group, "grpo", normalize_std=normalise)
        ]
        assert torch.allclose(theirs[:, 0], torch.tensor(ours, dtype=torch.float32), atol=1e-5)
    # The old meaning of "grpo" (centring only) is not verl's default GRPO.
    theirs, _ = compute_grpo_outcome_advantage(scores, mask, index)
    old = [a for group in rewards for a in group_advantages(group, "dr_grpo")]
    assert not torch.allclose(theirs[:, 0], torch.tensor(old, dtype=torch.float32), atol=1e-3)


def test_dr_grpo_never_divides_by_the_std():
    assert group_advantages([4.0, 0.0], "dr_grpo") == [2.0, -2.0]
    with pytest.raises(ValueError, match="never divides"):
        group_advantages([4.0, 0.0], "dr_grpo", normalize_std=True)


def test_rloo_uses_the_leave_one_out_mean():
    # A_0 = 1 - mean(0, 0, 1) = 2/3; A_1 = 0 - mean(1, 0, 1) = -2/3
    assert close(group_advantages([1, 0, 0, 1], "rloo"), [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # A_0 = 3 - mean(1, 2) = 1.5; A_1 = 1 - mean(3, 2) = -1.5; A_2 = 2 - mean(3, 1) = 0
    assert close(group_advantages([3, 1, 2], "rloo"), [1.5, -1.5, 0.0])
    with pytest.raises(ValueError, match="grpo' only"):
        group_advantages([1, 0], "rloo", normalize_std=True)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_a_lone_trajectory_has_no_baseline(estimator):
    assert group_advantages([5.0], estimator) == [0.0]
    assert group_advantages([], estimator) == []


def test_unknown_estimator_is_refused():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        compute_advantages([group_with([1.0])], "ppo")  # type: ignore[arg-type]
    # A per-step estimator cannot be a group's scalars (what a collector stores).
    with pytest.raises(ValueError, match="one advantage per step"):
        group_advantages([1.0, 0.0], "gigpo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one advantage per step"):
        estimator_info("gigpo")  # type: ignore[arg-type]


def test_total_reward_is_step_rewards_plus_group_reward():
    group = group_with([1.0, 0.0], step_rewards=[0.0, 3.0])  # totals 1 and 3
    assert compute_advantages([group], "dr_grpo") == [[-1.0, 1.0]]
    # mean 2, sample std sqrt(2)
    assert close(
        compute_advantages([group], "grpo")[0], [-1 / (2**0.5 + 1e-6), 1 / (2**0.5 + 1e-6)]
    )
    assert compute_advantages([group], "rloo") == [[-2.0, 2.0]]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=8),
        min_size=1,
        max_size=5,
    )
)
def test_estimators_against_definitions(reward_lists):
    groups = [group_with(rewards) for rewards in reward_lists]
    dr = compute_advantages(groups, "dr_grpo")
    grpo = compute_advantages(groups, "grpo")
    rloo = compute_advantages(groups, "rloo")
    assert compute_advantages(groups, "grpo", normalize_std=False) == dr
    for rewards, d, g, r in zip(reward_lists, dr, grpo, rloo, strict=True):
        assert abs(sum(d)) < 1e-9 * max(1.0, len(rewards) * max(map(abs, rewards)))
        if len(rewards) > 1:  # grpo = dr_grpo / (sample std + eps)
            mean = sum(rewards) / len(rewards)
            std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / (len(rewards) - 1))
            assert all(
                math.isclose(a, b / (std + 1e-6), rel_tol=1e-9, abs_tol=1e-9)
                for a, b in zip(g, d, strict=True)
            )
        if len(rewards) > 1:
            leave_one_out = [x - (sum(rewards) - x) / (len(rewards) - 1) for x in rewards]
            assert all(
                math.isclose(a, b, abs_tol=1e-9) for a, b in zip(r, leave_one_out, strict=True)
            )
    # The cookbook's "GRPO" centres only (no std): it is dr_grpo, to float32 precision.
    theirs = cookbook.compute_advantages([to_cookbook_group(g) for g in groups])
    for mine, other in zip(dr, theirs, strict=True):
        assert torch.allclose(torch.tensor(mine, dtype=torch.float32), other, atol=1e-5)


def test_remove_constant_reward_groups():
    varied = group_with([1.0, 0.0])
    constant = group_with([0.5, 0.5, 0.5])
    single = group_with([1.0])
    # Constant after adding step rewards: totals 1, 1.
    hidden_constant = group_with([1.0, 0.0], step_rewards=[0.0, 1.0])
    kept = remove_constant_reward_groups([constant, varied, single, hidden_constant])
    assert kept == [varied]
    assert remove_constant_reward_groups([constant]) == []


def test_estimator_info_is_json_ready():
    assert estimator_info() == {"estimator": "grpo", "normalize_std": True, "eps": 1e-6}
    assert estimator_info("dr_grpo") == {"estimator": "dr_grpo", "normalize_std": False}
    assert estimator_info("grpo", normalize_std=True, eps=1e-4) == {
        "estimator": "grpo",
        "normalize_std": True,
        "eps": 1e-4,
    }
    assert estimator_info("rloo")["estimator"] == "rloo"
    with pytest.raises(ValueError):
        estimator_info("dr_grpo", normalize_std=True)
