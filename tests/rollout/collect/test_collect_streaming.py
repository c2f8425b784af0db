"""Streaming collection: groups handed over as they finish, bounded staleness, store/resume.

The policy here stamps each turn with its weights version like the vLLM policy
does; the consumer bumps that version as a trainer would after each step.
"""

from __future__ import annotations

import asyncio

import pytest
from support.rollout_helpers import CountdownEnv, RecordingBuilder

from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.run_identity import RunMismatchError
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.collect.streaming import Staleness, StreamingCollection, collect_streaming
from agentenvs.rollout.policies.base import StampedTokens


class VersionedPolicy:
    """Answers ``[5, 6]``; stamps the turn with the version it was sampled by.

    ``bump_after_calls`` raises the version by one after that many calls, which
    lands a weight update in the middle of whatever episode is running."""

    def __init__(self, bump_after_calls: int | None = None) -> None:
        self.weights_version = 0
        self.calls = 0
        self.bump_after_calls = bump_after_calls

    async def __call__(self, observation, stop, *, max_tokens=None) -> TokensWithLogprobs:
        version = self.weights_version
        await asyncio.sleep(0)  # let other episodes interleave
        self.calls += 1
        if self.bump_after_calls and self.calls % self.bump_after_calls == 0:
            self.weights_version += 1
        stamp = {"weights_version": version}
        return StampedTokens([5, 6], [-0.5, -0.25], "stop", stamp=stamp)


def _builders(n: int, turns: int = 2, config: dict | None = None) -> list[RecordingBuilder]:
    return [
        RecordingBuilder(
            task_id=f"t{i}",
            env_factory=lambda a, j, t=turns: CountdownEnv(t),
            config=dict(config or {}),
        )
        for i in range(n)
    ]


async def test_groups_arrive_while_later_ones_are_still_to_run():
    builders = _builders(4)
    stream = StreamingCollection(builders, VersionedPolicy(), CollectOptions(concurrency=1))
    seen_untouched = []
    async for _record in stream:
        seen_untouched.append(sum(1 for b in builders if b.attempts == 0))
    assert seen_untouched[0] >= 2  # the first group came before most had started
    assert seen_untouched[-1] == 0 and stream.stats.handed == 4


@pytest.mark.parametrize("on_stale", ["drop", "requeue"])
async def test_stale_groups_are_never_handed_over(on_stale):
    policy = VersionedPolicy()
    builders = _builders(6)
    stream = StreamingCollection(
        builders,
        policy,
        CollectOptions(concurrency=3),
        staleness=Staleness(max_staleness=0, on_stale=on_stale, max_requeues=5),
    )
    handed = []
    async for record in stream:
        assert record.provenance["policy"]["weights_version"] == policy.weights_version
        handed.append(record)
        policy.weights_version += 1  # the trainer stepped: everything in flight is now stale
    stats = stream.stats
    assert set(stats.staleness) == {0}
    if on_stale == "drop":
        assert stats.dropped_stale > 0 and stats.requeued_stale == 0
        assert stats.handed + stats.dropped_stale == 6
    else:
        assert stats.requeued_stale > 0 and stats.dropped_stale == 0 and stats.handed == 6
        assert any(r.extra["requeues"] > 0 for r in handed)


async def test_bounded_staleness_accepts_up_to_k_versions_behind():
    policy = VersionedPolicy()
    stream = StreamingCollection(
        _builders(6), policy, CollectOptions(concurrency=3), staleness=Staleness(max_staleness=1)
    )
    async for _record in stream:
        policy.weights_version += 1
    assert stream.stats.max_staleness_seen <= 1 and stream.stats.handed == 6


async def test_an_update_mid_episode_is_recorded_per_turn_and_judged_by_the_oldest():
    policy = VersionedPolicy(bump_after_calls=1)  # every call moves the version on
    records, _ = await collect_streaming(
        _builders(1, turns=3), policy, CollectOptions(concurrency=1)
    )
    record = records[0]
    turns = [tr.logs["policy/weights_version"] for tr in record.group.trajectories[0].transitions]
    assert len(set(turns)) > 1
    described = record.provenance["policy"]
    oldest = min(
        tr.logs["policy/weights_version"] for t in record.group.trajectories for tr in t.transitions
    )
    assert described["weights_version"] == oldest
    assert described["weights_versions"][0] == oldest and len(described["weights_versions"]) > 1


async def test_store_resume_and_retries_work_under_streaming(tmp_path):
    store = TrajectoryStore(tmp_path / "stream.jsonl")
    flaky = RecordingBuilder(
        task_id="flaky",
        env_factory=lambda attempt, i: CountdownEnv(
            2, fail_at=1 if attempt == 1 else None, transient=True
        ),
    )
    broken = RecordingBuilder(task_id="broken", env_factory=lambda a, i: CountdownEnv(2, fail_at=1))
    builders = [*_builders(2), flaky, broken]
    keys = ["a", "b", "flaky", "broken"]
    first = StreamingCollection(
        builders, VersionedPolicy(), CollectOptions(retries=1), store=store, keys=keys
    )
    handed = [record async for record in first]
    assert sorted(r.key for r in handed) == ["a", "b", "flaky"]
    assert next(r for r in handed if r.key == "flaky").attempts == 2
    assert first.stats.failed == 1 and "env broke" in first.failed[0].error
    stored = {r.key: r.status for r in store.read()}
    assert stored == {"a": "ok", "b": "ok", "flaky": "ok", "broken": "failed"}

    again = StreamingCollection(
        builders, VersionedPolicy(), CollectOptions(retries=1), store=store, keys=keys
    )
    rerun = [record async for record in again]
    assert again.stats.skipped == 3 and rerun == []  # only the failed group ran again
    assert again.stats.failed == 1


async def test_a_store_of_another_run_is_refused_as_the_collector_refuses_it(tmp_path):
    store = TrajectoryStore(tmp_path / "other.jsonl")
    await collect(_builders(2, config={"high": 10}), VersionedPolicy(), store=store)
    before = store.path.read_bytes()
    with pytest.raises(RunMismatchError) as by_collect:
        await collect(_builders(2, config={"high": 20}), VersionedPolicy(), store=store)
    with pytest.raises(RunMismatchError) as by_stream:
        StreamingCollection(_builders(2, config={"high": 20}), VersionedPolicy(), store=store)
    assert str(by_stream.value) == str(by_collect.value)
    assert "config high: 10 in the store, 20 now" in str(by_stream.value)
    assert store.path.read_bytes() == before  # nothing appended
    # Asked for a new run, it appends one and skips none of the other run's keys.
    fresh = StreamingCollection(
        _builders(2, config={"high": 20}),
        VersionedPolicy(),
        CollectOptions(new_run=True),
        store=store,
    )
    assert fresh.stats.skipped == 0 and len([r async for r in fresh]) == 2


async def test_a_rerun_of_the_same_run_skips_exactly_the_stored_groups(tmp_path):
    store = TrajectoryStore(tmp_path / "same.jsonl")
    builders = _builders(5, config={"high": 10})
    keys = [f"k{i}" for i in range(5)]
    # An earlier run in the same file holds k3 and k4: its keys must not be skipped.
    earlier = _builders(5, config={"high": 99})
    await collect(earlier[3:], VersionedPolicy(), keys=keys[3:], store=store)
    first = StreamingCollection(
        builders[:2], VersionedPolicy(), CollectOptions(new_run=True), keys=keys[:2], store=store
    )
    assert sorted([r.key async for r in first]) == ["k0", "k1"]
    # The streamed records resume under the collector too: same identity stamped.
    resumed = await collect(builders[:3], VersionedPolicy(), keys=keys[:3], store=store)
    assert resumed.skipped == 2 and [r.key for r in resumed.records] == ["k2"]
    again = StreamingCollection(builders, VersionedPolicy(), keys=keys, store=store)
    assert again.stats.skipped == 3
    assert sorted([r.key async for r in again]) == ["k3", "k4"]
    assert sorted(r.key for r in store.read()) == sorted([*keys, "k3", "k4"])


async def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="on_stale"):
        StreamingCollection(_builders(1), VersionedPolicy(), staleness=Staleness(on_stale="ignore"))
    with pytest.raises(ValueError, match="unique key"):
        StreamingCollection(_builders(2), VersionedPolicy(), keys=["x", "x"])
    with pytest.raises(ValueError, match="max_staleness"):
        StreamingCollection(_builders(1), VersionedPolicy(), staleness=Staleness(max_staleness=-1))
