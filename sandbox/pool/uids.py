"""A dedicated host uid per worker, for both process backends (bubblewrap and containers)."""

from __future__ import annotations

import os
import threading
from typing import ClassVar


class UidAllocator:
    """Hands out a dedicated host uid per worker (only when the host runs as root).

    One uid per worker means its processes can be counted (RLIMIT_NPROC) and, in the
    direct launcher, swept with ``kill(-1)`` without touching anybody else's. One
    allocator per base uid per process (:meth:`shared`), so two sandboxes in the same
    process never hand out the same uid.
    """

    _shared: ClassVar[dict[int, UidAllocator]] = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, base: int) -> UidAllocator:
        with cls._shared_lock:
            if base not in cls._shared:
                cls._shared[base] = cls(base)
            return cls._shared[base]

    def __init__(self, base: int, span: int = 50_000) -> None:
        self.base = base
        self.span = span
        self._next = (os.getpid() * 61) % span
        self._used: set[int] = set()
        self._lock = threading.Lock()

    def acquire(self) -> int:
        with self._lock:
            for _ in range(self.span):
                uid = self.base + self._next
                self._next = (self._next + 1) % self.span
                if uid not in self._used:
                    self._used.add(uid)
                    return uid
        raise RuntimeError("no free sandbox uid")

    def release(self, uid: int | None) -> None:
        with self._lock:
            self._used.discard(uid)  # type: ignore[arg-type]
