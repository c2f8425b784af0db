"""The guest side of the cgroup v2 health-check test: run inside a user-mode Linux kernel.

This machine's memory and pids controllers are bound to cgroup v1 hierarchies, so a
cgroup v2 mount here has neither (see ``machine_skips``, condition ``cgroup2``). A UML
kernel (``linux.uml``, Debian's user-mode-linux) is a real Linux kernel running as a
host process, with its own cgroups: booted with the host's ``/`` as its (read-only) root,
it mounts a pure cgroup v2 hierarchy at ``/sys/fs/cgroup`` where every controller is
free. This program is started there by ``sandbox_uml.boot`` and runs the real local
backend (bubblewrap, seccomp, per-worker cgroups) on that hierarchy, so the health check
(``sandbox/pool/health.py``) takes its cgroup v2 path. It only observes and reports, as
one line ``CGROUP2-REPORT <json>`` on the console; the test on the host asserts.

Scenarios, each on the one pool worker (``pool_size=1``, no spare):

- ``reach``: a run tries to raise its own group's ``memory.max`` and ``pids.max``;
- ``page_cache``: a run reads a file of a disk filesystem (an ext2 image on the guest's
  ``/dev/ubda``, mounted under ``/usr``, which the sandbox sees), so its page cache is
  charged to the worker's group: the check must give it back with ``memory.reclaim``
  and keep the worker;
- ``processes``: a host process with 4 children is moved into the worker's group (the
  supervisor cannot see it): the check must count it (``pids.current``) and recycle;
- ``memory``: a host process holding twice the slack is moved in: reclaim cannot free
  it, the check must recycle.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path

MARK = "CGROUP2-REPORT "
CGROUP_ROOT = Path("/sys/fs/cgroup")


def mount_guest_filesystems() -> None:
    """What a bare UML init lacks: /proc, /sys, writable /tmp and /run, cgroup v2."""
    for fstype, target in (
        ("proc", "/proc"),
        ("sysfs", "/sys"),
        ("tmpfs", "/tmp"),
        ("tmpfs", "/run"),
        ("tmpfs", "/dev/shm"),
        ("cgroup2", str(CGROUP_ROOT)),
    ):
        os.makedirs(target, exist_ok=True)
        subprocess.run(["mount", "-t", fstype, fstype, target], check=True)
    (CGROUP_ROOT / "cgroup.subtree_control").write_text("+memory +pids")


CACHED_DIR = "/usr/local/games"
"""An empty directory of the host's /usr: the disk is mounted over it in the guest only."""
CACHED_FILE = f"{CACHED_DIR}/cached.bin"
CACHED_MB = 120


def prepare_cached_file() -> None:
    """Write the file on the disk, then drop it from the page cache and remount the
    disk read-only: the run that reads it is the first to cache it (and is charged)."""
    subprocess.run(["mount", "/dev/ubda", CACHED_DIR], check=True)
    with open(CACHED_FILE, "wb") as out:
        for _ in range(CACHED_MB):
            out.write(os.urandom(1 << 20))
    os.chmod(CACHED_FILE, 0o644)
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3")
    subprocess.run(["mount", "-o", "remount,ro", CACHED_DIR], check=True)


def group_of(pid: int) -> Path:
    """The v2 group of ``pid`` (its ``0::`` line)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return CGROUP_ROOT / line[3:].lstrip("/")
    raise RuntimeError(f"pid {pid} has no cgroup v2 line")


def moved_into(group: Path, code: str) -> subprocess.Popen:
    """A host process (leading its own process group) running ``code`` after it was
    moved into ``group``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys\nsys.stdin.readline()\n" + code],
        process_group=0,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    (group / "cgroup.procs").write_text(str(proc.pid))
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    proc.stdout.readline()  # its "ready"
    return proc


async def settled(sandbox, worker, *, replaced: bool, seconds: float = 60) -> bool:
    """Wait until the only slot is back in the idle queue (with another worker, if
    ``replaced``); False when that did not happen within ``seconds``."""
    for _ in range(int(seconds / 0.05)):
        slot = sandbox._slots[0]
        if (slot.worker is not worker) == replaced and not sandbox._idle.empty():
            return True
        await asyncio.sleep(0.05)
    return False


def memory_mb(group: Path) -> int | None:
    """The group's charge in MB (None: the group is gone, its worker retired)."""
    try:
        return int((group / "memory.current").read_text()) >> 20
    except OSError:
        return None


def health_facts(health) -> dict:
    if health is None:
        return {"present": False}
    return {
        "present": True,
        "version": health.dirs.version,
        "memory_dir": str(health.dirs.memory),
        "pids_dir": str(health.dirs.pids),
        "baseline_memory": health.baseline.memory,
        "baseline_processes": health.baseline.processes,
        "reclaims": health.reclaims,
    }


REACH = (
    "import os\n"
    "own = open('/proc/self/cgroup').read().split('::')[-1].strip().lstrip('/')\n"
    "tried = {}\n"
    "for base in ('/sys/fs/cgroup', '/sys/fs/cgroup/' + own):\n"
    "    for knob, value in (('memory.max', 'max'), ('pids.max', 'max')):\n"
    "        path = os.path.join(base, knob)\n"
    "        try:\n"
    "            with open(path, 'w') as f:\n"
    "                f.write(value)\n"
    "            tried[path] = 'written'\n"
    "        except OSError as exc:\n"
    "            tried[path] = exc.strerror\n"
    "print(tried)\n"
)
PAGE_CACHE = (
    f"total = 0\nwith open({CACHED_FILE!r}, 'rb') as f:\n"
    "    while chunk := f.read(1 << 20):\n"
    "        total += len(chunk)\n"
    "print('read', total >> 20)\n"
)


async def scenarios(report: dict) -> None:
    from agentenvs.sandbox import create
    from agentenvs.sandbox.pool.health import MB, MEMORY_SLACK_BYTES

    sandbox = create(
        backend="local",
        pool_size=1,
        spare_workers=0,
        timeout=60,
        memory_limit_mb=256,
        workdir_size_mb=64,
        max_processes=16,
    )
    async with sandbox:
        first = await sandbox.run("print(1)")
        report["first_run"] = [first.status.value, first.stdout]
        caps = sandbox.capabilities()
        report["cgroup_layers"] = {
            k: [caps.active.get(k), caps.notes.get(k)] for k in ("cgroup_memory", "cgroup_pids")
        }
        worker = sandbox._slots[0].worker
        health = worker.health
        report["health"] = health_facts(health)
        if health is None:
            return
        group = health.dirs.memory
        limits = {k: (group / k).read_text().strip() for k in ("memory.max", "pids.max")}

        # a run reaching for its own group's limits
        reach = await sandbox.run(REACH)
        report["reach"] = {
            "status": reach.status.value,
            "stdout": reach.stdout,
            "limits_before": limits,
            "limits_after": {k: (group / k).read_text().strip() for k in limits},
        }
        await settled(sandbox, worker, replaced=False)

        # page cache: reclaimed, the worker kept
        cached = await sandbox.run(PAGE_CACHE)
        memory_after_run = memory_mb(group)
        kept = await settled(sandbox, worker, replaced=False)
        report["page_cache"] = {
            "status": cached.status.value,
            "stdout": cached.stdout,
            "memory_after_run_mb": memory_after_run,
            "memory_now_mb": memory_mb(group),
            "kept": kept and sandbox._slots[0].worker is worker,
            "reclaims": health.reclaims,
            "health_recycles": sandbox.stats["health_recycles"],
        }

        # processes the supervisor cannot see, then memory reclaim cannot free
        hold_mb = 2 * MEMORY_SLACK_BYTES // MB
        for name, code in (
            (
                "processes",
                "import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n"
                "        time.sleep(120)\n        os._exit(0)\n"
                "print('ready', flush=True)\ntime.sleep(120)",
            ),
            (
                "memory",
                f"block = bytearray({hold_mb} << 20)\nblock[::4096] = b'\\x01' * len(block[::4096])\n"
                "print('ready', flush=True)\nimport time\ntime.sleep(120)",
            ),
        ):
            worker = sandbox._slots[0].worker
            health = worker.health
            group = health.dirs.memory
            before = sandbox.stats["health_recycles"]
            intruder = moved_into(group, code)
            try:
                problem = health.problem()
                result = await sandbox.run("print(2)")
                replaced = await settled(sandbox, worker, replaced=True)
                report[name] = {
                    "problem": problem,
                    "run": [result.status.value, result.stdout],
                    "replaced": replaced,
                    "recycle_reason": getattr(worker, "recycle_reason", ""),
                    "health_recycles": sandbox.stats["health_recycles"] - before,
                }
            finally:
                os.killpg(intruder.pid, signal.SIGKILL)
                intruder.wait()
            after = await sandbox.run("print(3)")
            report[name]["next_run"] = [after.status.value, after.stdout]


def main() -> None:
    report: dict = {}
    try:
        mount_guest_filesystems()
        prepare_cached_file()
        report["controllers"] = (CGROUP_ROOT / "cgroup.controllers").read_text().split()
        asyncio.run(asyncio.wait_for(scenarios(report), 400))
    except BaseException:
        report["error"] = traceback.format_exc()
    print(MARK + json.dumps(report), flush=True)


if __name__ == "__main__":
    os.chdir("/")
    main()
