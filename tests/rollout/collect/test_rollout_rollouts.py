"""do_single_rollout and do_group_rollout over real envs (token-level and guess_number)."""

from __future__ import annotations

import asyncio

import pytest
from support.rollout_helpers import CountdownEnv, EchoPolicy, HangingPolicy, RecordingBuilder

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.rollouts import do_group_rollout, do_single_rollout
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.policies.base import PolicyError


async def test_single_rollout_records_every_turn_and_the_stop_reason():
    env = CountdownEnv(turns=3)
    traj = await do_single_rollout(EchoPolicy(), env)
    assert len(traj.transitions) == 3
    assert traj.stop_reason == "completed"
    assert [t.episode_done for t in traj.transitions] == [False, False, True]
    assert traj.step_reward == pytest.approx(0.5 + 0.5 + 1.0)
    # Each observation extends the previous context plus the action.
    for before, after in zip(traj.transitions, traj.transitions[1:], strict=False):
        assert after.ob[: len(before.ob) + 2] == before.ob + before.ac.tokens
    # The sampler's stop reason reaches the env.
    assert env.extras == [{"stop_reason": "stop"}] * 3


class _Returns:
    def __init__(self, value) -> None:
        self.value = value

    async def __call__(self, observation, stop, *, max_tokens=None):
        return self.value


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ([1, 2], "expected TokensWithLogprobs"),
        (TokensWithLogprobs([1, 2], [0.0]), "1 logprobs for 2 tokens"),
        (TokensWithLogprobs([1, "x"], None), "not a list of non-negative ints"),
        (TokensWithLogprobs([1], [0.0], "finished"), "stop_reason 'finished'"),
        (TokensWithLogprobs([1], [float("nan")]), "not a number"),
    ],
)
async def test_malformed_policy_output_is_a_policy_error(output, message):
    with pytest.raises(PolicyError, match=message):
        await do_single_rollout(_Returns(output), CountdownEnv())


async def test_policy_exceeding_max_tokens_is_a_policy_error():
    with pytest.raises(PolicyError, match="over max_tokens=1"):
        await do_single_rollout(EchoPolicy(), CountdownEnv(), max_tokens=1)


async def test_group_rollout_scores_tags_and_cleans_up():
    builder = RecordingBuilder(group_size=3)
    group = await do_group_rollout(builder, EchoPolicy())
    assert len(group.trajectories) == 3
    assert group.group_rewards == [0.25] * 3
    assert group.group_metrics == [{"group_metric": 1}] * 3
    assert group.tags == ["recording"]
    assert group.total_rewards() == [pytest.approx(0.5 + 1.0 + 0.25)] * 3  # two turns
    assert builder.cleanups == 1


async def test_group_rollout_failure_cancels_siblings_raises_itself_and_cleans_up():
    hanging = HangingPolicy()

    class Mixed:
        per_env = True

        def __call__(self, env):
            return EchoPolicy() if env.fail_at else hanging

    builder = RecordingBuilder(
        group_size=2, env_factory=lambda attempt, i: CountdownEnv(fail_at=1 if i == 0 else None)
    )
    with pytest.raises(RuntimeError, match="env broke at turn 1"):
        await do_group_rollout(builder, Mixed())
    assert builder.cleanups == 1
    assert hanging.started == 1  # the sibling was running, and was cancelled (no hang)


async def test_group_rollout_cleans_up_when_cancelled():
    builder = RecordingBuilder(group_size=2)
    hanging = HangingPolicy()
    task = asyncio.create_task(do_group_rollout(builder, hanging))
    while hanging.started < 2:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert builder.cleanups == 1


async def test_group_rollout_cleans_up_when_make_envs_fails():
    class Broken(RecordingBuilder):
        async def make_envs(self):
            raise OSError("no sandbox available")

    builder = Broken()
    with pytest.raises(OSError, match="no sandbox"):
        await do_group_rollout(builder, EchoPolicy())
    assert builder.cleanups == 1


async def test_group_rollout_rejects_wrong_number_of_group_rewards():
    class Short(RecordingBuilder):
        async def compute_group_rewards(self, trajectories, envs):
            return [(1.0, {})]

    with pytest.raises(ValueError, match="returned 1 rewards for 2 trajectories"):
        await do_group_rollout(Short(), EchoPolicy())


async def test_guess_number_group_with_scripted_oracle(tokenizer):
    config = GuessNumberConfig(tasks=4)
    builder = config.group_builder(2, group_size=3, tokenizer=tokenizer)
    scripted = make_policy("scripted")
    seen = []

    def remember(env):
        seen.append(env)
        return scripted(env)

    remember.per_env = True
    group = await do_group_rollout(builder, remember)
    assert [t.stop_reason for t in group.trajectories] == ["completed"] * 3
    assert group.total_rewards() == [1.0] * 3
    assert group.tags == ["guess_number"]
    for traj in group.trajectories:
        for tr in traj.transitions:
            assert tr.ac.logprobs is None  # the oracle has none; zeros would claim p=1
            assert tokenizer.decode(tr.ac.tokens).startswith("<guess>")
    assert len(seen) == 3 and all(env.closed for env in seen)  # cleanup closed them


async def test_env_turn_cap_reaches_the_policy(tokenizer):
    config = GuessNumberConfig(tasks=1, limits=Limits(max_turns=5, max_tokens_per_turn=3))
    builder = config.group_builder(0, group_size=1, tokenizer=tokenizer)
    group = await do_group_rollout(builder, make_policy("scripted"))
    (traj,) = group.trajectories
    # The scripted action is longer than 3 tokens: cut like a sampler, and the env
    # ends the episode on the token cap.
    assert traj.transitions[0].ac.stop_reason == "length"
    assert len(traj.transitions[0].ac.tokens) == 3
    assert traj.stop_reason == "max_tokens"
