"""What the sandbox's mounts let a run change, measured from inside before any code runs.

Issue #40, class 1: a run must not change any inode of the host. Write permission is
enough to set a file's times (``utime(NULL)``), and a device node is world-writable, so
every host inode a run can open for writing must sit on a read-only mount (where the
kernel refuses a time change with EROFS, while the device itself still works). The host
remounts what the launcher left writable (``pool/mount_seal.py``), then asks the
supervisor to ``seal``: this module walks every writable mount outside the scratch dirs
(``/proc`` and ``/sys`` are pseudo files, not inodes a run keeps) and sorts what a run
could change:

- ``host``: a writable entry on a file system the sandbox did not make (the host's
  devtmpfs, a disk): the worker refuses to start where the host says it must not have
  any (``seal.require_private``);
- ``private``: a writable entry on a file system made for this worker alone (its own
  devpts, mqueue or ``/dev`` tmpfs): no other worker sees it, and the reset compares
  each with its baseline after every run (``WorkerReset``), so no later run sees a
  change either.

It also reports what forks need of the mounts (``session_table``): scratch dirs mounted
``noatime`` (a branch reading a family file would otherwise change its access time, a
bit the other branches can read) and a ``/proc`` that shows a process only the
processes it could trace (``hidepid=invisible``: with each branch in a Landlock domain of
its own, a branch sees no other branch's processes).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

PRIVATE_FILESYSTEMS = frozenset({"tmpfs", "devpts", "mqueue"})
"""File systems a launcher makes per sandbox (never a host directory in our launchers)."""
PSEUDO_TREES = ("/proc", "/sys")
MAX_ENTRIES = 5000
"""Entries walked at most: the writable mounts outside the scratch dirs are tiny."""
HIDDEN_PROC = ("hidepid=invisible", "hidepid=2", "hidepid=ptraceable", "hidepid=4")


@dataclass(frozen=True)
class Mount:
    point: str
    options: frozenset[str]
    fstype: str
    super_options: frozenset[str]

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


def _unescape(path: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    return path.encode().decode("unicode_escape") if "\\" in path else path


def mounts() -> list[Mount]:
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            before, _, after = line.partition(" - ")
            fields, tail = before.split(), after.split()
            if len(fields) < 6 or len(tail) < 3:
                continue
            found.append(
                Mount(
                    point=_unescape(fields[4]),
                    options=frozenset(fields[5].split(",")),
                    fstype=tail[0],
                    super_options=frozenset(tail[2].split(",")),
                )
            )
    return found


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def mount_of(path: str, table: list[Mount]) -> Mount | None:
    """The mount a path lies on: the last-mounted of the longest matching mount points."""
    best: Mount | None = None
    for mount in table:
        if _within(path, mount.point) and (best is None or len(mount.point) >= len(best.point)):
            best = mount
    return best


@dataclass
class Exposure:
    """What a run could change outside its scratch dirs, and what forks need."""

    host: list[str] = field(default_factory=list)
    private: dict[str, tuple] = field(default_factory=dict)
    """Path -> its baseline (``fingerprint``), compared after every run."""
    scratch_noatime: bool = True
    proc_hidden: bool = False
    incomplete: bool = False
    """The walk stopped at ``MAX_ENTRIES``: what it did not see is not proven safe."""

    def start_problem(self) -> str:
        """Why this worker must not start where host inodes must be out of reach."""
        if self.host:
            return "host inodes a run could change (writable, on a writable mount): " + ", ".join(
                sorted(self.host)[:8]
            )
        if self.incomplete:
            return f"more than {MAX_ENTRIES} entries on writable mounts: not proven safe"
        return ""

    def fork_problem(self) -> str:
        """Why a fork would share something through the mounts ('' when it would not)."""
        if not self.scratch_noatime:
            return (
                "the work dir is not mounted noatime: a branch's reads would change access "
                "times its family can see"
            )
        if not self.proc_hidden:
            return (
                "/proc is not mounted hidepid=invisible: branches would see each other's processes"
            )
        return ""


def fingerprint(path: str) -> tuple | None:
    """What a change of an inode's metadata shows in (None: gone)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (
        st.st_ino,
        st.st_mode,
        st.st_uid,
        st.st_gid,
        st.st_atime_ns,
        st.st_mtime_ns,
        st.st_ctime_ns,
    )


def _writable(path: str, st: os.stat_result) -> bool:
    if stat.S_ISLNK(st.st_mode):
        return False  # a symlink's own times need the directory, checked on its own
    return os.access(path, os.W_OK, follow_symlinks=False)


def inspect(scratch: list[str], read_dirs: list[str]) -> Exposure:
    """Walk every writable mount outside ``scratch`` and sort what a run could change;
    ``read_dirs``: where a family's branches read each other's files (must be noatime)."""
    table = mounts()
    exposure = Exposure()
    by_point = {m.point: m for m in table}
    for path in read_dirs:
        mount = mount_of(path, table)
        if mount is None or not ({"noatime"} & mount.options):
            exposure.scratch_noatime = False
    proc = by_point.get("/proc")
    exposure.proc_hidden = proc is not None and bool(set(HIDDEN_PROC) & proc.super_options)
    roots = sorted(
        {
            m.point
            for m in table
            if not m.read_only
            and not any(_within(m.point, p) for p in PSEUDO_TREES)
            and not any(_within(m.point, s) for s in scratch)
        }
    )
    visited: set[str] = set()
    for root in roots:
        stack = [root]
        while stack:
            path = stack.pop()
            if path in visited:
                continue
            if len(visited) >= MAX_ENTRIES:
                exposure.incomplete = True
                break
            visited.add(path)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            mount = mount_of(path, table)
            if mount is None or mount.read_only or any(_within(path, s) for s in scratch):
                continue
            if _writable(path, st):
                if mount.fstype in PRIVATE_FILESYSTEMS:
                    exposure.private[path] = fingerprint(path)
                else:
                    exposure.host.append(path)
            if stat.S_ISDIR(st.st_mode):
                try:
                    names = os.listdir(path)
                except OSError:
                    continue
                stack.extend(os.path.join(path, name) for name in names)
    return exposure


def private_changes(baseline: dict[str, tuple]) -> list[str]:
    """The private inodes whose metadata differs from their baseline."""
    return [path for path, before in baseline.items() if fingerprint(path) != before]
