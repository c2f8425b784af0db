"""Group commit for the trajectory store: many groups per ``fsync``, none on the event loop.

Appending one group with its own ``fsync`` on the collector's event loop blocked
the loop for 7-15 ms per group (the disk's flush latency, ~1 ms of it CPU), which
capped one driver at 50-80 groups/s however many actors ran episodes. A writer
thread does the disk work instead: every group that finished while the previous
flush was under way goes out in one ``write`` and one ``fsync``, so the rate grows
with the number of groups waiting instead of shrinking with the flush latency.

The durability promise is the one :meth:`TrajectoryStore.append` makes, kept per
group: :meth:`GroupCommitter.commit` returns (the collector counts the group as
stored and hands it on) only after the ``fsync`` that covered its line returned. A
process killed at any moment loses only groups whose ``commit`` had not returned.
Each batch is written under the store's exclusive ``flock`` on an ``O_APPEND``
descriptor, as single appends are, so writers in other processes never interleave
with it, and a torn tail left by a killed writer is closed with a newline first.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WrittenHook = Callable[[int, int, list[tuple[bytes, Any]]], None]
"""Called under the lock after the ``fsync``: the descriptor, the file's size before
the batch, and each ``(line as written, item)`` in file order."""


@dataclass
class _Waiting:
    line: bytes
    item: Any
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future


_LIVE_WRITERS: set[threading.Thread] = set()
_LIVE_LOCK = threading.Lock()


def wait_for_writers(timeout: float = 30.0) -> None:
    """Return once every store's writer thread has written what it was given.

    A run stopped by Ctrl-C still writes the groups already handed to its writers (a
    cancelled caller does not unwrite its line); what says how many groups are stored
    must count after them, or it names fewer than the file holds.
    """
    with _LIVE_LOCK:
        writers = list(_LIVE_WRITERS)
    for writer in writers:
        writer.join(timeout)


class GroupCommitter:
    """One store file's writer thread, started when something waits and ended when
    nothing does (no thread is left behind by an idle store)."""

    def __init__(self, path: Path, on_written: WrittenHook | None = None) -> None:
        self.path = path
        self.on_written = on_written
        self.batches = 0
        """``fsync`` calls made, for measuring how many groups each covered."""
        self.lines = 0
        self._lock = threading.Lock()
        self._queue: list[_Waiting] = []
        self._writer: threading.Thread | None = None

    async def commit(self, line: bytes, item: Any = None) -> None:
        """Append ``line`` (one whole line, newline included); return once it is on disk.

        Raises the ``OSError`` of a failed write (the whole batch it was in failed)."""
        loop = asyncio.get_running_loop()
        waiting = _Waiting(line, item, loop, loop.create_future())
        with self._lock:
            self._queue.append(waiting)
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_batches, name=f"store-writer:{self.path.name}"
                )
                with _LIVE_LOCK:
                    _LIVE_WRITERS.add(self._writer)
                self._writer.start()
        try:
            await asyncio.shield(waiting.done)  # a cancelled caller does not unwrite the line
        except asyncio.CancelledError:
            # Nobody will read this line's outcome now: a failed write (a full disk) has
            # already stopped the run through the caller that saw it first, and asyncio
            # would print each unread failure again ("Future exception was never
            # retrieved"), one traceback per group in flight.
            waiting.done.add_done_callback(_outcome_read)
            raise

    def _write_batches(self) -> None:
        while True:
            with self._lock:
                batch, self._queue = self._queue, []
                if not batch:
                    with _LIVE_LOCK:
                        _LIVE_WRITERS.discard(threading.current_thread())
                    self._writer = None
                    return
            error: BaseException | None = None
            try:
                self._write(batch)
            except BaseException as err:  # handed to every waiter of the batch
                error = err
            by_loop: dict[asyncio.AbstractEventLoop, list[_Waiting]] = {}
            for waiting in batch:
                by_loop.setdefault(waiting.loop, []).append(waiting)
            for loop, waiters in by_loop.items():
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                    loop.call_soon_threadsafe(_settle, waiters, error)

    def _write(self, batch: list[_Waiting]) -> None:
        if self.path.parent != Path():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size_before = os.fstat(fd).st_size
            lines = [w.line for w in batch]
            if size_before and os.pread(fd, 1, size_before - 1) != b"\n":
                lines[0] = b"\n" + lines[0]  # close a torn fragment so ours stay whole
            view = memoryview(b"".join(lines))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            self.batches += 1
            self.lines += len(batch)
            if self.on_written is not None:
                self.on_written(
                    fd, size_before, [(ln, w.item) for ln, w in zip(lines, batch, strict=True)]
                )
        finally:
            os.close(fd)  # closing releases the lock


def _outcome_read(done: asyncio.Future) -> None:
    if not done.cancelled():
        done.exception()  # marks it read


def _settle(waiters: list[_Waiting], error: BaseException | None) -> None:
    for waiting in waiters:
        if waiting.done.done():
            continue
        if error is None:
            waiting.done.set_result(None)
        else:
            waiting.done.set_exception(error)
