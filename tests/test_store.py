"""The append-only JSONL trajectory store: round trip, durability, torn lines, two writers."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore, read_records


def _record(key: str, status: str = "ok", size: int = 3) -> GroupRecord:
    group = None
    if status == "ok":
        ob = list(range(size))
        traj = Trajectory(
            [Transition(ob, TokensWithLogprobs([9] * size, [-0.5] * size, "eos"), 1.0, True)],
            final_ob=[],
            stop_reason="completed",
        )
        group = TrajectoryGroup([traj], [0.5], [{"m": 1}], tags=["x"])
    return GroupRecord(
        key=key,
        env="test",
        task_id=key,
        group=group,
        status=status,  # type: ignore[arg-type]
        error=None if status == "ok" else "RuntimeError: boom",
    )


def test_append_then_read_round_trips(tmp_path):
    store = TrajectoryStore(tmp_path / "sub" / "t.jsonl")
    store.append(_record("a"))
    store.append(_record("b", status="failed"))
    records = list(store.read())
    assert [r.key for r in records] == ["a", "b"]
    assert records[0].group is not None
    assert records[0].group.trajectories[0].transitions[0].ac.logprobs == [-0.5] * 3
    assert records[0].group.total_rewards() == [1.5]
    assert records[1].status == "failed" and records[1].error == "RuntimeError: boom"
    assert store.keys() == {"a"}  # failed groups are not resumed past
    assert store.problems == []
    assert len(store) == 2


def test_every_append_is_one_fsynced_line(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    store = TrajectoryStore(tmp_path / "t.jsonl")
    for key in "abc":
        store.append(_record(key))
    assert len(synced) == 3
    lines = (tmp_path / "t.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 4
    assert [json.loads(line)["key"] for line in lines[:-1]] == ["a", "b", "c"]


def test_torn_last_line_is_reported_not_raised_and_the_next_append_survives(tmp_path):
    path = tmp_path / "t.jsonl"
    store = TrajectoryStore(path)
    store.append(_record("a"))
    store.append(_record("b"))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # a run killed in the middle of line "b"

    assert [r.key for r in store.read()] == ["a"]
    assert len(store.problems) == 1
    assert store.problems[0].line == 2 and "torn" in store.problems[0].reason
    assert store.keys() == {"a"}

    store.append(_record("c"))  # must not be glued onto the torn fragment
    assert [r.key for r in store.read()] == ["a", "c"]
    assert len(store.problems) == 1 and store.problems[0].line == 2
    assert read_records(path)[-1].key == "c"


def test_garbage_lines_are_skipped_and_reported(tmp_path):
    path = tmp_path / "t.jsonl"
    store = TrajectoryStore(path)
    store.append(_record("a"))
    with path.open("a") as handle:
        handle.write("not json\n")
        handle.write('{"no_key": 1}\n')
        handle.write('{"key": "z", "format": 99}\n')
    store.append(_record("b"))
    assert [r.key for r in store.read()] == ["a", "b"]
    assert [p.line for p in store.problems] == [2, 3, 4]
    assert "unsupported trajectory format 99" in store.problems[2].reason


def test_missing_file_reads_empty_but_read_records_says_so(tmp_path):
    store = TrajectoryStore(tmp_path / "none.jsonl")
    assert store.keys() == set()
    assert list(store.read()) == []
    with pytest.raises(FileNotFoundError, match="no trajectory file"):
        read_records(tmp_path / "none.jsonl")


def test_latest_prefers_ok_over_failed(tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    store.append(_record("a", status="failed"))
    store.append(_record("a"))
    store.append(_record("b"))
    store.append(_record("b", status="failed"))
    latest = store.latest()
    assert latest["a"].status == "ok" and latest["b"].status == "ok"


def _writer(path: str, name: str, count: int) -> None:
    store = TrajectoryStore(path)
    for i in range(count):
        store.append(_record(f"{name}{i}", size=3000))  # lines of ~40 kB


def test_two_writer_processes_never_interleave_lines(tmp_path):
    path = str(tmp_path / "t.jsonl")
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_writer, args=(path, name, 40)) for name in "xy"]
    for proc in writers:
        proc.start()
    for proc in writers:
        proc.join(60)
        assert proc.exitcode == 0
    store = TrajectoryStore(path)
    keys = [r.key for r in store.read()]
    assert store.problems == []
    assert sorted(keys) == sorted([f"x{i}" for i in range(40)] + [f"y{i}" for i in range(40)])
    # Each writer's lines stay in its own order.
    assert [k for k in keys if k[0] == "x"] == [f"x{i}" for i in range(40)]
