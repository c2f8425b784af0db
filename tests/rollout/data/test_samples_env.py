"""Samples from real episodes of the reference environment, rendered with the test
tokenizer: decoded, the sampled tokens are exactly the guesses, and the masked ones
exactly the prompt and the environment's feedback."""

from __future__ import annotations

import re

import pytest

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.trainers.tinker.handoff import to_tinker_datums
from agentenvs.rollout.trainers.verl.handoff import from_verl_batch, to_verl_batch


async def play(env, variant_for_turn) -> Trajectory:
    """Run one episode with the env's own scripted actions (logprobs made up per token)."""
    ob, _ = await env.initial_observation()
    transitions = []
    turn = 0
    while True:
        tokens, stop = env.scripted_action(variant_for_turn(turn))
        logprobs = [-0.01 * (i + 1) for i in range(len(tokens))]
        result = await env.step(tokens, extra={"stop_reason": stop})
        transitions.append(
            Transition(
                ob,
                TokensWithLogprobs(tokens, logprobs, stop),
                result.reward,
                result.episode_done,
                dict(result.metrics),
            )
        )
        if result.episode_done:
            return Trajectory(transitions, result.next_observation)
        ob = result.next_observation
        turn += 1


@pytest.mark.parametrize("renderer", ["chat", "continuation"])
async def test_guess_number_episodes_become_exact_samples(tokenizer, renderer):
    config = GuessNumberConfig(renderer=renderer, low=1, high=50)
    trajectories = [
        await play(config.make_env(0, tokenizer), lambda turn: "oracle"),
        # A malformed first turn: the env answers with a format hint, then the oracle plays.
        await play(
            config.make_env(0, tokenizer), lambda turn: "malformed" if turn == 0 else "oracle"
        ),
    ]
    group = TrajectoryGroup(trajectories, [0.0, 0.0], [{}, {}])
    samples = trajectories_to_samples([group], compute_advantages([group], "grpo"))
    assert len(samples) == 2, "both renderers extend the conversation: one sample each"

    for sample, traj in zip(samples, trajectories, strict=True):
        assert sample.tokens == traj.transitions[-1].ob + traj.transitions[-1].ac.tokens
        actions = [tr.ac.tokens for tr in traj.transitions]
        sampled = [tok for i, tok in enumerate(sample.tokens) if sample.loss_mask[i]]
        assert sampled == [tok for action in actions for tok in action]
        assert [lp for lp, m in zip(sample.logprobs, sample.loss_mask, strict=True) if m] == [
            lp for tr in traj.transitions for lp in tr.ac.logprobs
        ]
        trained_text = tokenizer.decode(sampled)
        assert trained_text.count("<guess>") == sum(
            1 for tr in traj.transitions if "<guess>" in tokenizer.decode(tr.ac.tokens)
        )
        masked_text = tokenizer.decode(
            [tok for i, tok in enumerate(sample.tokens) if not sample.loss_mask[i]]
        )
        assert "I am thinking of a whole number" in masked_text
        assert re.search(r"<guess>\d+</guess>", masked_text) is None, "a guess was masked"
        if len(traj.transitions) > 1:
            assert "is wrong: go" in masked_text or "Write your guess" in masked_text
        assert "is wrong: go" not in trained_text and "Write your guess" not in trained_text
    assert "I think it is seven" in tokenizer.decode(samples[1].tokens)

    datums = to_tinker_datums(samples)
    assert [d.model_input.to_ints() for d in datums] == [s.tokens[:-1] for s in samples]
    back = from_verl_batch(to_verl_batch(samples, tokenizer.pad_token_id))
    assert [s.tokens for s in back] == [s.tokens for s in samples]
    assert [s.loss_mask for s in back] == [s.loss_mask for s in samples]
