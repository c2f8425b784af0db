"""The swap gate and the weights identity, without an engine.

The gate is what makes a per-request weights stamp true: a swap must wait for
the requests in flight and hold back new ones until it is done.
"""

from __future__ import annotations

import asyncio

import pytest

from agentenvs.rollout.weights.gate import SwapGate
from agentenvs.rollout.weights.identity import WeightsIdentity, hash_weights


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
