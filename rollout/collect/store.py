"""The trajectory store: an append-only JSONL file, one line per finished group.

Durability is the point. Each line is written with one ``write`` on an
``O_APPEND`` descriptor under an exclusive ``flock`` and then ``fsync``-ed, so a
killed run keeps every group it finished and two writers never interleave lines.
A process killed in the middle of a write (or a full disk) can leave a torn
line; the next append starts on a fresh line so the fragment cannot swallow a
good record, which leaves the fragment as a line of its own, possibly in the
middle of the file after a resume.

Every reader (the collector's resume, replay, ``view``, ``check``, the Python
API) goes through :func:`read_store`, so they all agree on what a file holds: a
line that is not JSON is a torn fragment, skipped with one warning naming it;
a line that is JSON but not a group record means the file is not a trajectory
store (or was edited by hand), which is an error, because skipping it would
hide the thing a person came to look at.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agentenvs.rollout.collect.records import GroupRecord

logger = logging.getLogger(__name__)

TORN_LINE = "torn line (a run was killed, or the disk filled, while writing it)"


class StoreError(ValueError):
    """The file cannot be read as a trajectory store; the message names file and line."""


@dataclass(frozen=True)
class StoreProblem:
    """A line the reader skipped, and why."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class StoreContents:
    """What a store file holds: its records in file order and the lines skipped."""

    path: Path
    records: list[GroupRecord] = field(default_factory=list)
    problems: list[StoreProblem] = field(default_factory=list)

    def latest(self) -> list[GroupRecord]:
        """The current outcome of each group (see :func:`latest_outcomes`)."""
        return latest_outcomes(self.records)

    def describe(self, problem: StoreProblem) -> str:
        return f"{self.path}:{problem.line}: skipped a {problem.reason}"

    def warnings(self) -> list[str]:
        """One line per skipped line, naming file and line."""
        return [self.describe(p) for p in self.problems]


def latest_outcomes(records: Iterable[GroupRecord]) -> list[GroupRecord]:
    """One record per group of each run: its latest outcome, in first-seen order.

    A rerun appends a new record for a group that failed, so counting every line
    would report failures that a later attempt fixed. Groups are told apart by
    run and key (two runs appended to one file may reuse keys). An ``ok`` record
    is not replaced by a later failure of the same group: within one run that
    only happens when two writers race, and the ok data is still good.
    """
    chosen: dict[tuple[str, str], GroupRecord] = {}
    for record in records:
        slot = (str(record.run.get("fingerprint", "")), record.key)
        previous = chosen.get(slot)
        if previous is not None and previous.status == "ok" and record.status != "ok":
            continue
        chosen.pop(slot, None)  # re-insert: the order follows the latest outcome's place
        chosen[slot] = record
    return list(chosen.values())


def read_store(
    path: str | Path, *, missing_ok: bool = False, require_records: bool = True, warn: bool = True
) -> StoreContents:
    """Read a whole store: the one reader every command and API shares.

    Torn lines are skipped with a warning each; a JSON line that is not a group
    record raises :class:`StoreError`. ``missing_ok`` reads a missing file as
    empty (a run about to start). ``require_records`` refuses a file none of whose
    lines is a record (a binary file, say) instead of showing it as empty.
    ``warn=False`` leaves the warnings to the caller (the CLI prints
    :meth:`StoreContents.warnings` itself, so they show with or without logging).
    """
    path = Path(path)
    contents = StoreContents(path)
    if path.is_dir():
        raise StoreError(f"{path}: is a directory, not a trajectory file")
    if path.exists() and not path.is_file():  # a device would read forever
        raise StoreError(f"{path}: not a regular file, so not a trajectory file")
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        if missing_ok:
            return contents
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path)) from None
    except OSError as err:
        raise StoreError(f"{path}: cannot read ({err.strerror or err})") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            record = _parse_line(path, number, raw, contents, warn)
            if record is not None:
                contents.records.append(record)
    if require_records and contents.problems and not contents.records:
        raise StoreError(
            f"{path}: not a trajectory store (no line is a JSON record; first: "
            f"{contents.problems[0]})"
        )
    return contents


def _parse_line(
    path: Path, number: int, raw: bytes, contents: StoreContents, warn: bool
) -> GroupRecord | None:
    text = raw.strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        problem = StoreProblem(number, TORN_LINE)
        contents.problems.append(problem)
        if warn:
            logger.warning("%s", contents.describe(problem))
        return None
    if not isinstance(data, dict) or "key" not in data:
        what = f"a JSON {type(data).__name__}" if not isinstance(data, dict) else "no key"
        raise StoreError(f"{path}:{number}: not a trajectory record ({what})")
    try:
        return GroupRecord.from_json(data)
    except (KeyError, TypeError, ValueError) as err:
        detail = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        raise StoreError(f"{path}:{number}: not a trajectory record ({detail})") from None


class TrajectoryStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.problems: list[StoreProblem] = []
        """Lines skipped by the last read (a torn line from a killed run, say)."""

    # ---- writing ---------------------------------------------------------------------
    def append(self, record: GroupRecord) -> None:
        """Write one record as one line, then flush it to disk (``os.fsync``).

        A failed write (a full disk) is raised as an ``OSError`` naming the store,
        so the message says which file could not be written."""
        line = (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode()
        try:
            if self.path.parent != Path():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as err:
            raise _naming(err, self.path, "cannot open the trajectory store") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _ends_torn(fd):
                line = b"\n" + line  # close the torn fragment so our record stays whole
            _write_all(fd, line)
            os.fsync(fd)
        except OSError as err:
            raise _naming(err, self.path, "cannot write to the trajectory store") from None
        finally:
            os.close(fd)  # closing releases the lock

    # ---- reading ---------------------------------------------------------------------
    def contents(self) -> StoreContents:
        """Everything the file holds (a missing file holds nothing)."""
        contents = read_store(self.path, missing_ok=True, require_records=False)
        self.problems = contents.problems
        return contents

    def read(self) -> Iterator[GroupRecord]:
        """Every stored record in file order; torn lines are skipped and reported."""
        yield from self.contents().records

    def keys(self) -> set[str]:
        """Keys whose latest outcome is ``ok``: a resumed run skips these."""
        return {r.key for r in self.contents().latest() if r.status == "ok"}

    def latest(self) -> dict[str, GroupRecord]:
        """The latest outcome of each key (see :func:`latest_outcomes`)."""
        return {record.key: record for record in self.contents().latest()}

    def __len__(self) -> int:
        return len(self.contents().records)


def read_records(path: str | Path) -> list[GroupRecord]:
    """All records of a trajectory file. A missing file is an error here (a reader
    asked for it); torn lines are skipped with a warning."""
    store = TrajectoryStore(path)
    if not store.path.is_file():
        raise FileNotFoundError(f"no trajectory file at {store.path}")
    return list(store.read())


def _naming(err: OSError, path: Path, what: str) -> OSError:
    """The same error, with the store's path and what was being done."""
    return type(err)(err.errno, f"{what}: {err.strerror or err}", str(path))


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
