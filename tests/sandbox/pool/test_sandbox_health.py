"""Issue #11, class 3: memory a run parks outside its own process never poisons the worker.

Each program parks ~330 MB in a way that outlives its own process (System V shm, tmpfs
files held open by a daemon, memfds passed to a lingering process, page cache), then an
allocation of 230 MB runs on the same worker (pool of one). The worker's cgroup leaves
room for that allocation only if what was parked is gone: freed by the supervisor's
cleanup, or else caught by the host's health check (``sandbox/pool/health.py``), which
recycles the worker. The health check itself is tested with something the supervisor
cannot see at all: a host process moved into the worker's cgroups.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys

import pytest
from support import machine_skips
from support.sandbox_escape.backends import sandbox_fixture

from agentenvs.sandbox import Sandbox, SandboxConfig
from agentenvs.sandbox.pool.health import MB, MEMORY_SLACK_BYTES, WorkerHealth

pytestmark = pytest.mark.asyncio(loop_scope="module")

CONFIG = SandboxConfig(
    timeout=30.0, memory_limit_mb=256, workdir_size_mb=512, max_processes=16, pool_size=1
)
PARK_MB = 110
"""Each of three holders parks this much: 330 MB in all, more than the cgroup can spare
beside a 230 MB allocation (local: 256 + 128 MB headroom; docker: 256 + 256 MB)."""

ALLOCATE_NEAR_LIMIT = (
    "block = bytearray(230 * 1024 * 1024)\n"
    "block[::4096] = b'\\x01' * len(block[::4096])\n"
    "print('allocated')"
)

_DAEMON = (
    "import os, time\n"
    "def daemon(body):\n"
    "    if os.fork() == 0:\n"
    "        os.setsid()\n"
    "        body()\n"
    "        while True:\n"
    "            time.sleep(60)\n"
)

PARKERS = {
    "sysv_shm_without_rmid": (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        f"size = {PARK_MB} * 1024 * 1024\n"
        "for _ in range(3):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        shm = libc.shmget(0, ctypes.c_size_t(size), 0o1600)\n"
        "        addr = libc.shmat(shm, None, 0)\n"
        "        ctypes.memset(addr, 1, size)\n"
        "        os._exit(0 if shm >= 0 else 1)\n"
        "    assert os.waitpid(pid, 0)[1] == 0\n"
        "print('parked')"
    ),
    "tmpfs_files_held_by_daemons": _DAEMON
    + (
        # files obey RLIMIT_FSIZE (16 MiB): many of 15 MiB, in /dev/shm and the work dir,
        # unlinked and held open (no name left for a wipe to find)
        "def hold():\n"
        "    chunk = b'x' * (1024 * 1024)\n"
        f"    for i in range({PARK_MB} // 15):\n"
        "        name = f\"{('/dev/shm', '.')[i % 2]}/parked-{os.getpid()}-{i}\"\n"
        "        fd = os.open(name, os.O_CREAT | os.O_RDWR, 0o600)\n"
        "        for _ in range(15):\n"
        "            os.write(fd, chunk)\n"
        "        os.unlink(name)\n"
        "for _ in range(3):\n"
        "    daemon(hold)\n"
        "time.sleep(3)\n"
        "print('parked')"
    ),
    "memfds_passed_to_a_lingering_process": _DAEMON
    + (
        # memfds obey RLIMIT_FSIZE (16 MiB files): many of 15 MiB each
        "import socket, mmap\n"
        "ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
        "size = 15 * 1024 * 1024\n"
        f"count = 3 * {PARK_MB} // 15\n"
        "kept = []\n"
        "def keep():\n"
        "    for _ in range(count):\n"
        "        _, fds, _, _ = socket.recv_fds(theirs, 16, 1)\n"
        "        kept.extend(fds)\n"
        "daemon(keep)\n"
        "for _ in range(count):\n"
        "    fd = os.memfd_create('parked')\n"
        "    os.ftruncate(fd, size)\n"
        "    with mmap.mmap(fd, size) as m:\n"
        "        for off in range(0, size, 4096):\n"
        "            m[off] = 1\n"
        "    socket.send_fds(ours, [b'x'], [fd])\n"
        "    os.close(fd)\n"
        "time.sleep(1)\n"
        "print('parked')"
    ),
    "page_cache_of_every_readable_file": (
        "import os\n"
        "total = 0\n"
        f"for root, dirs, files in os.walk('/usr'):\n"
        "    for name in files:\n"
        "        try:\n"
        "            with open(os.path.join(root, name), 'rb') as f:\n"
        "                while chunk := f.read(1 << 20):\n"
        "                    total += len(chunk)\n"
        "        except OSError:\n"
        "            pass\n"
        f"        if total > 3 * {PARK_MB} * 1024 * 1024:\n"
        "            break\n"
        f"    if total > 3 * {PARK_MB} * 1024 * 1024:\n"
        "        break\n"
        "print('parked')"
    ),
}

sandbox = sandbox_fixture(CONFIG)


@pytest.mark.parametrize("name", list(PARKERS))
async def test_parked_memory_never_poisons_the_worker(sandbox: Sandbox, name: str) -> None:
    parked = await sandbox.run(PARKERS[name])
    assert parked.ok and parked.stdout == "parked\n", parked
    for _ in range(2):  # and it stays so
        after = await sandbox.run(ALLOCATE_NEAR_LIMIT)
        assert after.ok and after.stdout == "allocated\n", (name, after)


def _only_worker(sandbox: Sandbox):
    # The health check reads the worker's cgroup: only a machine without usable cgroups
    # has none (asked of the machine itself); anywhere else a missing check is a failure.
    machine_skips.require("cgroups")
    worker = sandbox._slots[0].worker  # type: ignore[attr-defined]
    health: WorkerHealth | None = getattr(worker, "health", None)
    assert health is not None, "the machine offers cgroups, but this worker has no health check"
    return worker, health


async def test_memory_held_outside_the_sandbox_recycles_the_worker(sandbox: Sandbox) -> None:
    """A host process charged to the worker's cgroup: invisible to the supervisor."""
    assert (await sandbox.run("print(1)")).ok
    worker, health = _only_worker(sandbox)
    assert health.problem() == ""
    before = sandbox.stats.get("health_recycles", 0)  # type: ignore[attr-defined]
    hog = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nsys.stdin.readline()\n"
            f"block = bytearray({2 * MEMORY_SLACK_BYTES // MB} * 1024 * 1024)\n"
            "block[::4096] = b'\\x01' * len(block[::4096])\n"
            "print('held', flush=True)\ntime.sleep(120)",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for directory in {health.dirs.memory, health.dirs.pids} - {None}:
            (directory / "cgroup.procs").write_text(str(hog.pid))
        assert hog.stdin is not None and hog.stdout is not None
        hog.stdin.write("go\n")
        hog.stdin.flush()
        assert await asyncio.to_thread(hog.stdout.readline) == "held\n"
        assert health.problem() != ""
        result = await sandbox.run("print(2)")
        assert result.ok and result.stdout == "2\n", result
        # the release found it, reclaim could not free it: the worker is replaced
        for _ in range(200):
            if sandbox._slots[0].worker is not worker:  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.05)
        assert sandbox._slots[0].worker is not worker, worker.recycle_reason  # type: ignore[attr-defined]
        assert sandbox.stats["health_recycles"] == before + 1  # type: ignore[attr-defined]
        assert "MB in use" in worker.recycle_reason or "processes" in worker.recycle_reason
    finally:
        hog.kill()
        hog.wait()
        for directory in {health.dirs.memory, health.dirs.pids} - {None}:
            with contextlib.suppress(OSError):
                directory.rmdir()  # the retired worker's groups, busy until now
    nxt = await sandbox.run("print(3)")
    assert nxt.ok and nxt.stdout == "3\n", nxt


# --- issue #24: what a run could change about the supervisor itself
async def test_process_attributes_see_scheduling_and_limit_changes() -> None:
    """The host's reading of ``/proc/<pid>`` notices each attribute a run could change."""
    import os
    import resource

    from agentenvs.sandbox.pool.health import Baseline, CgroupDirs

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        health = WorkerHealth(proc.pid, CgroupDirs(None, None, 0))
        health.baseline = health.measure()
        assert isinstance(health.baseline, Baseline) and health.baseline.attributes
        assert health.problem() == ""
        changes = [
            ("nice", lambda: os.setpriority(os.PRIO_PROCESS, proc.pid, 19)),
            ("policy", lambda: os.sched_setscheduler(proc.pid, os.SCHED_IDLE, os.sched_param(0))),
            ("affinity", lambda: os.sched_setaffinity(proc.pid, {min(os.sched_getaffinity(0))})),
            ("Max open files", lambda: resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (8, 8))),
            ("Max file size", lambda: resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1, 1))),
        ]
        if len(os.sched_getaffinity(0)) == 1:
            changes = [c for c in changes if c[0] != "affinity"]  # nothing to narrow
        for name, change in changes:
            change()
            problem = health.problem()
            assert name in problem and "scheduling or limits changed" in problem, problem
            health.baseline = health.measure()  # the next change on its own
    finally:
        proc.kill()
        proc.wait()


async def test_supervisor_notices_its_own_attributes_changing() -> None:
    """The supervisor's own check (``processes.own_attributes``), as ``reset`` runs it."""
    code = (
        "import os, resource\n"
        "from agentenvs.sandbox.supervisor.processes import attributes_changed, own_attributes\n"
        "base = own_attributes()\n"
        "assert attributes_changed(base) == '', attributes_changed(base)\n"
        "os.nice(1)\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard - 1), hard - 1))\n"
        "print(attributes_changed(base))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "nice" in out.stdout and "RLIMIT_NOFILE" in out.stdout, out


async def test_a_supervisor_changed_from_outside_is_recycled(sandbox: Sandbox) -> None:
    """The supervisor reniced and put under ``SCHED_IDLE`` by a process the seccomp
    filter does not cover (the host itself, here; it has CAP_SYS_NICE, so it could undo
    it, but a run could not): the worker does not serve again; its replacement is intact."""
    import os

    assert (await sandbox.run("print(1)")).ok
    worker, health = _only_worker(sandbox)
    assert health.problem() == ""
    os.setpriority(os.PRIO_PROCESS, health.pid, 19)
    os.sched_setscheduler(health.pid, os.SCHED_IDLE, os.sched_param(0))
    assert "scheduling or limits changed" in health.problem()
    first = await sandbox.run("print(2)")
    # the run itself may still be answered by the changed worker (or found it condemned
    # and retried elsewhere); it is never reused after that
    assert first.ok and first.stdout == "2\n", first
    for _ in range(200):
        if sandbox._slots[0].worker is not worker:  # type: ignore[attr-defined]
            break
        await asyncio.sleep(0.05)
    assert sandbox._slots[0].worker is not worker, worker.recycle_reason  # type: ignore[attr-defined]
    nxt = await sandbox.run(
        "import os\nparent = os.getppid()\n"
        "print(os.getpriority(os.PRIO_PROCESS, parent) < 19, os.sched_getscheduler(parent))"
    )
    assert nxt.ok and nxt.stdout == f"True {os.SCHED_OTHER}\n", nxt
