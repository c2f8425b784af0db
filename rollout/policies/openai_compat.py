"""A policy served by an inference server: vLLM's OpenAI-compatible completions, or SGLang.

The policy is the one public face over four parts, each a module of its own:

* the wire dialect (:mod:`.wire_dialects`): ``api="vllm"`` sends token ids to
  ``/v1/completions`` and reads the sampled ids back; ``api="sglang"`` speaks
  SGLang's native ``/generate``;
* the servers and connections (:mod:`.server_pool`): retries with backoff, a bound
  on requests in flight, least-busy routing over several servers, kept-alive
  connections;
* the weights the turns are stamped with and their custody (:mod:`.served_weights`);
* request tracing (:mod:`.request_trace`): ``trace=`` records when each sampling
  request was in flight.

Tested: ``api="vllm"`` against a real vLLM server (CPU build) and a stand-in;
``api="sglang"`` only against an emulation of SGLang's ``/generate``
(``tests/support/rollout_vllm_standin.py``, field names from SGLang's native API),
never a running SGLang server.

Inside a rollout each request gets its own seed, derived from ``seed`` and the
turn's slot (group key, trajectory, turn: :func:`derive_seed`), so the episodes of
a GRPO group differ and the same seeds reproduce them. Each turn's answer is
stamped with that seed and with the weights that served it (:attr:`weights`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import httpx

from agentenvs.envs.types import StopCondition, TokensWithLogprobs, observation_images
from agentenvs.envs.weights_identity import WeightsIdentity
from agentenvs.rollout.policies.base import (
    PolicyError,
    StampedTokens,
    check_max_tokens,
    current_turn,
    derive_seed,
    turn_token_cap,
)
from agentenvs.rollout.policies.partial_sampling import sample_across_syncs
from agentenvs.rollout.policies.request_trace import RequestTrace
from agentenvs.rollout.policies.served_weights import ServedWeights, turn_stamp
from agentenvs.rollout.policies.server_pool import LeastBusy, ServerPool, Transport, answered_by
from agentenvs.rollout.policies.vision_generate import sample_with_images
from agentenvs.rollout.policies.wire_dialects import Api, TurnRequest, dialect

__all__ = ["Api", "LeastBusy", "OpenAICompatPolicy"]


class OpenAICompatPolicy:
    """A shared :class:`Policy` backed by one or several vLLM or SGLang servers."""

    def __init__(
        self,
        url: str | Sequence[str],
        model: str | None = None,
        *,
        api: Api = "vllm",
        tokenizer: Any = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int | None = None,
        seed: int | None = None,
        timeout: float = 120.0,
        connect_timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.5,
        concurrency: int = 32,
        eos_token_ids: list[int] | None = None,
        api_key: str | None = None,
        weights_version: int | str | None = None,
        instance_check_interval: float = 5.0,
        trace: RequestTrace | None = None,
        partial_rollouts: bool = False,
    ) -> None:
        if api not in ("vllm", "sglang"):
            raise ValueError(f"api must be 'vllm' or 'sglang', got {api!r}")
        if partial_rollouts and api != "vllm":
            raise ValueError("partial_rollouts needs vLLM's streamed completions (api='vllm')")
        check_max_tokens(max_tokens)
        transport = Transport(timeout, connect_timeout, retries, backoff, concurrency, api_key)
        self.pool = ServerPool(url, transport, on_connection_lost=self._connection_lost)
        self.urls = self.pool.urls
        self.url = self.pool.url
        """The first server: admin requests (a weight sync's) go there."""
        self.servers: LeastBusy = self.pool.servers
        self.model = model
        self.api: Api = api
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.seed = seed
        if tokenizer is not None and isinstance(tokenizer, str):
            from agentenvs.rollout.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        self.eos_token_ids: set[int] = set(eos_token_ids or [])
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos_token_ids is None and isinstance(eos, int):
            self.eos_token_ids.add(eos)
        self.wire = dialect(api, self.eos_token_ids)
        self.served = ServedWeights(
            self, weights_version, instance_check_interval, watch_instances=api == "vllm"
        )
        self.custody = self.served.custody
        """The identity turns are stamped with, and what takes its proof away
        (:mod:`agentenvs.rollout.weights.custody`)."""
        self.gate = self.served.gate
        self.instances = self.served.instances
        self.trace = trace
        """When set, every sampling request leaves a span in it
        (:mod:`agentenvs.rollout.policies.request_trace`)."""
        self.partial_rollouts = partial_rollouts
        """A weight sync aborts the requests in flight and each goes on from its
        sampled tokens under the new weights, its tokens stamped as version runs
        (:mod:`agentenvs.rollout.policies.partial_sampling`); off: a sync waits for
        them to finish."""

    @property
    def retries(self) -> int:
        return self.pool.transport.retries

    @property
    def concurrency(self) -> int:
        return self.pool.transport.concurrency

    @property
    def timeout(self) -> httpx.Timeout:
        return self.pool.timeout

    @property
    def weights(self) -> WeightsIdentity:
        """What the server samples with; a weight sync replaces it once verified."""
        return self.custody.identity

    @weights.setter
    def weights(self, identity: WeightsIdentity) -> None:
        self.custody.identity = identity

    @property
    def weights_version(self) -> int | str | None:
        return self.weights.version

    @weights_version.setter
    def weights_version(self, version: int | str | None) -> None:
        self.weights = replace(self.weights, version=version)

    def served_model(self) -> str | None:
        """The model name requests use: a loaded LoRA adapter's, else the base model's."""
        if self.weights.path == "lora" and self.weights.name:
            return self.weights.name
        return self.model

    def _connection_lost(self, reason: str) -> None:
        self.custody.lose(reason)

    # ---- the policy ------------------------------------------------------------------
    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        cap = turn_token_cap(self.max_tokens, max_tokens)
        slots = self.pool.slots()
        seed = self.request_seed()
        entered = time.perf_counter()
        async with slots, self.pool.least_busy_client() as client:
            if self.api == "vllm" and self.model is None:
                await self._discover_model(client)
            await self.served.before_request()
            if self.partial_rollouts and not observation_images(observation):
                return await sample_across_syncs(self, client, observation, stop, cap, seed)
            async with self.gate.request():
                weights = self.weights  # fixed while the request is in flight
                self.served.refuse_unvouched(weights)
                losses = self.custody.losses
                sent = time.perf_counter()
                if self.api == "vllm" and observation_images(observation):
                    body, out = await sample_with_images(self, client, observation, stop, cap, seed)
                else:
                    request = TurnRequest(
                        observation, stop, cap, self.temperature, self.top_p, seed,
                        self.served_model(),
                    )  # fmt: skip
                    body = self.wire.body(request)
                    data = await self.pool.send(client, "POST", self.wire.path, body, spread=True)
                    out = self.wire.parse(data, self.url)
                if self.trace is not None:
                    server = answered_by.get() or self.url
                    self.trace.add_turn(
                        body, server, len(observation), len(out.tokens),
                        max_tokens=cap, entered=entered, sent=sent,
                    )  # fmt: skip
            if self.custody.losses != losses:
                weights = await self.served.after_loss(weights)
        stamp = turn_stamp(weights, self.model, seed)
        if isinstance(out, StampedTokens):  # what the engine was given (images)
            stamp.update(out.stamp)
        return StampedTokens(out.tokens, out.logprobs, out.stop_reason, stamp=stamp)

    never_sample: frozenset[int] = frozenset()
    """Ids a turn with images keeps out of sampling (set to the image markup ids)."""

    def sees_images(self) -> bool:
        """vLLM's ``/inference/v1/generate`` takes images (``vision_generate.py``)."""
        return self.api == "vllm"

    def request_seed(self) -> int | None:
        """This request's seed: derived per turn inside a rollout, ``seed`` outside one."""
        if self.seed is None:
            return None
        slot = current_turn.get()
        return self.seed if slot is None else derive_seed(self.seed, slot)

    def provenance(self) -> dict[str, Any]:
        several = {"urls": list(self.urls)} if len(self.urls) > 1 else {}
        seen = self.custody.seen
        # Recent identities, when there were several: a group sampled across a sync is
        # recorded with the identity of the version it claims (:mod:`..weights.stamps`).
        recent = {"weights_seen": [i.to_json() for i in seen]} if len(seen) > 1 else {}
        return {
            "policy": "openai",
            "api": self.api,
            "url": self.url,
            **several,
            "model": self.model,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "seed_per_turn": "derive_seed(seed, group key, trajectory, turn)"
            if self.seed is not None
            else None,
            "weights": self.weights.to_json(),
            **({"partial_rollouts": True} if self.partial_rollouts else {}),
            **recent,
        }

    async def aclose(self) -> None:
        await self.pool.aclose()

    # ---- requests outside the sampling slots -----------------------------------------
    async def request(
        self, method: str, path: str, body: dict | None = None, *, server: str | None = None
    ) -> dict[str, Any]:
        """Any request to one server (admin endpoints, probes), with this policy's
        retries and errors; it does not wait at the gate, so a weight sync can use it.
        ``server`` is one of :attr:`urls` (default: the first). An answer that is not
        JSON (vLLM's LoRA endpoints answer in plain text) comes back as ``{"text": ...}``."""
        if server is not None and server not in self.urls:
            raise ValueError(f"{server} is not one of this policy's servers {list(self.urls)}")
        client = self.pool.admin_client()
        return await self.pool.send(client, method, path, body, plain_text_ok=True, to=server)

    async def model_name(self) -> str:
        """The base model's name, asked of the server if it was not given."""
        if self.model is None:
            return await self._discover_model(self.pool.admin_client())
        return self.model

    async def _discover_model(self, client: httpx.AsyncClient) -> str:
        """The served model's name, asked once however many requests start together."""
        assert self.pool.discovery is not None
        async with self.pool.discovery:
            if self.model is None:
                data = await self.pool.send(client, "GET", "/v1/models", None, spread=True)
                try:
                    self.model = str(data["data"][0]["id"])
                except (KeyError, IndexError, TypeError):
                    raise PolicyError(
                        f"{self.url}/v1/models lists no model; pass model=... explicitly"
                    ) from None
        return self.model
