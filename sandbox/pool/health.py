"""A worker's health, checked from the host after each run (issue #11, class 3).

The supervisor inside the sandbox removes what it knows a run can leave (processes,
files, System V IPC); this is the check from outside that does not trust it. It reads
the worker's own cgroup (found from a host pid of the worker, so the same code serves a
bubblewrap worker and a container): memory in use against the baseline taken when the
worker was fresh, the process count, and the work dir's tmpfs usage (through
``/proc/<pid>/root``). Memory over the baseline is first given back with
``memory.reclaim`` (cgroup v2) or ``memory.force_empty`` (v1), which frees page cache
and anything else reclaimable; what stays above it, or any extra process or tmpfs
block, means the run left something that can poison the next one: the worker is
recycled.

The same check reads the supervisor's own scheduling and limits from ``/proc/<pid>``
(nice value, policy and real-time priority, CPU affinity, every rlimit) against the
values it started with (issue #24): user code runs under the supervisor's uid, and a
run that could renice, ``SCHED_IDLE``, pin or ``prlimit`` it would starve or break
every later tenant. The children's seccomp filter refuses those calls; should one get
through anyway, the worker is recycled (a lowered hard limit or a raised nice value
cannot be given back without privileges the host need not have).

Why a slack: a warm worker's own footprint moves a little (its next pre-forked child's
copy-on-write pages, allocator caches); a leak that matters is one that takes a real
share of the memory limit.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

MB = 1024 * 1024
CGROUP_ROOT = Path("/sys/fs/cgroup")
MEMORY_SLACK_BYTES = 48 * MB
"""Tolerated growth of a worker's memory over its fresh baseline."""
EXTRA_PROCESSES = 2
"""Tolerated over the baseline count: the pre-forked idle child, one being reaped."""
TMPFS_SLACK_BYTES = 1 * MB


@dataclass(frozen=True)
class CgroupDirs:
    """Where one process's memory and pids accounting lives (v1 or v2)."""

    memory: Path | None
    pids: Path | None
    version: int

    @classmethod
    def of_pid(cls, pid: int) -> CgroupDirs:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return cls(None, None, 0)
        memory = pids = None
        version = 0
        for line in lines:
            hierarchy, controllers, path = line.split(":", 2)
            names = controllers.split(",")
            relative = path.lstrip("/")
            if "memory" in names and (CGROUP_ROOT / "memory" / relative).is_dir():
                memory, version = CGROUP_ROOT / "memory" / relative, 1
            if "pids" in names and (CGROUP_ROOT / "pids" / relative).is_dir():
                pids = CGROUP_ROOT / "pids" / relative
            if hierarchy == "0" and controllers == "" and memory is None:
                unified = CGROUP_ROOT / relative
                if (unified / "memory.current").exists():
                    memory = unified
                    pids = unified if (unified / "pids.current").exists() else pids
                    version = 2
        return cls(memory, pids, version)

    def memory_bytes(self) -> int | None:
        if self.memory is None:
            return None
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return _read_int(self.memory / name)

    def processes(self) -> int | None:
        return _read_int(self.pids / "pids.current") if self.pids is not None else None

    def reclaim(self, excess: int) -> None:
        """Ask the kernel to give back reclaimable memory (page cache first)."""
        if self.memory is None:
            return
        with contextlib.suppress(OSError):
            if self.version == 2:
                (self.memory / "memory.reclaim").write_text(str(max(excess, MB)))
            else:
                (self.memory / "memory.force_empty").write_text("0")


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def tmpfs_used_bytes(pid: int, paths: tuple[str, ...]) -> int | None:
    """Bytes in use in the worker's writable tmpfs mounts, seen through its root."""
    total = 0
    for path in paths:
        try:
            st = os.statvfs(f"/proc/{pid}/root{path}")
        except OSError:
            return None
        total += (st.f_blocks - st.f_bfree) * st.f_frsize
    return total


def process_attributes(pid: int) -> dict[str, str] | None:
    """The scheduling and limits of ``pid`` as ``/proc`` shows them (None: not visible).

    ``stat`` fields 19 (nice), 40 (real-time priority) and 41 (policy), the affinity
    (``Cpus_allowed_list``) and ``limits``: all world-readable, so the host needs no
    privilege to look, whichever uid the worker has.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
        limits = Path(f"/proc/{pid}/limits").read_text()
    except (OSError, IndexError):
        return None
    affinity = ""
    for line in status.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            affinity = line.split(":", 1)[1].strip()
    # after the command name, field 3 (state) is index 0
    attrs = {"nice": stat[16], "rt_priority": stat[37], "policy": stat[38], "affinity": affinity}
    for line in limits.splitlines()[1:]:
        name, values = line[:26].strip(), line[26:].split()
        if name and len(values) >= 2:
            attrs[f"limit {name}"] = f"{values[0]}/{values[1]}"
    return attrs


@dataclass
class Baseline:
    memory: int | None
    processes: int | None
    tmpfs: int | None
    attributes: dict[str, str] | None = None
    """The supervisor's scheduling and limits (``process_attributes``)."""


@dataclass
class WorkerHealth:
    """The health check of one worker (see the module docstring)."""

    pid: int
    """A host pid inside the worker's cgroup and mount namespace (its supervisor)."""
    dirs: CgroupDirs
    tmpfs_paths: tuple[str, ...] = ("/tmp", "/dev/shm")
    baseline: Baseline | None = None
    reclaims: int = 0

    @classmethod
    def for_pid(cls, pid: int | None, tmpfs_paths: tuple[str, ...] = ("/tmp", "/dev/shm")):
        """None when the host cannot see the worker (remote engine, no cgroup)."""
        if not pid:
            return None
        dirs = CgroupDirs.of_pid(pid)
        if dirs.memory is None and dirs.pids is None:
            return None
        health = cls(pid, dirs, tmpfs_paths)
        health.baseline = health.measure()
        return health

    def measure(self) -> Baseline:
        return Baseline(
            memory=self.dirs.memory_bytes(),
            processes=self.dirs.processes(),
            tmpfs=tmpfs_used_bytes(self.pid, self.tmpfs_paths),
            attributes=process_attributes(self.pid),
        )

    def problem(self, now: Baseline | None = None) -> str:
        """Why the worker is not back at its baseline ('' when it is)."""
        base, now = self.baseline, now or self.measure()
        if base is None:
            return ""
        if base.attributes is not None and now.attributes is not None:
            changed = [
                f"{key} {base.attributes.get(key)} -> {now.attributes.get(key)}"
                for key in base.attributes
                if base.attributes.get(key) != now.attributes.get(key)
            ]
            if changed:
                return "the supervisor's scheduling or limits changed: " + ", ".join(changed)
        if _over(now.processes, base.processes, EXTRA_PROCESSES):
            return f"{now.processes} processes in the worker (fresh: {base.processes})"
        if _over(now.tmpfs, base.tmpfs, TMPFS_SLACK_BYTES):
            return f"{(now.tmpfs or 0) // MB} MB left in the work dir's tmpfs"
        if _over(now.memory, base.memory, MEMORY_SLACK_BYTES):
            return (
                f"{(now.memory or 0) // MB} MB in use by the worker "
                f"(fresh: {(base.memory or 0) // MB} MB)"
            )
        return ""

    def recover(self) -> str:
        """After a run: '' if healthy (reclaiming memory if needed), else why not."""
        now = self.measure()
        problem = self.problem(now)
        base = self.baseline
        if problem and base is not None and _over(now.memory, base.memory, MEMORY_SLACK_BYTES):
            self.reclaims += 1
            self.dirs.reclaim((now.memory or 0) - (base.memory or 0))
            problem = self.problem()
        return problem


def _over(now: int | None, base: int | None, slack: int) -> bool:
    return now is not None and base is not None and now > base + slack
