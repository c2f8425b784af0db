"""Standby workers (``SandboxConfig.spare_workers``): nobody waits for a recycle or a
hostile run (issue #11, the load target), nor for a hostile run's aftermath (issue #24:
the benchmark showed innocent requests waiting while the slot a hostile run had used was
away for its worker's cleanup or replacement, and behind a condemned worker found only
by the next request).

Run for real on every backend of the escape suite. No clocks are asserted: what is
checked is the order of events and where a request ran.
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from support.sandbox_escape.backends import sandbox_fixture

from agentenvs.sandbox import ExecStatus, Sandbox, SandboxConfig

pytestmark = pytest.mark.asyncio(loop_scope="module")

CONFIG = SandboxConfig(timeout=20.0, memory_limit_mb=256, pool_size=1, spare_workers=1)

LEAVE_TOO_MANY_FILES = (
    "import os\n"
    "for i in range(30_000):\n"
    "    os.close(os.open(f'f{i}', os.O_CREAT | os.O_WRONLY, 0o600))\n"
    "print('left')"
)
WHO = "import os\nprint(os.getpid() > 0)"

sandbox = sandbox_fixture(CONFIG)


async def _standby_ready(sandbox: Sandbox) -> None:
    """Wait until a standby worker is warm and the pool slot is back in the queue."""
    for _ in range(1200):
        if sandbox._standby and not sandbox._idle.empty():  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no standby worker was started, or the slot did not come back")


async def test_a_worker_to_recycle_is_replaced_by_the_standby_at_once(sandbox: Sandbox) -> None:
    await sandbox.start()
    await _standby_ready(sandbox)
    slot = sandbox._slots[0]  # type: ignore[attr-defined]
    before, standby = slot.worker, sandbox._standby[-1]  # type: ignore[attr-defined]
    swaps = sandbox.stats["standby_swaps"]  # type: ignore[attr-defined]
    result = await sandbox.run(LEAVE_TOO_MANY_FILES)
    assert result.ok, result
    # when run() returns, the slot is already idle again, with the standby worker in it
    assert sandbox._idle.qsize() == 1  # type: ignore[attr-defined]
    assert slot.worker is standby and slot.worker is not before
    assert sandbox.stats["standby_swaps"] == swaps + 1  # type: ignore[attr-defined]
    after = await sandbox.run("import os\nprint(len(os.listdir('.')))")
    assert after.ok and after.stdout == "0\n", after
    await _standby_ready(sandbox)  # and a new standby is started in the background


async def test_a_short_run_does_not_queue_behind_a_long_one(sandbox: Sandbox) -> None:
    await _standby_ready(sandbox)
    lends = sandbox.stats["standby_lends"]  # type: ignore[attr-defined]
    long_run = asyncio.ensure_future(
        sandbox.run("import time\ntime.sleep(3)\nprint('long')", timeout=10)
    )
    while sandbox.stats["busy"] == 0:  # type: ignore[attr-defined]
        await asyncio.sleep(0.01)  # the long run holds the only pool slot
    short = await sandbox.run(WHO)
    assert short.ok and short.stdout == "True\n", short
    assert not long_run.done(), "the short run waited for the long one"
    assert sandbox.stats["standby_lends"] == lends + 1  # type: ignore[attr-defined]
    assert (await long_run).stdout == "long\n"
    await _standby_ready(sandbox)  # the lent worker went back to standby
    assert sandbox.stats["max_busy"] <= CONFIG.pool_size + CONFIG.spare_workers  # type: ignore[attr-defined]


# --- issue #24: the aftermath of a hostile run
async def test_a_slot_away_after_a_failed_run_is_stood_in_for_at_once(sandbox: Sandbox) -> None:
    await _standby_ready(sandbox)
    lends = sandbox.stats["standby_lends"]  # type: ignore[attr-defined]
    failed = await sandbox.run("import time\ntime.sleep(60)", timeout=0.5)
    assert failed.status == ExecStatus.TIMEOUT, failed
    # the only slot now waits for its worker's ping (after the cleanup): away
    assert sandbox._idle.empty()  # type: ignore[attr-defined]
    short = await sandbox.run("print(7)")
    assert short.ok and short.stdout == "7\n", short
    assert sandbox.stats["standby_lends"] == lends + 1, sandbox.stats  # type: ignore[attr-defined]


def plant_undeletable_ipc(sandbox: Sandbox) -> None:
    """A System V segment of host root in the worker's IPC namespace: the supervisor's
    reset cannot remove it (not its owner), so the worker cannot be proven clean; the
    host's cgroup health check does not look at IPC, so only the supervisor can say."""
    worker = sandbox._slots[0].worker  # type: ignore[attr-defined]
    pid = sandbox._health_pid(worker)  # type: ignore[attr-defined]
    assert pid, "no host pid for the worker"
    subprocess.run(
        ["nsenter", "-t", str(pid), "--ipc", "ipcmk", "-M", "4096", "-p", "0600"],
        check=True,
        capture_output=True,
    )


async def test_a_worker_that_failed_its_reset_is_replaced_before_a_request_lands(
    sandbox: Sandbox,
) -> None:
    """After a failed run whose code ended by itself (its reset comes after the answer),
    the ping that settles the slot says the reset failed: the standby takes the slot
    then, and the next request is not refused by a condemned worker (no retry)."""
    await _standby_ready(sandbox)
    worker = sandbox._slots[0].worker  # type: ignore[attr-defined]
    plant_undeletable_ipc(sandbox)
    retries = sandbox.stats["retries"]  # type: ignore[attr-defined]
    failed = await sandbox.run("raise SystemExit(3)")
    assert failed.status == ExecStatus.ERROR and failed.return_code == 3, failed
    await _standby_ready(sandbox)  # the slot is back (and a new standby warm)
    assert sandbox._slots[0].worker is not worker  # type: ignore[attr-defined]
    nxt = await sandbox.run("print(8)")
    assert nxt.ok and nxt.stdout == "8\n", nxt
    assert sandbox.stats["retries"] == retries, sandbox.stats  # type: ignore[attr-defined]


async def test_a_condemned_worker_found_by_a_request_hands_over_to_the_standby(
    sandbox: Sandbox,
) -> None:
    """After a successful run the slot is offered at once; a reset that fails after the
    answer is found by the next request (or, when the reset came first, by the run's own
    answer), and the warm standby takes the slot: no request waits for a fresh start."""
    await _standby_ready(sandbox)
    plant_undeletable_ipc(sandbox)
    swaps = sandbox.stats["standby_swaps"]  # type: ignore[attr-defined]
    started = sandbox.stats.get("spawned", sandbox.stats.get("containers_started"))  # type: ignore[attr-defined]
    assert (await sandbox.run("print(1)")).ok
    nxt = await sandbox.run("print(9)")
    assert nxt.ok and nxt.stdout == "9\n", nxt
    assert sandbox.stats["standby_swaps"] == swaps + 1, sandbox.stats  # type: ignore[attr-defined]
    await _standby_ready(sandbox)  # one start in all: the new standby, in the background
    now = sandbox.stats.get("spawned", sandbox.stats.get("containers_started"))  # type: ignore[attr-defined]
    assert now == started + 1, sandbox.stats  # type: ignore[operator]
