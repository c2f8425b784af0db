"""Micro-batching: many concurrent callers, one batched backend call.

Envs search one query at a time, but every backend is far cheaper per query in
batches (one HTTP round trip, one pass of Python overhead). A :class:`MicroBatcher`
collects submissions for up to ``max_wait_s`` (or until ``max_batch`` queries wait),
runs them as one batch, and hands each caller its own slice of the results. A
failed batch fails every caller in it with the same exception.

Batches adapt to load: with ``max_concurrency`` batches already running, new
submissions keep waiting and are merged, and the moment a batch finishes the next
one leaves with everything that queued up meanwhile (up to ``max_batch``).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")
Value = TypeVar("Value")


@dataclass
class _Pending(Generic[Item, Result]):
    items: list[Item]
    future: asyncio.Future[list[Result]]


@dataclass
class MicroBatcher(Generic[Item, Result]):
    """Batches submissions made on one event loop (see :class:`PerLoop` for many loops)."""

    run_batch: Callable[[list[Item]], Awaitable[list[Result]]]
    max_batch: int = 64
    max_wait_s: float = 0.002
    max_concurrency: int | None = None
    _pending: deque[_Pending[Item, Result]] = field(default_factory=deque, init=False)
    _pending_count: int = field(default=0, init=False)
    _timer: asyncio.Handle | None = field(default=None, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    async def submit(self, items: list[Item]) -> list[Result]:
        if not items:
            return []
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Result]] = loop.create_future()
        self._pending.append(_Pending(list(items), future))
        self._pending_count += len(items)
        if self._pending_count >= self.max_batch:
            self._flush()
        elif self._timer is None:
            if self.max_wait_s > 0:
                self._timer = loop.call_later(self.max_wait_s, self._flush)
            else:  # still gather everything submitted in this loop iteration
                self._timer = loop.call_soon(self._flush)
        return await future

    def _has_slot(self) -> bool:
        return self.max_concurrency is None or len(self._tasks) < self.max_concurrency

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._pending and self._has_slot():
            batch: list[_Pending[Item, Result]] = []
            count = 0
            while self._pending and (
                not batch or count + len(self._pending[0].items) <= self.max_batch
            ):
                entry = self._pending.popleft()
                self._pending_count -= len(entry.items)
                if entry.future.cancelled():
                    continue
                batch.append(entry)
                count += len(entry.items)
            if batch:
                task = asyncio.get_running_loop().create_task(self._run(batch))
                self._tasks.add(task)
                task.add_done_callback(self._batch_done)

    def _batch_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._pending:  # these already waited: send them now
            self._flush()

    async def _run(self, batch: list[_Pending[Item, Result]]) -> None:
        flat = [item for entry in batch for item in entry.items]
        try:
            results = await self.run_batch(flat)
            if len(results) != len(flat):
                raise RuntimeError(f"batch of {len(flat)} queries got {len(results)} results")
        except asyncio.CancelledError:
            for entry in batch:
                entry.future.cancel()
            raise
        except Exception as err:  # every caller of the batch learns why it failed
            for entry in batch:
                if not entry.future.done():
                    entry.future.set_exception(err)
            return
        start = 0
        for entry in batch:
            end = start + len(entry.items)
            if not entry.future.done():
                entry.future.set_result(results[start:end])
            start = end

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for entry in self._pending:
            if not entry.future.done():
                entry.future.cancel()
        self._pending.clear()
        self._pending_count = 0
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class PerLoop(Generic[Value]):
    """One value per running event loop, made on first use.

    Asyncio objects (futures, HTTP clients) belong to the loop that made them; a
    retriever shared by a whole process (the collector's loop, a gymnasium wrapper's
    private loop, a test's loop) keeps one of each per loop.
    """

    def __init__(self, factory: Callable[[], Value]) -> None:
        self._factory = factory
        self._values: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Value] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> Value:
        loop = asyncio.get_running_loop()
        value = self._values.get(loop)
        if value is None:
            value = self._factory()
            self._values[loop] = value
        return value

    def pop_current(self) -> Value | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        return self._values.pop(loop, None)


class TopKBatcher(Generic[Result]):
    """Micro-batched ``search(queries, topk)`` for a retriever, one batcher per loop.

    Callers may ask for different ``topk``: a batch searches once at its largest k and
    each caller gets its own top-k slice. ``search_at_k`` is the retriever's batched
    search (usually its blocking ``search_batch`` run on a worker thread).
    """

    def __init__(
        self,
        search_at_k: Callable[[list[str], int], Awaitable[list[list[Result]]]],
        *,
        max_batch: int,
        max_wait_s: float,
        max_concurrency: int | None = None,
    ) -> None:
        self._search_at_k = search_at_k
        self._batchers: PerLoop[MicroBatcher[tuple[str, int], list[Result]]] = PerLoop(
            lambda: MicroBatcher(
                self._run,
                max_batch=max_batch,
                max_wait_s=max_wait_s,
                max_concurrency=max_concurrency,
            )
        )

    async def _run(self, items: list[tuple[str, int]]) -> list[list[Result]]:
        k = max(topk for _, topk in items)
        found = await self._search_at_k([query for query, _ in items], k)
        return [ranked[:topk] for ranked, (_, topk) in zip(found, items, strict=True)]

    async def search(self, queries: list[str], topk: int) -> list[list[Result]]:
        return await self._batchers.get().submit([(query, topk) for query in queries])

    async def close(self) -> None:
        """Close this loop's batcher (other loops' batchers go with their loops)."""
        batcher = self._batchers.pop_current()
        if batcher is not None:
            await batcher.close()


class BlockingSearch(Generic[Result]):
    """A retriever's blocking batched search, run on one executor and micro-batched.

    The local backends whose search must stay on one thread use this: dense (a
    one-thread pool, since torch and faiss already use every core per call) and
    Lucene (the JVM thread pyjnius is attached to). ``executor`` is asked for the
    executor at every batch, so a backend may hand out one made lazily.
    """

    def __init__(
        self,
        search_batch: Callable[[list[str], int], list[list[Result]]],
        executor: Callable[[], Executor],
        *,
        batch_size: int,
        batch_wait_ms: float,
    ) -> None:
        self._search_batch = search_batch
        self._executor = executor
        self._batcher: TopKBatcher[Result] = TopKBatcher(
            self._on_executor, max_batch=batch_size, max_wait_s=batch_wait_ms / 1000
        )

    async def _on_executor(self, queries: list[str], k: int) -> list[list[Result]]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor(), self._search_batch, queries, k)

    async def search(self, queries: list[str], topk: int) -> list[list[Result]]:
        if not queries:
            return []
        if topk < 1:
            return [[] for _ in queries]
        return await self._batcher.search(queries, topk)

    async def close(self) -> None:
        await self._batcher.close()
