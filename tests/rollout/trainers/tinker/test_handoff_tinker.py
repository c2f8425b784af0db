"""The Tinker hand-off equals ``tinker_cookbook.rl.data_processing`` field by field."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from support.sample_strategies import batches
from support.tinker_compare import assert_same_datums
from tinker_cookbook.rl import data_processing as cookbook
from tinker_cookbook.rl.types import PARSE_ERROR_MASKED_METRIC_KEY

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.data.samples import PARSE_ERROR_MASKED_METRIC, trajectories_to_samples
from agentenvs.rollout.trainers.tinker.handoff import (
    assemble_tinker_data,
    to_cookbook_group,
    to_tinker_datums,
)


def test_parse_error_metric_is_the_cookbooks():
    assert PARSE_ERROR_MASKED_METRIC == PARSE_ERROR_MASKED_METRIC_KEY


@settings(max_examples=80, deadline=None)
@given(batches(max_groups=3, max_group_size=4))
def test_same_datums_as_cookbook_for_the_same_advantages(batch):
    """Random multi-turn groups (prefix breaks, missing logprobs, parse-error masks):
    fed the cookbook's own advantages, ours equals ``assemble_training_data``."""
    groups, _ = batch
    theirs_groups = [to_cookbook_group(g) for g in groups]
    advantages = cookbook.compute_advantages(theirs_groups)
    theirs, theirs_meta = cookbook.assemble_training_data(theirs_groups, advantages)
    ours, ours_meta = assemble_tinker_data(groups, advantages)
    assert ours_meta == theirs_meta
    assert_same_datums(ours, theirs)


@settings(max_examples=40, deadline=None)
@given(batches(max_groups=3, max_group_size=4, dyadic=True))
def test_whole_pipeline_matches_cookbook(batch):
    """Our advantages + assembly against the cookbook's, end to end. The cookbook's
    estimator centres on the group mean without dividing by the std: our ``dr_grpo``.
    Rewards are dyadic (0, ±0.5, ±1) so float32 (cookbook) and float64 (ours) means
    agree exactly."""
    groups, _ = batch
    theirs_groups = [to_cookbook_group(g) for g in groups]
    theirs, theirs_meta = cookbook.assemble_training_data(
        theirs_groups, cookbook.compute_advantages(theirs_groups)
    )
    ours, ours_meta = assemble_tinker_data(groups, compute_advantages(groups, "dr_grpo"))
    assert ours_meta == theirs_meta
    assert_same_datums(ours, theirs)


def test_realistic_trajectory_matches_cookbook():
    """A fixed multi-turn trajectory: a prompt, tool observations, one template rewrite."""
    rng = np.random.default_rng(7)

    def toks(n):
        return rng.integers(0, 150_000, size=n).tolist()

    def logps(n):
        return (-rng.random(n) * 5).tolist()

    prompt = toks(200)
    a1, o1, a2 = toks(120), toks(80), toks(60)
    rewritten = prompt + toks(30)  # the template dropped the first turn's reasoning
    a3 = toks(90)
    traj = Trajectory(
        [
            Transition(prompt, TokensWithLogprobs(a1, logps(120)), 0.0, False),
            Transition(prompt + a1 + o1, TokensWithLogprobs(a2, logps(60)), 0.0, False),
            Transition(rewritten, TokensWithLogprobs(a3, logps(90), "eos"), 1.0, True),
        ]
    )
    other = Trajectory([Transition(prompt, TokensWithLogprobs(a1, logps(120)), 0.0, True)])
    groups = [TrajectoryGroup([traj, other], [0.5, 0.0], [{}, {}])]
    ours, meta = assemble_tinker_data(groups, compute_advantages(groups, "dr_grpo"))
    theirs_groups = [to_cookbook_group(g) for g in groups]
    theirs, theirs_meta = cookbook.assemble_training_data(
        theirs_groups, cookbook.compute_advantages(theirs_groups)
    )
    assert (
        meta
        == theirs_meta
        == [
            {"group_idx": 0, "traj_idx": 0},
            {"group_idx": 0, "traj_idx": 0},
            {"group_idx": 0, "traj_idx": 1},
        ]
    )
    assert_same_datums(ours, theirs)
    first = ours[0]
    assert first.model_input.length == 200 + 120 + 80 + 60 - 1
    assert first.loss_fn_inputs["target_tokens"].to_torch().dtype == torch.int64
    assert first.loss_fn_inputs["logprobs"].to_torch().dtype == torch.float32


def test_validated_and_constructed_model_inputs_are_equal():
    groups = [
        TrajectoryGroup(
            [Trajectory([Transition([1, 2], TokensWithLogprobs([3, 4], [-1.0, -2.0]), 1.0, True)])],
            [0.0],
            [{}],
        )
    ]
    samples = trajectories_to_samples(groups, [[1.0]])
    fast = to_tinker_datums(samples)[0]
    checked = to_tinker_datums(samples, validate=True)[0]
    assert fast.model_input == checked.model_input
    assert fast.model_input.model_dump() == checked.model_input.model_dump()
    assert "mask" not in to_tinker_datums(samples, include_mask=False)[0].loss_fn_inputs


def test_non_integer_tokens_are_refused():
    groups = [
        TrajectoryGroup(
            [Trajectory([Transition([1, 2], TokensWithLogprobs([3.5]), 0.0, True)])], [0.0], [{}]
        )
    ]
    with pytest.raises(ValueError, match="token ids must be integers"):
        to_tinker_datums(trajectories_to_samples(groups, [[0.0]]))


def test_single_token_sample_cannot_be_a_datum():
    groups = [
        TrajectoryGroup(
            [Trajectory([Transition([], TokensWithLogprobs([3]), 0.0, True)])], [0.0], [{}]
        )
    ]
    with pytest.raises(ValueError, match="at least 2"):
        to_tinker_datums(trajectories_to_samples(groups, [[0.0]]))


def test_action_less_datum_keeps_float32_advantages():
    """The one documented difference: the cookbook makes int64 advantages when no action
    token survives the shift; ours stay float32 (the dtype Tinker's losses expect)."""
    traj = Trajectory(
        [
            Transition([1, 2, 3], TokensWithLogprobs([], []), 0.0, False),
            Transition([1, 2, 3, 4], TokensWithLogprobs([], []), 0.0, True),
        ]
    )
    groups = [TrajectoryGroup([traj], [1.0], [{}])]
    (ours,), _ = assemble_tinker_data(groups, [[0.0]])
    cookbook_groups = [to_cookbook_group(g) for g in groups]
    (theirs,), _ = cookbook.assemble_training_data(cookbook_groups, [torch.tensor([0.0])])
    assert theirs.loss_fn_inputs["advantages"].dtype == "int64"
    assert ours.loss_fn_inputs["advantages"].dtype == "float32"
    assert ours.loss_fn_inputs["advantages"].tolist() == [0.0, 0.0, 0.0]


def test_float32_overflow_rounds_like_torch():
    groups = [
        TrajectoryGroup(
            [
                Trajectory(
                    [Transition([1, 2], TokensWithLogprobs([3, 4], [-1e40, -1.0]), 0.0, True)]
                )
            ],
            [0.0],
            [{}],
        )
    ]
    (datum,) = to_tinker_datums(trajectories_to_samples(groups, [[0.0]]))
    assert datum.loss_fn_inputs["logprobs"].tolist() == [0.0, float("-inf"), -1.0]
    assert torch.tensor([0.0, -1e40, -1.0]).tolist() == [0.0, float("-inf"), -1.0]
