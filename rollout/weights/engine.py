"""vLLM's endpoints for changing weights, behind names that say what they do.

Facts of vLLM 0.32's OpenAI-compatible server:

* ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}`` (and ``unload``)
  need ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; a name can
  be loaded once, so every version gets its own name;
* ``POST /collective_rpc`` ``{"method": "reload_weights", "kwargs": {"weights_path"}}``
  and ``POST /reset_prefix_cache`` need ``VLLM_SERVER_DEV_MODE=1``;
* ``POST /abort_requests {}`` (dev mode) cuts every request short without
  pausing: each answers with its tokens so far and ``finish_reason: "abort"``
  (partial rollouts go on from there);
* ``POST /pause?mode=wait`` drains running requests and ``POST /resume`` lets new
  ones run; older servers have neither, and a sync then goes on without them.
  Its ``clear_cache`` (deprecated, on by default) is turned off: the reset is
  done explicitly, on every path.

A missing endpoint is a :class:`WeightSyncError` that says which flag enables it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.rollout.policies.base import PolicyError

if TYPE_CHECKING:
    from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy


class WeightSyncError(AgentEnvsError, RuntimeError):
    """The engine refused or could not apply a weight change.

    ``status`` is the HTTP status of the server's answer when it gave one.
    """


_MISSING = frozenset({404, 405})
"""The statuses with which vLLM says an endpoint is not there (its flag is off)."""


_ENABLE = {
    "/v1/load_lora_adapter": "start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
    "/v1/unload_lora_adapter": "start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
    "/collective_rpc": "start vLLM with VLLM_SERVER_DEV_MODE=1",
    "/reset_prefix_cache": "start vLLM with VLLM_SERVER_DEV_MODE=1",
}


class VLLMEngine:
    """The admin side of one vLLM server, reached through the policy's HTTP client."""

    def __init__(self, policy: OpenAICompatPolicy, url: str | None = None) -> None:
        self.policy = policy
        self.url = url or policy.url
        """Which of the policy's servers this is."""
        self.can_pause: bool | None = None
        """Unknown until the first pause; False once the server showed it has none."""

    async def call(self, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            return await self.policy.request("POST", path, body, server=self.url)
        except PolicyError as err:
            hint = _ENABLE.get(path.split("?")[0])
            if hint and err.status in _MISSING:
                raise WeightSyncError(
                    f"{path} is not available: {hint} ({err})", status=err.status
                ) from None
            raise WeightSyncError(f"{path} failed: {err}", status=err.status) from None

    async def pause(self) -> bool:
        """Drain running requests and hold new ones; False when the engine cannot."""
        if self.can_pause is False:
            return False
        try:
            # clear_cache=false: the prefix cache is reset by its own call, which
            # also covers engines whose pause does not clear it.
            await self.policy.request(
                "POST", "/pause?mode=wait&clear_cache=false", None, server=self.url
            )
        except PolicyError as err:
            if err.status == 404:
                self.can_pause = False
                return False
            raise WeightSyncError(f"/pause failed: {err}", status=err.status) from None
        self.can_pause = True
        return True

    async def abort_requests(self) -> bool:
        """Cut every request on the server short without pausing it (``POST
        /abort_requests {}``, a dev-mode endpoint): each answers with the tokens it
        sampled so far and ``finish_reason: "abort"``. False when the server has
        no such endpoint (the requests then run to their end)."""
        try:
            await self.policy.request("POST", "/abort_requests", {}, server=self.url)
        except PolicyError as err:
            if err.status in _MISSING:
                return False
            raise WeightSyncError(f"/abort_requests failed: {err}", status=err.status) from None
        return True

    async def resume(self) -> None:
        await self.call("/resume")

    async def reset_prefix_cache(self) -> None:
        await self.call("/reset_prefix_cache")

    async def load_lora(self, name: str, path: str) -> None:
        await self.call("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    async def unload_lora(self, name: str) -> None:
        await self.call("/v1/unload_lora_adapter", {"lora_name": name})

    async def reload_weights(self, path: str) -> None:
        body = {"method": "reload_weights", "kwargs": {"weights_path": path}}
        await self.call("/collective_rpc", body)

    async def served_models(self) -> list[str]:
        """The names the server serves now: its base model and every loaded adapter."""
        try:
            data = await self.policy.request("GET", "/v1/models", None, server=self.url)
            return [str(m["id"]) for m in data["data"]]
        except PolicyError as err:
            raise WeightSyncError(f"/v1/models failed: {err}", status=err.status) from None
        except (KeyError, TypeError) as err:
            raise WeightSyncError(f"/v1/models answered without a model list: {err!r}") from None


async def resume_all(engines: list[VLLMEngine]) -> tuple[list[VLLMEngine], WeightSyncError | None]:
    """Resume each engine: those that could not be, and the first failure."""
    failure: WeightSyncError | None = None
    left: list[VLLMEngine] = []
    for engine in engines:
        try:
            await engine.resume()
        except WeightSyncError as err:
            failure = failure or err
            left.append(engine)
    return left, failure
