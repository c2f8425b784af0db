"""The trajectory store: an append-only JSONL file, one line per finished group.

Durability is the point. Each line is written with one ``write`` on an
``O_APPEND`` descriptor under an exclusive ``flock`` and then ``fsync``-ed, so a
killed run keeps every group it finished and two writers never interleave lines.
A process killed in the middle of a write can leave a torn last line; readers
skip it and report it (never raise), and the next append starts on a fresh line
so the torn fragment cannot swallow a good record.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentenvs.rollout.collect.records import GroupRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreProblem:
    """A line the reader skipped, and why."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


class TrajectoryStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.problems: list[StoreProblem] = []
        """Lines skipped by the last read (a torn tail from a killed run, say)."""

    # ---- writing ---------------------------------------------------------------------
    def append(self, record: GroupRecord) -> None:
        """Write one record as one line, then flush it to disk (``os.fsync``)."""
        line = (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode()
        if self.path.parent != Path():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _ends_torn(fd):
                line = b"\n" + line  # close the torn fragment so our record stays whole
            _write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)  # closing releases the lock

    # ---- reading ---------------------------------------------------------------------
    def read(self) -> Iterator[GroupRecord]:
        """Every stored record in file order; bad lines are skipped and reported."""
        for number, data in self._lines():
            try:
                yield GroupRecord.from_json(data)
            except (KeyError, TypeError, ValueError) as err:
                self._report(number, f"not a group record ({type(err).__name__}: {err})")

    def keys(self) -> set[str]:
        """Keys of groups stored with status ``ok``: a resumed run skips these."""
        return {str(data["key"]) for _, data in self._lines() if data.get("status", "ok") == "ok"}

    def latest(self) -> dict[str, GroupRecord]:
        """The last record of each key, preferring an ``ok`` one over later failures."""
        chosen: dict[str, GroupRecord] = {}
        for record in self.read():
            previous = chosen.get(record.key)
            if previous is None or record.status == "ok" or previous.status != "ok":
                chosen[record.key] = record
        return chosen

    def __len__(self) -> int:
        return sum(1 for _ in self._lines())

    def _lines(self) -> Iterator[tuple[int, dict[str, Any]]]:
        self.problems = []
        try:
            handle = self.path.open("rb")
        except FileNotFoundError:
            return
        with handle:
            for number, raw in enumerate(handle, start=1):
                complete = raw.endswith(b"\n")
                text = raw.strip()
                if not text:
                    continue
                try:
                    data = json.loads(text)
                except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
                    reason = (
                        "torn last line (a run was killed while writing it)"
                        if not complete
                        else f"unreadable line ({err})"
                    )
                    self._report(number, reason)
                    continue
                if not isinstance(data, dict) or "key" not in data:
                    self._report(number, "not a group record (no key)")
                    continue
                yield number, data

    def _report(self, line: int, reason: str) -> None:
        problem = StoreProblem(line, reason)
        self.problems.append(problem)
        logger.warning("%s: skipped %s", self.path, problem)


def read_records(path: str | Path) -> list[GroupRecord]:
    """All records of a trajectory file. A missing file is an error here (a reader
    asked for it); a torn last line is skipped with a warning."""
    store = TrajectoryStore(path)
    if not store.path.is_file():
        raise FileNotFoundError(f"no trajectory file at {store.path}")
    return list(store.read())


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    if size == 0:
        return False
    return os.pread(fd, 1, size - 1) != b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
