"""Kernel objects that outlive an execution's processes, removed before the next run.

Issue classes 2 and 3. Killing every process of an execution (``processes``) ends most of
what it could leave behind: abstract unix sockets, memfds, timers, pipes, eventfds and
their memory die with the last process holding them. Files in the writable directories
are wiped (``wipe``). What remains is state the kernel keeps *per IPC namespace* rather
than per process, and the worker's whole life shares one IPC namespace (the supervisor
cannot create a new one per run: no capability in bubblewrap's user namespace or in the
container, and ``unshare`` is denied by the seccomp filter):

- System V shared memory, message queues and semaphore sets: listed from
  ``/proc/sysvipc/{shm,msg,sem}`` and removed with ``IPC_RMID`` (the supervisor runs as
  the same uid: it owns them). A segment of 480 MB parked by one run would otherwise
  stay charged to the worker's memory cgroup for good.
- POSIX message queues: creating one needs ``RLIMIT_MSGQUEUE`` bytes, which every
  execution gets as 0 (``restrictions``); where an engine mounts ``/dev/mqueue`` it is
  also wiped like a scratch directory, in case a queue exists anyway.

Everything else an execution could change is per process and cannot reach the next run,
which is a fresh fork of the supervisor: rlimits, cwd, environment, signal dispositions,
umask. :func:`remove_ipc_objects` reports whether the namespace is empty afterwards; if
not, the worker is recycled.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

IPC_RMID = 0
SYSV_KINDS = ("shm", "msg", "sem")
POSIX_MQUEUE_DIR = "/dev/mqueue"

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class IpcReport:
    removed: dict[str, int] = field(default_factory=dict)
    remaining: dict[str, int] = field(default_factory=dict)
    readable: bool = True
    """False when ``/proc/sysvipc`` cannot be read (the namespace cannot be checked)."""

    @property
    def clean(self) -> bool:
        return self.readable and not any(self.remaining.values())


def sysv_ids(kind: str) -> list[int]:
    """Identifiers of every System V object of ``kind`` in this IPC namespace."""
    with open(f"/proc/sysvipc/{kind}") as f:
        rows = f.read().splitlines()[1:]  # the first line names the columns
    ids = []
    for row in rows:
        fields = row.split()
        if len(fields) > 1 and fields[1].lstrip("-").isdigit():
            ids.append(int(fields[1]))
    return ids


def _remove(kind: str, ident: int) -> bool:
    if kind == "shm":
        return _libc.shmctl(ident, IPC_RMID, None) == 0
    if kind == "msg":
        return _libc.msgctl(ident, IPC_RMID, None) == 0
    return _libc.semctl(ident, 0, IPC_RMID) == 0


def sysv_objects_exist() -> bool:
    """Cheap check (three small reads) for the fast path: is there anything to remove?"""
    try:
        return any(sysv_ids(kind) for kind in SYSV_KINDS)
    except OSError:
        return True


def remove_ipc_objects() -> IpcReport:
    """Remove every System V IPC object of this namespace; never raises."""
    report = IpcReport()
    for kind in SYSV_KINDS:
        try:
            ids = sysv_ids(kind)
            report.removed[kind] = sum(_remove(kind, ident) for ident in ids)
            report.remaining[kind] = len(sysv_ids(kind))
        except OSError:
            report.readable = False
    return report
