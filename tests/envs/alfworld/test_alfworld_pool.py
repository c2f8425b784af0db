"""The ALFWorld engine processes: bounds, crashes, timeouts, clean shutdown, flat memory."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from agentenvs.envs import make
from agentenvs.envs.alfworld.pool import (
    EngineError,
    EnginePool,
    WorkerCrashed,
    WorkerTimeout,
)
from agentenvs.rollout.collect.rollouts import do_group_rollout
from agentenvs.rollout.policies import make_policy

SMALL = "pick_and_place_simple-Apple-None-Fridge-kitchen7/trial_simple-apple-fridge"
LOOK = "look_at_obj_in_light-Book-None-DeskLamp-study6/trial_look-book-desklamp"


def process_exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie is not reaped
    except FileNotFoundError:
        return False


def game_index(cfg, name: str) -> int:
    return [g.name for g in cfg.games()].index(name)


@pytest.fixture
def pool():
    p = EnginePool(workers=2, engines_per_worker=2)
    yield p
    p.close()


async def test_pool_bounds_processes_and_engines(pool):
    leases = [await pool.lease() for _ in range(4)]
    assert len({lease.pid for lease in leases}) == 2  # spread over both processes first
    assert sorted((lease.pid, lease.slot) for lease in leases) == sorted(
        {(lease.pid, lease.slot) for lease in leases}
    )
    waiting = asyncio.ensure_future(pool.lease())
    await asyncio.sleep(0.2)
    assert not waiting.done()  # every engine is busy: the fifth episode waits
    leases[0].release()
    fifth = await asyncio.wait_for(waiting, 30)
    assert (fifth.pid, fifth.slot) == (leases[0].pid, leases[0].slot)
    assert len(pool.pids()) == 2 and pool.spawned == 2
    for lease in [*leases[1:], fifth]:
        lease.release()


async def test_stuck_worker_times_out_and_is_killed(pool):
    lease = await pool.lease()
    pid = lease.pid
    with pytest.raises(WorkerTimeout, match=rf"pid {pid} did not answer 'sleep' within 0.5s"):
        await lease.call("sleep", timeout=0.5, seconds=30)
    assert not process_exists(pid)
    lease.release()
    fresh = await pool.lease()
    assert fresh.pid != pid
    assert (await fresh.call("ping", timeout=30))["ok"]
    fresh.release()


async def test_engine_errors_keep_the_worker(pool):
    lease = await pool.lease()
    with pytest.raises(EngineError, match="unknown op"):
        await lease.call("teleport", timeout=30)
    with pytest.raises(EngineError, match="step before reset"):
        await lease.call("step", timeout=30, command="look")
    assert (await lease.call("ping", timeout=30))["ok"]
    lease.release()


async def test_worker_that_cannot_start_fails_clearly():
    pool = EnginePool(workers=1, engines_per_worker=1, python="/bin/false")
    try:
        with pytest.raises(WorkerCrashed, match=r"failed to start.*exited with status 1"):
            await pool.lease()
    finally:
        pool.close()


async def test_close_reaps_every_worker():
    pool = EnginePool(workers=2, engines_per_worker=1)
    leases = [await pool.lease() for _ in range(2)]
    pids = [lease.pid for lease in leases]
    assert all(process_exists(pid) for pid in pids)
    pool.close()
    assert not any(process_exists(pid) for pid in pids)
    with pytest.raises(WorkerCrashed):
        await leases[0].call("ping", timeout=5)
    pool.close()  # idempotent


async def test_killed_worker_fails_the_episode_and_is_replaced(tokenizer):
    cfg = make("alfworld", data="shipped", workers=1, engines_per_worker=2)
    try:
        env = cfg.make_env(game_index(cfg, SMALL), tokenizer)
        await env.initial_observation()
        pid = env.task.worker_pid
        os.kill(pid, signal.SIGKILL)
        tokens, stop = await env.scripted_action("oracle")
        with pytest.raises(WorkerCrashed, match=rf"pid {pid} was killed by SIGKILL"):
            await asyncio.wait_for(env.step(tokens, extra={"stop_reason": stop}), 30)
        await env.close()
        assert not process_exists(pid)

        # The next episode gets a fresh process and plays normally.
        group = await do_group_rollout(
            cfg.group_builder(game_index(cfg, SMALL), 2, tokenizer), make_policy("scripted")
        )
        assert group.total_rewards() == [1.0, 1.0]
        assert cfg.pool().pids() and pid not in cfg.pool().pids()
    finally:
        cfg.shutdown()


async def test_killed_worker_can_end_the_episode_instead(tokenizer):
    cfg = make(
        "alfworld", data="shipped", workers=1, engines_per_worker=1, on_env_error="end_episode"
    )
    try:
        env = cfg.make_env(game_index(cfg, SMALL), tokenizer)
        await env.initial_observation()
        os.kill(env.task.worker_pid, signal.SIGKILL)
        tokens, stop = await env.scripted_action("oracle")
        result = await asyncio.wait_for(env.step(tokens, extra={"stop_reason": stop}), 30)
        assert result.episode_done and result.metrics["stop/env_error"] == 1
        assert "SIGKILL" in result.logs["env_error"]
        assert env.task.episode_metrics()["env_error"] == 1
    finally:
        cfg.shutdown()


async def test_memory_stays_flat_over_300_episodes():
    """RSS of one worker after episode 50 vs 300: one engine, resets, and a game switch
    (a fresh ``load``) every tenth episode."""
    cfg = make("alfworld", data="shipped", workers=1, engines_per_worker=1)
    games = [game_index(cfg, SMALL), game_index(cfg, LOOK)]
    rss = {}
    try:
        for episode in range(1, 301):
            task = cfg.make_text_env(games[(episode // 10) % 2])
            await task.start()
            step = await task.step(task.scripted_action("oracle"), stop_reason="stop")
            assert step.metrics["invalid_action"] == 0
            await task.close()
            if episode in (50, 300):
                (stats,) = await cfg.pool().stats()
                rss[episode] = stats["rss_kb"]
                assert stats["engines"] == 1 and stats["episodes"] == episode
        print(f"worker RSS after 50 episodes {rss[50]} kB, after 300 {rss[300]} kB")
        assert rss[300] - rss[50] < 0.05 * rss[50], rss
    finally:
        cfg.shutdown()


class KillWorkerPolicy:
    """The scripted oracle, except that its first ``kills`` actions SIGKILL the engine first."""

    per_env = True

    def __init__(self, kills: int) -> None:
        self.kills_left = kills
        self.killed: list[int] = []
        self.scripted = make_policy("scripted")

    def __call__(self, env):
        inner = self.scripted(env)

        async def act(observation, stop, *, max_tokens=None):
            if self.kills_left > 0 and env.task.worker_pid not in self.killed:
                self.kills_left -= 1
                self.killed.append(env.task.worker_pid)
                os.kill(env.task.worker_pid, signal.SIGKILL)
            return await inner(observation, stop, max_tokens=max_tokens)

        return act


async def test_collector_retries_a_crashed_group_on_a_fresh_worker(tokenizer):
    from agentenvs.rollout.collect.collector import CollectOptions, collect

    cfg = make("alfworld", data="shipped", workers=1, engines_per_worker=2)
    try:
        builder = cfg.group_builder(game_index(cfg, SMALL), 2, tokenizer)
        policy = KillWorkerPolicy(kills=1)
        result = await asyncio.wait_for(
            collect([builder], policy, CollectOptions(retries=1, progress=False)), 120
        )
        (record,) = result.records
        assert record.status == "ok" and record.attempts == 2
        assert record.group.total_rewards() == [1.0, 1.0]

        policy = KillWorkerPolicy(kills=5)
        result = await asyncio.wait_for(
            collect([builder], policy, CollectOptions(retries=1, progress=False)), 120
        )
        (record,) = result.records
        assert record.status == "failed" and record.attempts == 2
        assert record.error.count("WorkerCrashed") == 2 and "SIGKILL" in record.error
        assert not any(process_exists(pid) for pid in policy.killed)
    finally:
        cfg.shutdown()
