"""GiGPO on a real ALFWorld group (the real engine, preset=gigpo): both trajectories win,
so GRPO has nothing to say; the second wastes its first step on an inadmissible command,
and GiGPO's step level blames exactly that step (the one anchor state both passed
through with different returns). Then the samples go through the JSONL hand-off and
``agentenvs check`` judges them per step."""

from __future__ import annotations

import asyncio
import math

import pytest

from agentenvs.envs import make
from agentenvs.rollout.collect.rollouts import current_slot, do_group_rollout
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.data.gigpo import GigpoSettings
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.inspect.findings import Check
from agentenvs.rollout.policies.scripted import ScriptedEnvPolicy
from agentenvs.rollout.trainers.jsonl.handoff import write_samples_jsonl

SMALL = "pick_and_place_simple-Apple-None-Fridge-kitchen7/trial_simple-apple-fridge"


class SecondWastesItsFirstStep:
    """Per env: the scripted oracle, except trajectory 1's first reply (an inadmissible,
    well-formed command: 'Nothing happens.', reward 0 under the preset)."""

    per_env = True

    def __call__(self, env):
        slot = current_slot.get()
        oracle, waste = ScriptedEnvPolicy(env, "oracle"), ScriptedEnvPolicy(env, "invalid")
        turns = [0]

        async def act(observation, stop, *, max_tokens=None):
            turns[0] += 1
            wasteful = slot is not None and slot.traj_index == 1 and turns[0] == 1
            return await (waste if wasteful else oracle)(observation, stop, max_tokens=max_tokens)

        return act


@pytest.fixture(scope="module")
def group(tokenizer_module):
    cfg = make("alfworld", preset="gigpo", data="shipped")
    try:
        index = [g.name for g in cfg.games()].index(SMALL)
        builder = cfg.group_builder(index, 2, tokenizer_module)
        yield asyncio.run(do_group_rollout(builder, SecondWastesItsFirstStep()))
    finally:
        cfg.shutdown()


@pytest.fixture(scope="module")
def tokenizer_module():
    from agentenvs.rollout.tokenizer import load_tokenizer

    return load_tokenizer("builtin")


def test_gigpo_blames_the_wasted_step_where_grpo_sees_nothing(group):
    a, b = group.trajectories
    assert group.total_rewards() == [10.0, 10.0]
    assert len(b.transitions) == len(a.transitions) + 1
    assert compute_advantages([group], "grpo") == [[0.0, 0.0]]
    (per_step,) = compute_advantages([group], "gigpo")
    # The first state is shared; A's return there is 10 * 0.95^(T-1), B's one step further
    # off. Two members, normalised: +-1/sqrt(2) (episode level is 0: all rows score 10).
    first = a.transitions[0].logs["anchor_key"]
    assert b.transitions[0].logs["anchor_key"] == first
    assert per_step[0][0] == pytest.approx(1 / math.sqrt(2), rel=1e-5)
    assert per_step[1][0] == pytest.approx(-1 / math.sqrt(2), rel=1e-5)
    # From then on both follow the same plan with as many steps left: same returns, 0.
    assert per_step[0][1:] == pytest.approx([0.0] * (len(a.transitions) - 1), abs=1e-9)
    assert per_step[1][1:] == pytest.approx([0.0] * (len(b.transitions) - 1), abs=1e-9)
    # Without discounting the two returns at the first state are equal: nothing to blame.
    (flat,) = compute_advantages([group], "gigpo", gigpo=GigpoSettings(gamma=1.0))
    assert all(v == pytest.approx(0.0, abs=1e-9) for traj in flat for v in traj)


def test_per_step_samples_pass_the_check_and_a_scalar_label_fails_them(group, tmp_path):
    advantages = compute_advantages([group], "gigpo")
    samples = trajectories_to_samples([group], advantages)
    # Window history: one sample per step, each step's tokens carry its own advantage.
    assert len(samples) == sum(len(t.transitions) for t in group.trajectories)
    good = tmp_path / "gigpo.jsonl"
    write_samples_jsonl(samples, good, extra={"advantage_estimator": GigpoSettings().info()})
    report = check_file(good)
    assert report.status(Check.LOSS_INPUTS) != "fail", report.by_check(Check.LOSS_INPUTS)
    # Labelled as GRPO, the check recomputes GRPO from the rewards (10, 10: all 0) and
    # finds the step advantages: fail.
    labelled = tmp_path / "as_grpo.jsonl"
    write_samples_jsonl(
        samples,
        labelled,
        extra={"advantage_estimator": {"estimator": "grpo", "normalize_std": True}},
    )
    assert check_file(labelled).status(Check.LOSS_INPUTS) == "fail"
