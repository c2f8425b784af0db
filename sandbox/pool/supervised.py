"""What the ``local`` and ``docker`` backends share: a pool of supervised workers.

Both backends run the same in-sandbox supervisor (``sandbox/supervisor/``) over the same
frames (``pool/protocol.py``); they differ only in how a worker is launched and watched
(a bubblewrap process in a cgroup, or a container over its attach stream). This module
holds everything else once: the warm pool (``run()`` borrows an idle worker, replaces a
dead one, retries a request that never reached a worker), the session spares, and
turning answers into ExecResults. How slots are handed out (standby workers, settling
after a failed run, the after-run health check) is ``care.py``; the notebook
session with its replay of kept cells is ``session.py``.

A backend subclasses :class:`SupervisedSandbox` and :class:`SupervisedSession` and fills
in the hooks: ``_launch_first``/``_spawn`` (start workers), ``_assess_worker`` and
``_probe_sandbox`` (capabilities), ``_oom_count``/``_dead_result`` and the session's
``_lost_worker_result`` (how an OOM kill or a dead worker is reported) and, where it
applies, ``_apply_memory_limit`` and ``_retire``. Worker-level framing (one request at a
time, answered in turn, and the start-up handshake) is
:class:`agentenvs.sandbox.pool.worker.FramedRequests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Generic

from agentenvs.sandbox.base import (
    Capabilities,
    ExecResult,
    ExecStatus,
    Sandbox,
    SandboxUnavailable,
)
from agentenvs.sandbox.capabilities import enforce_minimum, run_sync
from agentenvs.sandbox.pool.branch_memory import BranchMemory, host_pid_of
from agentenvs.sandbox.pool.care import SETTLE_ON_CLOSE_SECONDS, PoolCare, Slot, W
from agentenvs.sandbox.pool.errors import WorkerDead, WorkerStartError
from agentenvs.sandbox.pool.files import decode_files, encode_files, request_problem

if TYPE_CHECKING:
    from agentenvs.sandbox.pool.session import SupervisedSession

MB = 1024 * 1024
REQUEST_GRACE_SECONDS = 10.0
"""The supervisor enforces the timeout; the host gives up on it only this much later."""
SUPERVISOR_PROCESSES = 1
SESSION_PROCESSES = 2  # supervisor + state holder
SESSION_FORK_LIMIT = 16
"""Live sessions one session worker holds (the opened one and its in-worker forks); each
fork's state holder is one more process, so the worker's process limits count them."""


def to_exec_result(
    response: dict, *, oom: bool = False, memory_mb: int | None = None
) -> ExecResult:
    """The supervisor's answer as an ExecResult (``oom``: the host saw an OOM kill)."""
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
        files=decode_files(response),
    )


def oom_between(before: int | None, after: int | None) -> bool:
    """Did an OOM-kill counter grow (``None``: the backend cannot see it)?"""
    return before is not None and after is not None and after > before


class SupervisedSandbox(Sandbox, PoolCare[W], Generic[W]):
    """A warm pool of workers running the shared supervisor; backends fill in the hooks."""

    worker_noun = "worker"
    """How messages name one worker ("worker", "container")."""

    def _init_pool(self, session_spares: int, start_timeout: float) -> None:
        self.session_spares = session_spares
        self.start_timeout = start_timeout
        self._caps: Capabilities | None = None
        self._slots: list[Slot[W]] = []
        self._idle: asyncio.Queue[Slot[W]] | None = None
        self._spares: list[W] = []
        self._sessions: weakref.WeakSet[SupervisedSession[W]] = weakref.WeakSet()
        self._tasks: set[asyncio.Task] = set()
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._closed = False
        self._standby: list[W] = []
        """Warm workers kept aside (``SandboxConfig.spare_workers``), see ``_acquire_slot``."""
        self._standby_wanted = 0
        self._settling: set[asyncio.Task] = set()
        """Tasks waiting for a worker's ping (``_ping``): let finish, not cancelled, on close."""
        self._lent = 0
        self._busy_since: dict[int, float] = {}
        """id(slot) -> when its current run started (for lending a standby worker)."""
        self.stats: dict[str, int] = {
            "runs": 0,
            "busy": 0,
            "max_busy": 0,
            "retries": 0,
            "health_recycles": 0,
            "standby_swaps": 0,
            "standby_lends": 0,
        }

    # ------------------------------------------------------------------ hooks
    async def _launch_first(self) -> W:
        """Prepare the backend and start the first worker (raise SandboxUnavailable)."""
        raise NotImplementedError

    async def _spawn(self) -> W:
        """Start one more worker (raise WorkerStartError)."""
        raise NotImplementedError

    async def _assess_worker(self, worker: W, probe: dict) -> Capabilities:
        raise NotImplementedError

    def _probe_sandbox(self) -> SupervisedSandbox[W]:
        """A one-worker copy with no isolation minimum, to measure the capabilities."""
        raise NotImplementedError

    def _oom_count(self, worker: W) -> int | None:
        """The worker's OOM-kill counter now, or ``None`` if it cannot be read."""
        return None

    async def _dead_result(
        self, worker: W, exc: WorkerDead, memory_mb: int, oom_before: int | None
    ) -> ExecResult:
        """Retire a worker that died during a run and say what happened."""
        raise NotImplementedError

    def _branch_memory(self, worker: W) -> BranchMemory | str | None:
        """Where the worker's sessions get a memory group each (``pool/branch_memory``):
        the groups, why they cannot be made (a shared group that cannot be split: forks
        are refused), or ``None`` when the worker has no memory group to share."""
        return None

    def _supervisor_host_pid(self, worker: W) -> int | None:
        """The worker's supervisor as the host sees it (``None``: not on this machine)."""
        return None

    def _separate_memory(
        self, worker: W, holders: dict[int, object], *, forked: bool = False
    ) -> str:
        """Give each session (id -> its holder's pid in the worker) a memory group of its
        own; why that is impossible, or ''. Issue #40, class 5. Right after a fork
        (``forked``) both holders must be found; after a cell, a holder that is already
        gone (its cell killed it) has nothing to place: the next request replaces it."""
        branches = worker.branches
        if branches is None:
            made = self._branch_memory(worker)
            if made is None:
                return ""
            if isinstance(made, str):
                return made
            worker.branches = branches = made
        supervisor = self._supervisor_host_pid(worker)
        for session, inner in holders.items():
            if not isinstance(inner, int) or not branches.needs_placing(session, inner):
                continue
            host = host_pid_of(supervisor, inner) if supervisor else None
            if host is None:
                if forked:
                    return f"the state holder of session {session} is not visible on the host"
                continue
            problem = branches.place(session, inner, host)
            if problem:
                return problem
        return ""

    def _apply_memory_limit(self, worker: W, memory_bytes: int) -> None:
        """Raise or lower the worker's outer memory limit before a request (if it has one)."""

    async def _retire(self, worker: W) -> None:
        await worker.kill()

    # ------------------------------------------------------------------ setup
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
        overhead = SESSION_PROCESSES + SESSION_FORK_LIMIT if session else SUPERVISOR_PROCESSES
        return {
            "timeout": timeout,
            "cpu_seconds": math.ceil(cpu),
            "memory_bytes": (memory_limit_mb or cfg.memory_limit_mb) * MB,
            "max_processes": cfg.max_processes + overhead,
            "max_output_bytes": cfg.max_output_bytes,
            "max_file_bytes": cfg.max_file_bytes,
            "max_open_files": 512,
        }

    async def start(self) -> None:
        if self._closed:
            raise SandboxUnavailable("this sandbox has been closed")
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            first = await self._launch_first()
            try:
                probe = await first.request({"op": "probe", "limits": self._limits()}, 60)
                self._caps = await self._assess_worker(first, probe)
                enforce_minimum(self._caps, self.config.min_isolation)
            except BaseException:
                await self._retire(first)
                raise
            await self._fill_pool(first)
            self._started = True

    async def _fill_pool(self, first: W) -> None:
        others = await asyncio.gather(
            *(self._spawn() for _ in range(self.config.pool_size - 1)), return_exceptions=True
        )
        self._slots = [Slot(first)] + [
            Slot(None if isinstance(w, BaseException) else w) for w in others
        ]
        self._idle = asyncio.Queue()
        for slot in self._slots:
            self._idle.put_nowait(slot)
        self._standby_wanted = self.config.spare_workers
        self._refill_standby()

    def capabilities(self) -> Capabilities:
        if self._caps is None:
            return run_sync(self._measure_capabilities())
        return self._caps

    async def _measure_capabilities(self) -> Capabilities:
        probe_sandbox = self._probe_sandbox()
        async with probe_sandbox:
            assert probe_sandbox._caps is not None
            return probe_sandbox._caps

    # ------------------------------------------------------------------ runs
    def _run_request(
        self,
        code: str,
        timeout: float | None,
        memory_limit_mb: int | None,
        stdin: str | None,
        *,
        files: Mapping[str, bytes] | None = None,
        fetch_files: Sequence[str] = (),
        language: str = "python",
    ) -> tuple[dict, dict]:
        limits = self._limits(timeout=timeout, memory_limit_mb=memory_limit_mb)
        request = {
            "op": "run",
            "code": code,
            "limits": limits,
            "stdin": stdin,
            "show_last": self.config.show_last_expression,
            "language": language,
        }
        if files:
            request["files"] = encode_files(files)
        if fetch_files:
            request["fetch_files"] = list(fetch_files)
        return request, limits

    async def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        memory_limit_mb: int | None = None,
        stdin: str | None = None,
        files: Mapping[str, bytes] | None = None,
        fetch_files: Sequence[str] = (),
        language: str = "python",
    ) -> ExecResult:
        """One execution on a pooled worker (both backends: one piece of code)."""
        if (refusal := self._refuse_arguments(files, fetch_files, language)) is not None:
            return refusal
        if (refusal := await self._refuse_or_start(closed=self._closed)) is not None:
            return refusal
        request, limits = self._run_request(
            code,
            timeout,
            memory_limit_mb,
            stdin,
            files=files,
            fetch_files=fetch_files,
            language=language,
        )
        try:
            return await self._dispatch(request, limits)
        finally:
            self.stats["runs"] += 1

    async def _dispatch(self, request: dict, limits: dict) -> ExecResult:
        """Borrow a slot, run, give it back (a backend may route differently)."""
        slot = await self._acquire_slot()
        self.stats["busy"] += 1
        self.stats["max_busy"] = max(self.stats["max_busy"], self.stats["busy"])
        self._busy_since[id(slot)] = asyncio.get_running_loop().time()
        result: ExecResult | None = None
        try:
            result = await self._run_in_slot(slot, request, limits)
            return result
        finally:
            self.stats["busy"] -= 1
            self._busy_since.pop(id(slot), None)
            self._release_slot(slot, settle=result is None or not result.ok)

    def _background(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _refuse_arguments(
        files: Mapping[str, bytes] | None, fetch_files: Sequence[str], language: str
    ) -> ExecResult | None:
        """A malformed ``files``/``fetch_files``/``language`` as a result, not an exception."""
        problem = request_problem(files, fetch_files, language)
        return ExecResult(ExecStatus.SANDBOX_ERROR, message=problem) if problem else None

    async def _ready_worker(self, slot: Slot[W]) -> W:
        if self._closed:
            raise WorkerStartError("the sandbox is closed")
        worker = slot.worker
        if worker is not None and worker.alive and not worker.recycle:
            return worker
        slot.worker = None
        if worker is not None:
            await self._retire(worker)
        slot.worker = await self._spawn()
        return slot.worker

    async def _execute(self, worker: W, request: dict, limits: dict) -> ExecResult:
        """One request on one worker; raises WorkerDead (the caller retires the worker)."""
        before = self._oom_count(worker)
        response = await worker.request(request, limits["timeout"] + REQUEST_GRACE_SECONDS)
        oom = oom_between(before, self._oom_count(worker))
        return to_exec_result(response, oom=oom, memory_mb=limits["memory_bytes"] // MB)

    async def _run_in_slot(self, slot: Slot[W], request: dict, limits: dict) -> ExecResult:
        noun = self.worker_noun
        for attempt in range(2):
            try:
                worker = await self._ready_worker(slot)
            except WorkerStartError as exc:
                return ExecResult(
                    ExecStatus.SANDBOX_ERROR, message=f"could not start a sandbox {noun}: {exc}"
                )
            self._apply_memory_limit(worker, limits["memory_bytes"])
            before = self._oom_count(worker)
            try:
                response = await worker.request(request, limits["timeout"] + REQUEST_GRACE_SECONDS)
            except WorkerDead as exc:
                slot.worker = None
                if not exc.delivered and attempt == 0:
                    await self._retire(worker)
                    self.stats["retries"] += 1
                    continue
                return await self._dead_result(worker, exc, limits["memory_bytes"] // MB, before)
            if response.get("not_run") and attempt == 0:
                # the worker could not clean up after its previous execution: use a fresh
                # one, a standby worker if one is warm (no wait for a start-up)
                self.stats["retries"] += 1
                old = self._swap_in_standby(slot)
                if old is not None:
                    self._background(self._retire(old))
                    continue
                await self._retire(worker)
                slot.worker = None
                continue
            oom = oom_between(before, self._oom_count(worker))
            return to_exec_result(response, oom=oom, memory_mb=limits["memory_bytes"] // MB)
        return ExecResult(
            ExecStatus.SANDBOX_ERROR, message=f"no sandbox {noun} could take the request"
        )

    # ------------------------------------------------------------------ sessions
    async def _take_session_worker(self) -> W:
        await self.start()
        worker = None
        while self._spares and worker is None:
            candidate = self._spares.pop()
            if candidate.alive:
                worker = candidate
            else:
                await self._retire(candidate)
        if worker is None:
            worker = await self._spawn()
        self._refill_spares()
        return worker

    def _refill_spares(self) -> None:
        if self._closed or len(self._spares) >= self.session_spares:
            return

        self._background(self._spawn_into(self._spares))

    async def _spawn_into(self, workers: list[W]) -> None:
        """Start one worker in the background and keep it in ``workers`` (spares, standby)."""
        with contextlib.suppress(WorkerStartError):
            worker = await self._spawn()
            if self._closed:
                await self._retire(worker)
            else:
                workers.append(worker)

    def _session_workers(self) -> list[W]:
        return [s._worker for s in list(self._sessions) if s._worker is not None]

    # ------------------------------------------------------------------ teardown
    async def close(self) -> None:
        self._closed = True
        if self._settling:
            # a ping in flight is answered within milliseconds; cancelled, it would kill
            # the worker abruptly (bubblewrap before it reaped the supervisor)
            await asyncio.wait(list(self._settling), timeout=SETTLE_ON_CLOSE_SECONDS)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for session in list(self._sessions):
            await session.close()
        workers = [slot.worker for slot in self._slots if slot.worker is not None]
        workers += self._spares + self._standby
        for slot in self._slots:
            slot.worker = None
        self._spares, self._standby = [], []
        await asyncio.gather(*(self._retire(w) for w in workers), return_exceptions=True)
