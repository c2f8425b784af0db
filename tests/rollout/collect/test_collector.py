"""The collector: concurrency bound, retries with fresh envs, timeouts, store, resume, kill."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest
from support.paths import SUPPORT
from support.rollout_helpers import (
    CountdownEnv,
    EchoPolicy,
    HangingPolicy,
    InFlight,
    RecordingBuilder,
)

from agentenvs.envs.config import dumped_config_hash
from agentenvs.envs.data_hashes import data_digests
from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.rollout.collect.collector import CollectOptions, ProvenanceNotes, collect, summarize
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import train_chatml_tokenizer


def _builders(n: int, **kwargs) -> list[RecordingBuilder]:
    return [RecordingBuilder(task_id=f"task{i}", **kwargs) for i in range(n)]


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_concurrency_bound_is_respected_and_reached(concurrency):
    groups = InFlight()
    calls = InFlight()
    builders = _builders(8, group_size=2, tracker=groups)
    result = await collect(
        builders,
        EchoPolicy(delay=0.01, tracker=calls),
        CollectOptions(concurrency=concurrency, progress=False),
    )
    assert len(result.ok) == 8 and result.failed == []
    assert groups.peak == concurrency  # never more groups in flight, and the bound is used
    assert calls.peak == 2 * concurrency  # policy calls in flight: group size x groups
    assert all(b.cleanups == 1 for b in builders)


async def test_records_carry_keys_env_and_provenance():
    """What a record says of its group and its provenance come from the builder's
    description, the policy's and the notes' (a run spec's) only."""
    builders = _builders(3, env_name="countdown", config={"turns": 2})
    notes = ProvenanceNotes(sections={"weights": "v7"})
    result = await collect(builders, EchoPolicy(), CollectOptions(progress=False), notes=notes)
    by_key = {r.key: r for r in result.records}
    assert set(by_key) == {"0:task0", "1:task1", "2:task2"}
    record = by_key["1:task1"]
    assert record.env == "countdown" and record.task_id == "task1"
    assert record.env_config == {"turns": 2}
    assert record.provenance == {
        "policy": {
            "kind": "EchoPolicy", "model": None, "url": None, "weights_version": None,
            "options": {},
        },
        "env": {
            "name": "countdown", "version": None, "config_sha256": dumped_config_hash({"turns": 2}),
            "config": {"turns": 2}, "renderer": None, "protocol": None, "tool_format": None,
            "data": {},
        },
        "sampling": {"temperature": None, "top_p": None, "max_tokens": None, "seed": None},
        "weights": "v7",
    }  # fmt: skip
    assert "tokenizer" not in record.provenance  # none described: readers will ask for one
    assert record.attempts == 1 and record.status == "ok"


class _QuestionsGame(GuessNumberConfig):
    """guess_number that declares a data file and a tool-call parser, as Search-R1 and
    Harbor do: what a config declares must reach every record's provenance."""

    questions: str = ""

    def data_sources(self) -> dict[str, str]:
        return {"questions": self.questions}

    @property
    def tool_call_format(self) -> str:
        return "qwen3_coder"


async def test_records_carry_the_content_hash_of_the_data_and_the_tool_parser(tmp_path):
    """From Python too (no CLI): the env section names each data source by the hash of
    its content (an edited file gets another), never by its path, and the parser."""
    data = tmp_path / "questions.jsonl"
    tokenizer = train_chatml_tokenizer()
    hashes = []
    for content in (b'{"q": 1}\n', b'{"q": 2}\n'):
        data.write_bytes(content)
        os.utime(data, ns=(0, len(hashes)))  # a same-size edit is seen by its mtime
        config = _QuestionsGame(tasks=2, questions=str(data))
        builders = config.dataset(tokenizer, group_size=1).builders
        result = await collect(builders, make_policy("scripted"), CollectOptions(progress=False))
        envs = [r.provenance["env"] for r in result.ok]
        assert len(envs) == 2 and all(e["tool_format"] == "qwen3_coder" for e in envs)
        assert envs[0]["data"] == envs[1]["data"] == data_digests({"questions": data})
        assert str(tmp_path) not in json.dumps(envs[0]["data"])
        hashes.append(envs[0]["data"]["questions"])
    assert hashes[0] != hashes[1]


async def test_retry_uses_fresh_envs_and_succeeds():
    # The first attempt's first env hiccups mid-episode; the second attempt works.
    builder = RecordingBuilder(
        env_factory=lambda attempt, i: CountdownEnv(
            fail_at=2 if attempt == 1 and i == 0 else None, transient=True
        )
    )
    result = await collect([builder], EchoPolicy(), CollectOptions(retries=1, progress=False))
    (record,) = result.records
    assert record.status == "ok" and record.attempts == 2
    assert builder.attempts == 2 and builder.cleanups == 2
    first, second = builder.made
    assert not {id(e) for e in first} & {id(e) for e in second}  # fresh envs
    assert all(env.taken == 2 for env in second)


async def test_a_group_that_always_fails_is_recorded_failed_and_others_are_kept(tmp_path):
    broken = RecordingBuilder(
        task_id="broken", env_factory=lambda attempt, i: CountdownEnv(fail_at=1, transient=True)
    )
    builders = [*_builders(2), broken, *_builders(2)]
    keys = [f"k{i}" for i in range(5)]
    store = TrajectoryStore(tmp_path / "t.jsonl")
    result = await collect(
        builders, EchoPolicy(), CollectOptions(retries=2, progress=False), keys=keys, store=store
    )
    assert len(result.records) == 5  # nothing dropped
    (failed,) = result.failed
    assert failed.key == "k2" and failed.attempts == 3 and failed.group is None
    assert failed.error.count("EnvHiccup: env broke at turn 1") == 3
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
        [builder, always],
        FirstAttemptHangs(),
        CollectOptions(retries=1, group_timeout=0.2, progress=False),
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
    first = await collect(
        builders, EchoPolicy(), CollectOptions(retries=0, progress=False), store=store
    )
    assert len(first.ok) == 3 and len(first.failed) == 1

    fixed = RecordingBuilder(task_id="flaky")
    fresh = [*_builders(3), fixed]
    second = await collect(fresh, EchoPolicy(), CollectOptions(progress=False), store=store)
    assert second.skipped == 3
    assert [r.key for r in second.records] == ["3:flaky"]
    assert all(b.attempts == 0 for b in fresh[:3])  # skipped groups never ran
    assert store.keys() == {"0:task0", "1:task1", "2:task2", "3:flaky"}


async def test_duplicate_keys_and_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="unique"):
        await collect(_builders(2), EchoPolicy(), CollectOptions(progress=False), keys=["a", "a"])
    with pytest.raises(ValueError, match="concurrency"):
        await collect(_builders(1), EchoPolicy(), CollectOptions(concurrency=0, progress=False))


async def test_progress_off_a_terminal_is_plain_periodic_lines(capsys, monkeypatch):
    monkeypatch.setenv("AGENTENVS_PROGRESS_SECONDS", "0")  # every tenth, however fast
    result = await collect(_builders(20), EchoPolicy(), CollectOptions(progress=True))
    assert len(result.ok) == 20
    captured = capsys.readouterr()
    assert captured.out == "" and "\x1b" not in captured.err  # not a TTY: no bar
    lines = captured.err.splitlines()
    assert [line.split(" done")[0] for line in lines] == [f"groups {n}/20" for n in range(2, 21, 2)]
    assert all(", 0 failed, " in line for line in lines)
    monkeypatch.setenv("AGENTENVS_PROGRESS_SECONDS", "3600")  # a run shorter than that
    await collect(_builders(20), EchoPolicy(), CollectOptions(progress=True))
    assert capsys.readouterr().err == ""  # a training loop's quick steps stay quiet
    await collect(_builders(2), EchoPolicy(), CollectOptions(progress=False))
    assert capsys.readouterr().err == ""


async def test_cancelling_a_collection_cleans_up_running_groups(tmp_path):
    builders = _builders(4)
    hanging = HangingPolicy()
    store = TrajectoryStore(tmp_path / "t.jsonl")
    task = asyncio.create_task(
        collect(builders, hanging, CollectOptions(concurrency=2, progress=False), store=store)
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
    result = await collect(builders, make_policy("scripted"), CollectOptions(progress=False))
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
            CollectOptions(progress=False),
            store=store,
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


async def test_a_bug_in_step_is_recorded_once_with_its_traceback_and_not_retried(tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    buggy = RecordingBuilder(task_id="buggy", env_factory=lambda a, i: CountdownEnv(fail_at=1))
    result = await collect(
        [buggy], EchoPolicy(), CollectOptions(retries=2, progress=False), store=store
    )
    (failed,) = result.failed
    assert failed.attempts == 1 and buggy.attempts == 1 and buggy.cleanups == 1
    assert "RuntimeError: env broke at turn 1 (raised in CountdownEnv.step; not retried" in (
        failed.error
    )
    # The stored record keeps where it happened: the raising line of the env's step.
    (stored,) = store.read()
    assert stored.traceback == failed.traceback
    assert 'support/rollout_helpers.py", line' in stored.traceback
    assert "in step\n" in stored.traceback
    assert stored.traceback.rstrip().endswith("RuntimeError: env broke at turn 1")


async def test_policy_errors_and_transient_env_errors_are_still_retried():
    # A policy that fails once (a server hiccup) is retried, as is a transient env error.
    class FailsOnce(EchoPolicy):
        failed = False

        async def __call__(self, observation, stop, *, max_tokens=None):
            if not FailsOnce.failed:
                FailsOnce.failed = True
                raise KeyError("policy bug or outage: not the env's")
            return await super().__call__(observation, stop, max_tokens=max_tokens)

    result = await collect(_builders(1), FailsOnce(), CollectOptions(retries=1, progress=False))
    assert result.records[0].status == "ok" and result.records[0].attempts == 2
    hiccup = RecordingBuilder(
        env_factory=lambda attempt, i: CountdownEnv(
            fail_at=1 if attempt == 1 else None, transient=True
        )
    )
    result = await collect([hiccup], EchoPolicy(), CollectOptions(retries=1, progress=False))
    assert result.records[0].status == "ok" and result.records[0].attempts == 2


async def test_a_loop_step_whose_default_keys_repeat_warns_instead_of_collecting_nothing(tmp_path):
    """Issue #30: the step where the dataset wraps used to give ``ok 0, skipped 2`` silently."""
    from agentenvs.envs import make
    from agentenvs.rollout.collect.collector import AllGroupsSkipped
    from agentenvs.rollout.collect.streaming import StreamingCollection
    from agentenvs.rollout.tokenizer import load_tokenizer

    config = make("guess_number", tasks=2)
    dataset = config.dataset(load_tokenizer("builtin"), group_size=2, batch_size=2)
    store = TrajectoryStore(tmp_path / "loop.jsonl")
    policy = make_policy("scripted")
    first = await collect(dataset.get_batch(0), policy, CollectOptions(progress=False), store=store)
    assert len(first.ok) == 2
    with pytest.warns(AllGroupsSkipped, match=r"all 2 groups skipped.*pass keys= unique"):
        wrapped = await collect(
            dataset.get_batch(0), policy, CollectOptions(progress=False), store=store
        )
    assert (len(wrapped.records), wrapped.skipped) == (0, 2)
    with pytest.warns(AllGroupsSkipped):
        StreamingCollection(dataset.get_batch(0), policy, store=store)
    # With the step in the keys, as the loop examples do, the step collects.
    keys = [f"step1:{i}" for i in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", AllGroupsSkipped)
        again = await collect(
            dataset.get_batch(0), policy, CollectOptions(progress=False), store=store, keys=keys
        )
        partly = await collect(
            dataset.get_batch(0),
            policy,
            CollectOptions(progress=False),
            store=store,
            keys=["step1:0", "step2:1"],
        )
    assert len(again.ok) == 2 and (len(partly.ok), partly.skipped) == (1, 1)


def test_what_counts_as_transient():
    """The rule a retry of an environment error follows (``envs.errors.is_transient``)."""
    from agentenvs.envs.alfworld.pool import WorkerCrashed
    from agentenvs.envs.errors import AgentEnvsError, TransientError, is_transient
    from agentenvs.envs.search_r1.retrievers.base import QueryRejected, RetrieverUnavailable
    from agentenvs.sandbox.pool.errors import WorkerDead

    transient = [
        TransientError("restarting"), ConnectionRefusedError(), TimeoutError(),
        AgentEnvsError("busy", status=503), AgentEnvsError("slow down", status=429),
        WorkerCrashed("SIGKILL"), WorkerDead("gone", delivered=True),
        RetrieverUnavailable("down"),
    ]  # fmt: skip
    lasting = [
        KeyError("oops"), ValueError("bad"), AgentEnvsError("no", status=400),
        AgentEnvsError("plain"), QueryRejected("refused", status=422),
    ]  # fmt: skip
    assert [is_transient(e) for e in transient] == [True] * len(transient)
    assert [is_transient(e) for e in lasting] == [False] * len(lasting)
