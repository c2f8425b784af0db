"""Forking a live ALFWorld engine: the host's side of the worker's ``fork`` op.

Measured on a kitchen game after five steps (issue #16): ``os.fork`` of the
single-threaded engine process takes ~4.5 ms whatever the history, while replaying
the history on a fresh engine takes 0.37-1.7 s. So a fork asks the engine's worker to
fork itself (``worker.fork_engine``); the child connects back to a Unix socket made
here, in the abstract namespace (no file to clean up), and is then driven exactly
like a worker, by :class:`ForkedWorker` (the pool's :class:`Worker` over a socket
instead of pipes). A connection is believed only from the pid the worker named
(``SO_PEERCRED``).

The forked process is not the host's child (the worker is its parent and reaps it),
so it is watched through a pidfd. It lives until its lease is released, its pool is
closed, or the host goes away (its socket then reaches end-of-file and it exits).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import select
import signal
import socket
import struct
import tempfile
import threading
import time
from typing import IO, Any

from agentenvs.envs.alfworld.pool import ALFWorldWorkerError, EngineLease, Worker

WAIT_SLICE_SECONDS = 0.02


class ForkedProcess:
    """The part of ``subprocess.Popen`` that :class:`Worker` uses, for a process that is
    not our child: liveness from a pidfd, the request stream over a socket."""

    def __init__(self, pid: int, conn: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)
        self._lock = threading.Lock()
        self._killed = False
        self.stdin: IO[bytes] | None = conn.makefile("wb")
        self.stdout: IO[bytes] | None = conn.makefile("rb")
        conn.close()  # the two files keep the connection open

    def _exited(self, timeout: float) -> bool:
        """Whether the process has exited, waiting at most ``timeout`` (kept short: the
        lock is held meanwhile, so the reader thread and the owner never race on the fd)."""
        with self._lock:
            if self._pidfd < 0:
                return True
            ready, _, _ = select.select([self._pidfd], [], [], timeout)
            if not ready:
                return False
            # Not our child: the exit status is the worker's; a kill of ours is known.
            self.returncode = -signal.SIGKILL if self._killed else 0
            os.close(self._pidfd)
            self._pidfd = -1
            return True

    def poll(self) -> int | None:
        self._exited(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._exited(WAIT_SLICE_SECONDS):
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("forked ALFWorld engine", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        with self._lock:
            if self._pidfd >= 0:
                self._killed = True
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


class ForkedWorker(Worker):
    """A :class:`Worker` whose process was forked from another worker's engine."""

    def __init__(self, process: ForkedProcess, log: Any, slot: int) -> None:
        self._given = (process, log)
        super().__init__(slots=slot + 1, cache_translations=False)
        self.busy = {slot}

    def _open_log(self) -> Any:
        return self._given[1]

    def _launch(self, cache_translations: bool, python: str | None) -> Any:
        return self._given[0]

    def kill(self, reason: str | None = None) -> None:
        # The process group id is the fork's pid (it called setsid), but the pidfd is
        # the safe handle: the pid may be reused once the worker reaped it.
        self.proc.kill()
        with contextlib.suppress(Exception):  # Worker.kill below fails the pending calls
            self.proc.wait(timeout=10)
        super().kill(reason)


class ForkLease(EngineLease):
    """A forked engine, held by the forked episode until :meth:`release` kills it."""

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.pool.forks.discard(self.worker)
            self.worker.kill(f"forked ALFWorld engine pid {self.worker.pid} was released")


def _peer_pid(conn: socket.socket) -> int:
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)[0]


async def fork_engine(lease: EngineLease, *, timeout: float) -> ForkLease:
    """A new engine process whose game state is a copy of ``lease``'s, right now."""
    if lease.pool.closed:
        raise ALFWorldWorkerError("the ALFWorld engine pool is closed")
    address = f"\0agentenvs-alfworld-fork-{os.getpid()}-{secrets.token_hex(8)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - handed to the ForkedWorker
        prefix="agentenvs-alfworld-fork-", suffix=".log", delete=False
    )
    conn: socket.socket | None = None
    try:
        listener.bind(address)
        listener.listen(4)
        listener.setblocking(False)
        answer = await lease.call("fork", timeout=timeout, address=address, log=log.name)
        pid = int(answer["pid"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while conn is None:
            candidate, _ = await asyncio.wait_for(
                loop.sock_accept(listener), max(0.0, deadline - loop.time())
            )
            if _peer_pid(candidate) == pid:
                conn = candidate
            else:  # someone else found the name: not our engine
                candidate.close()
        conn.setblocking(True)
        process = ForkedProcess(pid, conn)
    except BaseException:
        if conn is not None:
            conn.close()
        log.close()
        os.unlink(log.name)
        raise
    finally:
        listener.close()
    worker = ForkedWorker(process, log, lease.slot)
    fork = ForkLease(lease.pool, worker, lease.slot)
    lease.pool.forks.add(worker)
    try:
        await worker.wait_ready(timeout)
    except BaseException:
        fork.release()
        raise
    return fork
