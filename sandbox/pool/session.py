"""The notebook session of the supervised backends (``local`` and ``docker``).

Cells run on a dedicated worker whose supervisor keeps the namespace in a fork chain
(``sandbox/supervisor/sessions.py`` and ``chain.py``). This module is the host's side:
one cell at a time, and when the state is lost (a cell killed the state holder, or the
worker died) the earlier successful cells are replayed, quietly, and the result says so.

``fork()`` asks the worker's supervisor to fork the state holder (``session_fork``):
the fork is a new session of the same worker, so the worker is shared (``WorkerShare``)
and retired when its last session leaves. Where the supervisor refuses (no Landlock,
a descriptor or shared mapping that would stay shared, the per-worker bound reached),
the fork falls back to replaying the kept cells on a worker of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, Self

from agentenvs.sandbox.base import (
    ExecResult,
    ExecStatus,
    SandboxUnavailable,
    Session,
    SessionForkError,
)
from agentenvs.sandbox.pool.care import W
from agentenvs.sandbox.pool.errors import WorkerDead, WorkerStartError
from agentenvs.sandbox.pool.supervised import (
    REQUEST_GRACE_SECONDS,
    SESSION_FORK_LIMIT,
    oom_between,
    to_exec_result,
)

if TYPE_CHECKING:
    from agentenvs.sandbox.pool.supervised import SupervisedSandbox

FORK_REQUEST_SECONDS = 30.0


@dataclass
class WorkerShare(Generic[W]):
    """A worker and how many sessions (the opened one and its forks) live on it."""

    worker: W
    sessions: int = 1


ForkMethod = Literal["process", "replay"]


class SupervisedSession(Session, Generic[W]):
    """Cells sharing one namespace on a dedicated worker (see ``supervisor.Holder``).

    If the state is lost (a cell killed the state holder, or the worker died), the
    earlier successful cells are replayed, quietly, and the result says so.
    """

    def __init__(self, sandbox: SupervisedSandbox[W]) -> None:
        self._sandbox = sandbox
        self._share: WorkerShare[W] | None = None
        self._session_id = 0
        """This session's id in its worker's supervisor (0 for the one it opened)."""
        self._cells: list[str] = []
        """Cells whose state was kept, in order: replayed if the state is ever lost."""
        self._lock = asyncio.Lock()
        self._closed = False
        self._needs_replay = False
        self.replays = 0
        self.forked_by: ForkMethod | None = None
        """How this session was made from another (``None``: opened, not forked)."""
        self.fork_refusal = ""
        """Why the last ``fork()`` of this session fell back to a replay ('' if it did not)."""
        self.fork_seconds = 0.0
        """Host-measured seconds of the last ``fork()`` of this session."""

    @property
    def _worker(self) -> W | None:
        return self._share.worker if self._share is not None else None

    @_worker.setter
    def _worker(self, worker: W | None) -> None:
        # A backend that retired a dead worker itself drops it here (no session_close).
        if worker is None:
            self._share = None
        else:
            self._share = WorkerShare(worker)

    async def _leave_worker(self) -> None:
        """Stop using the worker: close this session on it, retire it if it was the last."""
        share, self._share = self._share, None
        if share is None:
            return
        share.sessions -= 1
        worker = share.worker
        if share.sessions > 0:
            if worker.alive and not worker.recycle:
                request = {"op": "session_close", "session": self._session_id}
                with contextlib.suppress(WorkerDead):
                    await worker.request(request, FORK_REQUEST_SECONDS)
                if worker.branches is not None:
                    worker.branches.forget(self._session_id)
            return
        await self._sandbox._retire(worker)

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
        return self._worker is not None and self._worker.alive

    async def _ensure_worker(self) -> W:
        current = self._worker
        if current is not None and current.alive and not current.recycle:
            return current
        if current is not None:
            await self._leave_worker()
            self._needs_replay = bool(self._cells)
        worker = await self._sandbox._take_session_worker()
        self._share = WorkerShare(worker)
        limits = self._sandbox._limits(session=True)
        self._sandbox._apply_memory_limit(worker, limits["memory_bytes"])
        request = {"op": "session_open", "limits": limits, "max_sessions": SESSION_FORK_LIMIT}
        response = await worker.request(request, 30)
        session_id = response.get("session", 0)
        self._session_id = session_id if isinstance(session_id, int) else 0
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
                    # The state was gone before the cell started: restore it, then run the
                    # cell, and say why it was gone.
                    if result.message:
                        notes.append(result.message)
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
            "session": self._session_id,
            "code": code,
            "timeout": timeout,
            "show_last": cfg.show_last_expression,
        }
        before = self._oom_count(worker)
        try:
            response = await worker.request(request, timeout + REQUEST_GRACE_SECONDS)
        except WorkerDead as exc:
            result = await self._lost_worker_result(worker, exc, before)
            self._needs_replay = bool(self._cells)
            return result, {"not_run": not exc.delivered}
        oom = oom_between(before, self._oom_count(worker))
        holder = response.get("holder")
        if worker.branches is not None and isinstance(holder, int):
            # a fresh holder starts in the worker's group: back into this branch's
            problem = self._sandbox._separate_memory(worker, {self._session_id: holder})
            if problem:  # no branch may share memory: this session moves to a fresh worker
                worker.recycle = True
                self._needs_replay = bool(self._cells)
        return to_exec_result(response, oom=oom, memory_mb=cfg.memory_limit_mb), response

    def _oom_count(self, worker: W) -> int | None:
        """The OOM-kill counter of this session's own memory: its branch group once the
        worker's sessions forked (a kill elsewhere is not this cell's), else the worker's."""
        if worker.branches is not None:
            count = worker.branches.oom_kills(self._session_id)
            if count is not None:
                return count
        return self._sandbox._oom_count(worker)

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

    @property
    def cells(self) -> list[str]:
        """The cells whose state was kept, in order (what a replay or a fork re-runs)."""
        return list(self._cells)

    async def fork(self) -> Session:
        """A new session whose namespace starts as a copy of this one's.

        First choice: the supervisor forks the state holder (``session_fork``), so the
        copy is the same interpreter, values read from a clock or unseeded randomness
        included, and costs an ``os.fork``; the fork lives on this session's worker and
        from then on neither side may write files (see ``supervisor/forking.py``). When
        the supervisor refuses, a session on its own worker gets its namespace rebuilt
        by replaying the kept cells (``fork_refusal`` on the clone says why).
        """
        if self._closed:
            raise SessionForkError("the session is closed")
        started = time.monotonic()
        clone: SupervisedSession[W] | None = None
        refusal = "the sandbox is configured with session_fork='replay'"
        if self._sandbox.config.session_fork == "process":
            async with self._lock:
                clone, refusal = await self._fork_in_worker()
        if clone is None:
            clone = await self.replay_fork()
            clone.fork_refusal = refusal
        clone.fork_seconds = time.monotonic() - started
        return clone

    async def _fork_in_worker(self) -> tuple[SupervisedSession[W] | None, str]:
        """A fork of the state holder on the same worker, or ``None`` and why not."""
        share = self._share
        if self._closed or share is None or not self._alive() or self._needs_replay:
            return None, "the session has no live state holder to fork"
        request = {"op": "session_fork", "session": self._session_id}
        try:
            response = await share.worker.request(request, FORK_REQUEST_SECONDS)
        except WorkerDead as exc:
            self._needs_replay = bool(self._cells)
            return None, f"the worker died during the fork: {exc}"
        session_id = response.get("session")
        if not response.get("ok") or not isinstance(session_id, int):
            self._sandbox.stats["session_fork_refusals"] = (
                self._sandbox.stats.get("session_fork_refusals", 0) + 1
            )
            return None, str(response.get("message") or "the supervisor refused the fork")
        placements = {
            self._session_id: response.get("parent_holder"),
            session_id: response.get("holder"),
        }
        problem = self._sandbox._separate_memory(share.worker, placements, forked=True)
        if problem:  # the branches would share one memory group: no in-worker fork
            with contextlib.suppress(WorkerDead):
                close = {"op": "session_close", "session": session_id}
                await share.worker.request(close, FORK_REQUEST_SECONDS)
            return None, problem
        clone = self._sandbox.session()
        assert isinstance(clone, SupervisedSession)
        share.sessions += 1
        clone._share = share
        clone._session_id = session_id
        clone._cells = list(self._cells)
        clone.forked_by = "process"
        self._sandbox.stats["session_forks"] = self._sandbox.stats.get("session_forks", 0) + 1
        return clone, ""

    async def replay_fork(self) -> SupervisedSession[W]:
        """A session on its own worker, its namespace rebuilt by replaying the kept cells.

        The fallback of ``fork()`` (and its only way with ``session_fork='replay'``). A
        replay, not a process fork: two workers share no process, so a cell that read a
        clock or unseeded randomness may leave a different value in the copy.
        """
        cells = self.cells
        clone = self._sandbox.session()
        for code in cells:
            await clone.run(code)
        if not isinstance(clone, SupervisedSession) or clone._cells != cells:
            await clone.close()
            raise SessionForkError(
                f"replaying {len(cells)} kept cell(s) did not rebuild the session's state"
            )
        clone.forked_by = "replay"
        return clone

    async def close(self) -> None:
        self._closed = True
        async with self._lock:
            await self._leave_worker()
