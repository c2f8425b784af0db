"""The ALFWorld env on the real TextWorld/ALFWorld engine, played through the token-level API.

Every test here runs real games in real worker processes; nothing is faked.
"""

from __future__ import annotations

import asyncio

import pytest

from agentenvs.envs import make
from agentenvs.envs.alfworld.config import ALFWorldConfig
from agentenvs.envs.alfworld.env import NOTHING_HAPPENS
from agentenvs.envs.alfworld.games import find_games
from agentenvs.envs.alfworld.scenes import TASK_TYPES
from agentenvs.envs.registry import EnvConfigError, list_envs
from agentenvs.envs.types import TrajectoryGroup
from agentenvs.rollout.collect.rollouts import do_group_rollout, do_single_rollout
from agentenvs.rollout.data.samples import trajectory_to_samples
from agentenvs.rollout.policies import make_policy

SMALL = "pick_and_place_simple-Apple-None-Fridge-kitchen7/trial_simple-apple-fridge"
BIG_KITCHEN = (
    "pick_heat_then_place_in_recep-Egg-None-DiningTable-kitchen33/trial_heat-egg-diningtable"
)


@pytest.fixture(scope="module")
def config():
    cfg = make("alfworld", data="shipped")
    yield cfg
    cfg.shutdown()


def index_of(cfg: ALFWorldConfig, name: str, split: str = "train") -> int:
    return [g.name for g in cfg.games(split)].index(name)


async def play(cfg: ALFWorldConfig, index: int, tokenizer, split: str = "train", variant="oracle"):
    env = cfg.make_env(index, tokenizer, split)
    policy = make_policy("scripted", variant=variant)(env)
    try:
        return env, await do_single_rollout(policy, env)
    finally:
        await env.close()


def check_masks(trajectory, tokenizer):
    """Observation tokens are env tokens: mask 0; exactly the sampled tokens have mask 1."""
    (sample,) = trajectory_to_samples(trajectory, 1.0)
    expected_mask: list[int] = []
    for i, transition in enumerate(trajectory.transitions):
        previous = (
            trajectory.transitions[i - 1].ob + trajectory.transitions[i - 1].ac.tokens if i else []
        )
        assert transition.ob[: len(previous)] == previous  # the context only grows
        observation = transition.ob[len(previous) :]
        expected_mask += [0] * len(observation) + [1] * len(transition.ac.tokens)
        if i:
            text = tokenizer.decode(observation)
            assert "Commands available now:" in text  # the game's answer is in env tokens
    assert sample.loss_mask == expected_mask
    assert sample.tokens == trajectory.transitions[-1].ob + trajectory.transitions[-1].ac.tokens


@pytest.mark.parametrize("split", ["train", "valid_seen", "valid_unseen"])
async def test_oracle_solves_every_shipped_game(config, tokenizer, split):
    games = config.games(split)
    results = await asyncio.gather(*(play(config, i, tokenizer, split) for i in range(len(games))))
    for game, (env, trajectory) in zip(games, results, strict=True):
        final = trajectory.transitions[-1]
        assert trajectory.stop_reason == "completed", game.name
        assert final.metrics["won"] == 1
        assert trajectory.step_reward == pytest.approx(config.success_reward)
        assert env.task.stats.invalid_actions == 0
        assert len(trajectory.transitions) == len(game_walkthrough(game.path))
        check_masks(trajectory, tokenizer)


def game_walkthrough(path: str) -> list[str]:
    import json

    with open(path) as f:
        return json.load(f)["walkthrough"]


async def test_invalid_and_malformed_actions_are_penalised_and_counted(config, tokenizer):
    env = config.make_env(index_of(config, SMALL), tokenizer)
    ob, _ = await env.initial_observation()
    rewards = []
    for variant in ("invalid", "malformed"):
        tokens, stop = await env.scripted_action(variant)
        result = await env.step(tokens, extra={"stop_reason": stop})
        rewards.append(result.reward)
        assert result.metrics["invalid_action"] == 1
        added = tokenizer.decode(result.next_observation[len(ob) + len(tokens) :])
        if variant == "invalid":
            assert NOTHING_HAPPENS in added
            assert result.metrics["invalid_format"] == 0
        else:
            assert "<action>" in added and result.metrics["invalid_format"] == 1
        ob = result.next_observation
    assert rewards == [-config.invalid_action_penalty] * 2

    # Forgiving matching: case, spacing and a full stop do not make an action invalid.
    text = "<action>  Go To   CounterTop 1. </action>"
    result = await env.step(
        tokenizer.encode(text, add_special_tokens=False), extra={"stop_reason": "stop"}
    )
    assert result.reward == 0 and result.metrics["invalid_action"] == 0
    assert "You arrive at countertop 1" in tokenizer.decode(result.next_observation)
    # The oracle replans from wherever the game now is, and wins.
    while not result.episode_done:
        tokens, stop = await env.scripted_action("oracle")
        result = await env.step(tokens, extra={"stop_reason": stop})
    assert result.metrics["won"] == 1 and result.metrics["stop/completed"] == 1
    metrics = env.task.episode_metrics()
    assert metrics["invalid_actions"] == 2 and metrics["invalid_format"] == 1
    assert metrics["won"] == 1 and metrics["won/pick_and_place_simple"] == 1


async def test_old_put_wording_is_accepted(config, tokenizer):
    env = config.make_env(index_of(config, SMALL), tokenizer)
    await env.initial_observation()
    task = env.task
    for command in (
        "go to countertop 1",
        "take apple 1 from countertop 1",
        "go to fridge 1",
        "open fridge 1",
    ):
        step = await task.step(f"<action>{command}</action>", stop_reason="stop")
        assert step.metrics["invalid_action"] == 0, command
    step = await task.step("<action>put apple 1 in/on fridge 1</action>", stop_reason="stop")
    assert step.done and step.metrics["won"] == 1
    await env.close()


async def test_reset_restores_the_initial_state_on_a_reused_engine(tokenizer):
    cfg = make("alfworld", data="shipped", workers=1, engines_per_worker=1)
    try:
        small, other = (
            index_of(cfg, SMALL),
            index_of(
                cfg, "look_at_obj_in_light-Book-None-DeskLamp-study6/trial_look-book-desklamp"
            ),
        )
        first_env, first = await play(cfg, small, tokenizer)
        _, _ = await play(cfg, other, tokenizer)  # the engine loads another game in between
        again_env, again = await play(cfg, small, tokenizer)
        assert first.transitions[0].ob == again.transitions[0].ob
        assert [t.ac.tokens for t in first.transitions] == [t.ac.tokens for t in again.transitions]
        assert first_env.task.worker_pid == again_env.task.worker_pid  # one engine, reused
        # A half-played game is fully reset for the next episode.
        env = cfg.make_env(small, tokenizer)
        await env.initial_observation()
        await env.task.step("<action>go to countertop 1</action>", stop_reason="stop")
        await env.task.step("<action>take apple 1 from countertop 1</action>", stop_reason="stop")
        await env.close()
        _, fresh = await play(cfg, small, tokenizer)
        assert fresh.transitions[0].ob == first.transitions[0].ob
        assert fresh.transitions[-1].metrics["won"] == 1
    finally:
        cfg.shutdown()


async def test_group_of_eight_plays_one_game_concurrently(config, tokenizer):
    builder = config.group_builder(index_of(config, BIG_KITCHEN), 8, tokenizer)
    group: TrajectoryGroup = await do_group_rollout(builder, make_policy("scripted"))
    assert len(group.trajectories) == 8
    first_obs = {tuple(t.transitions[0].ob) for t in group.trajectories}
    assert len(first_obs) == 1  # same game, same initial state
    assert all(t.stop_reason == "completed" for t in group.trajectories)
    assert group.total_rewards() == [config.success_reward] * 8
    for metrics in group.group_metrics:
        assert metrics["won/pick_heat_then_place_in_recep"] == 1
        assert metrics["invalid_actions"] == 0
    assert len(config.pool().pids()) <= config.workers
    assert builder.envs == []  # cleanup released every engine


async def test_tool_protocol(tokenizer):
    cfg = make("alfworld", data="shipped", protocol="tool")
    env, trajectory = await play(cfg, index_of(cfg, SMALL), tokenizer)
    prompt = tokenizer.decode(trajectory.transitions[0].ob)
    assert "alfworld_step" in prompt and "<tools>" in prompt
    assert "<tool_call>" in tokenizer.decode(trajectory.transitions[0].ac.tokens)
    assert "<|im_start|>tool" in tokenizer.decode(trajectory.transitions[1].ob)
    assert trajectory.transitions[-1].metrics["won"] == 1
    check_masks(trajectory, tokenizer)
    # A reply with no tool call is a format error, not an exception.
    env = cfg.make_env(index_of(cfg, SMALL), tokenizer)
    await env.initial_observation()
    step = await env.task.step('{"action": "look"}', stop_reason="eos")
    assert step.metrics["invalid_format"] == 1 and "alfworld_step" in step.observation["content"]
    await env.close()


async def test_window_history_makes_each_step_a_sample(tokenizer):
    cfg = make("alfworld", data="shipped", history="window", history_window=1)
    _, trajectory = await play(cfg, index_of(cfg, SMALL), tokenizer)
    steps = len(trajectory.transitions)
    assert trajectory.transitions[-1].metrics["won"] == 1
    samples = trajectory_to_samples(trajectory, 1.0)
    assert len(samples) == steps  # every step restarts the prompt
    for i, transition in enumerate(trajectory.transitions[1:], start=1):
        prompt = tokenizer.decode(transition.ob)
        assert prompt.count("<|im_start|>user") == 1  # one fresh prompt, no old turns
        assert f"Action {i}:" in prompt
        if i >= 2:  # exactly one earlier step is shown
            assert f"[{i - 1}]" in prompt and f"[{i - 2}]" not in prompt
    for transition in trajectory.transitions[:-1]:
        assert transition.metrics["renderer/prefix_breaks"] == 1
    for sample, transition in zip(samples, trajectory.transitions, strict=True):
        assert sample.loss_mask == [0] * len(transition.ob) + [1] * len(transition.ac.tokens)


async def test_continuation_renderer(tokenizer):
    cfg = make("alfworld", data="shipped", renderer="continuation")
    _, trajectory = await play(cfg, index_of(cfg, SMALL), tokenizer)
    assert trajectory.transitions[-1].metrics["won"] == 1
    assert "<observation>" in tokenizer.decode(trajectory.transitions[1].ob)
    check_masks(trajectory, tokenizer)


async def test_turn_limit_ends_the_episode(tokenizer):
    cfg = make("alfworld", data="shipped", limits={"max_turns": 3}, success_reward=10.0)
    _, trajectory = await play(cfg, index_of(cfg, SMALL), tokenizer, variant="invalid")
    assert trajectory.stop_reason == "max_turns"
    assert len(trajectory.transitions) == 3
    assert trajectory.step_reward == pytest.approx(-0.3)


def test_registry_config_and_splits():
    names = {info.name: info for info in list_envs()}
    assert names["alfworld"].gym_id == "agentenvs/ALFWorld-v0"
    cfg = make("alfworld", data="shipped")
    assert cfg.limits.max_turns == 50
    assert {cfg.num_tasks(s) for s in ("train", "valid_seen", "valid_unseen")} >= {12, 2}
    assert cfg.num_tasks("eval_out_of_distribution") == cfg.num_tasks("valid_unseen")
    assert {g.task_type for g in cfg.games("train")} == set(TASK_TYPES)
    only = make("alfworld", data="shipped", task_types=["pick_two_obj_and_place"])
    assert only.num_tasks() == 2
    with pytest.raises(EnvConfigError):
        make("alfworld", task_types=["make_coffee"])
    with pytest.raises(EnvConfigError):
        make("alfworld", protocol="tool", renderer="continuation")
    with pytest.raises(ValueError):
        cfg.num_tasks("test")
    assert find_games.cache_info().currsize >= 1


def test_gymnasium_wrapper_plays_a_game():
    import gymnasium

    from agentenvs.envs.registry import register_gymnasium

    register_gymnasium()
    env = gymnasium.make(
        "agentenvs/ALFWorld-v0", data="shipped", task_types=["pick_and_place_simple"]
    )
    try:
        prompt, info = env.reset(options={"task_index": 0})
        assert "Task: put" in prompt and info["stop_sequences"] == ["</action>"]
        observation, reward, done, truncated, _ = env.step("<action>look</action>")
        assert reward == 0 and not truncated
        assert not done and "Commands available now" in observation
    finally:
        env.close()
