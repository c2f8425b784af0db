"""A policy served by an inference server: vLLM's OpenAI-compatible completions, or SGLang.

Token-in/token-out over HTTP:

* ``api="vllm"``: ``POST {url}/v1/completions`` with ``prompt`` as a list of token
  ids, ``logprobs: 1`` and ``return_tokens_as_token_ids: true`` so each sampled
  token comes back as ``"token_id:<id>"`` in ``choices[0].logprobs.tokens`` next to
  ``token_logprobs``. ``include_stop_str_in_output`` and
  ``skip_special_tokens: false`` keep the stop text and special tokens, so the
  tokens are exactly what was sampled. ``finish_reason`` is ``length`` or
  ``stop``; a stop whose last token is an end-of-sequence id (or whose
  ``stop_reason`` is null, vLLM's mark for EOS) is reported as ``eos``.
* ``api="sglang"``: SGLang's native ``POST {url}/generate`` with ``input_ids`` and
  ``return_logprob: true``; tokens from ``output_ids`` (or the ids inside
  ``meta_info.output_token_logprobs``, a list of ``(logprob, token_id, text)``),
  and ``meta_info.finish_reason.type``. ``no_stop_trim`` keeps the stop string.

Tested: ``api="vllm"`` against a real vLLM server (CPU build) and a stand-in;
``api="sglang"`` only against an emulation of SGLang's ``/generate``
(``tests/support/rollout_vllm_standin.py``, field names from SGLang's native API),
never a running SGLang server.

Connection errors, timeouts, 429 and 5xx answers are retried with exponential
backoff; anything else, or running out of attempts, is a :class:`PolicyError`
naming the URL. Requests in flight are bounded by ``concurrency``.

Several servers of one model (``url`` as a list, or comma-separated) share the
sampling requests (:class:`LeastBusy`); a retry goes to another server than the
one that just failed; so does model discovery (every server serves the same
model). Admin requests (a weight sync) go to the first server only.

Every request in flight keeps its HTTP connection alive between turns (the pool keeps
``concurrency`` of them, and a few for admin requests), so no turn opens a new one.
``trace=`` a :class:`~agentenvs.rollout.policies.request_trace.RequestTrace` records
when each sampling request was in flight (``benchmarks/bench_vllm.py`` compares
those spans with a raw client's, and the engine's own counters:
:mod:`~agentenvs.rollout.policies.vllm_metrics`).

Inside a rollout each request gets its own seed, derived from ``seed`` and the
turn's slot (group key, trajectory, turn: :func:`derive_seed`), so the episodes of
a GRPO group differ and the same seeds reproduce them. Each turn's answer is
stamped with that seed and with the weights that served it (:attr:`weights`, which
a :class:`~agentenvs.rollout.weights.WeightSync` replaces after a verified swap;
requests wait at :attr:`gate` while one is under way; inside a Ray actor that is
the actor's gate, which a sync in the driver closes and opens with the new weights).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, Literal

import httpx

from agentenvs.envs.types import (
    SamplerStopReason,
    StopCondition,
    TokensWithLogprobs,
    observation_images,
)
from agentenvs.envs.weights_identity import WeightsIdentity
from agentenvs.rollout.policies.base import (
    PolicyError,
    StampedTokens,
    check_max_tokens,
    current_turn,
    derive_seed,
    turn_token_cap,
)
from agentenvs.rollout.policies.request_trace import RequestSpan, RequestTrace
from agentenvs.rollout.policies.stop import split_stop
from agentenvs.rollout.policies.vision_generate import sample_with_images
from agentenvs.rollout.weights.custody import PROVEN, WeightsCustody
from agentenvs.rollout.weights.gate import SwapGate
from agentenvs.rollout.weights.instances import ServerInstances

logger = logging.getLogger(__name__)

Api = Literal["vllm", "sglang"]
_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_POOL_CONNECTIONS = 8
"""Sampling connections per httpx pool. httpcore walks every connection of a pool
(and polls each idle one's socket) whenever a request starts or ends, so one pool of
32 connections costs the client about 16 times the walking of four pools of 8; at
concurrency 32 that walk was the largest part of the client's CPU (issue 32)."""
_ADMIN_CONNECTIONS = 4
"""Connections beyond ``concurrency`` for requests outside the sampling slots (a weight
sync's, a probe's, model discovery)."""
_answered_by: ContextVar[str | None] = ContextVar("agentenvs_answered_by", default=None)
"""The server that answered this task's latest sampling request (for its trace span)."""


class LeastBusy:
    """Which server a sampling request goes to: the one with the fewest of this
    client's requests in flight, ties taken in turn. Equal servers share the load
    evenly, and a slow one, whose requests pile up, is given fewer."""

    def __init__(self, urls: Sequence[str]) -> None:
        self.in_flight: dict[str, int] = dict.fromkeys(urls, 0)
        self.sent: dict[str, int] = dict.fromkeys(urls, 0)
        """Requests sent to each server so far: sampling and model discovery, retries
        included."""
        self._turn = itertools.count()

    def pick(self, avoid: str | None = None) -> str:
        """A server, other than ``avoid`` (the one that just failed) when there is one."""
        candidates = [u for u in self.in_flight if u != avoid] or list(self.in_flight)
        fewest = min(self.in_flight[u] for u in candidates)
        tied = [u for u in candidates if self.in_flight[u] == fewest]
        return tied[next(self._turn) % len(tied)]

    @contextmanager
    def using(self, url: str) -> Iterator[None]:
        self.in_flight[url] += 1
        self.sent[url] += 1
        try:
            yield
        finally:
            self.in_flight[url] -= 1


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
    ) -> None:
        if api not in ("vllm", "sglang"):
            raise ValueError(f"api must be 'vllm' or 'sglang', got {api!r}")
        check_max_tokens(max_tokens)
        if retries < 0 or concurrency < 1 or timeout <= 0:
            raise ValueError("need retries >= 0, concurrency >= 1 and timeout > 0")
        self.urls = _base_urls(url)
        self.url = self.urls[0]
        """The first server: admin requests (a weight sync's) go there."""
        self.servers = LeastBusy(self.urls)
        self.model = model
        self.api: Api = api
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.seed = seed
        self.timeout = httpx.Timeout(timeout, connect=min(connect_timeout, timeout))
        self.retries = retries
        self.backoff = backoff
        self.concurrency = concurrency
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if tokenizer is not None and isinstance(tokenizer, str):
            from agentenvs.rollout.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        self.eos_token_ids: set[int] = set(eos_token_ids or [])
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos_token_ids is None and isinstance(eos, int):
            self.eos_token_ids.add(eos)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pools: list[httpx.AsyncClient] = []
        self._pool_load: list[int] = []
        self._discovery: asyncio.Lock | None = None
        self._slots: asyncio.Semaphore | None = None
        self.custody = WeightsCustody(WeightsIdentity(version=weights_version))
        """The identity turns are stamped with, and what takes its proof away
        (:mod:`agentenvs.rollout.weights.custody`)."""
        self.gate = SwapGate()
        self.instances = ServerInstances(self, instance_check_interval)
        """Each vLLM server's start time, read again at most every
        ``instance_check_interval`` seconds while the weights are proven: a new
        instance loses the proof. Exact while a restart takes longer than the
        interval (vLLM's start-up takes 30 s and more)."""
        self.trace = trace
        """When set, every sampling request leaves a span in it
        (:mod:`agentenvs.rollout.policies.request_trace`)."""

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

    # ---- the policy ------------------------------------------------------------------
    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        cap = turn_token_cap(self.max_tokens, max_tokens)
        slots = self._session()
        seed = self.request_seed()
        entered = time.perf_counter()
        async with slots, self._least_busy_pool() as client:
            if self.api == "vllm" and self.model is None:
                await self._discover_model(client)
            await self._keep_custody()
            async with self.gate.request():
                weights = self.weights  # fixed while the request is in flight
                if weights.failed:
                    raise PolicyError(
                        f"sampling refused: the weights on {self.url} are not vouched for "
                        f"({weights.failed}); sync verified weights first"
                    )
                losses = self.custody.losses
                sent = time.perf_counter()
                if self.api == "vllm" and observation_images(observation):
                    body, out = await sample_with_images(self, client, observation, stop, cap, seed)
                elif self.api == "vllm":
                    body = self._vllm_body(observation, stop, cap, seed)
                    body["model"] = self.served_model()
                    out = self._parse_vllm(await self._post(client, "/v1/completions", body))
                else:
                    body = self._sglang_body(observation, stop, cap, seed)
                    out = self._parse_sglang(await self._post(client, "/generate", body))
                if self.trace is not None:
                    self._trace(body, observation, cap, out, entered, sent)
            if self.custody.losses != losses:
                # A server was lost while this turn was under way: the answer may come
                # from a restarted one. Stamp what a re-probe says, or refuse.
                weights = await self._reproven(weights)
        if weights.path == "base" and weights.name is None:
            weights = replace(weights, name=self.model)  # the served model, once known
        stamp: dict[str, str | int | float] = {"weights": weights.label()}
        if weights.proof != "none":
            stamp["weights_proof"] = weights.proof
        if weights.version is not None:
            stamp["weights_version"] = weights.version
        if seed is not None:
            stamp["seed"] = seed
        if isinstance(out, StampedTokens):  # what the engine was given (images)
            stamp.update(out.stamp)
        return StampedTokens(out.tokens, out.logprobs, out.stop_reason, stamp=stamp)

    def _trace(
        self,
        body: dict[str, Any],
        observation: list[int],
        cap: int,
        out: TokensWithLogprobs,
        entered: float,
        sent: float,
    ) -> None:
        assert self.trace is not None
        slot = current_turn.get()
        self.trace.add(
            RequestSpan(
                sent=sent,
                answered=time.perf_counter(),
                server=_answered_by.get() or self.url,
                prompt_tokens=len(observation),
                max_tokens=cap,
                sampled_tokens=len(out.tokens),
                waited=sent - entered,
                slot=None if slot is None else (slot.group_key, slot.traj_index, slot.turn),
                body=body,  # the trace drops it unless it keeps bodies
            )
        )

    async def _keep_custody(self) -> None:
        """Before a request: a new server instance loses the proof; a lost proof is
        re-probed when this policy's sync left a way to."""
        if self.api == "vllm" and self.weights.proof in PROVEN:
            await self.instances.check_due()
        await self.custody.ensure_proven()

    async def _reproven(self, stamped: WeightsIdentity) -> WeightsIdentity:
        await self.custody.ensure_proven()
        now = self.weights
        if now.failed:
            raise PolicyError(
                f"a server was lost during this turn and no longer serves the weights "
                f"it was sent to ({now.failed})"
            )
        return now if now.version == stamped.version else stamped

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
            **self._weights_seen(),
        }

    def _weights_seen(self) -> dict[str, Any]:
        """Recent identities, when there were several: a group sampled across a sync
        is recorded with the identity of the version it claims (:mod:`..weights.stamps`)."""
        seen = self.custody.seen
        return {"weights_seen": [i.to_json() for i in seen]} if len(seen) > 1 else {}

    async def aclose(self) -> None:
        pools, self._pools, self._pool_load = self._pools, [], []
        for pool in pools:
            await pool.aclose()

    # ---- requests --------------------------------------------------------------------
    def _vllm_body(
        self, prompt: list[int], stop: StopCondition, cap: int, seed: int | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt),
            "max_tokens": cap,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "n": 1,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        body.update(split_stop(stop).request_fields())
        if seed is not None:
            body["seed"] = seed
        return body

    def _sglang_body(
        self, prompt: list[int], stop: StopCondition, cap: int, seed: int | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "max_new_tokens": cap,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        params.update(split_stop(stop).request_fields())
        if seed is not None:
            params["sampling_seed"] = seed
        return {"input_ids": list(prompt), "sampling_params": params, "return_logprob": True}

    def _session(self) -> asyncio.Semaphore:
        """The sampling slots, and the connection pools, bound to the running event
        loop (made on first use)."""
        loop = asyncio.get_running_loop()
        if not self._pools or self._loop is not loop:
            self._loop = loop
            pools = -(-self.concurrency // _POOL_CONNECTIONS)
            # Every request in flight keeps its connection alive between turns: with
            # fewer kept (httpx keeps 20), each turn past them opens a new connection.
            kept = -(-self.concurrency // pools) + _ADMIN_CONNECTIONS
            limits = httpx.Limits(max_connections=max(100, kept), max_keepalive_connections=kept)
            self._pools = [
                httpx.AsyncClient(
                    timeout=self.timeout,
                    headers=self.headers,
                    limits=limits,
                    verify=_tls_context(),
                )
                for _ in range(pools)
            ]
            self._pool_load = [0] * pools
            self._slots = asyncio.Semaphore(self.concurrency)
            self._discovery = asyncio.Lock()
        assert self._slots is not None
        return self._slots

    @contextlib.asynccontextmanager
    async def _least_busy_pool(self) -> AsyncIterator[httpx.AsyncClient]:
        loads = self._pool_load  # the pools of this session, even if closed meanwhile
        index = min(range(len(loads)), key=loads.__getitem__)
        loads[index] += 1
        try:
            yield self._pools[index]
        finally:
            loads[index] -= 1

    def _admin_client(self) -> httpx.AsyncClient:
        self._session()
        return self._pools[0]

    async def _discover_model(self, client: httpx.AsyncClient) -> str:
        """The served model's name, asked once however many requests start together."""
        assert self._discovery is not None
        async with self._discovery:
            if self.model is None:
                self.model = await self._first_model(client)
        return self.model

    async def request(
        self, method: str, path: str, body: dict | None = None, *, server: str | None = None
    ) -> dict[str, Any]:
        """Any request to one server (admin endpoints, probes), with this policy's
        retries and errors; it does not wait at the gate, so a weight sync can use it.
        ``server`` is one of :attr:`urls` (default: the first). An answer that is not
        JSON (vLLM's LoRA endpoints answer in plain text) comes back as ``{"text": ...}``."""
        if server is not None and server not in self.urls:
            raise ValueError(f"{server} is not one of this policy's servers {list(self.urls)}")
        client = self._admin_client()
        return await self._send(client, method, path, body, plain_text_ok=True, to=server)

    async def model_name(self) -> str:
        """The base model's name, asked of the server if it was not given."""
        if self.model is None:
            return await self._discover_model(self._admin_client())
        return self.model

    async def _first_model(self, client: httpx.AsyncClient) -> str:
        data = await self._send(client, "GET", "/v1/models", None, spread=True)
        try:
            return str(data["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise PolicyError(
                f"{self.url}/v1/models lists no model; pass model=... explicitly"
            ) from None

    async def _post(self, client: httpx.AsyncClient, path: str, body: dict) -> dict[str, Any]:
        """A sampling request, to whichever server :attr:`servers` picks."""
        return await self._send(client, "POST", path, body, spread=True)

    async def _send(
        self,
        client: httpx.AsyncClient,
        method: str,
        path: str,
        body: dict | None,
        *,
        plain_text_ok: bool = False,
        spread: bool = False,
        to: str | None = None,
    ) -> dict[str, Any]:
        server = to or self.url
        url = server + path
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                delay = self.backoff * 2 ** (attempt - 1) * (1 + 0.25 * random.random())
                logger.warning("retrying %s in %.2fs after: %s", url, delay, last)
                await asyncio.sleep(delay)
            if spread:
                server = self.servers.pick(avoid=server if attempt else None)
                url = server + path
            try:
                with self.servers.using(server) if spread else contextlib.nullcontext():
                    response = await client.request(method, url, json=body)
            except httpx.TimeoutException as err:
                last = f"timed out ({type(err).__name__})"
                continue
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
                # Refused, reset or closed early: the server may be a new instance now.
                self.custody.lose(f"{server}: {last}")
                continue
            if response.status_code in _RETRY_STATUS:
                last = f"HTTP {response.status_code}: {_snippet(response)}"
                continue
            if response.status_code >= 400:
                raise PolicyError(
                    f"policy server {url} rejected the request: "
                    f"HTTP {response.status_code}: {_snippet(response)}",
                    status=response.status_code,
                )
            if spread:
                _answered_by.set(server)
            try:
                return response.json()
            except ValueError:
                if plain_text_ok:
                    return {"text": response.text}
                raise PolicyError(
                    f"policy server {url} answered with something that is not JSON: "
                    f"{_snippet(response)}"
                ) from None
        attempts = self.retries + 1
        raise PolicyError(
            f"policy server {url} did not answer after {attempts} "
            f"attempt{'s' if attempts > 1 else ''}: {last}"
        )

    # ---- responses -------------------------------------------------------------------
    def _parse_vllm(self, data: dict[str, Any]) -> TokensWithLogprobs:
        try:
            choice = data["choices"][0]
            logprobs = choice.get("logprobs") or {}
            tokens = choice.get("token_ids")
            if tokens is None:
                tokens = [_token_id(t) for t in logprobs.get("tokens") or []]
            values = logprobs.get("token_logprobs")
            finish = choice.get("finish_reason")
            matched = choice.get("stop_reason")
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise PolicyError(f"unexpected completions response from {self.url}: {err}") from None
        if not tokens and (choice.get("text") or "") != "":
            raise PolicyError(
                f"{self.url} returned text but no token ids; it must honour "
                "return_tokens_as_token_ids with logprobs (vLLM >= 0.5)"
            )
        return self._result(list(tokens), values, finish, matched)

    def _parse_sglang(self, data: dict[str, Any]) -> TokensWithLogprobs:
        try:
            meta = data["meta_info"]
            pairs = meta.get("output_token_logprobs") or []
            tokens = data.get("output_ids")
            if tokens is None:
                tokens = [int(p[1]) for p in pairs]
            values = [float(p[0]) for p in pairs] if pairs else None
            finish_info = meta.get("finish_reason") or {}
            finish = finish_info.get("type") if isinstance(finish_info, dict) else finish_info
            matched = finish_info.get("matched") if isinstance(finish_info, dict) else None
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise PolicyError(f"unexpected /generate response from {self.url}: {err}") from None
        if finish == "abort":
            raise PolicyError(f"{self.url} aborted the request: {finish_info}")
        return self._result(list(tokens), values, finish, matched)

    def _result(
        self, tokens: list[int], values: Any, finish: str | None, matched: Any
    ) -> TokensWithLogprobs:
        logprobs = None
        if values is not None:
            if len(values) != len(tokens):
                raise PolicyError(
                    f"{self.url} returned {len(values)} logprobs for {len(tokens)} tokens"
                )
            logprobs = [float(v) if v is not None else float("nan") for v in values]
        reason: SamplerStopReason
        if finish == "length":
            reason = "length"
        elif tokens and tokens[-1] in self.eos_token_ids:
            reason = "eos"
        elif finish == "stop" and matched is None and self.api == "vllm":
            reason = "eos"  # vLLM leaves stop_reason null when the model's EOS ended it
        else:
            reason = "stop"
        return TokensWithLogprobs(tokens, logprobs, reason)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verifying context, made once per process: each client would
    otherwise load the CA bundle again (37 ms here, more than a turn's client work)."""
    return httpx.create_ssl_context()


def _base_urls(url: str | Sequence[str]) -> tuple[str, ...]:
    """One or several servers: a list, or one string with commas between them."""
    given = url.split(",") if isinstance(url, str) else list(url)
    urls = tuple(dict.fromkeys(_base_url(str(u).strip()) for u in given if str(u).strip()))
    if not urls:
        raise ValueError(f"url must name at least one server, got {url!r}")
    return urls


def _base_url(url: str) -> str:
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _token_id(token: str) -> int:
    if not isinstance(token, str) or not token.startswith("token_id:"):
        raise ValueError(
            f"token {token!r} is not 'token_id:<id>'; the server ignored return_tokens_as_token_ids"
        )
    return int(token[len("token_id:") :])


def _snippet(response: httpx.Response, limit: int = 300) -> str:
    text = response.text.strip().replace("\n", " ")
    return text[:limit] + ("..." if len(text) > limit else "")
