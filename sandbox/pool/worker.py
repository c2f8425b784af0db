"""One supervisor reached over frames: what the ``local`` and ``docker`` workers share.

A worker is the in-sandbox supervisor behind a byte pipe: a bubblewrap process's stdin
and stdout (``backends/local/worker.py``) or a container's attach stream
(``backends/docker/worker.py``). How it is launched and killed differs; the rest is here
once: a start that kills whatever it began when any step fails, the handshake (the bundled
supervisor and its config in, the ``hello`` frame out), requests answered in turn with
every failure ending as :class:`WorkerDead`, and the ``/proc`` reads that tell the
supervisor's own processes from what a run left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING

from agentenvs.sandbox.pool.errors import WorkerDead, WorkerStartError
from agentenvs.sandbox.pool.mount_seal import MountPlan, tighten_mounts
from agentenvs.sandbox.pool.protocol import (
    ProtocolError,
    encode_frame,
    read_frame,
    supervisor_source,
)

if TYPE_CHECKING:
    from agentenvs.sandbox.pool.branch_memory import BranchMemory
    from agentenvs.sandbox.pool.health import WorkerHealth

IDLE_PROCESS_NAME = "sandbox-idle"
"""Name of the supervisor's pre-forked child waiting for a request (see supervisor/)."""


class FramedRequests:
    """One request at a time to a supervisor, answered in turn (shared by both backends).

    A subclass says how a frame is sent (``_send``, failing with one of ``_send_errors``),
    where answers are read (``_reader``), how it is brought up (``_start``, which calls
    :meth:`_handshake`) and what to do when the supervisor died mid-request (``_died``);
    it has ``alive``, ``kill()``, ``kill_now()`` and ``stderr_tail()``. Every failure of a
    request ends as :class:`WorkerDead`, every failure to start as :class:`WorkerStartError`.
    """

    noun = "worker"
    """How messages name the worker ("worker", "container")."""
    timeout_fate = "killed"
    """What happened to a worker past its deadline ("killed", "removed")."""
    start_failure = "the sandbox worker did not start"
    """How a failed handshake begins its message."""
    _send_errors: tuple[type[BaseException], ...] = (OSError, RuntimeError)
    _handshake_errors: tuple[type[BaseException], ...] = (OSError,)
    """What the pipe raises when the supervisor is gone before its ``hello``."""

    health: WorkerHealth | None = None
    """The host-side after-run check (``pool/health.py``), set when it was spawned."""
    recycle_reason: str = ""
    seal: dict | None = None
    """The supervisor's ``seal`` answer: what a run could change, what forks lack."""
    mount_failures: dict[str, str] | None = None
    """Mounts the host could not tighten (``_mount_plan``), by path."""
    branches: BranchMemory | None = None
    """One memory group per session, once a session of this worker forked (``session.py``)."""

    def __init__(self) -> None:
        self.hello: dict = {}
        self.recycle = False
        self.requests = 0
        self._lock = asyncio.Lock()
        self._ids: Iterator[int] = count(1)
        self._dead = False

    @property
    def alive(self) -> bool:
        raise NotImplementedError

    def _reader(self) -> asyncio.StreamReader:
        raise NotImplementedError

    async def _send(self, frame: bytes) -> None:
        raise NotImplementedError

    async def _start(self, timeout: float) -> dict:
        raise NotImplementedError

    async def _died(self) -> None:
        raise NotImplementedError

    async def kill(self) -> None:
        raise NotImplementedError

    def kill_now(self) -> None:
        raise NotImplementedError

    def stderr_tail(self) -> str:
        raise NotImplementedError

    def _mount_plan(self) -> tuple[int, MountPlan] | None:
        """The host pid whose mounts the host tightens, and how (``None``: nothing to do)."""
        return None

    # ------------------------------------------------------------------ lifecycle
    async def start(self, timeout: float) -> dict:
        """Bring the worker up, seal it and return its ``hello``; on any failure nothing
        is left."""
        try:
            await self._start(timeout)
            await self._seal(timeout)
            return self.hello
        except BaseException:
            await self.kill()
            raise

    async def _seal(self, timeout: float) -> None:
        """Tighten the mounts from the host, then let the supervisor measure them: it runs
        no code before, and refuses where a run could change a host inode (issue #40)."""
        target = self._mount_plan()
        if target is not None:
            result = await tighten_mounts(*target)
            self.mount_failures = result.failed
        try:
            answer = await self.request({"op": "seal"}, timeout)
        except WorkerDead as exc:
            raise WorkerStartError(f"the sandbox {self.noun} died while sealed: {exc}") from exc
        if not answer.get("ok"):
            failures = f" (remounting failed: {self.mount_failures})" if self.mount_failures else ""
            raise WorkerStartError(
                f"the sandbox {self.noun} refused to serve: {answer.get('message')}{failures}"
            )
        self.seal = answer

    async def _handshake(self, config: dict, timeout: float) -> dict:
        """Send the bundled supervisor and its config, then wait for its ``hello`` frame."""
        try:
            await self._send(encode_frame(supervisor_source()) + encode_frame(config))
            self.hello = await asyncio.wait_for(read_frame(self._reader()), timeout)
        except (
            TimeoutError,
            asyncio.IncompleteReadError,
            ProtocolError,
            *self._handshake_errors,
        ) as exc:
            await asyncio.sleep(0.05)
            raise WorkerStartError(
                f"{self.start_failure} ({type(exc).__name__}); its stderr: "
                f"{self.stderr_tail() or '(empty)'}"
            ) from exc
        if self.hello.get("event") != "hello":
            raise WorkerStartError(
                f"unexpected first frame from the {self.noun}: {self.hello!r:.300}"
            )
        if self.hello.get("fatal"):
            raise WorkerStartError(
                f"the sandbox supervisor refused to start: {self.hello['fatal']}"
            )
        return self.hello

    # ------------------------------------------------------------------ requests
    async def request(self, message: dict, timeout: float) -> dict:
        noun = self.noun
        async with self._lock:
            if not self.alive:
                raise WorkerDead(f"the sandbox {noun} is not running", delivered=False)
            request_id = next(self._ids)
            self.requests += 1
            try:
                await self._send(encode_frame({**message, "id": request_id}))
            except self._send_errors as exc:
                await self.kill()
                raise WorkerDead(f"the sandbox {noun} was gone: {exc}", delivered=False) from exc
            try:
                response = await asyncio.wait_for(read_frame(self._reader()), timeout)
            except TimeoutError as exc:
                await self.kill()
                raise WorkerDead(
                    f"the sandbox {noun} did not answer within {timeout:g} s "
                    f"and was {self.timeout_fate}",
                    delivered=True,
                ) from exc
            except (asyncio.IncompleteReadError, ProtocolError, OSError) as exc:
                await asyncio.sleep(0.02)
                await self._died()
                tail = self.stderr_tail()
                raise WorkerDead(
                    f"the sandbox {noun} died during the execution" + (f": {tail}" if tail else ""),
                    delivered=True,
                ) from exc
            except asyncio.CancelledError:
                self.kill_now()  # the answer would arrive out of turn: this worker is done
                raise
            if response.get("id") != request_id:
                await self.kill()
                raise WorkerDead(f"the sandbox {noun} answered out of turn", delivered=True)
            if response.get("recycle"):
                self.recycle = True
            return response


def children_of(pid: int) -> list[int]:
    """The host pids of ``pid``'s children ([] once it is gone)."""
    with contextlib.suppress(OSError, ValueError):
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def process_name(pid: int) -> str:
    """``pid``'s ``comm`` ("" once it is gone): how a supervisor's own children are told."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
