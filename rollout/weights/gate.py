"""Keep a weight swap and sampling requests apart, so each turn has one set of weights.

The engine's own pause (vLLM's ``/pause?mode=wait``) drains what is running, but a
request sent while it is paused would be labelled with the old weights by the
client and then run on the new ones. The gate closes that gap on the client side:
a swap waits until the requests in flight have finished and holds new ones back
until the new weights are verified, so the version a request is stamped with is
the version that served it. It also works for engines that have no pause at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class SwapGate:
    def __init__(self) -> None:
        self._in_flight = 0
        self._swapping = False
        self._changed: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

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
    async def swap(self) -> AsyncIterator[None]:
        """Around a weight swap: no request is in flight inside it."""
        changed = self._condition()
        async with changed:
            await changed.wait_for(lambda: not self._swapping)
            self._swapping = True
            await changed.wait_for(lambda: self._in_flight == 0)
        try:
            yield
        finally:
            async with changed:
                self._swapping = False
                changed.notify_all()
