"""A store is owned by one run at a time (issue #46, item 6).

Two runs started on one file used to both find nothing stored and both write every
group (every key twice, both exit 0). The collector now claims the store (a lock on
``<store>.lock``) for the whole run; a second run is refused, naming the first.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from support.rollout_helpers import EchoPolicy, RecordingBuilder

from agentenvs.rollout.collect.collector import AllGroupsSkipped, CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore, read_store
from agentenvs.rollout.collect.store_lock import StoreBusy, StoreClaim, lock_path
from agentenvs.rollout.collect.streaming import StreamingCollection


def _builders(n: int) -> list[RecordingBuilder]:
    return [RecordingBuilder(task_id=f"t{i}") for i in range(n)]


async def test_two_runs_on_one_store_at_once_the_second_is_refused(tmp_path):
    path = tmp_path / "one.jsonl"
    slow = CollectOptions(concurrency=1, progress=False)
    sampler = EchoPolicy(delay=0.02)
    first = asyncio.create_task(collect(_builders(6), sampler, slow, store=TrajectoryStore(path)))
    while not sampler.calls:  # the first run is under way
        await asyncio.sleep(0.005)
    with pytest.raises(StoreBusy, match=rf"being written by another run \(pid {os.getpid()} "):
        await collect(_builders(6), EchoPolicy(), slow, store=TrajectoryStore(path))
    done = await first
    keys = [r.key for r in read_store(path).records]
    assert len(done.ok) == 6 and sorted(keys) == sorted(set(keys)) and len(keys) == 6
    assert not lock_path(path).exists()  # released with the run
    with pytest.warns(AllGroupsSkipped):
        again = await collect(_builders(6), EchoPolicy(), slow, store=TrajectoryStore(path))
    assert again.skipped == 6  # the next run owns it, and resumes


async def test_a_streaming_collection_owns_its_store_until_it_ends(tmp_path):
    store = TrajectoryStore(tmp_path / "stream.jsonl")
    stream = StreamingCollection(_builders(2), EchoPolicy(), store=store)
    with pytest.raises(StoreBusy):
        await collect(_builders(2), EchoPolicy(), CollectOptions(progress=False), store=store)
    assert len([record async for record in stream]) == 2
    assert not lock_path(store.path).exists()


def test_a_claim_names_its_process_and_goes_with_it(tmp_path):
    path = tmp_path / "x.jsonl"
    held = StoreClaim(path)
    assert lock_path(path).read_text().startswith(f"pid {os.getpid()} since ")
    with pytest.raises(StoreBusy):
        StoreClaim(path)
    held.release()
    held.release()  # idempotent
    StoreClaim(path).release()  # free again
