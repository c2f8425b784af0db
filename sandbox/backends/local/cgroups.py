"""Per-worker cgroups: a memory and a process-count ceiling for everything a worker runs.

rlimits are per process: a program that forks 60 children, each allocating just under
its address-space limit, would still take 60x the memory. A cgroup bounds the sum. Each
worker gets its own group, created *below the cgroup the host process is in* (so the
host's own limits and accounting still apply), under the names
``agentenvs-<host pid>-<serial>``.

cgroup v1 (separate ``memory`` and ``pids`` hierarchies) and v2 (unified) are both
handled. The host moves the worker's supervisor into its group right after the hello
frame, before the supervisor forks anything, so every execution is inside. The memory
the supervisor allocated while importing numpy/sympy stays charged where it was (cgroup
v1 does not move charges), which leaves the whole group limit for the code.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "agentenvs-"


def _own_cgroup_paths() -> dict[str, str]:
    """controller (or "" for the v2 unified hierarchy) -> this process's cgroup path."""
    paths: dict[str, str] = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return paths
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


@dataclass
class CgroupSupport:
    """Where this host can create memory/pids groups, and why not when it cannot."""

    memory_parent: Path | None = None
    pids_parent: Path | None = None
    version: int = 0
    notes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def detect(cls) -> CgroupSupport:
        support = cls()
        own = _own_cgroup_paths()
        v1_memory = CGROUP_ROOT / "memory"
        v1_pids = CGROUP_ROOT / "pids"
        if (v1_memory / "memory.limit_in_bytes").exists() or (v1_pids / "cgroup.procs").exists():
            support.version = 1
            candidates = {
                "memory": v1_memory / own.get("memory", "/").lstrip("/"),
                "pids": v1_pids / own.get("pids", "/").lstrip("/"),
            }
        elif (CGROUP_ROOT / "cgroup.controllers").exists():
            support.version = 2
            unified = CGROUP_ROOT / own.get("", "/").lstrip("/")
            candidates = {"memory": unified, "pids": unified}
            enabled = (
                (unified / "cgroup.subtree_control").read_text().split()
                if (unified / "cgroup.subtree_control").exists()
                else []
            )
            for name in ("memory", "pids"):
                if name not in enabled:
                    support.notes[name] = (
                        f"cgroup v2: controller {name!r} not enabled in {unified}/cgroup.subtree_control"
                    )
                    candidates.pop(name)
        else:
            support.notes["memory"] = support.notes["pids"] = (
                "no cgroup filesystem at /sys/fs/cgroup"
            )
            return support
        for name, parent in candidates.items():
            reason = _writable_reason(parent)
            if reason:
                support.notes[name] = reason
            elif name == "memory":
                support.memory_parent = parent
            else:
                support.pids_parent = parent
        return support


def _writable_reason(parent: Path) -> str:
    if not parent.is_dir():
        return f"{parent} does not exist"
    probe = parent / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError as exc:
        return f"cannot create a cgroup under {parent}: {exc.strerror}"
    with contextlib.suppress(OSError):
        probe.rmdir()
    return ""


def remove_stale_groups(support: CgroupSupport) -> None:
    """Remove empty groups left by host processes that died without cleaning up."""
    for parent in {support.memory_parent, support.pids_parent} - {None}:
        assert parent is not None
        for child in parent.glob(f"{PREFIX}*"):
            match = re.match(rf"{PREFIX}(\d+)-", child.name)
            if match and not Path(f"/proc/{match.group(1)}").exists():
                with contextlib.suppress(OSError):
                    child.rmdir()


class WorkerCgroup:
    """The memory and pids group of one worker."""

    def __init__(self, support: CgroupSupport, name: str) -> None:
        self.support = support
        self.memory: Path | None = None
        self.pids: Path | None = None
        self.errors: dict[str, str] = {}
        self._memory_limit: int | None = None
        self._created: list[Path] = []
        for controller, parent in (
            ("memory", support.memory_parent),
            ("pids", support.pids_parent),
        ):
            if parent is None:
                continue
            path = parent / name
            if controller == "pids" and path == self.memory:
                self.pids = path  # cgroup v2: one group, both controllers
                continue
            try:
                path.mkdir(exist_ok=True)
            except OSError as exc:
                self.errors[controller] = f"mkdir {path}: {exc.strerror}"
                continue
            self._created.append(path)
            setattr(self, controller, path)

    @property
    def v2(self) -> bool:
        return self.support.version == 2

    def add(self, pid: int) -> None:
        for controller in ("memory", "pids"):
            path: Path | None = getattr(self, controller)
            if path is None or (controller == "pids" and path == self.memory):
                continue
            try:
                (path / "cgroup.procs").write_text(str(pid))
            except OSError as exc:
                self.errors[controller] = f"cannot move pid {pid} into {path}: {exc.strerror}"
                setattr(self, controller, None)

    def set_pids_max(self, count: int) -> None:
        if self.pids is None:
            return
        try:
            (self.pids / "pids.max").write_text(str(count))
        except OSError as exc:
            self.errors["pids"] = f"pids.max: {exc.strerror}"
            self.pids = None

    def set_memory_limit(self, limit_bytes: int) -> bool:
        """Change the group's memory ceiling; False (and the old one stays) if refused."""
        if self.memory is None or limit_bytes == self._memory_limit:
            return True
        try:
            if self.v2:
                (self.memory / "memory.max").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):
                    (self.memory / "memory.swap.max").write_text("0")
            else:
                self._set_v1_memory(limit_bytes)
            self._memory_limit = limit_bytes
        except OSError as exc:
            # e.g. EBUSY: lowering below what the group uses right now
            self.errors["memory"] = f"memory limit {limit_bytes}: {exc.strerror}"
            return False
        return True

    def _set_v1_memory(self, limit_bytes: int) -> None:
        assert self.memory is not None
        limit = self.memory / "memory.limit_in_bytes"
        memsw = self.memory / "memory.memsw.limit_in_bytes"
        with contextlib.suppress(OSError):
            (self.memory / "memory.swappiness").write_text("0")
        # memory+swap must stay >= memory: the order of the two writes depends on direction.
        if memsw.exists():
            try:
                limit.write_text(str(limit_bytes))
                memsw.write_text(str(limit_bytes))
            except OSError:
                memsw.write_text(str(limit_bytes))
                limit.write_text(str(limit_bytes))
        else:
            limit.write_text(str(limit_bytes))

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this group so far."""
        if self.memory is None:
            return 0
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            text = (self.memory / name).read_text()
        except OSError:
            return 0
        match = re.search(r"^oom_kill (\d+)", text, re.M)
        return int(match.group(1)) if match else 0

    def remove(self, timeout: float = 2.0) -> None:
        """Remove the groups (the worker's processes must be dead: a group with tasks is busy)."""
        deadline = time.monotonic() + timeout
        for path in self._created:
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
