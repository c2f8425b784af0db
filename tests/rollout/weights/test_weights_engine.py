"""The vLLM engine's admin calls read the HTTP status of a refusal, not its message text."""

from __future__ import annotations

from typing import Any

import pytest

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.weights.engine import VLLMEngine, WeightSyncError


class _Refusing:
    """A stand-in for the policy's HTTP client: every request fails with ``status``."""

    url = "http://engine"

    def __init__(self, status: int | None, message: str = "no") -> None:
        self.status = status
        self.message = message
        self.calls: list[str] = []

    async def request(self, method: str, path: str, body: Any, *, server: str) -> Any:
        self.calls.append(path)
        raise PolicyError(self.message, status=self.status)


@pytest.mark.parametrize("status", [404, 405])
async def test_missing_endpoint_names_its_flag(status: int) -> None:
    engine = VLLMEngine(_Refusing(status))  # type: ignore[arg-type]
    with pytest.raises(
        WeightSyncError, match="not available: start vLLM with --enable-lora"
    ) as caught:
        await engine.load_lora("v1", "/tmp/a")
    assert caught.value.status == status
    assert isinstance(caught.value, AgentEnvsError) and isinstance(caught.value, RuntimeError)


async def test_the_message_text_alone_is_not_a_missing_endpoint() -> None:
    """A 500 whose text mentions "HTTP 404" is a failure, not a missing flag."""
    engine = VLLMEngine(_Refusing(500, "upstream said HTTP 404"))  # type: ignore[arg-type]
    with pytest.raises(WeightSyncError, match="failed") as caught:
        await engine.reset_prefix_cache()
    assert caught.value.status == 500


async def test_a_server_without_pause_is_remembered() -> None:
    policy = _Refusing(404)
    engine = VLLMEngine(policy)  # type: ignore[arg-type]
    assert await engine.pause() is False
    assert engine.can_pause is False
    assert await engine.pause() is False
    assert len(policy.calls) == 1  # not asked again


async def test_pause_failing_otherwise_is_an_error_with_its_status() -> None:
    engine = VLLMEngine(_Refusing(503))  # type: ignore[arg-type]
    with pytest.raises(WeightSyncError, match="/pause failed") as caught:
        await engine.pause()
    assert caught.value.status == 503
    none = VLLMEngine(_Refusing(None, "did not answer"))  # type: ignore[arg-type]
    with pytest.raises(WeightSyncError) as caught:
        await none.pause()
    assert caught.value.status is None
