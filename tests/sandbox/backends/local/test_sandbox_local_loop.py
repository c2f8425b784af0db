"""The local sandbox under an event loop that cannot start a process as another user."""

from __future__ import annotations

import pytest
from support import machine_skips

from agentenvs.sandbox import SandboxConfig
from agentenvs.sandbox.backends.local.backend import LocalSandbox

needs_sandbox = machine_skips.needs(*machine_skips.LOCAL_SANDBOX)
CONFIG = SandboxConfig(timeout=3.0, pool_size=1, memory_limit_mb=256)


@needs_sandbox
def test_a_loop_that_cannot_start_workers_as_another_user_is_refused_not_worked_around() -> None:
    """Under uvloop (which a web server may pick) the worker cannot be started as the
    unprivileged uid; the sandbox refuses with the reason instead of running as the caller."""
    import uvloop

    async def start() -> None:
        sb = LocalSandbox(CONFIG)
        try:
            await sb.start()
        finally:
            await sb.close()

    with pytest.raises(Exception, match="needs asyncio's own event loop") as caught:
        uvloop.run(start())
    assert "loop='asyncio'" in str(caught.value)
