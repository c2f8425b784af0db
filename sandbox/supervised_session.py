"""The notebook session of the supervised backends (``local`` and ``docker``).

Cells run on a dedicated worker whose supervisor keeps the namespace in a fork chain
(``local/supervisor/sessions.py`` and ``chain.py``). This module is the host's side:
one cell at a time, and when the state is lost (a cell killed the state holder, or the
worker died) the earlier successful cells are replayed, quietly, and the result says so.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Generic, Self

from agentenvs.sandbox.base import (
    ExecResult,
    ExecStatus,
    SandboxUnavailable,
    Session,
    SessionForkError,
)
from agentenvs.sandbox.supervised import (
    REQUEST_GRACE_SECONDS,
    W,
    WorkerDead,
    WorkerStartError,
    oom_between,
    to_exec_result,
)

if TYPE_CHECKING:
    from agentenvs.sandbox.supervised import SupervisedSandbox


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

    @property
    def cells(self) -> list[str]:
        """The cells whose state was kept, in order (what a replay or a fork re-runs)."""
        return list(self._cells)

    async def fork(self) -> Session:
        """A session on its own worker, its namespace rebuilt by replaying the kept cells.

        A replay, not a process fork: two workers share no process, so a cell that read
        a clock or unseeded randomness may leave a different value in the copy.
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
        return clone

    async def close(self) -> None:
        self._closed = True
        if self._worker is not None:
            worker, self._worker = self._worker, None
            await self._sandbox._retire(worker)
