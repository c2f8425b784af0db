"""A killed ALFWorld worker's crash reason survives into the record, whoever notices first.

When a worker dies, its reader thread sees EOF and records why (the signal and the
log tail). If the pool notices the dead process first (a sibling episode releasing
its engine), it used to shut the worker down with "was shut down", and that is the
reason the waiting episode and its stored record then carried.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from agentenvs.envs.alfworld.pool import EnginePool, WorkerCrashed


async def test_the_pool_keeps_the_signal_when_it_notices_a_death_first() -> None:
    pool = EnginePool(workers=1, engines_per_worker=2)
    try:
        lease = await pool.lease()
        worker = lease.worker
        hold = threading.Event()
        real_on_exit = worker._on_exit
        worker._on_exit = hold.wait  # the reader thread stalls before it says why
        os.kill(worker.pid, signal.SIGKILL)
        await asyncio.to_thread(worker.proc.wait, 30)
        assert worker.dead_reason is None and not worker.alive

        with pool._lock:
            pool._drop_dead()  # what a sibling's release does
        assert "was killed by SIGKILL" in (worker.dead_reason or "")
        with pytest.raises(WorkerCrashed, match="killed by SIGKILL"):
            await lease.call("look", timeout=10)
        hold.set()
        real_on_exit()
        lease.release()
    finally:
        pool.close()
