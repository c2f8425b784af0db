"""Killing and reaping whatever an execution left running.

The supervisor is pid 1 of its pid namespace (or the only process of a dedicated uid), so
"no child left to wait for" means "nothing the code started is still alive". A run that
goes on for long is also made to yield the CPU here (``yield_cpu``), so that a hostile
busy loop on one worker does not slow the short runs of the others. The last part is how
the supervisor watches a session's holder from outside (stopped or not, resumed since,
how many seccomp filters it runs), trusting only what ``/proc`` and ``waitid`` say.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import re
import resource
import signal
import time

from .restrictions import CHILD_SECCOMP, READ_ONLY_SECCOMP


def reap() -> dict[int, int]:
    """Collect every exited child (the supervisor adopts orphans); pid -> wait status."""
    reaped = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        except InterruptedError:
            continue
        if pid == 0:
            return reaped
        reaped[pid] = status


def _live_pids(uid: int, filter_uid: bool) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        state = re.search(rb"^State:\s+(\S)", status, re.M)
        if state and state.group(1) in (b"Z", b"X"):
            continue
        if filter_uid:
            uid_line = re.search(rb"^Uid:\s+(\d+)", status, re.M)
            if not uid_line or int(uid_line.group(1)) != uid:
                continue
        pids.append(int(name))
    return pids


def zombie_children(parents: set[int]) -> set[int]:
    """Zombies whose parent is one of ``parents`` (children nobody reaped).

    Each parent's children are read from ``/proc/<pid>/task/<pid>/children`` (zombies
    included, as long as nobody reaped them); where the kernel has no such file, every
    process's parent is looked up instead.
    """
    candidates: set[int] = set()
    for parent in parents:
        try:
            with open(f"/proc/{parent}/task/{parent}/children", "rb") as f:
                candidates.update(int(pid) for pid in f.read().split())
        except FileNotFoundError:
            if os.path.exists(f"/proc/{parent}"):  # no CONFIG_PROC_CHILDREN: scan all
                candidates.update(int(name) for name in os.listdir("/proc") if name.isdigit())
        except (OSError, ValueError):
            continue
    zombies = set()
    for pid in candidates:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == b"Z" and int(fields[1]) in parents:
            zombies.add(pid)
    return zombies


def await_no_zombies(parents: set[int], patience: float = 0.05) -> set[int]:
    """``zombie_children`` once they had ``patience`` seconds to be reaped."""
    deadline = time.monotonic() + patience
    while True:
        zombies = zombie_children(parents)
        if not zombies or time.monotonic() > deadline:
            return zombies
        time.sleep(0.002)


class Sweeper:
    """Kills whatever an execution left behind.

    As pid 1 of its own pid namespace (bubblewrap ``--as-pid-1``), or as the only
    process of a dedicated uid, ``kill(-1, SIGKILL)`` reaches exactly the sandbox's
    other processes and nothing else; daemons that ``setsid`` away are included, and
    orphans are re-parented to the supervisor (init, or a child subreaper), so "no child
    left to wait for" means "nothing left alive". Signals to pid 1 from inside its
    namespace are dropped by the kernel, so the code cannot kill the supervisor. When one
    process must survive (a session's state holder), the others are listed from /proc
    and killed until none is left.
    """

    def __init__(self, pid_namespace: bool) -> None:
        self.pid_namespace = pid_namespace
        self.uid = os.getuid()
        self.me = os.getpid()
        self.reaped: dict[int, int] = {}

    def reap(self) -> None:
        self.reaped.update(reap())

    def kill_all(self, timeout: float = 5.0) -> bool:
        with contextlib.suppress(OSError):  # ESRCH: nothing else was alive
            os.kill(-1, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while True:
            self.reap()
            try:
                os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0002)

    def kill_except(self, keep: set[int], timeout: float = 5.0) -> bool:
        keep_set = frozenset(keep)
        deadline = time.monotonic() + timeout
        rounds = 0
        while True:
            self.reap()
            victims = [
                p
                for p in _live_pids(self.uid, not self.pid_namespace)
                if p != self.me and p not in keep_set
            ]
            if not victims:
                # A victim that exited after the reap above is a zombie now, which the
                # listing skips: reap it too, or the next run sees it in the table.
                self.reap()
                return True
            for pid in victims:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            rounds += 1
            time.sleep(min(0.0002 * rounds, 0.01))


LONG_RUN_SECONDS = 0.25
"""A run still going after this long yields the CPU to short ones (``yield_cpu``)."""
LONG_RUN_NICE = 10


def yield_cpu(pid: int) -> None:
    """Lower the priority of a long run (its whole process group: the child called
    ``setsid``, its forks inherit the group): on a loaded machine a busy loop or a fork
    bomb then takes CPU only when short runs leave it, and on an idle one nothing changes.
    Lowering one's own uid's priority needs no privilege; a process that left the group
    (its own ``setsid``) keeps the priority it had, which is this one's when forked late."""
    for which in (os.PRIO_PGRP, os.PRIO_PROCESS):
        with contextlib.suppress(OSError):
            os.setpriority(which, pid, LONG_RUN_NICE)


# --- what a run could change about the supervisor itself (issue #24, class 1) ----------
RLIMIT_NAMES = tuple(sorted(name for name in dir(resource) if name.startswith("RLIMIT_")))
IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(platform.machine())
IOPRIO_WHO_PROCESS = 1
_LIBC: list = []


def own_attributes() -> dict:
    """This process's scheduling, priority, CPU affinity, I/O priority and rlimits.

    The children's seccomp filter keeps runs from changing any of it (only calls on the
    caller itself pass); the supervisor still compares this with the value it started
    with before every run, and a worker that differs is recycled (a lowered hard limit,
    a raised nice value or ``SCHED_IDLE`` cannot be undone without privileges).
    """
    attrs: dict = {}
    with contextlib.suppress(OSError):
        attrs["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    with contextlib.suppress(OSError):
        attrs["policy"] = os.sched_getscheduler(0)
        attrs["priority"] = os.sched_getparam(0).sched_priority
    with contextlib.suppress(OSError):
        attrs["affinity"] = sorted(os.sched_getaffinity(0))
    if IOPRIO_GET is not None:
        if not _LIBC:
            _LIBC.append(ctypes.CDLL(None, use_errno=True))
        attrs["ioprio"] = int(_LIBC[0].syscall(IOPRIO_GET, IOPRIO_WHO_PROCESS, 0))
    for name in RLIMIT_NAMES:
        with contextlib.suppress(OSError, ValueError):
            attrs[name] = list(resource.getrlimit(getattr(resource, name)))
    return attrs


def attributes_changed(baseline: dict, now: dict | None = None) -> str:
    """What differs from ``baseline`` ('' when nothing does)."""
    now = own_attributes() if now is None else now
    changed = [
        f"{key} {baseline.get(key)!r} -> {now.get(key)!r}"
        for key in sorted(set(baseline) | set(now))
        if baseline.get(key) != now.get(key)
    ]
    return ", ".join(changed)


# --- the state of a session's holder, as the supervisor watches it (issue #40) -------
STOPPED_OR_GONE = (b"T", b"t", b"Z", b"X", b"")


def process_state(pid: int) -> bytes:
    """The state letter of ``/proc/<pid>/stat`` (b"" when the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return b""


def continued_since_stop(pid: int) -> bool:
    """Did ``pid`` (a child, as every holder is of the subreaper) get resumed since it
    last stopped? Consumes the kernel's record of it."""
    try:
        info = os.waitid(os.P_PID, pid, os.WCONTINUED | os.WNOHANG)
    except (ChildProcessError, OSError):
        return False
    return info is not None and info.si_code == os.CLD_CONTINUED


def seccomp_filters(pid: int) -> int | None:
    """How many seccomp filters ``pid`` runs under (``None``: cannot tell)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Seccomp_filters:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def family_filters_problem(pids: set[int]) -> str:
    """After a fork, parent and fork must run the read-only stage on top of the others:
    their own code made the calls, and a cell can rebind that code (issue #40, class 7),
    so the supervisor counts the filters the kernel holds for them."""
    expected = 1 + len(CHILD_SECCOMP) + len(READ_ONLY_SECCOMP)
    for pid in sorted(pids):
        count = seccomp_filters(pid)
        if count is None or count < expected:
            return (
                f"a holder of the family runs {count} seccomp filters, not the {expected} "
                "a forked family must: the fork is refused"
            )
    return ""


def continue_if_stopped(pid: int) -> None:
    """A cell may stop its holder (``SIGSTOP`` cannot be ignored): resume it, so that it
    reports the cell's end instead of leaving the cell to run into its timeout."""
    state = process_state(pid)
    if state in (b"T", b"t"):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)
