"""Tightening a started worker's mounts from the host, before any code runs in it.

Issue #40, class 1 (and the mounts that forks need, classes 2 and 3). The launchers leave
some mounts wider than a run may have them, and cannot say otherwise:

- bubblewrap binds the host's device nodes (``/dev/null``...) writable, and its own
  ``--remount-ro`` would add ``nodev`` (the devices would stop working); a writable
  mount lets a run set the times of the host's own ``/dev/null``;
- the work dir and ``/dev/shm`` are ``relatime`` tmpfs: reading a file can change its
  access time, which a forked branch's family can see;
- ``/proc`` shows every process of the sandbox to every other.

The sandbox's own processes cannot change mounts (no capability, ``mount`` refused by
seccomp), but the host can: the worker's mount namespace belongs to a user namespace its
launcher created as the host's user (or, for a container of a local engine, to the
engine's), so a short-lived helper process joins that user namespace and the mount
namespace (``setns``) and remounts: device nodes read-only (a read-only mount refuses
``utime`` with EROFS; the device itself still reads and writes), scratch tmpfs
``noatime``, ``/dev/pts`` read-only, ``/proc`` with ``hidepid=invisible``. A helper
process because ``setns`` into a user namespace needs a single-threaded caller.

The supervisor then measures the result itself before it runs anything (``seal``, see
``supervisor/sealing.py``): this module only tries, the supervisor decides.

The helper is this file run as ``python -I -S -c <source> <pid> <json>``: standard
library only, no agentenvs import.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

DEVICE_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
"""What bubblewrap's ``--dev`` and the container engines bind or create."""
HELPER_SECONDS = 10.0


@dataclass(frozen=True)
class MountPlan:
    """What to tighten in one worker's mount namespace (each path skipped if absent)."""

    read_only: tuple[str, ...] = ()
    noatime: tuple[str, ...] = ()
    hide_processes: bool = False
    """Remount ``/proc`` with ``hidepid=invisible``."""

    def as_json(self) -> str:
        return json.dumps(
            {
                "read_only": list(self.read_only),
                "noatime": list(self.noatime),
                "hide_processes": self.hide_processes,
            }
        )


@dataclass
class SealResult:
    done: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


async def tighten_mounts(pid: int, plan: MountPlan) -> SealResult:
    """Run the helper against the mount namespace of host pid ``pid``."""
    return await asyncio.to_thread(_run_helper, pid, plan)


def _run_helper(pid: int, plan: MountPlan) -> SealResult:
    """Blocking, in a thread: no event-loop transport outlives the helper's pipes."""
    argv = [sys.executable, "-I", "-S", "-c", Path(__file__).read_text(), str(pid), plan.as_json()]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=HELPER_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SealResult(failed={"helper": f"{type(exc).__name__}: {exc}"})
    try:
        report = json.loads(done.stdout)
    except ValueError:
        detail = (done.stderr or done.stdout).decode(errors="replace")[-500:]
        return SealResult(failed={"helper": detail})
    return SealResult(done=list(report.get("done", [])), failed=dict(report.get("failed", {})))


# ---------------------------------------------------------------------- the helper
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
ST_TO_MS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME}
ST_TO_MS.update({2048: MS_NODIRATIME, 4096: MS_RELATIME})
NS_GET_USERNS = 0xB701
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000


def _current_flags(path: str) -> int:
    """The mount's per-mount flags now (kept: a remount may not clear locked ones)."""
    import os

    flags = os.statvfs(path).f_flag
    return sum(ms for st, ms in ST_TO_MS.items() if flags & st)


def _helper(pid: int, plan: dict) -> dict:
    import ctypes
    import fcntl
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    report: dict = {"done": [], "failed": {}}

    def fail(what: str) -> dict:
        report["failed"][what] = os.strerror(ctypes.get_errno())
        return report

    mnt = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    owner = fcntl.ioctl(mnt, NS_GET_USERNS)
    foreign = os.fstat(owner).st_ino != os.stat("/proc/self/ns/user").st_ino
    if foreign and libc.setns(owner, CLONE_NEWUSER) != 0:
        return fail("setns(user)")
    if libc.setns(mnt, CLONE_NEWNS) != 0:
        return fail("setns(mnt)")

    def remount(path: str, add: int, drop: int = 0, data: bytes | None = None, bind=True) -> None:
        if not os.path.lexists(path):
            return
        flags = (_current_flags(path) | add) & ~drop
        flags |= MS_REMOUNT | (MS_BIND if bind else 0)
        if libc.mount(None, path.encode(), None, flags, data) != 0:
            fail(path)
        else:
            report["done"].append(path)

    for path in plan.get("read_only", []):
        remount(path, MS_RDONLY)
    for path in plan.get("noatime", []):
        remount(path, MS_NOATIME, MS_RELATIME | MS_STRICTATIME | MS_NODIRATIME)
    if plan.get("hide_processes"):
        remount("/proc", 0, 0, b"hidepid=invisible", bind=False)
    return report


if __name__ == "__main__":
    print(json.dumps(_helper(int(sys.argv[1]), json.loads(sys.argv[2]))))
