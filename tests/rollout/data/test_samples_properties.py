"""Property tests: over random multi-turn trajectories, samples hold exactly what the
policy saw and sampled, masks cover exactly the sampled tokens, and logprobs line up
after the one-token shift of the trainer hand-offs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sample_strategies import Scenario, batches, scenarios

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.data.samples import (
    PARSE_ERROR_MASKED_METRIC,
    TrainingSample,
    trajectories_to_samples,
    trajectory_to_samples,
)
from agentenvs.rollout.trainers.jsonl.handoff import read_samples_jsonl, write_samples_jsonl
from agentenvs.rollout.trainers.tinker.handoff import to_tinker_datums
from agentenvs.rollout.trainers.verl.handoff import from_verl_batch, to_verl_batch

ADVANTAGE = st.floats(-3, 3, allow_nan=False).filter(lambda a: a != 0.0)
SETTINGS = settings(max_examples=120, deadline=None)


def f32(values) -> list[float]:
    return np.asarray(values, dtype=np.float32).tolist()


@SETTINGS
@given(scenarios(allow_empty_actions=True), ADVANTAGE)
def test_samples_match_the_oracle(scenario: Scenario, advantage: float):
    samples = trajectory_to_samples(scenario.trajectory, advantage, reward=0.5)
    assert len(samples) == len(scenario.expected)
    for index, (sample, want) in enumerate(zip(samples, scenario.expected, strict=True)):
        assert sample.sample_index == index
        assert sample.tokens == want.tokens
        assert sample.loss_mask == [int(t) for t in want.trained]
        assert sample.logprobs == want.logprobs
        assert sample.advantages == [advantage if t else 0.0 for t in want.trained]
        assert sample.has_logprobs == want.has_logprobs
        assert sample.prompt_length == want.prompt_length
        assert sample.advantage == advantage and sample.reward == 0.5


@SETTINGS
@given(scenarios(allow_empty_actions=True), ADVANTAGE)
def test_tokens_are_what_the_policy_saw_and_sampled(scenario: Scenario, advantage: float):
    """Stated without the oracle: each sample ends with its last observation plus action,
    every observation it merged is a prefix of it, and the samples together contain
    every sampled token exactly once, in order."""
    samples = trajectory_to_samples(scenario.trajectory, advantage)
    transitions = scenario.trajectory.transitions
    # Transitions belong to samples in order; a sample's first transition starts it fresh.
    owner, position = [], 0
    for tr in transitions:
        sample = samples[position]
        if not (len(sample.tokens) >= len(tr.ob) and sample.tokens[: len(tr.ob)] == tr.ob):
            position += 1
            sample = samples[position]
        assert sample.tokens[: len(tr.ob)] == tr.ob
        assert sample.tokens[len(tr.ob) : len(tr.ob) + len(tr.ac.tokens)] == tr.ac.tokens
        owner.append(position)
    assert position == len(samples) - 1
    for index, sample in enumerate(samples):
        last = max(i for i, o in enumerate(owner) if o == index)
        assert sample.tokens == transitions[last].ob + transitions[last].ac.tokens
    trained = sum(sum(s.loss_mask) for s in samples)
    assert trained == sum(
        len(tr.ac.tokens) for tr in transitions if not tr.metrics.get(PARSE_ERROR_MASKED_METRIC)
    )


@SETTINGS
@given(scenarios(allow_empty_actions=True), ADVANTAGE)
def test_mask_is_one_exactly_on_sampled_tokens_and_advantages_vanish_elsewhere(
    scenario: Scenario, advantage: float
):
    samples = trajectory_to_samples(scenario.trajectory, advantage)
    for sample, want in zip(samples, scenario.expected, strict=True):
        for i, (m, a, lp) in enumerate(
            zip(sample.loss_mask, sample.advantages, sample.logprobs, strict=True)
        ):
            assert m == (1 if want.trained[i] else 0)
            assert (a != 0.0) == bool(m), "advantage must be zero exactly where masked"
            if not want.sampled[i]:
                assert lp == 0.0, "observation tokens carry no logprob"


@SETTINGS
@given(scenarios(), ADVANTAGE)
def test_logprobs_line_up_after_the_tinker_shift(scenario: Scenario, advantage: float):
    samples = trajectory_to_samples(scenario.trajectory, advantage)
    datums = to_tinker_datums(samples)
    for want, datum in zip(scenario.expected, datums, strict=True):
        inputs = datum.model_input.to_ints()
        targets = datum.loss_fn_inputs["target_tokens"].tolist()
        logprobs = datum.loss_fn_inputs["logprobs"].tolist()
        mask = datum.loss_fn_inputs["mask"].tolist()
        advantages = datum.loss_fn_inputs["advantages"].tolist()
        assert inputs == want.tokens[:-1]
        assert targets == want.tokens[1:]
        for p in range(1, len(want.tokens)):
            # Row p-1 predicts token p from tokens[:p]: it carries token p's logprob and mask.
            assert targets[p - 1] == want.tokens[p]
            assert logprobs[p - 1] == f32([want.logprobs[p]])[0]
            assert mask[p - 1] == float(want.trained[p])
            assert advantages[p - 1] == (f32([advantage])[0] if want.trained[p] else 0.0)
            if not want.sampled[p]:
                assert logprobs[p - 1] == 0.0


@SETTINGS
@given(batches(allow_empty_actions=True), st.integers(0, 3))
def test_verl_batch_round_trips(batch, pad_token_id):
    groups, _ = batch
    samples = trajectories_to_samples(groups, compute_advantages(groups, "rloo"))
    padded = to_verl_batch(samples, pad_token_id)
    width_p = padded["prompts"].shape[1]
    for row, sample in enumerate(samples):
        p, r = sample.prompt_length, len(sample.tokens) - sample.prompt_length
        # Prompt left-padded, response right-padded, input_ids their concatenation.
        assert padded["prompts"][row, width_p - p :].tolist() == sample.tokens[:p]
        assert set(padded["prompts"][row, : width_p - p].tolist()) <= {pad_token_id}
        assert padded["responses"][row, :r].tolist() == sample.tokens[p:]
        assert set(padded["responses"][row, r:].tolist()) <= {pad_token_id}
        assert padded["response_mask"][row, r:].sum() == 0
        assert padded["response_mask"][row, :r].tolist() == sample.loss_mask[p:]
    assert padded["input_ids"].tolist() == [
        a + b for a, b in zip(padded["prompts"].tolist(), padded["responses"].tolist(), strict=True)
    ]
    back = from_verl_batch(padded)
    assert len(back) == len(samples)
    for got, sample in zip(back, samples, strict=True):
        assert got.tokens == sample.tokens
        assert got.loss_mask == sample.loss_mask
        assert got.logprobs == f32(sample.logprobs)
        assert got.advantages == f32(sample.advantages)
        assert got.prompt_length == sample.prompt_length
        assert (got.group_index, got.traj_index, got.sample_index) == (
            sample.group_index,
            sample.traj_index,
            sample.sample_index,
        )
        # verl's rm_scores are float32; a batch with no response column keeps the float64 reward
        scored = padded["rm_scores"].shape[1] > 0
        assert got.reward == (f32([sample.reward])[0] if scored else sample.reward)
        assert got.advantage == sample.advantage
        assert got.has_logprobs == sample.has_logprobs


@settings(max_examples=40, deadline=None)
@given(batches(allow_empty_actions=True))
def test_jsonl_round_trips_exactly(tmp_path_factory, batch):
    groups, _ = batch
    samples = trajectories_to_samples(groups, compute_advantages(groups))
    path = tmp_path_factory.mktemp("jsonl") / "samples.jsonl"
    assert write_samples_jsonl(samples, path, extra={"estimator": "grpo"}) == len(samples)
    assert read_samples_jsonl(path) == samples


@SETTINGS
@given(batches())
def test_samples_follow_group_and_trajectory_order(batch):
    groups, per_group = batch
    advantages = compute_advantages(groups, "grpo")
    samples = trajectories_to_samples(groups, advantages)
    want = [
        (g, t, i)
        for g, found in enumerate(per_group)
        for t, scenario in enumerate(found)
        for i in range(len(scenario.expected))
    ]
    assert [(s.group_index, s.traj_index, s.sample_index) for s in samples] == want
    for s in samples:
        assert s.reward == groups[s.group_index].total_rewards()[s.traj_index]
        assert s.advantage == advantages[s.group_index][s.traj_index]


def test_policy_without_logprobs_is_flagged():
    traj = Trajectory(
        [
            Transition([1, 2], TokensWithLogprobs([3, 4], None), 0.0, False),
            Transition([1, 2, 3, 4, 5], TokensWithLogprobs([6], [-0.5]), 1.0, True),
        ]
    )
    (sample,) = trajectory_to_samples(traj, 1.0)
    assert not sample.has_logprobs
    assert sample.logprobs == [0.0, 0.0, 0.0, 0.0, 0.0, -0.5]
    assert sample.loss_mask == [0, 0, 1, 1, 0, 1]
    assert sample.prompt_length == 2


def test_parse_error_masked_action_keeps_tokens_but_not_loss():
    traj = Trajectory(
        [
            Transition(
                [1],
                TokensWithLogprobs([2, 3], [-1.0, -2.0]),
                0.0,
                False,
                {PARSE_ERROR_MASKED_METRIC: 1},
            ),
            Transition([1, 2, 3, 9], TokensWithLogprobs([4], [-0.25]), 1.0, True),
        ]
    )
    (sample,) = trajectory_to_samples(traj, 2.0)
    assert sample.tokens == [1, 2, 3, 9, 4]
    assert sample.loss_mask == [0, 0, 0, 0, 1]
    assert sample.advantages == [0.0, 0.0, 0.0, 0.0, 2.0]
    assert sample.logprobs == [0.0, -1.0, -2.0, 0.0, -0.25]
    assert sample.prompt_length == 1


def test_logprob_count_mismatch_is_an_error():
    traj = Trajectory([Transition([1], TokensWithLogprobs([2, 3], [-1.0]), 0.0, True)])
    with pytest.raises(ValueError, match="2 tokens but 1 logprobs"):
        trajectory_to_samples(traj, 1.0)


def test_advantages_must_match_groups():
    group = TrajectoryGroup(
        [Trajectory([Transition([1], TokensWithLogprobs([2]), 0.0, True)])], [0.0], [{}]
    )
    with pytest.raises(ValueError, match="1 trajectories but 2 advantages"):
        trajectories_to_samples([group], [[0.0, 1.0]])
    with pytest.raises(ValueError, match="1 groups"):
        trajectories_to_samples([group], [])


def test_empty_trajectory_gives_no_sample():
    assert trajectory_to_samples(Trajectory([]), 1.0) == []
    assert isinstance(
        trajectory_to_samples(
            Trajectory([Transition([5], TokensWithLogprobs([6]), 0.0, True)]), 1.0
        )[0],
        TrainingSample,
    )
