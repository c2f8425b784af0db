"""One warm worker: a sandboxed supervisor process and the host's handle on it.

A worker serves one request at a time. If it stops answering (dead, out of protocol,
past its deadline) it is killed, processes, cgroups and descriptors included, and the
caller gets :class:`WorkerDead` telling whether the request had been delivered (only an
undelivered request is safe to retry elsewhere). The framing and the handshake are
:class:`~agentenvs.sandbox.pool.worker.FramedRequests`; this module is how a local worker is
launched (a subprocess, bubblewrap or direct), found on the host and killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
from itertools import count
from pathlib import Path

from agentenvs.sandbox.backends.local.cgroups import CgroupSupport, WorkerCgroup
from agentenvs.sandbox.backends.local.launch import (
    SANDBOX_SHM,
    SANDBOX_WORKDIR,
    LaunchPlan,
    SpawnSpec,
)
from agentenvs.sandbox.pool.errors import WorkerStartError
from agentenvs.sandbox.pool.mount_seal import DEVICE_NODES, MountPlan
from agentenvs.sandbox.pool.uids import UidAllocator
from agentenvs.sandbox.pool.worker import (
    IDLE_PROCESS_NAME,
    FramedRequests,
    children_of,
    process_name,
)

STDERR_TAIL_BYTES = 8192
SUPERVISOR_OOM_SCORE_ADJ = -999
"""The supervisor is the last choice of the OOM killer in its group; the code (1000) the first."""

_serials = count(1)


class Worker(FramedRequests):
    """A supervisor under bubblewrap (or run directly as a dedicated uid) in its cgroup."""

    def __init__(
        self,
        plan: LaunchPlan,
        *,
        cgroups: CgroupSupport | None,
        uids: UidAllocator | None,
        pids_max: int,
        memory_limit_bytes: int,
    ) -> None:
        super().__init__()
        self.plan = plan
        self.serial = next(_serials)
        self.name = f"agentenvs-{os.getpid()}-{self.serial}"
        self._cgroup_support = cgroups
        self._uids = uids
        self._pids_max = pids_max
        self._initial_memory = memory_limit_bytes
        self.uid: int | None = None
        self.cgroup: WorkerCgroup | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.supervisor_pid: int | None = None
        self._spec: SpawnSpec | None = None
        self._stderr = bytearray()
        self._stderr_task: asyncio.Task | None = None

    # ------------------------------------------------------------------ lifecycle
    async def _start(self, timeout: float) -> dict:
        if self._uids is not None:
            self.uid = self._uids.acquire()
        if self._cgroup_support is not None:
            self.cgroup = WorkerCgroup(self._cgroup_support, self.name)
        host_tmp = Path(tempfile.gettempdir()) / self.name
        spec = self._spec = self.plan.spawn_spec(self.uid, host_tmp)
        ids: dict = {}
        if self.uid is not None:
            _refuse_a_loop_that_cannot_switch_user()
            ids = {"user": self.uid, "group": self.uid, "extra_groups": []}
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *spec.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=spec.env,
                cwd=spec.cwd or "/",
                pass_fds=spec.pass_fds,
                start_new_session=True,
                limit=1 << 20,
                **ids,
            )
        except OSError as exc:
            raise WorkerStartError(f"cannot execute {spec.argv[0]}: {exc}") from exc
        finally:
            spec.close_fds()
        self._stderr_task = asyncio.ensure_future(self._collect_stderr())
        await self._handshake(spec.config, timeout)
        self.supervisor_pid = await self._find_supervisor_pid()
        if self.supervisor_pid is None:
            raise WorkerStartError("could not find the supervisor process of the worker")
        with contextlib.suppress(OSError):
            Path(f"/proc/{self.supervisor_pid}/oom_score_adj").write_text(
                str(SUPERVISOR_OOM_SCORE_ADJ)
            )
        if self.cgroup is not None:
            self.cgroup.add(self.supervisor_pid)
            self.cgroup.set_pids_max(self._pids_max)
            self.cgroup.set_memory_limit(self._initial_memory)
        return self.hello

    def _mount_plan(self) -> tuple[int, MountPlan] | None:
        """bubblewrap binds the host's device nodes writable and mounts relatime tmpfs and
        a /proc that shows every process: tightened before any code runs (issue #40)."""
        if self.plan.mode != "bwrap" or self.supervisor_pid is None:
            return None
        plan = MountPlan(
            read_only=(*DEVICE_NODES, "/dev/pts"),
            noatime=(SANDBOX_WORKDIR, SANDBOX_SHM),
            hide_processes=True,
        )
        return self.supervisor_pid, plan

    async def _find_supervisor_pid(self) -> int | None:
        assert self.proc is not None
        if self.plan.mode == "direct":
            return self.proc.pid
        # bubblewrap's only child is the supervisor (pid 1 inside, thanks to --as-pid-1).
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            children = children_of(self.proc.pid)
            if len(children) == 1:
                return children[0]
            await asyncio.sleep(0.005)
        return None

    async def _collect_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        with contextlib.suppress(Exception):
            while chunk := await self.proc.stderr.read(4096):
                self._stderr += chunk
                del self._stderr[:-STDERR_TAIL_BYTES]

    def stderr_tail(self) -> str:
        return bytes(self._stderr).decode(errors="replace").strip()[-2000:]

    @property
    def alive(self) -> bool:
        return not self._dead and self.proc is not None and self.proc.returncode is None

    def host_pids(self) -> set[int]:
        """The worker's own processes on the host (bubblewrap and the supervisor)."""
        pids = set()
        if self.proc is not None and self.proc.returncode is None:
            pids.add(self.proc.pid)
            if self.plan.mode == "bwrap" and not self.supervisor_pid:  # still starting
                pids.update(children_of(self.proc.pid))
        if self.supervisor_pid and Path(f"/proc/{self.supervisor_pid}").exists():
            pids.add(self.supervisor_pid)
            pids |= self._idle_children()
        return pids

    def _idle_children(self) -> set[int]:
        """The supervisor's pre-forked child, waiting for the next request (not a leftover)."""
        if not self.supervisor_pid:
            return set()
        children = children_of(self.supervisor_pid)
        return {pid for pid in children if process_name(pid) == IDLE_PROCESS_NAME}

    def kill_now(self, *, everything: bool = True) -> None:
        """Synchronous part of :meth:`kill` (safe in a cancelled task): SIGKILL the worker.

        The supervisor is pid 1 of the sandbox's pid namespace: when it dies the kernel
        kills every process in it, and bubblewrap (its parent) reaps it and exits. With
        ``everything`` bubblewrap is killed at once too (--die-with-parent covers us).
        """
        self._dead = True
        targets = [self.supervisor_pid]
        if everything or not self.supervisor_pid:
            targets.append(self.proc.pid if self.proc else None)
        for pid in targets:
            if pid:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if self.plan.mode == "direct" and self.uid is not None:
            _kill_uid(self.uid)

    async def kill(self) -> None:
        self.kill_now(everything=False)
        if self.proc is not None:
            with contextlib.suppress(Exception):
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except (TimeoutError, ProcessLookupError):
                self.kill_now()
                with contextlib.suppress(asyncio.TimeoutError, ProcessLookupError):
                    await asyncio.wait_for(self.proc.wait(), 10)
            if self._stderr_task is not None:
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                    await asyncio.wait_for(self._stderr_task, 2)
            transport = getattr(self.proc, "_transport", None)
            if transport is not None:
                transport.close()  # closes the pipes now rather than at garbage collection
        if self.branches is not None:
            self.branches.remove_all()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self._spec is not None and self._spec.host_workdir is not None:
            shutil.rmtree(self._spec.host_workdir, ignore_errors=True)
        if self._uids is not None and self.uid is not None:
            self._uids.release(self.uid)
            self.uid = None

    # ------------------------------------------------------------------ requests
    def _reader(self) -> asyncio.StreamReader:
        assert self.proc is not None and self.proc.stdout is not None
        return self.proc.stdout

    async def _send(self, frame: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(frame)
        await self.proc.stdin.drain()

    async def _died(self) -> None:
        await self.kill()


def _kill_uid(uid: int) -> None:
    """Direct launcher only: kill every process of the worker's dedicated uid."""
    for _ in range(50):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                status = Path(f"/proc/{name}/status").read_text()
            except OSError:
                continue
            if "\nState:\tZ" in status:
                continue
            for line in status.splitlines():
                if line.startswith("Uid:") and int(line.split()[1]) == uid:
                    found = True
                    with contextlib.suppress(OSError):
                        os.kill(int(name), signal.SIGKILL)
        if not found:
            return
        time.sleep(0.01)


def _refuse_a_loop_that_cannot_switch_user() -> None:
    """The worker runs as an unprivileged uid, which asyncio's own loop sets for the child
    (``user=``/``group=``). uvloop's process spawner does not accept them, and running the
    worker as the caller's user instead would drop a layer silently: refuse, saying why.
    ``uvicorn.run(..., loop="asyncio")`` is how a server hosting the sandbox picks the loop."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, asyncio.BaseEventLoop):
        raise WorkerStartError(
            f"the local sandbox needs asyncio's own event loop to start its workers as an "
            f"unprivileged user; this process runs {type(loop).__module__}."
            f"{type(loop).__name__} (with uvicorn: loop='asyncio')"
        )
