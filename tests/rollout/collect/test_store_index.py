"""The store's resume index: the facts a resume needs, parsed once per line, equal to a full read.

Every test compares the index of a long-lived ``TrajectoryStore`` object with what
``read_store`` finds in the same file at that moment, after the ways a store file
changes in practice: appends by this object, appends by another process, torn lines
closed by a later append, and a file replaced or truncated under the same name.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentenvs.envs import make
from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.run_identity import (
    ResumeFacts,
    RunIdentity,
    RunMismatchError,
    keys_to_skip,
)
from agentenvs.rollout.collect.store import StoreError, TrajectoryStore, read_store
from agentenvs.rollout.policies import make_policy

RUN_A = RunIdentity(env="test", config_sha256="aaaa", group_size=2).to_json()
RUN_B = RunIdentity(env="test", config_sha256="bbbb", group_size=2).to_json()


def _record(key: str, status: str = "ok", run: dict | None = None, size: int = 2) -> GroupRecord:
    group = None
    if status == "ok":
        traj = Trajectory(
            [Transition(list(range(size)), TokensWithLogprobs([7] * size, None, "eos"), 1.0, True)],
            final_ob=[],
            stop_reason="completed",
        )
        group = TrajectoryGroup([traj, traj], [0.0, 0.0], [{}, {}])
    return GroupRecord(
        key=key,
        env="test",
        task_id=key,
        group=group,
        status=status,  # type: ignore[arg-type]
        error=None if status == "ok" else "RuntimeError: boom",
        env_config={"high": 10},
        run=dict(run) if run is not None else {},
    )


def _full_read(path: Path) -> tuple[list[ResumeFacts], list]:
    contents = read_store(path, missing_ok=True, require_records=False, warn=False)
    return [ResumeFacts.of(r) for r in contents.records], contents.problems


def _assert_index_equals_full_read(store: TrajectoryStore) -> list[ResumeFacts]:
    facts = store.resume_facts()
    expected_facts, expected_problems = _full_read(store.path)
    assert facts == expected_facts
    assert store.problems == expected_problems
    return facts


def _indexed_store(path: Path, keys: list[str], run: dict | None = RUN_A) -> TrajectoryStore:
    """A store holding ``keys`` whose index has read them all (a loop after some steps)."""
    store = TrajectoryStore(path)
    for key in keys:
        store.append(_record(key, run=run))
    store.resume_facts()
    return store


def _line(record: GroupRecord) -> bytes:
    return (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode()


def test_many_appends_with_reads_in_between_match_a_full_read(tmp_path) -> None:
    store = TrajectoryStore(tmp_path / "t.jsonl")
    assert store.resume_facts() == []  # a missing file holds nothing
    for i in range(120):
        status = "failed" if i % 7 == 3 else "ok"
        run = (RUN_A, RUN_B, None)[i % 3]  # None: an old record with no stored run
        store.append(_record(f"k{i % 40}", status, run))
        if i % 9 == 0:
            _assert_index_equals_full_read(store)
    facts = _assert_index_equals_full_read(store)
    assert len(facts) == 120 == len(store)
    assert _assert_index_equals_full_read(TrajectoryStore(store.path)) == facts  # a cold build
    assert store.keys() == {r.key for r in read_store(store.path).latest() if r.status == "ok"}
    run_a = [f for f in facts if f.run_fingerprint == RUN_A["fingerprint"]]
    assert len(run_a) == 40 and all(f.identity is run_a[0].identity for f in run_a)  # shared


def test_a_refresh_parses_only_the_bytes_appended_since(tmp_path) -> None:
    """Proof by a hand edit the index does not see: the first line is spoiled in place
    (same length, before the offset); the index keeps what it read, a full read does not."""
    path = tmp_path / "t.jsonl"
    store = TrajectoryStore(path)
    for i in range(5):
        store.append(_record(f"k{i}", run=RUN_A))
    before = store.resume_facts()
    first = path.read_bytes().index(b"\n")
    with path.open("r+b") as handle:
        handle.write(b"#" * first)
    TrajectoryStore(path).append(_record("k5", run=RUN_A))  # another writer: not a fast path
    after = store.resume_facts()
    assert after == [*before, ResumeFacts.of(_record("k5", run=RUN_A))]
    full, problems = _full_read(path)
    assert [p.line for p in problems] == [1] and len(full) == 5


def test_append_takes_in_its_own_record_without_reading_it_back(tmp_path) -> None:
    """After an append into a current index, the start of that line (outside the last
    bytes the index checks) is spoiled in place: the index still holds the record."""
    path = tmp_path / "t.jsonl"
    store = TrajectoryStore(path)
    store.append(_record("a", run=RUN_A))
    store.resume_facts()
    store.append(_record("b", run=RUN_A, size=200))  # a line far longer than the check
    start = path.read_bytes().index(b"\n") + 1
    with path.open("r+b") as handle:
        handle.seek(start)
        handle.write(b"#" * 40)
    assert [f.key for f in store.resume_facts()] == ["a", "b"]
    assert [f.key for f in TrajectoryStore(path).resume_facts()] == ["a"]  # a cold build sees it


def test_a_torn_line_then_a_resume_matches_a_full_read_with_one_warning(tmp_path, caplog) -> None:
    path = tmp_path / "t.jsonl"
    store = _indexed_store(path, [f"k{i}" for i in range(3)])
    with path.open("ab") as handle:
        handle.write(_line(_record("torn", run=RUN_A))[:50])  # killed mid-write
    with caplog.at_level(logging.WARNING):
        _assert_index_equals_full_read(store)
        assert [p.line for p in store.problems] == [4]
        _assert_index_equals_full_read(store)  # the same torn tail again: no second warning
        store.append(_record("k3", run=RUN_A))  # the resume closes the fragment
        facts = _assert_index_equals_full_read(store)
        _assert_index_equals_full_read(store)
    assert [f.key for f in facts] == ["k0", "k1", "k2", "k3"]
    assert [p.line for p in store.problems] == [4]  # now a middle line
    warned = [r.getMessage() for r in caplog.records if "torn line" in r.getMessage()]
    assert warned == [f"{path}:4: skipped a torn line (a run was killed, or the disk filled, "
                      "while writing it)"]  # fmt: skip


def test_a_line_still_being_written_is_read_again_once_finished(tmp_path) -> None:
    """A writer in another process that is half-way through a line: the index must not
    keep the half as a torn line once the rest arrives."""
    path = tmp_path / "t.jsonl"
    store = TrajectoryStore(path)
    store.append(_record("a", run=RUN_A))
    line = _line(_record("b", run=RUN_A))
    with path.open("ab") as handle:
        handle.write(line[:30])
    _assert_index_equals_full_read(store)
    assert len(store.problems) == 1
    with path.open("ab") as handle:
        handle.write(line[30:])
    facts = _assert_index_equals_full_read(store)
    assert [f.key for f in facts] == ["a", "b"] and store.problems == []


def test_a_last_line_without_newline_that_is_a_record_counts(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(_line(_record("a", run=RUN_A)) + _line(_record("b", run=RUN_A))[:-1])
    store = TrajectoryStore(path)
    assert [f.key for f in _assert_index_equals_full_read(store)] == ["a", "b"]
    store.append(_record("c", run=RUN_A))
    assert [f.key for f in _assert_index_equals_full_read(store)] == ["a", "b", "c"]


_WRITER = """
import sys
from agentenvs.envs.types import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore

store = TrajectoryStore(sys.argv[1])
store.resume_facts()  # this writer's own index is current, so its appends take the fast path
for i in range(int(sys.argv[2])):
    traj = Trajectory([Transition([1], TokensWithLogprobs([2], None, "eos"), 1.0, True)], [], None)
    group = TrajectoryGroup([traj], [0.0], [{}])
    store.append(GroupRecord(key=f"child{i}", env="test", task_id="t", group=group,
                             run={"env": "test", "fingerprint": "child"}))
assert len(store.resume_facts()) == int(sys.argv[3])
"""


def test_appends_by_another_process_are_picked_up(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    store = _indexed_store(path, [f"k{i}" for i in range(5)])
    child = subprocess.run(
        [sys.executable, "-c", _WRITER, str(path), "20", "25"], capture_output=True, text=True
    )
    assert child.returncode == 0, child.stderr
    for i in range(5, 8):  # the index is behind now: these appends must not skip the child's
        store.append(_record(f"k{i}", run=RUN_A))
    facts = _assert_index_equals_full_read(store)
    assert [f.key for f in facts] == (
        [f"k{i}" for i in range(5)] + [f"child{i}" for i in range(20)] + ["k5", "k6", "k7"]
    )


def test_a_replaced_file_is_read_afresh(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    store = _indexed_store(path, [f"old{i}" for i in range(6)])
    other = tmp_path / "new.jsonl"
    replacement = TrajectoryStore(other)
    for i in range(9):  # longer than the old file: only the inode tells
        replacement.append(_record(f"new{i}", run=RUN_B))
    os.replace(other, path)
    facts = _assert_index_equals_full_read(store)
    assert [f.key for f in facts] == [f"new{i}" for i in range(9)]
    path.unlink()
    assert store.resume_facts() == [] and store.problems == []


def test_a_truncated_or_rewritten_in_place_file_is_read_afresh(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    store = _indexed_store(path, [f"old{i}" for i in range(4)])
    with path.open("r+b") as handle:  # shorter: the size tells
        handle.truncate(0)
    TrajectoryStore(path).append(_record("x", run=RUN_B))
    assert [f.key for f in _assert_index_equals_full_read(store)] == ["x"]
    with path.open("r+b") as handle:  # same inode, longer than before: the last bytes tell
        handle.truncate(0)
        handle.write(b"".join(_line(_record(f"re{i}", run=RUN_B)) for i in range(7)))
    assert [f.key for f in _assert_index_equals_full_read(store)] == [f"re{i}" for i in range(7)]


def test_json_that_is_not_a_record_is_an_error_naming_its_line(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    store = TrajectoryStore(path)
    store.append(_record("a", run=RUN_A))
    store.resume_facts()
    with path.open("ab") as handle:
        handle.write(b'{"not": "a record"}\n')
    for _ in range(2):  # every read says so, not only the first
        with pytest.raises(StoreError, match=r"t\.jsonl:2: not a trajectory record \(no key\)"):
            store.resume_facts()
    with pytest.raises(StoreError, match=r":2: not a trajectory record"):
        read_store(path)
    directory = tmp_path / "dir.jsonl"
    directory.mkdir()
    with pytest.raises(StoreError, match="is a directory"):
        TrajectoryStore(directory).resume_facts()


def test_resume_from_the_index_skips_latest_ok_and_refuses_another_run(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    store = TrajectoryStore(path)
    store.append(_record("a", "failed", RUN_A))
    store.append(_record("a", "ok", RUN_A))  # a rerun fixed it
    store.append(_record("b", "ok", RUN_A))
    store.append(_record("b", "failed", RUN_A))  # a racing writer's failure keeps the ok
    store.append(_record("c", "failed", RUN_A))
    current = RunIdentity.from_json(RUN_A)
    facts = store.resume_facts()
    assert keys_to_skip(path, facts, current, new_run=False) == {"a", "b"}
    assert keys_to_skip(path, list(store.read()), current, new_run=False) == {"a", "b"}
    other = RunIdentity.from_json(RUN_B)
    with pytest.raises(RunMismatchError, match="config_sha256: aaaa in the store, bbbb now"):
        keys_to_skip(path, facts, other, new_run=False)
    assert keys_to_skip(path, facts, other, new_run=True) == set()


def test_collect_called_step_after_step_into_one_store_resumes_as_before(tmp_path) -> None:
    """A training loop's shape: one store object, ``collect`` once per step."""
    from agentenvs.rollout.tokenizer import load_tokenizer

    tokenizer = load_tokenizer("builtin")
    store = TrajectoryStore(tmp_path / "loop.jsonl")

    def step(n_groups: int, group_size: int = 2, **options):
        dataset = make("guess_number").dataset(tokenizer, group_size=group_size, n_groups=n_groups)
        builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
        return asyncio.run(
            collect(builders, make_policy("scripted"), CollectOptions(progress=False, **options), store=store)
        )  # fmt: skip

    first = step(3)
    assert (first.skipped, len(first.ok)) == (0, 3)
    second = step(5)  # the same run, two more groups
    assert (second.skipped, len(second.ok)) == (3, 2)
    _assert_index_equals_full_read(store)
    with pytest.raises(RunMismatchError, match="group_size: 2 in the store, 3 now"):
        step(5, group_size=3)
    assert len(step(5, group_size=3, new_run=True).ok) == 5
    assert len(_assert_index_equals_full_read(store)) == 10
