"""Standby workers (``SandboxConfig.spare_workers``): nobody waits for a recycle or a
hostile run (issue #11, the load target).

Run for real on every backend of the escape suite. No clocks are asserted: what is
checked is the order of events and where a request ran.
"""

from __future__ import annotations

import asyncio

import pytest
from support.sandbox_escape.backends import sandbox_fixture

from agentenvs.sandbox import Sandbox, SandboxConfig

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
    for _ in range(600):
        if sandbox._standby:  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no standby worker was started")


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
