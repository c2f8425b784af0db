"""One WebSocket per env server and event loop, shared by every group that loop plays.

A group used to open its own socket, so the steps of different groups never shared a
frame. Groups of one event loop now share it: each
:class:`~agentenvs.envs.remote.client.ServerConnection` takes a use of the loop's
object for its key and gives it back when it closes; the last one closes the object.
An object belongs to its event loop (a connection pool, a reader task), so a key is
looked up per running loop, and an entry whose loop has closed is replaced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    value: T
    loop: asyncio.AbstractEventLoop
    """Held so that the loop's id in the key cannot be reused while the entry lives."""
    users: int = 0


class PerLoop(Generic[T]):
    """Objects shared by key within one event loop, counted by use."""

    def __init__(self, close: Callable[[T], Awaitable[None]]) -> None:
        self._close = close
        self._entries: dict[tuple[int, Hashable], _Entry[T]] = {}

    def acquire(self, key: Hashable, make: Callable[[], T]) -> T:
        """The running loop's object for ``key`` (made on first use), one use counted."""
        loop = asyncio.get_running_loop()
        slot = (id(loop), key)
        entry = self._entries.get(slot)
        if entry is None or entry.loop is not loop or loop.is_closed():
            entry = self._entries[slot] = _Entry(make(), loop)
        entry.users += 1
        return entry.value

    async def release(self, key: Hashable, value: T) -> None:
        """One use of ``value`` fewer; the last closes it. A value no longer in the table
        (replaced, or never shared) is closed when released."""
        slot = (id(asyncio.get_running_loop()), key)
        entry = self._entries.get(slot)
        if entry is None or entry.value is not value:
            await self._close(value)
            return
        entry.users -= 1
        if entry.users <= 0:
            del self._entries[slot]
            await self._close(value)

    def __len__(self) -> int:
        return len(self._entries)
