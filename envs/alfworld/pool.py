"""A bounded pool of ALFWorld engine processes, used from asyncio.

Each worker process (:mod:`agentenvs.envs.alfworld.worker`) hosts up to
``engines_per_worker`` engines; an episode leases one engine for its whole life
(the game state lives there) and gives it back when it closes. Engines are reused
across episodes, so the planner library is loaded once per engine, not per episode.

Calls are asynchronous without tying a worker to one event loop: a reader thread
per worker matches answers to requests in order and resolves each request's
future on the loop that made it. That lets one pool outlive the event loops that
use it (tests, the gymnasium wrapper, a trainer's loop).

Failures never hang a rollout: every call has a timeout; a worker that dies (or
times out, and is then killed) fails all its pending calls with
:class:`WorkerCrashed` / :class:`WorkerTimeout`, naming the pid, the exit signal
and the tail of its log, and is replaced by a fresh worker on the next lease.
Workers are killed and reaped by :meth:`EnginePool.close`, by
:func:`shutdown_pools` and at interpreter exit; they also exit on their own when
the parent goes away (their stdin closes).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.errors import AgentEnvsError, TransientError

WORKER_MODULE = "agentenvs.envs.alfworld.worker"
SINGLE_THREADED = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""numpy's OpenBLAS starts a thread pool on import; the engine never uses it, and an
engine process must stay single-threaded for ``os.fork`` to copy it whole (``fork.py``)."""


class ALFWorldWorkerError(TransientError, RuntimeError):
    """The engine process could not answer: it died, timed out, or failed to start.

    Transient: a group that hit it is retried by the collector on a fresh worker."""


class WorkerCrashed(ALFWorldWorkerError):
    pass


class WorkerTimeout(ALFWorldWorkerError):
    pass


class EngineError(AgentEnvsError, RuntimeError):
    """The game engine raised inside a live worker (the worker keeps running)."""


def _resolve(fut: asyncio.Future, value: Any = None, error: BaseException | None = None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


def _deliver(loop: asyncio.AbstractEventLoop, fut: asyncio.Future, value=None, error=None) -> None:
    # RuntimeError: the loop that asked has closed; nobody is waiting any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_resolve, fut, value, error)


class Worker:
    """One engine process and the thread that reads its answers."""

    def __init__(self, *, slots: int, cache_translations: bool, python: str | None = None):
        self.slots = slots
        self.busy: set[int] = set()
        self.dead_reason: str | None = None
        self._pending: deque[tuple[asyncio.AbstractEventLoop | None, asyncio.Future | None]] = (
            deque()
        )
        self._lock = threading.Lock()
        self._log = self._open_log()
        self.proc = self._launch(cache_translations, python)
        self.pid = self.proc.pid
        # The first line the worker sends is its ready message.
        self._pending.append((None, None))
        self._ready_event = threading.Event()
        self._ready_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self._ready_message: dict[str, Any] | None = None
        self._reader = threading.Thread(
            target=self._read_answers, name=f"alfworld-worker-{self.pid}", daemon=True
        )
        self._reader.start()

    def _open_log(self) -> Any:
        return tempfile.NamedTemporaryFile(
            prefix="agentenvs-alfworld-", suffix=".log", delete=False
        )

    def _launch(self, cache_translations: bool, python: str | None) -> Any:
        """Start the engine process; a forked engine (``fork.py``) is handed in instead."""
        command = [python or sys.executable, "-m", WORKER_MODULE]
        if cache_translations:
            command.append("--cache-translations")
        return subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,  # a Ctrl-C in the terminal is the parent's to handle
            env={**os.environ, "PYTHONUNBUFFERED": "1", **SINGLE_THREADED},
        )

    # ---- answers -----------------------------------------------------------------
    def _read_answers(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                message = json.loads(raw)
            except json.JSONDecodeError:
                message = {"ok": False, "error": f"unreadable answer {raw[:200]!r}"}
            with self._lock:
                loop, fut = self._pending.popleft() if self._pending else (None, None)
            if fut is None:  # the ready message
                self._ready_message = message
                self._set_ready()
                continue
            if loop is not None:
                _deliver(loop, fut, value=message)
        self._on_exit()

    def _on_exit(self) -> None:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        reason = self.dead_reason or self._describe_exit(code)
        self._fail_all(WorkerCrashed(reason))
        self._set_ready()

    def _set_ready(self) -> None:
        with self._lock:
            self._ready_event.set()
            waiters, self._ready_waiters = self._ready_waiters, []
        for loop, fut in waiters:
            _deliver(loop, fut, value=None)

    def exit_reason(self) -> str | None:
        """How the process ended, if it has (its exit signal or status and log tail)."""
        code = self.proc.poll()
        return None if code is None else self._describe_exit(code)

    def _describe_exit(self, code: int | None) -> str:
        if code is None:
            how = "stopped answering"
        elif code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        tail = self.log_tail()
        return f"ALFWorld worker pid {self.pid} {how}" + (
            f"; its log ends with:\n{tail}" if tail else ""
        )

    def _fail_all(self, error: ALFWorldWorkerError) -> None:
        with self._lock:
            if self.dead_reason is None:
                self.dead_reason = str(error)
            pending, self._pending = list(self._pending), deque()
        for loop, fut in pending:
            if loop is not None and fut is not None:
                _deliver(loop, fut, error=type(error)(str(error)))

    def log_tail(self, lines: int = 12) -> str:
        try:
            with open(self._log.name, errors="replace") as log:
                return "".join(log.readlines()[-lines:]).rstrip()
        except OSError:
            return ""

    # ---- requests ----------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.dead_reason is None and self.proc.poll() is None

    async def wait_ready(self, timeout: float) -> None:
        """Until the process has imported the engine and said so (or died)."""
        ready = self._ready_event.is_set()
        if not ready:
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            with self._lock:
                ready = self._ready_event.is_set()
                if not ready:
                    self._ready_waiters.append((loop, fut))
            if not ready:
                try:
                    await asyncio.wait_for(fut, timeout)
                    ready = True
                except TimeoutError:
                    ready = False
        if self.dead_reason is not None:
            raise WorkerCrashed(f"ALFWorld worker failed to start: {self.dead_reason}")
        if not ready:
            self.kill(f"ALFWorld worker pid {self.pid} did not start within {timeout:g}s")
            raise WorkerTimeout(self.dead_reason or "worker start timed out")
        message = self._ready_message or {}
        if not message.get("ok"):
            self.kill(f"ALFWorld worker pid {self.pid} failed to start: {message.get('error')}")
            raise WorkerCrashed(
                f"ALFWorld worker failed to start: {message.get('error')} "
                "(is the 'alfworld' extra installed? pip install 'agentenvs[alfworld]')"
            )

    async def call(self, op: str, *, timeout: float, **payload: Any) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        line = (json.dumps({"op": op, **payload}) + "\n").encode()
        with self._lock:
            if self.dead_reason is not None:
                raise WorkerCrashed(self.dead_reason)
            self._pending.append((loop, fut))
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                self._pending.pop()
                broken = True
            else:
                broken = False
        if broken:
            # The reader thread will see EOF and say why the process died.
            await asyncio.to_thread(self._reader.join, 5)
            raise WorkerCrashed(self.dead_reason or f"ALFWorld worker pid {self.pid} is gone")
        try:
            answer = await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self.kill(
                f"ALFWorld worker pid {self.pid} did not answer {op!r} within {timeout:g}s "
                "and was killed"
            )
            raise WorkerTimeout(self.dead_reason) from None
        if not answer.get("ok"):
            raise EngineError(f"ALFWorld engine failed on {op!r}: {answer.get('error')}")
        return answer

    # ---- shutdown ------------------------------------------------------------------
    def kill(self, reason: str | None = None) -> None:
        """Kill and reap the process now; pending calls fail with ``reason``."""
        with self._lock:
            if self.dead_reason is None:
                self.dead_reason = reason or f"ALFWorld worker pid {self.pid} was shut down"
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self._reap()
        self._fail_all(WorkerCrashed(self.dead_reason or "worker killed"))

    def close(self, grace: float = 2.0) -> None:
        """Ask the process to exit, then kill it if it has not; always reaps it."""
        if self.proc.poll() is None and self.dead_reason is None:
            try:
                assert self.proc.stdin is not None
                with self._lock:
                    self._pending.append((None, _Ignored()))
                    self.proc.stdin.write(b'{"op": "exit"}\n')
                    self.proc.stdin.flush()
                self.proc.wait(timeout=grace)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self.kill(f"ALFWorld worker pid {self.pid} was shut down")

    def _reap(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=5)
            if self.proc.stdout is not None and not self._reader.is_alive():
                self.proc.stdout.close()
        try:
            self._log.close()
            os.unlink(self._log.name)
        except OSError:
            pass


class _Ignored:
    """Placeholder future for answers nobody waits for."""

    def done(self) -> bool:
        return True


@dataclass
class EngineLease:
    """One engine of one worker, held by one episode until :meth:`release`."""

    pool: EnginePool
    worker: Worker
    slot: int
    released: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        return self.worker.pid

    async def call(self, op: str, *, timeout: float, **payload: Any) -> dict[str, Any]:
        if self.released:
            raise RuntimeError("this engine lease was released")
        return await self.worker.call(op, timeout=timeout, slot=self.slot, **payload)

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.pool._release(self)


class EnginePool:
    """At most ``workers`` processes with ``engines_per_worker`` engines each."""

    def __init__(
        self,
        workers: int = 2,
        engines_per_worker: int = 8,
        *,
        cache_translations: bool = True,
        startup_timeout: float = 120.0,
        python: str | None = None,
    ) -> None:
        if workers < 1 or engines_per_worker < 1:
            raise ValueError("an engine pool needs at least one worker and one engine per worker")
        self.max_workers = workers
        self.engines_per_worker = engines_per_worker
        self.cache_translations = cache_translations
        self.startup_timeout = startup_timeout
        self.python = python
        self.workers: list[Worker] = []
        self._lock = threading.Lock()
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = deque()
        self.closed = False
        self.spawned = 0
        self.forks: set[Worker] = set()
        """Engine processes forked from this pool's workers (``fork.py``), closed with it."""

    # ---- leasing ---------------------------------------------------------------------
    async def lease(self) -> EngineLease:
        """An engine for one episode; waits while every engine is busy."""
        while True:
            if self.closed:
                raise ALFWorldWorkerError("the ALFWorld engine pool is closed")
            loop = asyncio.get_running_loop()
            with self._lock:
                self._drop_dead()
                pick = self._pick()
                if pick is None and len(self.workers) < self.max_workers:
                    worker = Worker(
                        slots=self.engines_per_worker,
                        cache_translations=self.cache_translations,
                        python=self.python,
                    )
                    self.workers.append(worker)
                    self.spawned += 1
                    pick = (worker, 0)
                    worker.busy.add(0)
                elif pick is not None:
                    pick[0].busy.add(pick[1])
                else:
                    waiter = loop.create_future()
                    self._waiters.append((loop, waiter))
            if pick is not None:
                worker, slot = pick
                lease = EngineLease(self, worker, slot)
                try:
                    await worker.wait_ready(self.startup_timeout)
                except BaseException:
                    lease.release()
                    raise
                return lease
            await waiter

    def _pick(self) -> tuple[Worker, int] | None:
        """The least busy live worker with a free engine; an idle one if any."""
        candidates = [w for w in self.workers if len(w.busy) < w.slots]
        if not candidates:
            return None
        worker = min(candidates, key=lambda w: len(w.busy))
        if worker.busy and len(self.workers) < self.max_workers:
            return None  # spread episodes over processes before stacking them
        slot = min(set(range(worker.slots)) - worker.busy)
        return worker, slot

    def _drop_dead(self) -> None:
        live = []
        for worker in self.workers:
            if worker.alive:
                live.append(worker)
            else:
                # A process can be gone before its reader thread has said why; name the
                # exit (a signal, say) rather than let "was shut down" stand in for it.
                worker.kill(worker.dead_reason or worker.exit_reason())
        self.workers = live

    def _release(self, lease: EngineLease) -> None:
        with self._lock:
            lease.worker.busy.discard(lease.slot)
            if not lease.worker.alive:
                self._drop_dead()
            waiters, self._waiters = list(self._waiters), deque()
        # Wake everyone waiting; they re-check and the losers wait again. Groups are
        # small and leases long, so the thundering herd is a handful of futures.
        for loop, fut in waiters:
            _deliver(loop, fut, value=None)

    # ---- introspection and shutdown --------------------------------------------------
    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self.workers if w.alive]

    async def stats(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        return [await w.call("stats", timeout=timeout) for w in list(self.workers) if w.alive]

    def close(self) -> None:
        """Stop and reap every worker. Idempotent; leases still out fail cleanly."""
        with self._lock:
            self.closed = True
            workers, self.workers = self.workers, []
            forks, self.forks = list(self.forks), set()
            waiters, self._waiters = list(self._waiters), deque()
        for fork in forks:
            fork.kill("the ALFWorld engine pool was closed")
        for worker in workers:
            worker.close()
        for loop, fut in waiters:
            _deliver(loop, fut, error=ALFWorldWorkerError("the ALFWorld engine pool was closed"))


_POOLS: dict[tuple, EnginePool] = {}
_POOLS_LOCK = threading.Lock()


def get_pool(workers: int, engines_per_worker: int, cache_translations: bool = True) -> EnginePool:
    """The process-wide pool for these settings (made on first use)."""
    key = (workers, engines_per_worker, cache_translations)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool.closed:
            pool = EnginePool(workers, engines_per_worker, cache_translations=cache_translations)
            _POOLS[key] = pool
        return pool


def shutdown_pools() -> None:
    """Kill and reap every ALFWorld worker this process started."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()


atexit.register(shutdown_pools)
