"""Tree advantages: values from the leaves, GRPO per root, segment credit from siblings."""

from __future__ import annotations

import math

import pytest
from support.tree_helpers import SeededGuesser

from agentenvs.envs import make
from agentenvs.rollout.collect.tree import BranchSchedule, do_tree_rollout
from agentenvs.rollout.data.advantages import group_advantages
from agentenvs.rollout.data.tree_advantages import (
    node_values,
    tree_grpo,
    tree_samples,
    tree_segment,
)

# root 0 branches at turn 2 into A (path 0) and B (path 1); A branches at turn 3 into
# A0 and A1. Root 1 has one leaf.
TREE = {
    "leaves": [
        {"root": 0, "path": [0, 0], "branch_turns": [2, 3]},
        {"root": 0, "path": [0, 1], "branch_turns": [2, 3]},
        {"root": 0, "path": [1], "branch_turns": [2]},
        {"root": 1, "path": [], "branch_turns": []},
    ]
}
REWARDS = [1.0, 0.0, 0.5, 3.0]


def test_node_value_is_the_mean_of_its_leaves():
    values = node_values(REWARDS, TREE)
    assert values[(0, ())] == pytest.approx(sum(REWARDS[:3]) / 3)
    assert values[(0, (0,))] == pytest.approx(0.5)
    assert values[(0, (0, 1))] == 0.0 and values[(1, ())] == 3.0


def test_tree_grpo_is_grpo_within_each_root():
    got = tree_grpo(REWARDS, TREE)
    assert got[:3] == pytest.approx(group_advantages(REWARDS[:3], "dr_grpo"))
    assert got[3] == 0.0  # a lone leaf has no baseline


def test_segments_telescope_to_the_leaf_grpo_value():
    turns = [4, 4, 3, 2]
    per_turn = tree_segment(REWARDS, TREE, turns)
    values = node_values(REWARDS, TREE)
    assert per_turn[0][0] == 0.0  # shared by the whole root
    assert per_turn[0][1] == pytest.approx(values[(0, (0,))] - values[(0, ())])
    assert per_turn[0][2] == per_turn[0][3] == pytest.approx(1.0 - 0.5)
    assert per_turn[1][2] == pytest.approx(0.0 - 0.5)
    assert per_turn[3] == [0.0, 0.0]
    grpo = tree_grpo(REWARDS, TREE)
    for leaf, row in enumerate(per_turn):
        segment_sum = sum(row[b - 1] for b in TREE["leaves"][leaf]["branch_turns"])
        assert segment_sum == pytest.approx(grpo[leaf])


def test_a_tree_that_does_not_match_its_group_is_refused():
    with pytest.raises(ValueError, match="describes 4 leaves for 3"):
        tree_grpo(REWARDS[:3], TREE)


async def test_segment_samples_put_each_turns_advantage_on_its_tokens(tokenizer):
    config = make("guess_number", limits={"max_turns": 4})
    schedule = BranchSchedule(branch_at=(2, 3), branch_factor=2)
    group = await do_tree_rollout(
        config.group_builder(3, 1, tokenizer), SeededGuesser(tokenizer), schedule
    )
    group.group_rewards = [float(i) for i in range(len(group.trajectories))]  # spread rewards
    samples = tree_samples([group], [group.tree], "tree_segment")
    turns = [len(t.transitions) for t in group.trajectories]
    expected = tree_segment(group.total_rewards(), group.tree, turns)
    for sample in samples:
        traj = group.trajectories[sample.traj_index]
        trained = [a for a, m in zip(sample.advantages, sample.loss_mask, strict=True) if m]
        per_token = [
            expected[sample.traj_index][turn]
            for turn, tr in enumerate(traj.transitions)
            for _ in tr.ac.tokens
        ]
        assert trained == pytest.approx(per_token)
        assert all(
            a == 0.0 for a, m in zip(sample.advantages, sample.loss_mask, strict=True) if not m
        )
        assert sample.advantage == pytest.approx(math.fsum(expected[sample.traj_index]))
    grpo_samples = tree_samples([group], [group.tree], "tree_grpo")
    assert [s.tokens for s in grpo_samples] == [s.tokens for s in samples]
    assert [s.loss_mask for s in grpo_samples] == [s.loss_mask for s in samples]
