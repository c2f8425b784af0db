"""One run writes a store at a time: a lock on a sidecar file, held for the whole run.

Appends are safe between processes (each line is written whole under the file's own
``flock``), but a run is more than its appends: it reads the store to decide what to
skip, then writes what is missing. Two runs started on one file both found nothing
stored and both wrote every group: every key twice, and both exited 0. So a run
first claims the store: an exclusive ``flock`` on ``<store>.lock``, taken without
waiting and held until the run ends (a process that dies releases it with its file
descriptors). A second run finds it taken and is refused with :class:`StoreBusy`,
which names the process that holds it.

The sidecar holds the owner's pid and start time while claimed and is removed on
release; a claimant checks, once locked, that the file it locked is still the one on
disk, so a removal racing with a new claim cannot leave two owners.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from agentenvs.rollout.collect.store import StoreError


class StoreBusy(StoreError):
    """Another run holds the store's lock; the message names its process."""


def lock_path(store: Path) -> Path:
    """The sidecar lock file of a store: ``out/run.jsonl`` -> ``out/run.jsonl.lock``."""
    return store.with_name(store.name + ".lock")


class StoreClaim:
    """This process's claim on one store, from :func:`claim` to :meth:`release`."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.path = lock_path(store)
        self._handle: BinaryIO | None = None
        self._take()

    def _take(self) -> None:
        if self.store.parent != Path():
            self.store.parent.mkdir(parents=True, exist_ok=True)
        while True:
            handle = self.path.open("a+b")
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(handle)
                handle.close()
                raise StoreBusy(
                    f"{self.store} is being written by another run ({holder}): one run "
                    "writes a store at a time; wait for it to end, or write to another "
                    "file (another --out)"
                ) from None
            if _same_file(handle, self.path):
                break
            handle.close()  # removed by its last owner after we opened it: again
        handle.truncate(0)
        handle.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        """Remove the sidecar and let go of the lock (idempotent)."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # while still holding it: see the module docstring
        handle.close()


@contextlib.contextmanager
def claim(store: Path | None) -> Iterator[StoreClaim | None]:
    """Hold ``store``'s lock for the ``with`` block (nothing for no store)."""
    if store is None:
        yield None
        return
    owned = StoreClaim(store)
    try:
        yield owned
    finally:
        owned.release()


def _read_holder(handle: BinaryIO) -> str:
    handle.seek(0)
    text = handle.read(200).decode("utf-8", "replace").strip()
    return text or "its process is not recorded"


def _same_file(handle: BinaryIO, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(handle.fileno())
    return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)
