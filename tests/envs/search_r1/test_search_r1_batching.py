"""Micro-batching: concurrent submissions become few backend calls, errors reach all callers."""

from __future__ import annotations

import asyncio

import pytest

from agentenvs.envs.search_r1.retrievers.batching import MicroBatcher, PerLoop


class Backend:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail
        self.in_flight = 0
        self.most_in_flight = 0

    async def __call__(self, items: list[str]) -> list[str]:
        self.calls.append(list(items))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        if self.fail:
            raise RuntimeError("backend down")
        return [item.upper() for item in items]


async def test_concurrent_submissions_are_batched_and_answered_in_order():
    backend = Backend()
    batcher = MicroBatcher(backend, max_batch=8, max_wait_s=0.005)
    results = await asyncio.gather(*(batcher.submit([f"q{i}", f"r{i}"]) for i in range(20)))
    assert results == [[f"Q{i}", f"R{i}"] for i in range(20)]
    assert all(len(call) <= 8 for call in backend.calls)
    assert len(backend.calls) == 5  # 40 items, 8 per batch


async def test_large_submission_goes_alone_and_zero_wait_still_batches():
    backend = Backend()
    batcher = MicroBatcher(backend, max_batch=4, max_wait_s=0)
    big, small = await asyncio.gather(batcher.submit(list("abcdef")), batcher.submit(["x"]))
    assert big == list("ABCDEF") and small == ["X"]
    backend2 = Backend()
    batcher2 = MicroBatcher(backend2, max_batch=100, max_wait_s=0)
    await asyncio.gather(*(batcher2.submit([str(i)]) for i in range(10)))
    assert len(backend2.calls) == 1  # everything submitted in one loop iteration


async def test_failure_reaches_every_caller_of_the_batch():
    batcher = MicroBatcher(Backend(fail=True), max_batch=50, max_wait_s=0.005)
    results = await asyncio.gather(
        *(batcher.submit([str(i)]) for i in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, RuntimeError) and "backend down" in str(r) for r in results)


async def test_concurrency_bound_and_cancelled_callers():
    backend = Backend()
    batcher = MicroBatcher(backend, max_batch=1, max_wait_s=0, max_concurrency=2)
    await asyncio.gather(*(batcher.submit([str(i)]) for i in range(8)))
    assert backend.most_in_flight == 2
    waiter = asyncio.ensure_future(batcher.submit(["late"]))
    await asyncio.sleep(0)
    waiter.cancel()
    assert (await batcher.submit(["next"])) == ["NEXT"]
    await batcher.close()


def test_per_loop_values_are_separate():
    made = PerLoop(object)

    async def grab():
        return made.get(), made.get()

    a1, a2 = asyncio.run(grab())
    b1, _ = asyncio.run(grab())
    assert a1 is a2 and a1 is not b1
    with pytest.raises(RuntimeError):
        made.get()
