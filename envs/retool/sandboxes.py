"""One sandbox per process, per sandbox configuration, per event loop.

Starting a sandbox means starting a pool of warm workers, so environments must
never start their own: every ReTool episode in a process borrows the same one.
It is made lazily on first use (configs and group builders stay picklable and
cheap), keyed by the configuration, and by the running event loop because the
workers' pipes belong to the loop that opened them.

It is closed, whichever comes first:

* by :func:`close_shared_sandboxes` (tests, benchmarks, long-lived services);
* when its event loop shuts down through ``asyncio.run`` / ``asyncio.Runner``
  (the CLI, pytest-asyncio): a parked async generator tied to the loop is
  finalized by ``loop.shutdown_asyncgens()`` and closes the sandbox on its own
  loop, before the loop is closed;
* at interpreter exit, as a last resort.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from agentenvs.sandbox.base import Sandbox, SandboxConfig

logger = logging.getLogger(__name__)

_Key = tuple[int, str]


@dataclass
class _Entry:
    loop: asyncio.AbstractEventLoop
    sandbox: Sandbox
    guard: AsyncGenerator[None, None] | None = None
    """Parked async generator whose finalization at loop shutdown closes the sandbox."""


_sandboxes: dict[_Key, _Entry] = {}
_locks: dict[_Key, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}


def _key(loop: asyncio.AbstractEventLoop, config: SandboxConfig) -> _Key:
    return id(loop), config.model_dump_json()


async def shared_sandbox(config: SandboxConfig) -> Sandbox:
    """The started sandbox for ``config`` in this event loop, created on first use.

    Raises :class:`~agentenvs.sandbox.base.SandboxUnavailable` when the backend
    cannot start (missing bubblewrap, an unreachable server, isolation below
    ``min_isolation``): an infrastructure problem, not something the model did.
    """
    loop = asyncio.get_running_loop()
    await _forget_closed_loops()
    key = _key(loop, config)
    entry = _sandboxes.get(key)
    if entry is not None:
        return entry.sandbox
    lock_entry = _locks.get(key)
    if lock_entry is None:
        lock_entry = _locks[key] = (loop, asyncio.Lock())
    async with lock_entry[1]:
        entry = _sandboxes.get(key)
        if entry is None:
            from agentenvs.sandbox.factory import create  # lazy: backends import heavy deps

            sandbox = create(config)
            await sandbox.start()
            entry = _sandboxes[key] = _Entry(loop, sandbox)
            entry.guard = _closed_with_loop(key)
            await entry.guard.__anext__()  # park it: the loop now tracks it
            logger.debug("started a shared %s sandbox", config.backend)
    return entry.sandbox


async def _closed_with_loop(key: _Key) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        entry = _sandboxes.pop(key, None)
        _locks.pop(key, None)
        if entry is not None:
            await _close_quietly(entry.sandbox)


async def close_shared_sandboxes() -> int:
    """Close the shared sandboxes of the running loop; returns how many were closed."""
    loop = asyncio.get_running_loop()
    closed = 0
    for key, entry in list(_sandboxes.items()):
        if entry.loop is loop:
            del _sandboxes[key]
            _locks.pop(key, None)
            await _close_quietly(entry.sandbox)
            if entry.guard is not None:
                await entry.guard.aclose()
            closed += 1
    return closed


def open_sandbox_count() -> int:
    return len(_sandboxes)


async def _close_quietly(sandbox: Sandbox) -> None:
    try:
        await sandbox.close()
    except Exception:
        logger.warning("closing a shared sandbox failed", exc_info=True)


async def _forget_closed_loops() -> None:
    """Drop sandboxes whose loop was closed without shutting down its async
    generators (a hand-made loop), closing them as well as a foreign loop allows."""
    for key, entry in list(_sandboxes.items()):
        if entry.loop.is_closed():
            del _sandboxes[key]
            _locks.pop(key, None)
            try:
                await asyncio.wait_for(_close_quietly(entry.sandbox), timeout=10)
            except Exception:
                logger.debug("a sandbox of a closed event loop could not be closed", exc_info=True)
    for key, (loop, _) in list(_locks.items()):
        if loop.is_closed():
            del _locks[key]


def _abandon(sandbox: Sandbox) -> None:
    """At exit, for a sandbox whose loop closed without closing it: close it on a
    fresh loop (backends whose close needs no loop-bound transport succeed)."""
    runner = asyncio.new_event_loop()
    try:
        runner.run_until_complete(asyncio.wait_for(sandbox.close(), timeout=10))
    except Exception:
        logger.debug(
            "a sandbox left open by a closed event loop could not be closed", exc_info=True
        )
    finally:
        runner.close()


@atexit.register
def _close_at_exit() -> None:
    for key, entry in list(_sandboxes.items()):
        del _sandboxes[key]
        if not entry.loop.is_closed() and not entry.loop.is_running():
            try:
                entry.loop.run_until_complete(_close_quietly(entry.sandbox))
                continue
            except Exception:
                logger.debug("closing a sandbox on its own loop at exit failed", exc_info=True)
        _abandon(entry.sandbox)
