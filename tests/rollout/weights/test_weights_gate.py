"""The swap gate and the weights identity, without an engine.

The gate is what makes a per-request weights stamp true: a swap must wait for
the requests in flight and hold back new ones until it is done.
"""

from __future__ import annotations

import asyncio

import pytest

from agentenvs.envs.weights_identity import WeightsIdentity, hash_weights
from agentenvs.rollout.weights.gate import SwapGate


async def test_a_swap_waits_for_requests_in_flight_and_holds_new_ones():
    gate = SwapGate()
    events: list[str] = []
    release = asyncio.Event()

    async def request(name: str, wait: asyncio.Event | None = None) -> None:
        async with gate.request():
            events.append(f"{name} start")
            if wait is not None:
                await wait.wait()
            events.append(f"{name} end")

    async def swap() -> None:
        async with gate.swap():
            events.append("swap")

    first = asyncio.create_task(request("old", release))
    await asyncio.sleep(0)
    swapping = asyncio.create_task(swap())
    await asyncio.sleep(0)
    late = asyncio.create_task(request("new"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert events == ["old start"] and gate.in_flight == 1  # the swap waits, so does "new"
    release.set()
    await asyncio.gather(first, swapping, late)
    assert events == ["old start", "old end", "swap", "new start", "new end"]


class _RecordingGate:
    """A linked gate (as a Ray executor's is) that writes down what the swap did to it."""

    def __init__(self, events: list[str], name: str) -> None:
        self.events, self.name = events, name

    async def close(self) -> None:
        self.events.append(f"{self.name} closed")

    async def open(self, identity) -> None:
        self.events.append(f"{self.name} opened with {identity}")


async def test_a_swap_closes_linked_gates_after_its_own_and_opens_them_with_the_new_identity():
    gate = SwapGate()
    events: list[str] = []
    gate.link(_RecordingGate(events, "actors"))
    current = {"version": 1}
    async with gate.swap(opens_with=lambda: current["version"]):
        events.append("swap")
        current["version"] = 2
    assert events == ["actors closed", "swap", "actors opened with 2"]
    with pytest.raises(RuntimeError, match="load failed"):
        async with gate.swap(opens_with=lambda: current["version"]):
            raise RuntimeError("load failed")
    assert events[-1] == "actors opened with 2"  # opened again after a failed swap too
    async with gate.request():  # and the gate itself is open
        pass


async def test_a_swap_cancelled_while_draining_leaves_the_gate_open():
    gate = SwapGate()
    release = asyncio.Event()

    async def in_flight() -> None:
        async with gate.request():
            await release.wait()

    async def swap() -> None:
        async with gate.swap():
            pass

    request = asyncio.create_task(in_flight())
    await asyncio.sleep(0)
    swapping = asyncio.create_task(swap())
    for _ in range(3):
        await asyncio.sleep(0)
    swapping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await swapping
    late = asyncio.create_task(in_flight())  # not held by a swap that never happened
    for _ in range(3):
        await asyncio.sleep(0)
    assert gate.in_flight == 2
    release.set()
    await asyncio.gather(request, late)


def test_weights_hash_follows_the_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "a" / "config.json").write_text("{}")
    (tmp_path / "a" / "README.md").write_text("ignored")
    first = hash_weights(tmp_path / "a")
    (tmp_path / "a" / "README.md").write_text("still ignored")
    assert hash_weights(tmp_path / "a") == first
    (tmp_path / "a" / "model.safetensors").write_bytes(b"weights2")
    assert hash_weights(tmp_path / "a") != first
    with pytest.raises(FileNotFoundError, match="no weights directory"):
        hash_weights(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no weight files"):
        hash_weights(tmp_path / "empty")


def test_identity_label_names_what_was_loaded():
    lora = WeightsIdentity(version=3, path="lora", name="run-v3", sha256="0123456789abcdef")
    assert lora.label() == "lora:run-v3@01234567"
    assert WeightsIdentity(version=0).label() == "base:?"
