"""The append-only JSONL trajectory store: round trip, durability, torn lines, two writers."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import re

import pytest

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import (
    StoreError,
    TrajectoryStore,
    latest_outcomes,
    read_records,
    read_store,
)


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


def test_a_torn_line_in_the_middle_is_skipped_with_one_warning(tmp_path, caplog):
    """A killed run then a resume leaves the fragment as a middle line: still readable."""
    path = tmp_path / "t.jsonl"
    store = TrajectoryStore(path)
    store.append(_record("a"))
    with path.open("ab") as handle:
        handle.write(b'{"format":1,"key":"b","env":"te')  # killed mid-write
    store.append(_record("c"))  # the resume
    store.append(_record("d"))
    with caplog.at_level("WARNING"):
        contents = read_store(path)
    assert [r.key for r in contents.records] == ["a", "c", "d"]
    assert [p.line for p in contents.problems] == [2]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and f"{path}:2: skipped a torn line" in warnings[0]


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("[1, 2]", ":2: not a trajectory record (a JSON list)"),
        ('{"no_key": 1}', ":2: not a trajectory record (no key)"),
        ('{"key": "z", "format": 99}', ":2: not a trajectory record (unsupported trajectory"),
        ('{"key": "z", "format": 1}', ":2: not a trajectory record (missing field 'trajectories')"),
    ],
)
def test_json_that_is_not_a_record_is_an_error_naming_the_line(tmp_path, line, fragment):
    path = tmp_path / "t.jsonl"
    TrajectoryStore(path).append(_record("a"))
    with path.open("a") as handle:
        handle.write(line + "\n")
    with pytest.raises(StoreError, match=re.escape(fragment)):
        read_store(path)
    with pytest.raises(StoreError):  # the collector's reader is the same reader
        TrajectoryStore(path).keys()


def test_unreadable_files_are_refused_with_what_they_are(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        read_store(tmp_path)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(StoreError, match="not a trajectory store"):
        read_store(binary)
    with pytest.raises(FileNotFoundError):
        read_store(tmp_path / "none.jsonl")
    assert read_store(tmp_path / "none.jsonl", missing_ok=True).records == []


def test_missing_file_reads_empty_but_read_records_says_so(tmp_path):
    store = TrajectoryStore(tmp_path / "none.jsonl")
    assert store.keys() == set()
    assert list(store.read()) == []
    with pytest.raises(FileNotFoundError, match="no trajectory file"):
        read_records(tmp_path / "none.jsonl")


def test_latest_outcome_per_key_and_run(tmp_path):
    store = TrajectoryStore(tmp_path / "t.jsonl")
    store.append(_record("a", status="failed"))
    store.append(_record("b"))
    store.append(_record("a"))  # a rerun fixed it
    store.append(_record("c", status="failed"))
    store.append(_record("c", status="failed"))
    store.append(_record("b", status="failed"))  # a racing writer: the ok data stays
    other_run = _record("a", status="failed")
    other_run.run = {"fingerprint": "other"}
    store.append(other_run)
    latest = latest_outcomes(store.read())
    assert [(r.key, r.status, r.run.get("fingerprint")) for r in latest] == [
        ("b", "ok", None),
        ("a", "ok", None),
        ("c", "failed", None),
        ("a", "failed", "other"),
    ]
    assert store.keys() == {"a", "b"}  # "a" of the other run failed, but ok is kept


def test_a_full_disk_names_the_file(tmp_path):
    """/dev/full fails every write with ENOSPC, as a full disk does."""
    store = TrajectoryStore("/dev/full")
    with pytest.raises(OSError, match="cannot write to the trajectory store") as caught:
        store.append(_record("a"))
    assert caught.value.filename == "/dev/full"
    assert caught.value.errno == errno.ENOSPC


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
