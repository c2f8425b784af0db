"""What the ``local`` and ``docker`` backends share: a pool of supervised workers.

Both backends run the same in-sandbox supervisor (``local/supervisor.py``) over the same
frames (``local/protocol.py``); they differ only in how a worker is launched and watched
(a bubblewrap process in a cgroup, or a container over its attach stream). This module
holds everything else once: the warm pool (``run()`` borrows an idle worker, replaces a
dead one, retries a request that never reached a worker), the session spares, the
notebook session with its replay of kept cells, and turning answers into ExecResults.

A backend subclasses :class:`SupervisedSandbox` and :class:`SupervisedSession` and fills
in the hooks: ``_launch_first``/``_spawn`` (start workers), ``_assess_worker`` and
``_probe_sandbox`` (capabilities), ``_oom_count``/``_dead_result`` and the session's
``_lost_worker_result`` (how an OOM kill or a dead worker is reported) and, where it
applies, ``_apply_memory_limit`` and ``_retire``. Worker-level framing (one request at a
time, answered in turn) is :class:`agentenvs.sandbox.local.worker.FramedRequests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Self, TypeVar

from agentenvs.sandbox.base import (
    Capabilities,
    ExecResult,
    ExecStatus,
    Sandbox,
    SandboxUnavailable,
    Session,
)
from agentenvs.sandbox.capabilities import enforce_minimum, run_sync
from agentenvs.sandbox.local.files import decode_files, encode_files, request_problem

MB = 1024 * 1024
REQUEST_GRACE_SECONDS = 10.0
"""The supervisor enforces the timeout; the host gives up on it only this much later."""
SUPERVISOR_PROCESSES = 1
SESSION_PROCESSES = 2  # supervisor + state holder


class WorkerDead(RuntimeError):
    """A worker stopped answering; ``delivered`` says whether the request had reached it
    (only an undelivered request is safe to retry elsewhere)."""

    def __init__(self, message: str, *, delivered: bool) -> None:
        super().__init__(message)
        self.delivered = delivered


class WorkerStartError(RuntimeError):
    """The worker could not be started (the message carries the launcher's stderr)."""


W = TypeVar("W")
"""A worker: ``request()``, ``kill()``, ``alive`` and ``recycle`` (local or container)."""


@dataclass
class Slot(Generic[W]):
    """One place in the warm pool; its worker is replaced when it dies or asks to be."""

    worker: W | None = None


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


class SupervisedSandbox(Sandbox, Generic[W]):
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

    def _apply_memory_limit(self, worker: W, memory_bytes: int) -> None:
        """Raise or lower the worker's outer memory limit before a request (if it has one)."""

    async def _retire(self, worker: W) -> None:
        await worker.kill()  # type: ignore[attr-defined]

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
        overhead = SESSION_PROCESSES if session else SUPERVISOR_PROCESSES
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
                probe = await first.request({"op": "probe", "limits": self._limits()}, 60)  # type: ignore[attr-defined]
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

    @staticmethod
    def _refuse_arguments(
        files: Mapping[str, bytes] | None, fetch_files: Sequence[str], language: str
    ) -> ExecResult | None:
        """A malformed ``files``/``fetch_files``/``language`` as a result, not an exception."""
        problem = request_problem(files, fetch_files, language)
        return ExecResult(ExecStatus.SANDBOX_ERROR, message=problem) if problem else None

    def _release_slot(self, slot: Slot[W]) -> None:
        """Give a slot back; a worker to recycle is replaced first, off the request path.

        Issue class 8: when a run leaves its worker unfit (a wipe too costly, a reset
        that could not be proven), the next request must not pay for the replacement.
        The slot stays out of the idle queue while a fresh worker starts in the
        background, and other slots serve meanwhile.
        """
        assert self._idle is not None
        worker = slot.worker
        if self._closed or (worker is not None and worker.alive and not worker.recycle):  # type: ignore[attr-defined]
            self._idle.put_nowait(slot)
            return

        async def replace() -> None:
            try:
                with contextlib.suppress(WorkerStartError):
                    await self._ready_worker(slot)
            finally:
                assert self._idle is not None
                self._idle.put_nowait(slot)

        task = asyncio.ensure_future(replace())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ready_worker(self, slot: Slot[W]) -> W:
        if self._closed:
            raise WorkerStartError("the sandbox is closed")
        worker = slot.worker
        if worker is not None and worker.alive and not worker.recycle:  # type: ignore[attr-defined]
            return worker
        slot.worker = None
        if worker is not None:
            await self._retire(worker)
        slot.worker = await self._spawn()
        return slot.worker

    async def _execute(self, worker: W, request: dict, limits: dict) -> ExecResult:
        """One request on one worker; raises WorkerDead (the caller retires the worker)."""
        before = self._oom_count(worker)
        response = await worker.request(request, limits["timeout"] + REQUEST_GRACE_SECONDS)  # type: ignore[attr-defined]
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
                response = await worker.request(  # type: ignore[attr-defined]
                    request, limits["timeout"] + REQUEST_GRACE_SECONDS
                )
            except WorkerDead as exc:
                slot.worker = None
                if not exc.delivered and attempt == 0:
                    await self._retire(worker)
                    self.stats["retries"] += 1
                    continue
                return await self._dead_result(worker, exc, limits["memory_bytes"] // MB, before)
            if response.get("not_run") and attempt == 0:
                # the worker could not clean up after its previous execution: use a fresh one
                await self._retire(worker)
                slot.worker = None
                self.stats["retries"] += 1
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
            if candidate.alive:  # type: ignore[attr-defined]
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

        async def refill() -> None:
            with contextlib.suppress(WorkerStartError):
                worker = await self._spawn()
                if self._closed:
                    await self._retire(worker)
                else:
                    self._spares.append(worker)

        task = asyncio.ensure_future(refill())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _session_workers(self) -> list[W]:
        return [s._worker for s in list(self._sessions) if s._worker is not None]

    # ------------------------------------------------------------------ teardown
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
        await asyncio.gather(*(self._retire(w) for w in workers), return_exceptions=True)


class SupervisedSession(Session, Generic[W]):
    """Cells sharing one namespace on a dedicated worker (see ``supervisor.Holder``).

    If the state is lost (a cell killed the state holder, or the worker died), the
    earlier successful cells are replayed, quietly, and the result says so.
    """

    def __init__(self, sandbox: SupervisedSandbox[W]) -> None:
        self._sandbox = sandbox
        self._worker: W | None = None
        self._cells: list[str] = []
        """Cells whose state was kept, in order: replayed if the state is ever lost."""
        self._lock = asyncio.Lock()
        self._closed = False
        self._needs_replay = False
        self.replays = 0

    async def __aenter__(self) -> Self:
        async with self._lock:
            await self._ensure_worker()
        return self

    async def _lost_worker_result(
        self, worker: W, exc: WorkerDead, oom_before: int | None
    ) -> ExecResult:
        """The worker died during a cell: retire it and say what happened."""
        raise NotImplementedError

    def _alive(self) -> bool:
        return self._worker is not None and self._worker.alive  # type: ignore[attr-defined]

    async def _ensure_worker(self) -> W:
        current = self._worker
        if current is not None and current.alive and not current.recycle:  # type: ignore[attr-defined]
            return current
        if current is not None:
            await self._sandbox._retire(current)
            self._worker = None
            self._needs_replay = bool(self._cells)
        worker = await self._sandbox._take_session_worker()
        self._worker = worker
        limits = self._sandbox._limits(session=True)
        self._sandbox._apply_memory_limit(worker, limits["memory_bytes"])
        await worker.request({"op": "session_open", "limits": limits}, 30)  # type: ignore[attr-defined]
        return worker

    async def run(self, code: str, *, timeout: float | None = None) -> ExecResult:
        if self._closed:
            return ExecResult(ExecStatus.SANDBOX_ERROR, message="the session is closed")
        async with self._lock:
            notes: list[str] = []
            result, response = ExecResult(ExecStatus.SANDBOX_ERROR), {}
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
                if self._worker is not None and self._alive():
                    notes.append(await self._replay(self._worker))
            if notes:
                result.message = "; ".join(n for n in [result.message, *notes] if n)
            return result

    async def _cell(self, worker: W, code: str, timeout: float | None) -> tuple[ExecResult, dict]:
        cfg = self._sandbox.config
        timeout = float(timeout or cfg.timeout)
        request = {
            "op": "cell",
            "code": code,
            "timeout": timeout,
            "show_last": cfg.show_last_expression,
        }
        before = self._sandbox._oom_count(worker)
        try:
            response = await worker.request(request, timeout + REQUEST_GRACE_SECONDS)  # type: ignore[attr-defined]
        except WorkerDead as exc:
            result = await self._lost_worker_result(worker, exc, before)
            self._needs_replay = bool(self._cells)
            return result, {"not_run": not exc.delivered}
        oom = oom_between(before, self._sandbox._oom_count(worker))
        return to_exec_result(response, oom=oom, memory_mb=cfg.memory_limit_mb), response

    async def _replay(self, worker: W) -> str:
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
            if not self._alive():
                break
        note = f"the session's state was rebuilt by replaying {len(cells)} earlier cell(s)"
        return note + (f" ({failed} did not complete)" if failed else "")

    async def close(self) -> None:
        self._closed = True
        if self._worker is not None:
            worker, self._worker = self._worker, None
            await self._sandbox._retire(worker)
