"""ALFWorld forks on the real TextWorld engine: a forked process per branch, exact state."""

from __future__ import annotations

import os

import pytest

from agentenvs.envs.alfworld.config import ALFWorldConfig
from agentenvs.envs.registry import make

KITCHEN = "pick_and_place_simple-Apple-None-Fridge-kitchen7/trial_simple-apple-fridge"


@pytest.fixture(scope="module")
def config():
    cfg = make("alfworld", data="shipped", workers=1, engines_per_worker=4)
    yield cfg
    cfg.shutdown()


def kitchen(cfg: ALFWorldConfig) -> int:
    return [g.name for g in cfg.games("train")].index(KITCHEN)


async def play(env, command: str):
    tokens = env.renderer.encode(f"<action>{command}</action>")
    return await env.step(tokens, extra={"stop_reason": "stop"})


async def engine_says(cfg: ALFWorldConfig, commands: list[str]) -> tuple[str, list[str]]:
    """What a fresh engine answers after ``commands``: the reference for a fork."""
    lease = await cfg.settings().pool().lease()
    try:
        answer = await lease.call("reset", timeout=120, game=cfg.games("train")[kitchen(cfg)].path)
        for command in commands:
            answer = await lease.call("step", timeout=60, command=command, plan=False)
        return answer["feedback"], list(answer["admissible"])
    finally:
        lease.release()


async def test_branch_a_opens_the_fridge_and_branch_b_does_not(config, tokenizer):
    env = config.make_env(kitchen(config), tokenizer)
    await env.initial_observation()
    await play(env, "go to fridge 1")
    branch = await env.fork()
    try:
        assert branch.task.fork_method == "process"
        assert branch.task.worker_pid != env.task.worker_pid
        assert branch.context == env.context and branch.task.admissible == env.task.admissible
        await play(env, "open fridge 1")
        await play(branch, "examine fridge 1")
        a_feedback, a_admissible = await engine_says(config, ["go to fridge 1", "open fridge 1"])
        b_feedback, b_admissible = await engine_says(config, ["go to fridge 1", "examine fridge 1"])
        assert env.task.raw_observation == a_feedback and env.task.admissible == a_admissible
        assert branch.task.raw_observation == b_feedback
        assert branch.task.admissible == b_admissible
        assert "close fridge 1" in a_admissible and "close fridge 1" not in b_admissible
        assert a_feedback != b_feedback
    finally:
        await env.close()
        await branch.close()


async def test_an_action_in_one_fork_never_changes_anothers_next_observation(config, tokenizer):
    env = config.make_env(kitchen(config), tokenizer)
    await env.initial_observation()
    await play(env, "go to fridge 1")
    forks = [await env.fork() for _ in range(2)]
    try:
        await play(env, "open fridge 1")
        await play(forks[0], "go to countertop 1")
        # The second fork has not moved: it sees what the engine shows after the common
        # past only, whatever its siblings did.
        step = await play(forks[1], "look")
        look_feedback, look_admissible = await engine_says(config, ["go to fridge 1", "look"])
        assert forks[1].task.raw_observation == look_feedback
        assert forks[1].task.admissible == look_admissible
        assert not step.episode_done
        # A fork of a fork carries the fork's own past.
        deeper = await forks[0].fork()
        forks.append(deeper)
        await play(deeper, "look")
        ref_feedback, _ = await engine_says(
            config, ["go to fridge 1", "go to countertop 1", "look"]
        )
        assert deeper.task.raw_observation == ref_feedback
    finally:
        for episode in (env, *forks):
            await episode.close()


async def test_replay_fallback_reaches_the_same_state(config, tokenizer):
    env = config.make_env(kitchen(config), tokenizer)
    await env.initial_observation()
    await play(env, "go to fridge 1")
    await play(env, "open fridge 1")
    lease = await env.task._replayed_engine()
    try:
        answer = await lease.call("step", timeout=60, command="look", plan=False)
        mine = await env.task.lease.call("step", timeout=60, command="look", plan=False)
        assert answer["feedback"] == mine["feedback"] and answer["admissible"] == mine["admissible"]
    finally:
        lease.release()
        await env.close()


async def test_a_closed_fork_gives_its_engine_process_back(config, tokenizer):
    env = config.make_env(kitchen(config), tokenizer)
    await env.initial_observation()
    branch = await env.fork()
    pid = branch.task.worker_pid
    pool = config.settings().pool()
    assert len(pool.forks) == 1
    await branch.close()
    await branch.close()  # idempotent
    assert not pool.forks
    await env.task.lease.call("ping", timeout=30)  # its worker has run the reaper by now
    assert not os.path.exists(f"/proc/{pid}")  # killed and reaped by the worker it came from
    await env.close()


async def test_a_tree_of_oracle_episodes_on_forked_engines_all_win(config, tokenizer):
    from agentenvs.rollout.collect.records import GroupRecord
    from agentenvs.rollout.collect.tree import BranchSchedule, do_tree_rollout
    from agentenvs.rollout.inspect.check import check_records
    from agentenvs.rollout.policies import make_policy

    builder = config.group_builder(kitchen(config), 1, tokenizer)
    schedule = BranchSchedule(branch_at=(3,), branch_factor=3)
    group = await do_tree_rollout(builder, make_policy("scripted"), schedule)
    assert len(group.trajectories) == 3 and group.tree["forks"] == 2
    assert all(t.stop_reason == "completed" for t in group.trajectories)
    assert not config.settings().pool().forks  # every forked engine was given back
    record = GroupRecord(
        key="0", env="alfworld", task_id="0", group=group, extra={"tree": group.tree}
    )
    trees = [f for f in check_records([record]).findings if f.detail.startswith("tree ")]
    assert [f.status for f in trees] == ["pass", "pass"]
