"""The collector: concurrency bound, retries with fresh envs, timeouts, store, resume, kill."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from support.paths import SUPPORT
from support.rollout_helpers import (
    CountdownEnv,
    EchoPolicy,
    HangingPolicy,
    InFlight,
    RecordingBuilder,
)

from agentenvs.rollout.collect.collector import collect, summarize
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy


def _builders(n: int, **kwargs) -> list[RecordingBuilder]:
    return [RecordingBuilder(task_id=f"task{i}", **kwargs) for i in range(n)]


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_concurrency_bound_is_respected_and_reached(concurrency):
    groups = InFlight()
    calls = InFlight()
    builders = _builders(8, group_size=2, tracker=groups)
    result = await collect(
        builders, EchoPolicy(delay=0.01, tracker=calls), concurrency=concurrency, progress=False
    )
    assert len(result.ok) == 8 and result.failed == []
    assert groups.peak == concurrency  # never more groups in flight, and the bound is used
    assert calls.peak == 2 * concurrency  # policy calls in flight: group size x groups
    assert all(b.cleanups == 1 for b in builders)


async def test_records_carry_keys_env_and_provenance():
    builders = _builders(3)
    result = await collect(
        builders,
        EchoPolicy(),
        env_name="countdown",
        env_config={"turns": 2},
        provenance={"weights": "v7"},
        progress=False,
    )
    by_key = {r.key: r for r in result.records}
    assert set(by_key) == {"0:task0", "1:task1", "2:task2"}
    record = by_key["1:task1"]
    assert record.env == "countdown" and record.task_id == "task1"
    assert record.env_config == {"turns": 2}
    assert record.provenance == {"policy": {"policy": "EchoPolicy"}, "weights": "v7"}
    assert record.attempts == 1 and record.status == "ok"


async def test_retry_uses_fresh_envs_and_succeeds():
    # The first attempt's first env raises mid-episode; the second attempt works.
    builder = RecordingBuilder(
        env_factory=lambda attempt, i: CountdownEnv(fail_at=2 if attempt == 1 and i == 0 else None)
    )
    result = await collect([builder], EchoPolicy(), retries=1, progress=False)
    (record,) = result.records
    assert record.status == "ok" and record.attempts == 2
    assert builder.attempts == 2 and builder.cleanups == 2
    first, second = builder.made
    assert not {id(e) for e in first} & {id(e) for e in second}  # fresh envs
    assert all(env.taken == 2 for env in second)


async def test_a_group_that_always_fails_is_recorded_failed_and_others_are_kept(tmp_path):
    broken = RecordingBuilder(
        task_id="broken", env_factory=lambda attempt, i: CountdownEnv(fail_at=1)
    )
    builders = [*_builders(2), broken, *_builders(2)]
    keys = [f"k{i}" for i in range(5)]
    store = TrajectoryStore(tmp_path / "t.jsonl")
    result = await collect(
        builders, EchoPolicy(), retries=2, keys=keys, store=store, progress=False
    )
    assert len(result.records) == 5  # nothing dropped
    (failed,) = result.failed
    assert failed.key == "k2" and failed.attempts == 3 and failed.group is None
    assert "RuntimeError: env broke at turn 1" in failed.error
    assert failed.error.startswith("failed after 3 attempts")
    assert broken.cleanups == 3
    stored = {r.key: r.status for r in store.read()}
    assert stored == {"k0": "ok", "k1": "ok", "k2": "failed", "k3": "ok", "k4": "ok"}
    summary = summarize(result.records)
    assert summary["groups"] == 5 and summary["failed"] == 1 and summary["ok"] == 4


async def test_group_timeout_counts_as_a_failed_attempt_and_cleans_up():
    hanging = HangingPolicy()

    class FirstAttemptHangs:
        per_env = True

        def __call__(self, env):
            return hanging if env.turns == 99 else EchoPolicy()

    builder = RecordingBuilder(
        env_factory=lambda attempt, i: CountdownEnv(turns=99 if attempt == 1 else 2)
    )
    always = RecordingBuilder(task_id="stuck", env_factory=lambda a, i: CountdownEnv(turns=99))
    result = await collect(
        [builder, always], FirstAttemptHangs(), retries=1, group_timeout=0.2, progress=False
    )
    by_task = {r.task_id: r for r in result.records}
    assert by_task["t"].status == "ok" and by_task["t"].attempts == 2
    stuck = by_task["stuck"]
    assert stuck.status == "failed" and stuck.attempts == 2
    assert stuck.error.count("TimeoutError: group took longer than 0.2s") == 2
    assert builder.cleanups == 2 and always.cleanups == 2


async def test_resume_skips_stored_groups_and_retries_failed_ones(tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    flaky = RecordingBuilder(task_id="flaky", env_factory=lambda a, i: CountdownEnv(fail_at=1))
    builders = [*_builders(3), flaky]
    first = await collect(builders, EchoPolicy(), retries=0, store=store, progress=False)
    assert len(first.ok) == 3 and len(first.failed) == 1

    fixed = RecordingBuilder(task_id="flaky")
    fresh = [*_builders(3), fixed]
    second = await collect(fresh, EchoPolicy(), store=store, progress=False)
    assert second.skipped == 3
    assert [r.key for r in second.records] == ["3:flaky"]
    assert all(b.attempts == 0 for b in fresh[:3])  # skipped groups never ran
    assert store.keys() == {"0:task0", "1:task1", "2:task2", "3:flaky"}


async def test_duplicate_keys_and_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="unique"):
        await collect(_builders(2), EchoPolicy(), keys=["a", "a"], progress=False)
    with pytest.raises(ValueError, match="concurrency"):
        await collect(_builders(1), EchoPolicy(), concurrency=0, progress=False)


async def test_progress_bar_is_safe_without_a_terminal(capsys):
    result = await collect(_builders(2), EchoPolicy(), progress=True)
    assert len(result.ok) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""  # not a TTY: no bar, no noise


async def test_cancelling_a_collection_cleans_up_running_groups(tmp_path):
    builders = _builders(4)
    hanging = HangingPolicy()
    store = TrajectoryStore(tmp_path / "t.jsonl")
    task = asyncio.create_task(
        collect(builders, hanging, concurrency=2, store=store, progress=False)
    )
    while hanging.started < 4:  # two groups of two envs are running
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [b.cleanups for b in builders] == [1, 1, 0, 0]
    assert store.keys() == set()


async def test_summary_of_guess_number(tokenizer):
    from agentenvs.envs.guess_number import GuessNumberConfig

    builders = list(GuessNumberConfig(tasks=3).dataset(tokenizer, group_size=2).builders)
    result = await collect(builders, make_policy("scripted"), progress=False)
    summary = summarize(result.records)
    assert summary["groups"] == 3 and summary["trajectories"] == 6 and summary["failed"] == 0
    assert summary["mean_reward"] == 1.0
    assert summary["stop_reasons"] == {"completed": 6}
    assert summary["tokens_sampled"] == sum(
        len(t.ac.tokens)
        for r in result.records
        for traj in r.group.trajectories
        for t in traj.transitions
    )
    turns = [len(traj.transitions) for r in result.records for traj in r.group.trajectories]
    assert summary["mean_turns"] == pytest.approx(sum(turns) / len(turns))
    assert result.records[0].env == "guess_number"  # taken from the builder's config
    assert result.records[0].env_config["tasks"] == 3


def test_killed_run_loses_nothing_and_the_rerun_resumes(tmp_path):
    from support import rollout_kill_worker as worker

    out = tmp_path / "run.jsonl"
    groups = 40
    proc = subprocess.Popen(
        [sys.executable, str(SUPPORT / "rollout_kill_worker.py"), str(out), str(groups), "0.03"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120  # a hang guard, not a speed assertion
        while not (out.exists() and out.read_bytes().count(b"\n") >= 4):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "worker wrote nothing"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    before = out.read_bytes()
    store = TrajectoryStore(out)
    kept = list(store.read())
    assert 4 <= len(kept) < groups, "the kill should land mid-run"
    assert all(r.status == "ok" for r in kept)
    assert len(store.problems) <= 1  # at most a torn last line

    result = asyncio.run(
        collect(
            worker.builders(groups),
            make_policy("scripted"),
            store=store,
            env_name="guess_number",
            progress=False,
        )
    )
    assert result.skipped == len(kept)
    assert len(result.records) == groups - len(kept)
    assert not {r.key for r in result.records} & {r.key for r in kept}
    after = out.read_bytes()
    complete = before[: before.rfind(b"\n") + 1]
    assert after.startswith(complete)  # what was written survives byte for byte
    final = TrajectoryStore(out)
    assert len(final.keys()) == groups
    assert [r.key for r in final.read()][: len(kept)] == [r.key for r in kept]
