"""Tree rollouts on guess_number with real envs, a real tokenizer and seeded policies."""

from __future__ import annotations

import pytest
from support.rollout_helpers import CountdownEnv, RecordingBuilder
from support.tree_helpers import SeededGuesser

from agentenvs.envs import make
from agentenvs.envs.forking import copy_task_state
from agentenvs.envs.guess_number import GuessNumberEnv
from agentenvs.envs.rendered_env import Limits, RenderedEnv
from agentenvs.envs.renderers import make_renderer
from agentenvs.rollout.collect.tree import BranchSchedule, do_tree_rollout


def builder(tokenizer, roots: int = 1, max_turns: int = 5, task: int = 0):
    config = make("guess_number", limits={"max_turns": max_turns})
    return config.group_builder(task, roots, tokenizer)


def shared_prefix_holds(group) -> None:
    """Every leaf equals its parent up to its branch turn: transitions, then observation."""
    leaves = group.tree["leaves"]
    for index, leaf in enumerate(leaves):
        if leaf["parent"] is None:
            continue
        mine = group.trajectories[index].transitions
        theirs = group.trajectories[leaf["parent"]].transitions
        cut = leaf["branch_turn"] - 1
        for a, b in zip(mine[:cut], theirs[:cut], strict=True):
            assert a.ob == b.ob and a.ac.tokens == b.ac.tokens
        assert mine[cut].ob == theirs[cut].ob


async def test_fixed_schedule_branches_every_live_path(tokenizer):
    schedule = BranchSchedule(branch_at=(2, 3), branch_factor=3)
    group = await do_tree_rollout(builder(tokenizer), SeededGuesser(tokenizer), schedule)
    tree = group.tree
    leaves = tree["leaves"]
    assert len(group.trajectories) == len(leaves) == len(group.group_rewards)
    # Each path alive at a branch turn split in three; count from the leaves themselves.
    at_two = [leaf for leaf in leaves if 2 in leaf["branch_turns"]]
    assert len(at_two) == len(leaves)  # a guess hitting the secret on turn 1 is 1 in 100
    assert tree["forks"] == len(leaves) - 1
    assert tree["fork_failures"] == 0
    for leaf, trajectory in zip(leaves, group.trajectories, strict=True):
        assert leaf["turns"] == len(trajectory.transitions)
        assert leaf["branch_turns"] == sorted(leaf["branch_turns"])
    shared_prefix_holds(group)
    # Siblings act differently right at the branch turn (their own sampling slots).
    firsts = {tuple(t.transitions[1].ac.tokens) for t in group.trajectories}
    assert len(firsts) > 1


async def test_leaf_cap_limits_the_tree(tokenizer):
    schedule = BranchSchedule(branch_at=(1, 2, 3), branch_factor=4, max_leaves=6)
    group = await do_tree_rollout(builder(tokenizer), SeededGuesser(tokenizer), schedule)
    assert len(group.trajectories) == 6
    assert group.tree["leaf_cap_hits"] >= 1
    shared_prefix_holds(group)


async def test_several_roots_each_grow_their_own_tree(tokenizer):
    schedule = BranchSchedule(branch_at=(2,), branch_factor=2)
    group = await do_tree_rollout(builder(tokenizer, roots=3), SeededGuesser(tokenizer), schedule)
    roots = [leaf["root"] for leaf in group.tree["leaves"]]
    assert sorted(set(roots)) == [0, 1, 2] and roots == sorted(roots)
    for leaf in group.tree["leaves"]:
        if leaf["parent"] is not None:
            assert group.tree["leaves"][leaf["parent"]]["root"] == leaf["root"]
    shared_prefix_holds(group)


async def test_entropy_trigger_branches_only_on_uncertain_actions(tokenizer):
    policy = SeededGuesser(tokenizer, uncertain_turns=(3,))
    schedule = BranchSchedule(branch_factor=2, entropy_threshold=1.0, entropy_tokens=4)
    group = await do_tree_rollout(builder(tokenizer, max_turns=6), policy, schedule)
    leaves = group.tree["leaves"]
    assert len(leaves) == 2
    assert all(leaf["branch_turns"] == [3] and leaf["triggers"] == ["entropy"] for leaf in leaves)
    shared_prefix_holds(group)
    # The original played the action that triggered the branch; the fork sampled anew.
    original, fork = group.trajectories
    assert original.transitions[2].ac.tokens != fork.transitions[2].ac.tokens


async def test_an_env_that_cannot_fork_records_failures_and_still_finishes(tokenizer):
    made = RecordingBuilder(group_size=2, env_factory=lambda attempt, i: CountdownEnv(turns=3))
    schedule = BranchSchedule(branch_at=(2,), branch_factor=3)
    group = await do_tree_rollout(made, SeededGuesser(tokenizer), schedule)
    assert len(group.trajectories) == 2
    assert group.tree["forks"] == 0 and group.tree["fork_failures"] == 4
    assert "ForkUnsupported" in group.tree["fork_failure_messages"][0]
    assert made.cleanups == 1


async def test_live_fork_bound_refuses_beyond_it(tokenizer):
    schedule = BranchSchedule(branch_at=(2,), branch_factor=4, max_live_forks=2)
    group = await do_tree_rollout(builder(tokenizer), SeededGuesser(tokenizer), schedule)
    assert group.tree["forks"] == 2 and group.tree["forks_refused"] == 1
    assert group.tree["peak_live_forks"] == 2
    assert len(group.trajectories) == 3


class ClosingGuess(GuessNumberEnv):
    """guess_number that notes each close (its forks are ClosingGuess too)."""

    def __init__(self, closes: list[int], *args) -> None:
        super().__init__(*args)
        self.closes = closes

    async def fork(self) -> ClosingGuess:
        return copy_task_state(self, shared=(self.closes,))

    async def close(self) -> None:
        self.closes.append(id(self))


async def test_every_fork_is_closed_after_the_tree(tokenizer):
    closes: list[int] = []

    def env(attempt: int, index: int) -> RenderedEnv:
        task = ClosingGuess(closes, 7, 1, 100)
        return RenderedEnv(task, make_renderer("chat", tokenizer), Limits(max_turns=4))

    made = RecordingBuilder(group_size=1, env_factory=env)
    schedule = BranchSchedule(branch_at=(2, 3), branch_factor=2)
    group = await do_tree_rollout(made, SeededGuesser(tokenizer), schedule)
    assert group.tree["forks"] == len(group.trajectories) - 1 >= 1
    # Every leaf's episode closed its task once (RenderedEnv closes once; forks too).
    assert len(closes) == len(set(closes)) == len(group.trajectories)


def test_bad_schedules_are_refused():
    for kwargs in (
        {"branch_factor": 1},
        {"branch_at": (0,)},
        {"max_leaves": 0},
        {"entropy_threshold": -1.0},
        {"max_live_forks": 0},
    ):
        with pytest.raises(ValueError):
            BranchSchedule(**kwargs)
