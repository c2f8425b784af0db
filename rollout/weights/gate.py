"""Keep a weight swap and sampling requests apart, so each turn has one set of weights.

The engine's own pause (vLLM's ``/pause?mode=wait``) drains what is running, but a
request sent while it is paused would be labelled with the old weights by the
client and then run on the new ones. The gate closes that gap on the client side:
a swap waits until the requests in flight have finished and holds new ones back
until the new weights are verified, so the version a request is stamped with is
the version that served it. It also works for engines that have no pause at all.

Clients in other processes (a Ray executor's actors) have gates of their own that
this one cannot see; the executor links a gate that spans them (:meth:`SwapGate.link`,
see :mod:`agentenvs.rollout.collect.executors.remote_gate`) and a swap closes each
linked gate after this one and opens it, with the identity the swap ends on, before
this one opens. Each of those actors holds a plain ``SwapGate`` of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol


class LinkedGate(Protocol):
    """A gate elsewhere that a swap must close too (drained) and open after it."""

    async def close(self) -> None: ...

    async def open(self, identity: Any) -> None: ...


class SwapGate:
    def __init__(self) -> None:
        self._in_flight = 0
        self._swapping = False
        self._changed: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.linked: list[LinkedGate] = []

    def link(self, gate: LinkedGate) -> None:
        """Close ``gate`` with every swap from now on (an executor's remote clients)."""
        if gate not in self.linked:
            self.linked.append(gate)

    def unlink(self, gate: LinkedGate) -> None:
        if gate in self.linked:
            self.linked.remove(gate)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _condition(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        if self._changed is None or self._loop is not loop:
            self._loop, self._changed = loop, asyncio.Condition()
        return self._changed

    @asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        """Around one sampling request: waits while a swap is under way."""
        changed = self._condition()
        async with changed:
            await changed.wait_for(lambda: not self._swapping)
            self._in_flight += 1
        try:
            yield
        finally:
            async with changed:
                self._in_flight -= 1
                changed.notify_all()

    @asynccontextmanager
    async def swap(
        self,
        opens_with: Callable[[], Any] | None = None,
        interrupt: Callable[[], Awaitable[None]] | None = None,
    ) -> AsyncIterator[None]:
        """Around a weight swap: no request is in flight inside it, here or behind a
        linked gate. ``opens_with()`` is the identity linked gates stamp requests
        with once open (called when the swap ends, successful or not).

        ``interrupt()``, when given, cuts the requests in flight short instead of
        waiting for them (partial rollouts: :mod:`agentenvs.rollout.policies.partial_sampling`);
        it is called again every ``interrupt_every`` seconds while some are still in
        flight, for a request that reached the engine just after the last call."""
        changed = self._condition()
        async with changed:
            await changed.wait_for(lambda: not self._swapping)
            self._swapping = True
        try:
            await self._drain(changed, interrupt)
        except BaseException:  # cancelled while draining: the gate must not stay shut
            async with changed:
                self._swapping = False
                changed.notify_all()
            raise
        closed: list[LinkedGate] = []
        try:
            for gate in list(self.linked):
                await gate.close()
                closed.append(gate)
            yield
        finally:
            identity = opens_with() if opens_with is not None else None
            try:
                for gate in closed:
                    await gate.open(identity)
            finally:
                async with changed:
                    self._swapping = False
                    changed.notify_all()

    interrupt_every = 0.25

    async def _drain(
        self, changed: asyncio.Condition, interrupt: Callable[[], Awaitable[None]] | None
    ) -> None:
        while True:
            async with changed:
                if self._in_flight == 0:
                    return
                if interrupt is None:
                    await changed.wait_for(lambda: self._in_flight == 0)
                    return
            await interrupt()
            async with changed:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interrupt_every):
                        await changed.wait_for(lambda: self._in_flight == 0)
