"""The trajectory store: an append-only JSONL file, one line per finished group.

Durability is the point. Each line is written with one ``write`` on an
``O_APPEND`` descriptor under an exclusive ``flock`` and then ``fsync``-ed, so a
killed run keeps every group it finished and two writers never interleave lines.
A process killed in the middle of a write (or a full disk) can leave a torn
line; the next append starts on a fresh line so the fragment cannot swallow a
good record, which leaves the fragment as a line of its own, possibly in the
middle of the file after a resume. :meth:`TrajectoryStore.commit` keeps the same
promise for a collector on an event loop, with many groups per ``fsync`` done by
a writer thread (group commit, :mod:`~agentenvs.rollout.collect.store_commit`).

Every reader (the collector's resume, replay, ``view``, ``check``, the Python
API) goes through :func:`read_store`, so they all agree on what a file holds: a
line that is not JSON is a torn fragment, skipped with one warning naming it;
a line that is JSON but not a group record means the file is not a trajectory
store (or was edited by hand), which is an error, because skipping it would
hide the thing a person came to look at.

A :class:`TrajectoryStore` object also keeps a :class:`ResumeIndex`: the key,
outcome and run of every record, extended by only the bytes appended since its
last look, so a loop calling ``collect`` into one store does not reparse the
whole file at every step.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.rollout.collect.image_files import group_images, save_group_images
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.run_identity import ResumeFacts, RunIdentity
from agentenvs.rollout.collect.store_commit import GroupCommitter

logger = logging.getLogger(__name__)

TORN_LINE = "torn line (a run was killed, or the disk filled, while writing it)"


class _HasOutcome(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def status(self) -> str: ...


_Outcome = TypeVar("_Outcome", bound=_HasOutcome)


class StoreError(AgentEnvsError, ValueError):
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


def record_slot(record: GroupRecord) -> tuple[str, str]:
    """What tells one group from another in a store: its run's fingerprint and its key."""
    return str(record.run.get("fingerprint", "")), record.key


def latest_outcomes(
    records: Iterable[_Outcome], slot: Callable[[_Outcome], tuple[str, str]] | None = None
) -> list[_Outcome]:
    """One record per group of each run: its latest outcome, in first-seen order.

    A rerun appends a new record for a group that failed, so counting every line
    would report failures that a later attempt fixed. Groups are told apart by
    run and key (two runs appended to one file may reuse keys). An ``ok`` record
    is not replaced by a later failure of the same group: within one run that
    only happens when two writers race, and the ok data is still good. ``slot``
    names a group for items that are not records (the resume index's facts).
    """
    name = slot or record_slot
    chosen: dict[tuple[str, str], _Outcome] = {}
    for record in records:
        place = name(record)
        previous = chosen.get(place)
        if previous is not None and previous.status == "ok" and record.status != "ok":
            continue
        chosen.pop(place, None)  # re-insert: the order follows the latest outcome's place
        chosen[place] = record
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
    handle = open_store(path, missing_ok=missing_ok)
    if handle is None:
        return contents
    with handle:
        for number, raw in enumerate(handle, start=1):
            parsed = parse_line(path, number, raw)
            if isinstance(parsed, StoreProblem):
                contents.problems.append(parsed)
                if warn:
                    logger.warning("%s", contents.describe(parsed))
            elif parsed is not None:
                contents.records.append(parsed)
    if require_records and contents.problems and not contents.records:
        # Not a store whose last line was torn: no line of it is a record at all.
        raise StoreError(
            f"{path}: not a trajectory store: none of its {len(contents.problems)} lines "
            f"is a JSON record (line {contents.problems[0].line} is not JSON)"
        )
    return contents


def open_store(path: Path, *, missing_ok: bool) -> BinaryIO | None:
    """The store opened for reading, or ``None`` for a missing file when that is allowed.

    Refuses what is not a regular file (a directory, or a device that would read
    forever) with a message saying what it is."""
    if path.is_dir():
        raise StoreError(f"{path}: is a directory, not a trajectory file")
    if path.exists() and not path.is_file():
        raise StoreError(f"{path}: not a regular file, so not a trajectory file")
    try:
        return path.open("rb")
    except FileNotFoundError:
        if missing_ok:
            return None
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path)) from None
    except OSError as err:
        raise StoreError(f"{path}: cannot read ({err.strerror or err})") from None


def parse_line(path: Path, number: int, raw: bytes) -> GroupRecord | StoreProblem | None:
    """One line of a store: a record, a torn fragment to skip, or nothing (a blank line).

    Shared by the whole-file reader and the resume index, so both judge every line
    the same way; a JSON line that is not a record raises :class:`StoreError`."""
    text = raw.strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return StoreProblem(number, TORN_LINE)
    if not isinstance(data, dict) or "key" not in data:
        what = f"a JSON {type(data).__name__}" if not isinstance(data, dict) else "no key"
        raise StoreError(f"{path}:{number}: not a trajectory record ({what})")
    try:
        return GroupRecord.from_json(data)
    except (KeyError, TypeError, ValueError) as err:
        detail = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        raise StoreError(f"{path}:{number}: not a trajectory record ({detail})") from None


_SEAL_BYTES = 64
"""How many bytes before the resume index's offset it keeps to recognise its file."""


@dataclass
class _Mark:
    """Where the resume index stopped reading, and how to tell it is still that file."""

    device: int
    inode: int
    offset: int = 0
    """End of the last whole line read (one ending in a newline)."""
    lines: int = 0
    """Lines before ``offset``: the next line's number is ``lines + 1``."""
    seal: bytes = b""
    """The bytes just before ``offset``. A file rewritten in place (same inode) and
    grown past ``offset`` almost surely differs here, so the index starts over."""

    def fits(self, fd: int, status: os.stat_result) -> bool:
        """Whether the open file ``fd`` is this file with only bytes appended since."""
        if (status.st_dev, status.st_ino) != (self.device, self.inode):
            return False  # replaced (a new file under the same name)
        if status.st_size < self.offset:
            return False  # truncated
        start = self.offset - len(self.seal)
        return not self.seal or os.pread(fd, len(self.seal), start) == self.seal

    def advance(self, line: bytes) -> None:
        self.offset += len(line)
        self.lines += 1
        self.seal = (self.seal + line)[-_SEAL_BYTES:]


@dataclass
class _Tail:
    """A last line without its newline: judged again on every refresh, because a
    later append closes it (``append`` starts on a fresh line), or a writer in
    another process is still writing it."""

    offset: int
    parsed: ResumeFacts | StoreProblem | None


class ResumeIndex:
    """The facts resume needs of every record of one store file, kept up to date cheaply.

    A training loop calls ``collect`` once per step into one store; reading the
    whole file each time to decide what to skip costs the size of the store per
    step, quadratic over a run. The index parses each line once: it remembers how
    far it read and which file that was (device and inode, plus the last bytes
    read), so a refresh parses only the bytes appended since, by this process or
    any other, and starts over when the file was replaced or shrank. Lines are
    judged by the same :func:`parse_line` as :func:`read_store`, so both agree on
    torn fragments (skipped, one warning each) and on lines that are JSON but not
    records (an error). It holds :class:`ResumeFacts` only, never trajectories.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._facts: list[ResumeFacts] = []
        self._problems: list[StoreProblem] = []
        self._mark: _Mark | None = None
        self._tail: _Tail | None = None
        self._warned_tail: int | None = None
        """The offset of the torn tail already warned about (not again once closed)."""
        self._identities: dict[RunIdentity, RunIdentity] = {}

    @property
    def facts(self) -> list[ResumeFacts]:
        """Every record's facts in file order, as of the last refresh or append."""
        tail = self._tail.parsed if self._tail is not None else None
        return [*self._facts, tail] if isinstance(tail, ResumeFacts) else list(self._facts)

    @property
    def problems(self) -> list[StoreProblem]:
        """The lines skipped, as :attr:`StoreContents.problems` would list them."""
        tail = self._tail.parsed if self._tail is not None else None
        return [*self._problems, tail] if isinstance(tail, StoreProblem) else list(self._problems)

    def refresh(self) -> None:
        """Read what was appended since the last refresh (everything, the first time)."""
        handle = open_store(self.path, missing_ok=True)
        if handle is None:
            self._start_over(None)
            return
        with handle:
            fd = handle.fileno()
            status = os.fstat(fd)
            if self._mark is None or not self._mark.fits(fd, status):
                self._start_over(status)
            assert self._mark is not None
            self._read_appended(handle, self._mark)

    def note_append(self, fd: int, size_before: int, line: bytes, record: GroupRecord) -> None:
        """Take in a record this process just appended at ``size_before`` (under the
        store's lock), without reading it back, when the index was current up to
        there. Otherwise leave it: the next refresh reads it with the rest."""
        mark = self._mark
        if mark is None or self._tail is not None or mark.offset != size_before:
            return
        if not record.run:
            return  # an old-style record's identity is pieced from its parsed form
        if not mark.fits(fd, os.fstat(fd)):
            return
        self._facts.append(self._facts_of(record))
        mark.advance(line)

    def _start_over(self, status: os.stat_result | None) -> None:
        self._facts, self._problems, self._tail, self._warned_tail = [], [], None, None
        self._mark = None if status is None else _Mark(status.st_dev, status.st_ino)

    def _read_appended(self, handle: BinaryIO, mark: _Mark) -> None:
        handle.seek(mark.offset)
        self._tail = None  # the old tail, if any, is read again below
        tail: _Tail | None = None
        for raw in handle:
            number = mark.lines + 1
            parsed = parse_line(self.path, number, raw)  # raises on JSON that is no record
            taken = self._facts_of(parsed) if isinstance(parsed, GroupRecord) else parsed
            if not raw.endswith(b"\n"):
                tail = _Tail(mark.offset, taken)
                break
            self._keep(taken, mark.offset)
            mark.advance(raw)
        self._tail = tail
        if (
            tail is not None
            and isinstance(tail.parsed, StoreProblem)
            and self._warned_tail != tail.offset
        ):
            self._warned_tail = tail.offset
            logger.warning("%s", self._describe(tail.parsed))

    def _keep(self, taken: ResumeFacts | StoreProblem | None, offset: int) -> None:
        if isinstance(taken, ResumeFacts):
            self._facts.append(taken)
        elif isinstance(taken, StoreProblem):
            self._problems.append(taken)
            if self._warned_tail != offset:  # a closed torn tail was warned about already
                logger.warning("%s", self._describe(taken))

    def _describe(self, problem: StoreProblem) -> str:
        return StoreContents(self.path).describe(problem)

    def _facts_of(self, record: GroupRecord) -> ResumeFacts:
        """The record's facts, sharing one identity object per run (memory: a run's
        records all carry the same identity)."""
        facts = ResumeFacts.of(record)
        shared = self._identities.setdefault(facts.identity, facts.identity)
        status, fingerprint = sys.intern(facts.status), sys.intern(facts.run_fingerprint)
        return ResumeFacts(facts.key, status, fingerprint, shared, facts.explicit)


class TrajectoryStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.problems: list[StoreProblem] = []
        """Lines skipped by the last read (a torn line from a killed run, say)."""
        self._index = ResumeIndex(self.path)
        self._index_lock = threading.Lock()
        """The writer thread of :meth:`commit` extends the index while the loop reads it."""
        self._committer = GroupCommitter(self.path, self._note_batch)

    # ---- writing ---------------------------------------------------------------------
    def append(self, record: GroupRecord) -> None:
        """Write one record as one line, then flush it to disk (``os.fsync``).

        A failed write (a full disk) is raised as an ``OSError`` naming the store,
        so the message says which file could not be written."""
        line = (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode()
        try:
            if self.path.parent != Path():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            save_group_images(self.path, record.group)  # before the line that names them
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as err:
            raise _naming(err, self.path, "cannot open the trajectory store") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size_before = os.fstat(fd).st_size
            if _ends_torn(fd, size_before):
                line = b"\n" + line  # close the torn fragment so our record stays whole
            _write_all(fd, line)
            os.fsync(fd)
            with self._index_lock:
                self._index.note_append(fd, size_before, line, record)
        except OSError as err:
            raise _naming(err, self.path, "cannot write to the trajectory store") from None
        finally:
            os.close(fd)  # closing releases the lock

    async def commit(self, record: GroupRecord) -> None:
        """:meth:`append` without blocking the event loop, many groups per ``fsync``
        (:mod:`~agentenvs.rollout.collect.store_commit`). Returns once the record's
        line is on disk, never before: the same promise, kept per record."""
        line = (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode()
        try:
            if group_images(record.group):  # images go on disk before the line naming them
                await asyncio.to_thread(save_group_images, self.path, record.group)
            await self._committer.commit(line, record)
        except OSError as err:
            raise _naming(err, self.path, "cannot write to the trajectory store") from None

    def _note_batch(self, fd: int, size_before: int, written: list) -> None:
        with self._index_lock:
            for line, record in written:
                self._index.note_append(fd, size_before, line, record)
                size_before += len(line)

    # ---- reading ---------------------------------------------------------------------
    def contents(self) -> StoreContents:
        """Everything the file holds (a missing file holds nothing)."""
        contents = read_store(self.path, missing_ok=True, require_records=False)
        self.problems = contents.problems
        return contents

    def read(self) -> Iterator[GroupRecord]:
        """Every stored record in file order; torn lines are skipped and reported."""
        yield from self.contents().records

    def resume_facts(self) -> list[ResumeFacts]:
        """Each record's key, outcome and run, in file order, from the resume index:
        only lines appended since the last call are parsed. Torn lines are skipped
        (one warning each) and listed in :attr:`problems`, as a full read would."""
        with self._index_lock:
            self._index.refresh()
            self.problems = self._index.problems
            return self._index.facts

    def keys(self) -> set[str]:
        """Keys whose latest outcome is ``ok``."""
        latest = latest_outcomes(self.resume_facts(), slot=ResumeFacts.group_slot)
        return {facts.key for facts in latest if facts.status == "ok"}

    def latest(self) -> dict[str, GroupRecord]:
        """The latest outcome of each key (see :func:`latest_outcomes`)."""
        return {record.key: record for record in self.contents().latest()}

    def __len__(self) -> int:
        return len(self.resume_facts())


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


def _ends_torn(fd: int, size: int) -> bool:
    if size == 0:
        return False
    return os.pread(fd, 1, size - 1) != b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
