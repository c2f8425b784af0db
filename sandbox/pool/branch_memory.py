"""A memory cgroup per branch of a forked session family, inside its worker's group.

Issue #40, class 5: the sessions of one worker (the opened one and its in-worker forks)
used to share the worker's memory group (the limit plus headroom). A parent allocating
within its own limit then pushed the group over, the OOM killer took the largest
process in it (often a fork's parked holder), and the parent's finished cell was
reported as a memory failure because the group's kill counter had moved.

Once a session of a worker forks, every session of it gets a group of its own below
the worker's (``branch-<session id>``), limited to one session's memory (the limit plus
headroom), and the worker's group is raised above the sum (one more session's worth for
what the holders had charged to it before they moved: cgroups do not move charges), so
that no branch can reach another's memory and the worker's group itself is never the one
over its limit. Each
holder is moved into its session's group while it is parked (right after the fork, and
again whenever the supervisor starts a fresh one); every cell it forks starts there. A
cell's outcome reads its own session's kill counter, so an OOM kill is blamed on the
branch it happened in, and only there.

cgroup v1 (a ``memory`` hierarchy; a group may hold processes and children alike) and v2
(unified; a group with children may hold no process, so the worker's own processes move
to a ``worker`` leaf first) are both handled. The host's own limits still apply above.
"""

from __future__ import annotations

import contextlib
import errno
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentenvs.sandbox.pool.worker import children_of

WORKER_LEAF = "worker"
"""cgroup v2: where the worker's own processes (the supervisor) go once branches exist."""


def host_pid_of(supervisor: int, inner: int) -> int | None:
    """The host pid of ``inner`` (a pid in the worker's pid namespace), among the
    supervisor and its descendants (a holder that just took over from a finished cell
    may not be re-parented to the supervisor yet)."""
    todo, seen = [supervisor], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(children_of(pid))
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        match = re.search(r"^NSpid:\s+(.*)$", status, re.M)
        if match and int(match.group(1).split()[-1]) == inner:
            return pid
    return None


@dataclass
class BranchMemory:
    """The branch groups below one worker's memory group (see the module docstring)."""

    group: Path
    """The worker's memory group (v1: in the memory hierarchy; v2: the unified group)."""
    version: int
    branch_bytes: int
    """One session's ceiling: its memory limit plus the backend's headroom."""
    headroom_bytes: int
    """What the worker's group keeps above the sum (its supervisor)."""
    branches: dict[int, Path] = field(default_factory=dict)
    placed: dict[int, int] = field(default_factory=dict)
    """Session -> the holder (pid in the worker) last moved into its group."""

    def needs_placing(self, session: int, holder: int) -> bool:
        """Is ``holder`` new to its session (a fresh or a newly adopted holder)?"""
        return self.placed.get(session) != holder

    def place(self, session: int, holder: int, host_pid: int) -> str:
        """Move ``host_pid`` (``holder``, parked) into ``session``'s group; why not, or ''."""
        try:
            path = self.branches.get(session) or self._make(session)
            (path / "cgroup.procs").write_text(str(host_pid))
        except OSError as exc:
            return f"cannot give session {session} its own memory group: {exc.strerror or exc}"
        self.placed[session] = holder
        return ""

    def _make(self, session: int) -> Path:
        if self.version == 2 and not self.branches:
            self._make_v2_parent()
        path = self.group / f"branch-{session}"
        path.mkdir(exist_ok=True)
        self.branches[session] = path
        self._set_limit(path, self.branch_bytes)
        total = (len(self.branches) + 1) * self.branch_bytes + self.headroom_bytes
        self._set_limit(self.group, total)
        return path

    def _make_v2_parent(self) -> None:
        """cgroup v2: the worker's processes to a leaf, then memory for the children."""
        leaf = self.group / WORKER_LEAF
        leaf.mkdir(exist_ok=True)
        for pid in (self.group / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, OSError):
                (leaf / "cgroup.procs").write_text(pid)
        (self.group / "cgroup.subtree_control").write_text("+memory")

    def _set_limit(self, path: Path, limit: int) -> None:
        if self.version == 2:
            (path / "memory.max").write_text(str(limit))
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")
            return
        with contextlib.suppress(OSError):
            (path / "memory.swappiness").write_text("0")
        memsw = path / "memory.memsw.limit_in_bytes"
        try:  # memory+swap >= memory at every step: the order depends on the direction
            (path / "memory.limit_in_bytes").write_text(str(limit))
            if memsw.exists():
                memsw.write_text(str(limit))
        except OSError:
            memsw.write_text(str(limit))
            (path / "memory.limit_in_bytes").write_text(str(limit))

    def oom_kills(self, session: int) -> int | None:
        """OOM kills in ``session``'s group so far (``None``: the session has none)."""
        path = self.branches.get(session)
        if path is None:
            return None
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = (path / name).read_text()
        except OSError:
            return None
        match = re.search(r"^oom_kill (\d+)", text, re.M)
        return int(match.group(1)) if match else 0

    def forget(self, session: int, timeout: float = 0.0) -> None:
        """Remove a closed session's group (kept for ``remove_all`` while still busy)."""
        self.placed.pop(session, None)
        path = self.branches.get(session)
        if path is not None and _rmdir(path, timeout):
            del self.branches[session]

    def remove_all(self, timeout: float = 2.0) -> None:
        """Remove every branch group (the worker's processes must be dead)."""
        for session in list(self.branches):
            self.forget(session, timeout)
        if self.version == 2:
            _rmdir(self.group / WORKER_LEAF, timeout)


def _rmdir(path: Path, timeout: float) -> bool:
    """Remove an empty cgroup; False while it still holds processes after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
