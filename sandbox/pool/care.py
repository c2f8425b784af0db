"""How the warm pool hands out its workers: standby workers, settling, health checks.

Issue #11's load target (3 innocent clients next to 1 hostile one: no innocent error,
p99 within 2x) is about where a request waits. Three rules, each here:

- a slot whose run failed is offered again only once its worker answered a ping, i.e.
  finished its own cleanup (``_settle``): no request lands on a worker still killing a
  fork bomb or wiping a work dir while another worker is free;
- a worker that must go (recycle, failed health check, or a reset that failed, as its
  ping or a refused run says) hands its slot to a standby worker at once
  (``_swap_in_standby``), and a request waiting while a slot is held by a run older than
  ``LEND_AFTER_SECONDS``, or is away for its worker's cleanup, check or replacement
  (issue #24: the aftermath of a hostile run, not only the run), is served by a standby
  worker (``_acquire_slot``);
- after every run the host checks the worker's cgroup against its fresh baseline
  (``pool/health.py``) and recycles a worker that does not come back (class 3).

A mixin of :class:`agentenvs.sandbox.pool.supervised.SupervisedSandbox`, which provides
``_spawn``, ``_retire``, ``_ready_worker``, ``_background``, ``_idle``, ``_slots``, ``_tasks``
and ``stats``.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from agentenvs.sandbox.pool.errors import WorkerDead, WorkerStartError
from agentenvs.sandbox.pool.health import WorkerHealth
from agentenvs.sandbox.pool.worker import FramedRequests

LEND_AFTER_SECONDS = 0.2
"""A slot held this long by one run may be stood in for by a standby worker."""
LEND_POLL_SECONDS = 0.05
SETTLE_ON_CLOSE_SECONDS = 5.0
"""``close()`` lets pings in flight finish (a cancelled one kills its worker abruptly)."""

W = TypeVar("W", bound=FramedRequests)
"""A worker (local or container): what it offers the pool is declared by
:class:`~agentenvs.sandbox.pool.worker.FramedRequests` (``request()``, ``kill()``,
``alive``, ``recycle`` and the after-run ``health`` check)."""


@dataclass
class Slot(Generic[W]):
    """One place in the warm pool; its worker is replaced when it dies or asks to be."""

    worker: W | None = None
    lent: bool = False
    """A standby worker serving one request while every pool slot is held (see
    ``SupervisedSandbox._acquire_slot``); it returns to standby afterwards."""


class PoolCare(Generic[W]):
    """Standby workers, settling and health checks of the pool (see the module docstring)."""

    # provided by SupervisedSandbox
    _idle: Any
    _slots: list
    _standby: list
    _standby_wanted: int
    _lent: int
    _busy_since: dict[int, float]
    _settling: set[asyncio.Task]
    _closed: bool
    stats: dict[str, int]
    _standby_starting = 0
    _out_of_queue = 0
    """Pool slots away from the idle queue for their worker's cleanup, check or replacement."""

    async def _acquire_slot(self) -> Slot[W]:
        """An idle slot; or, when no slot is idle and one is held by a run longer than
        ``LEND_AFTER_SECONDS`` (a hostile program running into its timeout, say) or is
        away while its worker cleans up after a failed run or is replaced, a standby
        worker lent as a temporary slot, so short runs do not queue behind it (at once
        when the slot is away: it will not be back within a short run)."""
        assert self._idle is not None
        while True:
            if not self._idle.empty() or not self._standby_wanted:
                return await self._idle.get()
            if not self._can_lend():
                try:
                    return await asyncio.wait_for(self._idle.get(), LEND_POLL_SECONDS)
                except TimeoutError:
                    pass
            if self._can_lend():
                self._lent += 1
                self.stats["standby_lends"] += 1
                return Slot(self._standby.pop(), lent=True)

    def _can_lend(self) -> bool:
        """Each slot held by a long run, or out of the queue while its worker cleans up
        after a failed run or is checked or replaced (``_release_slot``), may be stood in
        for by one standby worker: the other slots' short runs keep their capacity, as if
        the long run and its aftermath were elsewhere."""
        if not self._standby or self._lent >= self._standby_wanted:
            return False
        now = asyncio.get_running_loop().time()
        stuck = sum(now - started >= LEND_AFTER_SECONDS for started in self._busy_since.values())
        return stuck + self._out_of_queue > self._lent

    def _swap_in_standby(self, slot: Slot[W]) -> W | None:
        """A worker that must go is replaced by a standby one at once (none waits)."""
        while self._standby:
            spare = self._standby.pop()
            if spare.alive:
                old, slot.worker = slot.worker, spare
                self.stats["standby_swaps"] += 1
                self._refill_standby()
                return old
            self._background(self._retire(spare))
        return None

    def _refill_standby(self) -> None:
        missing = self._standby_wanted - len(self._standby) - self._lent - self._standby_starting
        for _ in range(max(0, missing)):
            self._standby_starting += 1

            async def start_one() -> None:
                try:
                    await self._spawn_into(self._standby)
                finally:
                    self._standby_starting -= 1

            self._background(start_one())

    def _health_pid(self, worker: W) -> int | None:
        """A host pid in the worker's cgroup and mount namespace (``None``: not visible)."""
        return None

    def _watch_health(self, worker: W) -> W:
        """Take a fresh worker's baseline for the after-run health check (``health``)."""
        worker.health = WorkerHealth.for_pid(self._health_pid(worker))
        return worker

    def _release_slot(self, slot: Slot[W], *, settle: bool = False) -> None:
        """Give a slot back; a worker to check or recycle is dealt with off the request path.

        Issue class 8: when a run leaves its worker unfit (a wipe too costly, a reset
        that could not be proven), the next request must not pay for the replacement.
        Class 3: a worker whose cgroup is not back at its fresh baseline (memory after a
        reclaim, processes, tmpfs) is recycled too (``pool/health.py``). The slot
        stays out of the idle queue meanwhile, and other slots serve. With ``settle`` (the
        run failed: killed, timed out, flooded...) the slot also waits out the worker's own
        cleanup (a ping is answered after it) before it is offered again, so that no
        request picks a worker that is still killing a fork bomb or wiping a work dir
        while another worker is free.
        """
        assert self._idle is not None
        worker = slot.worker
        fit = worker is not None and worker.alive and not worker.recycle
        health = worker.health if worker is not None else None
        healthy = fit and (health is None or not health.problem())
        if slot.lent:
            self._give_back_lent(slot, healthy, settle)
            return
        if self._closed or (healthy and not settle):
            self._idle.put_nowait(slot)
            return
        if not fit and (old := self._swap_in_standby(slot)) is not None:
            # the slot serves again at once; the old worker goes off the request path
            self._idle.put_nowait(slot)
            self._background(self._retire(old))
            return

        async def check_or_replace() -> None:
            try:
                if healthy:
                    await self._settle(slot)
                elif fit and health is not None:
                    await self._recheck_health(slot, health)
                if slot.worker is not None and slot.worker.recycle:
                    old = self._swap_in_standby(slot)
                    if old is not None:
                        await self._retire(old)
                with contextlib.suppress(WorkerStartError):
                    await self._ready_worker(slot)
            finally:
                assert self._idle is not None
                self._out_of_queue -= 1
                self._idle.put_nowait(slot)

        self._out_of_queue += 1  # at once: the next request may be lent a standby worker
        self._background(check_or_replace())

    def _give_back_lent(self, slot: Slot[W], healthy: bool, settle: bool) -> None:
        """A lent standby worker returns to standby (once settled), or is replaced."""
        worker = slot.worker

        async def back() -> None:
            if settle:
                await self._settle(slot)
            self._lent -= 1
            if not self._closed and worker is not None and worker.alive and not worker.recycle:
                self._standby.append(worker)
                return
            if worker is not None:
                await self._retire(worker)
            self._refill_standby()

        if healthy and not settle:
            assert worker is not None  # healthy implies a live worker
            self._lent -= 1
            self._standby.append(worker)
            return
        self._background(back())

    async def _settle(self, slot: Slot[W]) -> None:
        """Wait until the worker finished cleaning up after its run (then check its health)."""
        if not await self._ping(slot.worker):
            return  # dead: replaced by the caller
        health = slot.worker.health if slot.worker is not None else None
        if health is not None and health.problem():
            await self._recheck_health(slot, health)

    async def _ping(self, worker: W | None) -> bool:
        """A ping is answered once the worker finished its own after-run work."""
        if worker is None:
            return False
        task = asyncio.current_task()
        if task is not None:
            self._settling.add(task)
        try:
            await worker.request({"op": "ping"}, 30)
            return True
        except WorkerDead:
            return False
        finally:
            if task is not None:
                self._settling.discard(task)

    async def _recheck_health(self, slot: Slot[W], health: WorkerHealth) -> None:
        """The quick look was over the baseline: let the worker finish its own cleanup
        (a ping is answered after it), reclaim memory, look again; recycle if still off."""
        worker = slot.worker
        if not await self._ping(worker):
            return  # dead: replaced by the caller
        problem = await asyncio.to_thread(health.recover)
        if problem:
            worker.recycle = True
            worker.recycle_reason = problem
            self.stats["health_recycles"] = self.stats.get("health_recycles", 0) + 1
