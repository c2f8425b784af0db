"""Group commit: many records per fsync, off the event loop, each acknowledged only after
the fsync that covered it; a SIGKILLed writer loses nothing it acknowledged."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

from support.paths import SUPPORT

from agentenvs.rollout.collect import store_commit
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore


def record(key: str) -> GroupRecord:
    return GroupRecord(key=key, env="e", task_id=key, group=None, status="failed",
                       error="x", attempts=1)  # fmt: skip


async def test_concurrent_commits_share_fsyncs_and_every_line_is_whole(tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    await asyncio.gather(*(store.commit(record(f"k{i}")) for i in range(300)))
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["key"] for line in lines) == sorted(f"k{i}" for i in range(300))
    assert store._committer.lines == 300
    assert store._committer.batches < 300 / 4, "one fsync per record is not group commit"


async def test_a_commit_returns_only_after_its_fsync(tmp_path, monkeypatch):
    release = threading.Event()
    synced: list[int] = []
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        release.wait(10)
        real_fsync(fd)
        synced.append(fd)

    monkeypatch.setattr(store_commit.os, "fsync", slow_fsync)
    store = TrajectoryStore(tmp_path / "t.jsonl")
    committing = asyncio.ensure_future(store.commit(record("a")))
    await asyncio.sleep(0.2)  # written, not yet synced: the loop is free and it is not acked
    assert not committing.done() and synced == []
    release.set()
    await asyncio.wait_for(committing, 5)
    assert len(synced) == 1


async def test_the_loop_runs_while_the_disk_flushes(tmp_path, monkeypatch):
    real_fsync = os.fsync
    monkeypatch.setattr(store_commit.os, "fsync", lambda fd: (time.sleep(0.3), real_fsync(fd)))
    store = TrajectoryStore(tmp_path / "t.jsonl")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.ensure_future(tick())
    await store.commit(record("a"))
    ticker.cancel()
    assert ticks >= 10, "the event loop was blocked while the record was flushed"


async def test_a_torn_tail_is_closed_and_the_resume_index_follows(tmp_path):
    path = tmp_path / "t.jsonl"
    store = TrajectoryStore(path)
    await store.commit(record("first"))
    assert len(store) == 1
    with path.open("ab") as handle:
        handle.write(b'{"key": "torn", "sta')  # a writer killed mid-line
    await asyncio.gather(store.commit(record("a")), store.commit(record("b")))
    keys = [r.key for r in TrajectoryStore(path).read()]
    assert keys[0] == "first" and sorted(keys[1:]) == ["a", "b"]
    assert sorted(f.key for f in store.resume_facts()) == ["a", "b", "first"]


async def test_a_failed_write_is_raised_naming_the_store(tmp_path):
    target = tmp_path / "dir.jsonl"
    target.mkdir()
    store = TrajectoryStore(target)
    try:
        await store.commit(record("a"))
    except OSError as err:
        assert "the trajectory store" in str(err) and str(target) in str(err)
    else:
        raise AssertionError("a write into a directory did not fail")


def test_a_sigkilled_writer_loses_nothing_it_acknowledged(tmp_path):
    path = tmp_path / "t.jsonl"
    writer = subprocess.Popen(
        [sys.executable, str(SUPPORT / "store_commit_writer.py"), str(path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    acked: list[str] = []
    try:
        assert writer.stdout is not None
        for line in writer.stdout:
            acked.append(line.strip())
            if len(acked) >= 2000:
                break
        os.kill(writer.pid, signal.SIGKILL)
        acked.extend(line.strip() for line in writer.stdout)  # acks already printed
    finally:
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    stored = {r.key for r in TrajectoryStore(path).read()}
    assert len(acked) >= 2000
    missing = [key for key in acked if key not in stored]
    assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
