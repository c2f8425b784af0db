"""The ``local`` backend: a warm pool of bubblewrap-sandboxed, pre-imported interpreters.

``run()`` borrows an idle worker (at most ``pool_size`` run at once), asks it to fork a
fresh child for the code and returns what happened. A worker that dies is replaced on
its next use; a request that never reached a worker is retried once on a fresh one.
``session()`` takes a dedicated worker whose fork-chain keeps the notebook namespace
(see ``supervisor.py``); if that worker or its state holder is lost, the session replays
its earlier successful cells on a fresh one, and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import weakref
from dataclasses import dataclass

from agentenvs.sandbox.base import (
    Capabilities,
    ExecResult,
    ExecStatus,
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    Session,
)
from agentenvs.sandbox.capabilities import enforce_minimum, run_sync, unknown_layers
from agentenvs.sandbox.local.assess import assess
from agentenvs.sandbox.local.cgroups import CgroupSupport, remove_stale_groups
from agentenvs.sandbox.local.launch import DEFAULT_WARMUP, LaunchPlan, UidAllocator
from agentenvs.sandbox.local.seccomp import build_seccomp_program
from agentenvs.sandbox.local.worker import Worker, WorkerDead, WorkerStartError

MB = 1024 * 1024
CGROUP_HEADROOM_BYTES = 128 * MB
"""Above the per-execution memory limit: room for the supervisor's own copy-on-write pages."""
REQUEST_GRACE_SECONDS = 10.0
"""The supervisor enforces the timeout; the host gives up on it only this much later."""
SUPERVISOR_PROCESSES = 1
SESSION_PROCESSES = 2  # supervisor + state holder


@dataclass
class _Slot:
    worker: Worker | None = None


class LocalSandbox(Sandbox):
    """Local, daemon-less sandbox (see the package docstring for the layers).

    Backend-specific knobs are constructor arguments; the shared limits live in
    :class:`SandboxConfig`.
    """

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        python: str = "/usr/bin/python3",
        preload: tuple[str, ...] = ("numpy", "sympy"),
        warmup: str | None = DEFAULT_WARMUP,
        use_bwrap: bool | None = None,
        use_cgroups: bool = True,
        use_seccomp: bool = True,
        use_landlock: bool = True,
        uid_base: int = 1_900_000,
        session_spares: int = 1,
        start_timeout: float = 60.0,
    ) -> None:
        super().__init__(config or SandboxConfig())
        self.python = python
        self.preload = list(preload)
        self.warmup = warmup if preload else None
        self.use_bwrap = use_bwrap
        self.use_cgroups = use_cgroups
        self.use_seccomp = use_seccomp
        self.use_landlock = use_landlock
        self.session_spares = session_spares
        self.start_timeout = start_timeout
        self._uids = UidAllocator.shared(uid_base) if os.geteuid() == 0 else None
        self._plan: LaunchPlan | None = None
        self._cgroups: CgroupSupport | None = None
        self._cgroup_notes: dict[str, str] = {}
        self._seccomp_reason = ""
        self._caps: Capabilities | None = None
        self._slots: list[_Slot] = []
        self._idle: asyncio.Queue[_Slot] | None = None
        self._spares: list[Worker] = []
        self._starting: set[Worker] = set()
        self._sessions: weakref.WeakSet[LocalSession] = weakref.WeakSet()
        self._tasks: set[asyncio.Task] = set()
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._closed = False
        self.stats = {"runs": 0, "busy": 0, "max_busy": 0, "retries": 0, "spawned": 0}

    # ------------------------------------------------------------------ setup
    def _check_python(self) -> None:
        if not os.access(self.python, os.X_OK):
            raise SandboxUnavailable(
                f"the sandboxed interpreter {self.python} is missing: install Debian's python3 "
                "(with python3-numpy and python3-sympy) or pass python=..."
            )

    def _prepare(self) -> LaunchPlan:
        if self._plan is not None:
            return self._plan
        self._check_python()
        unknown = unknown_layers(self.config.min_isolation)
        if unknown:
            enforce_minimum(Capabilities(backend="local"), self.config.min_isolation)
        seccomp = build_seccomp_program() if self.use_seccomp else None
        self._seccomp_reason = (
            seccomp.reason if seccomp else "disabled by configuration (use_seccomp=False)"
        )
        if self.use_cgroups and os.geteuid() == 0:
            self._cgroups = CgroupSupport.detect()
            self._cgroup_notes = dict(self._cgroups.notes)
            remove_stale_groups(self._cgroups)
            if self._cgroups.memory_parent is None and self._cgroups.pids_parent is None:
                self._cgroups = None
        else:
            reason = (
                "disabled by configuration (use_cgroups=False)"
                if not self.use_cgroups
                else ("creating cgroups needs root (or a delegated cgroup)")
            )
            self._cgroup_notes = {"memory": reason, "pids": reason}
        self._plan = LaunchPlan.detect(
            python=self.python,
            workdir_bytes=self.config.workdir_size_mb * MB,
            preload=self.preload,
            warmup=self.warmup,
            seccomp_bpf=seccomp.bpf if seccomp else None,
            landlock=self.use_landlock,
            use_bwrap=self.use_bwrap,
        )
        return self._plan

    def _limits(
        self,
        *,
        timeout: float | None = None,
        memory_limit_mb: int | None = None,
        session: bool = False,
    ) -> dict:
        cfg = self.config
        timeout = float(timeout or cfg.timeout)
        cpu = cfg.cpu_seconds if cfg.cpu_seconds is not None else timeout + 1
        memory_mb = memory_limit_mb or cfg.memory_limit_mb
        overhead = SESSION_PROCESSES if session else SUPERVISOR_PROCESSES
        return {
            "timeout": timeout,
            "cpu_seconds": math.ceil(cpu),
            "memory_bytes": memory_mb * MB,
            "max_processes": cfg.max_processes + overhead,
            "max_output_bytes": cfg.max_output_bytes,
            "max_file_bytes": cfg.max_file_bytes,
            "max_open_files": 512,
        }

    def _new_worker_object(self) -> Worker:
        assert self._plan is not None
        return Worker(
            self._plan,
            cgroups=self._cgroups,
            uids=self._uids,
            pids_max=self.config.max_processes + SESSION_PROCESSES + 2,
            memory_limit_bytes=self.config.memory_limit_mb * MB + CGROUP_HEADROOM_BYTES,
        )

    async def _spawn(self) -> Worker:
        worker = self._new_worker_object()
        self._starting.add(worker)
        try:
            await worker.start(self.start_timeout)
        finally:
            self._starting.discard(worker)
        self.stats["spawned"] += 1
        return worker

    async def start(self) -> None:
        if self._closed:
            raise SandboxUnavailable("this sandbox has been closed")
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            plan = self._prepare()
            first = await self._first_worker(plan)
            try:
                probe = await first.request({"op": "probe", "limits": self._limits()}, 60)
                self._caps = assess(
                    first,
                    probe,
                    plan_notes=plan.notes,
                    cgroup_notes=self._cgroup_notes,
                    seccomp_reason=self._seccomp_reason,
                    limits=self._limits(),
                )
                enforce_minimum(self._caps, self.config.min_isolation)
            except BaseException:
                await first.kill()
                raise
            others = await asyncio.gather(
                *(self._spawn() for _ in range(self.config.pool_size - 1)), return_exceptions=True
            )
            self._slots = [_Slot(first)] + [
                _Slot(w if isinstance(w, Worker) else None) for w in others
            ]
            self._idle = asyncio.Queue()
            for slot in self._slots:
                self._idle.put_nowait(slot)
            self._started = True

    async def _first_worker(self, plan: LaunchPlan) -> Worker:
        try:
            return await self._spawn()
        except WorkerStartError as exc:
            if plan.mode != "bwrap" or self.use_bwrap:
                raise SandboxUnavailable(f"the local sandbox cannot start a worker: {exc}") from exc
            # bubblewrap is installed but cannot run here (e.g. user namespaces disabled).
            plan.fallback_to_direct(f"bubblewrap failed on this machine: {exc}")
            try:
                return await self._spawn()
            except WorkerStartError as exc2:
                raise SandboxUnavailable(
                    f"the local sandbox cannot start a worker: {exc2}"
                ) from exc2

    def capabilities(self) -> Capabilities:
        if self._caps is None:
            return run_sync(self._measure_capabilities())
        return self._caps

    async def _measure_capabilities(self) -> Capabilities:
        probe_sandbox = LocalSandbox(
            self.config.model_copy(update={"min_isolation": [], "pool_size": 1}),
            python=self.python,
            preload=tuple(self.preload),
            warmup=self.warmup,
            use_bwrap=self.use_bwrap,
            use_cgroups=self.use_cgroups,
            use_seccomp=self.use_seccomp,
            use_landlock=self.use_landlock,
        )
        async with probe_sandbox:
            assert probe_sandbox._caps is not None
            return probe_sandbox._caps

    # ------------------------------------------------------------------ runs
    async def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        memory_limit_mb: int | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        if self._closed:
            return ExecResult(ExecStatus.SANDBOX_ERROR, message="the sandbox is closed")
        await self.start()
        assert self._idle is not None
        slot = await self._idle.get()
        self.stats["busy"] += 1
        self.stats["max_busy"] = max(self.stats["max_busy"], self.stats["busy"])
        try:
            return await self._run_in_slot(slot, code, timeout, memory_limit_mb, stdin)
        finally:
            self.stats["busy"] -= 1
            self.stats["runs"] += 1
            self._idle.put_nowait(slot)

    async def _ready_worker(self, slot: _Slot) -> Worker:
        if self._closed:
            raise WorkerStartError("the sandbox is closed")
        worker = slot.worker
        if worker is not None and worker.alive and not worker.recycle:
            return worker
        slot.worker = None
        if worker is not None:
            await worker.kill()
        slot.worker = await self._spawn()
        return slot.worker

    async def _run_in_slot(
        self,
        slot: _Slot,
        code: str,
        timeout: float | None,
        memory_limit_mb: int | None,
        stdin: str | None,
    ) -> ExecResult:
        limits = self._limits(timeout=timeout, memory_limit_mb=memory_limit_mb)
        request = {
            "op": "run",
            "code": code,
            "limits": limits,
            "stdin": stdin,
            "show_last": self.config.show_last_expression,
        }
        for attempt in range(2):
            try:
                worker = await self._ready_worker(slot)
            except WorkerStartError as exc:
                return ExecResult(
                    ExecStatus.SANDBOX_ERROR, message=f"could not start a sandbox worker: {exc}"
                )
            if worker.cgroup is not None:
                worker.cgroup.set_memory_limit(limits["memory_bytes"] + CGROUP_HEADROOM_BYTES)
            oom_before = worker.cgroup.oom_kills() if worker.cgroup else 0
            try:
                response = await worker.request(request, limits["timeout"] + REQUEST_GRACE_SECONDS)
            except WorkerDead as exc:
                oom = worker.cgroup is not None and worker.cgroup.oom_kills() > oom_before
                await worker.kill()
                slot.worker = None
                if not exc.delivered and attempt == 0:
                    self.stats["retries"] += 1
                    continue
                if oom:
                    return ExecResult(
                        ExecStatus.MEMORY,
                        message="the sandbox worker was killed by the out-of-memory killer",
                    )
                return ExecResult(ExecStatus.SANDBOX_ERROR, message=str(exc))
            if response.get("not_run") and attempt == 0:
                # the worker could not clean up after its previous execution: use a fresh one
                await worker.kill()
                slot.worker = None
                self.stats["retries"] += 1
                continue
            oom = worker.cgroup is not None and worker.cgroup.oom_kills() > oom_before
            return to_exec_result(response, oom=oom, memory_mb=limits["memory_bytes"] // MB)
        return ExecResult(
            ExecStatus.SANDBOX_ERROR, message="no sandbox worker could take the request"
        )

    # ------------------------------------------------------------------ sessions
    def session(self) -> LocalSession:
        session = LocalSession(self)
        self._sessions.add(session)
        return session

    async def _take_session_worker(self) -> Worker:
        await self.start()
        worker = None
        while self._spares and worker is None:
            candidate = self._spares.pop()
            if candidate.alive:
                worker = candidate
            else:
                await candidate.kill()
        if worker is None:
            worker = await self._spawn()
        self._refill_spares()
        return worker

    def _refill_spares(self) -> None:
        if self._closed or len(self._spares) >= self.session_spares:
            return

        async def refill() -> None:
            with contextlib.suppress(WorkerStartError):
                worker = await self._spawn()
                if self._closed:
                    await worker.kill()
                else:
                    self._spares.append(worker)

        task = asyncio.ensure_future(refill())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ teardown
    def host_pids(self) -> set[int]:
        """Host pids of every live worker process (bubblewrap + supervisor), for leak checks."""
        pids: set[int] = set()
        for worker in self._all_workers():
            pids |= worker.host_pids()
        return pids

    def sandbox_uids(self) -> set[int]:
        return {w.uid for w in self._all_workers() if w.uid is not None}

    def _all_workers(self) -> list[Worker]:
        workers = [slot.worker for slot in self._slots if slot.worker is not None]
        workers += self._spares
        workers += list(self._starting)
        workers += [s._worker for s in list(self._sessions) if s._worker is not None]
        return workers

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for session in list(self._sessions):
            await session.close()
        workers = [slot.worker for slot in self._slots if slot.worker is not None] + self._spares
        for slot in self._slots:
            slot.worker = None
        self._spares = []
        await asyncio.gather(*(w.kill() for w in workers), return_exceptions=True)


def to_exec_result(
    response: dict, *, oom: bool = False, memory_mb: int | None = None
) -> ExecResult:
    try:
        status = ExecStatus(response.get("status", "sandbox_error"))
    except ValueError:
        status = ExecStatus.SANDBOX_ERROR
    message = str(response.get("message", ""))
    if oom and status in (ExecStatus.OK, ExecStatus.ERROR):
        status = ExecStatus.MEMORY
        message = f"a process was killed by the out-of-memory killer (limit {memory_mb} MB)" + (
            f"; {message}" if message else ""
        )
    return ExecResult(
        status=status,
        stdout=str(response.get("stdout", "")),
        stderr=str(response.get("stderr", "")),
        return_code=response.get("return_code"),
        duration=float(response.get("duration", 0.0)),
        stdout_truncated=bool(response.get("stdout_truncated", False)),
        stderr_truncated=bool(response.get("stderr_truncated", False)),
        message=message,
    )


class LocalSession(Session):
    """Cells sharing one namespace, on a dedicated worker (see ``supervisor.Holder``)."""

    def __init__(self, sandbox: LocalSandbox) -> None:
        self._sandbox = sandbox
        self._worker: Worker | None = None
        self._cells: list[str] = []
        """Cells whose state was kept, in order: replayed if the state is ever lost."""
        self._lock = asyncio.Lock()
        self._closed = False
        self._needs_replay = False
        self.replays = 0

    async def __aenter__(self) -> LocalSession:
        async with self._lock:
            await self._ensure_worker()
        return self

    async def _ensure_worker(self) -> Worker:
        if self._worker is not None and self._worker.alive and not self._worker.recycle:
            return self._worker
        if self._worker is not None:
            await self._worker.kill()
            self._worker = None
            self._needs_replay = bool(self._cells)
        worker = await self._sandbox._take_session_worker()
        self._worker = worker
        limits = self._sandbox._limits(session=True)
        if worker.cgroup is not None:
            worker.cgroup.set_memory_limit(limits["memory_bytes"] + CGROUP_HEADROOM_BYTES)
        await worker.request({"op": "session_open", "limits": limits}, 30)
        return worker

    async def run(self, code: str, *, timeout: float | None = None) -> ExecResult:
        if self._closed:
            return ExecResult(ExecStatus.SANDBOX_ERROR, message="the session is closed")
        async with self._lock:
            notes: list[str] = []
            for attempt in range(2):
                try:
                    worker = await self._ensure_worker()
                except (WorkerStartError, WorkerDead, SandboxUnavailable) as exc:
                    return ExecResult(
                        ExecStatus.SANDBOX_ERROR, message=f"could not start the session: {exc}"
                    )
                if self._needs_replay:
                    notes.append(await self._replay(worker))
                result, response = await self._cell(worker, code, timeout)
                if response.get("not_run") and attempt == 0:
                    # The state was gone before the cell started: restore it, then run the cell.
                    self._needs_replay = bool(self._cells)
                    continue
                break
            if response.get("adopted"):
                self._cells.append(code)
            if response.get("state_lost") and not response.get("not_run"):
                self._needs_replay = bool(self._cells)
                if self._worker is not None and self._worker.alive:
                    notes.append(await self._replay(self._worker))
            if notes:
                result.message = "; ".join(n for n in [result.message, *notes] if n)
            return result

    async def _cell(
        self, worker: Worker, code: str, timeout: float | None
    ) -> tuple[ExecResult, dict]:
        cfg = self._sandbox.config
        timeout = float(timeout or cfg.timeout)
        oom_before = worker.cgroup.oom_kills() if worker.cgroup else 0
        request = {
            "op": "cell",
            "code": code,
            "timeout": timeout,
            "show_last": cfg.show_last_expression,
        }
        try:
            response = await worker.request(request, timeout + REQUEST_GRACE_SECONDS)
        except WorkerDead as exc:
            oom = worker.cgroup is not None and worker.cgroup.oom_kills() > oom_before
            await worker.kill()
            self._needs_replay = bool(self._cells)
            status = ExecStatus.MEMORY if oom else ExecStatus.SANDBOX_ERROR
            message = f"{exc}; the session's earlier cells will be replayed on a fresh worker"
            return ExecResult(status, message=message), {"not_run": not exc.delivered}
        oom = worker.cgroup is not None and worker.cgroup.oom_kills() > oom_before
        return to_exec_result(response, oom=oom, memory_mb=cfg.memory_limit_mb), response

    async def _replay(self, worker: Worker) -> str:
        """Rebuild lost state by re-running the cells that had been kept, quietly."""
        self._needs_replay = False
        self.replays += 1
        cells, self._cells = self._cells, []
        failed = 0
        for code in cells:
            _, response = await self._cell(worker, code, None)
            if response.get("adopted"):
                self._cells.append(code)
            else:
                failed += 1
            if not self._worker or not self._worker.alive:
                break
        note = f"the session's state was rebuilt by replaying {len(cells)} earlier cell(s)"
        return note + (f" ({failed} did not complete)" if failed else "")

    async def close(self) -> None:
        self._closed = True
        if self._worker is not None:
            worker, self._worker = self._worker, None
            await worker.kill()
