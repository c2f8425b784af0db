"""Sampling that survives a weight sync: an aborted request goes on from its tokens.

With ``partial_rollouts=True`` an :class:`~agentenvs.rollout.policies.openai_compat.OpenAICompatPolicy`
streams each completion (``"stream": true`` on vLLM's ``/v1/completions``) so it
holds every token the moment the server sends it. A weight sync does not wait for
the slowest requests to drain: it aborts them (vLLM's ``/pause?mode=abort``,
:meth:`agentenvs.rollout.weights.gate.SwapGate.swap` with ``interrupt``); each
aborted stream ends with ``finish_reason: "abort"`` after the tokens sampled so
far. The request then waits at the gate until the new weights are verified and
goes on: the prompt plus the tokens already sampled as the new prompt, the
remaining ``max_tokens``, the same temperature and top-p. Tokens and behaviour
logprobs are concatenated, and each piece is recorded as a run of tokens with the
version (and proof) that sampled it (:mod:`agentenvs.rollout.weights.token_versions`).

Why abort and continue rather than vLLM's ``/pause?mode=keep``: a kept request
resumes inside the engine under the new weights, and a non-streaming answer does
not say which of its tokens came before the swap; a streamed one only says which
tokens reached the client, not which the engine had already computed. After an
abort the split is exact: every token the client holds was sampled before the
swap, every later one after it. The cost is one prefill of the prompt and the
sampled tokens per interrupted request.

What carries over is not the engine's random state: a seeded request's
continuation gets a seed of its own (derived from the turn's), so the same seeds
reproduce the same pieces, but the tokens after the cut differ from what an
uninterrupted request would have drawn. A stop string that straddles the cut is
not seen by the continuation (stop token ids are). A lost connection mid-stream
also goes on from the tokens received, up to the transport's ``retries``; the proof
is taken away then and re-probed before the continuation (as before any request).
Not covered: request tracing (``trace=``) and gates linked across processes (a Ray
executor's actors drain as before; their requests are not aborted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from agentenvs.envs.types import StopCondition, TokensWithLogprobs
from agentenvs.rollout.policies.base import PolicyError, StampedTokens
from agentenvs.rollout.policies.served_weights import turn_stamp
from agentenvs.rollout.policies.wire_dialects import TurnRequest, turn_result
from agentenvs.rollout.weights.token_versions import VersionRun, merge_runs, runs_to_log

if TYPE_CHECKING:
    from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy

ABORTED = "abort"
"""vLLM's ``finish_reason`` for a request a pause (or ``/abort_requests``) cut short."""


@dataclass
class StreamedPiece:
    """What one streamed request sampled before it ended (or was cut)."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    matched: Any = None
    """vLLM's ``stop_reason``: the stop string or id that ended it (None for EOS)."""


async def stream_piece(
    policy: OpenAICompatPolicy, client: httpx.AsyncClient, body: dict[str, Any], into: StreamedPiece
) -> None:
    """One streamed completion, appended to ``into`` token by token, so a lost
    connection keeps what arrived. HTTP errors raise :class:`PolicyError`."""
    server = policy.pool.servers.pick()
    url = server + policy.wire.path
    with policy.pool.servers.using(server):
        async with client.stream("POST", url, json={**body, "stream": True}) as response:
            if response.status_code >= 400:
                text = (await response.aread()).decode(errors="replace")[:300]
                raise PolicyError(
                    f"policy server {url} rejected the request: HTTP {response.status_code}: {text}",
                    status=response.status_code,
                )
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                _read_chunk(json.loads(line[6:]), into, url)


def _read_chunk(chunk: dict[str, Any], into: StreamedPiece, url: str) -> None:
    try:
        choice = chunk["choices"][0]
        logprobs = choice.get("logprobs") or {}
        names = logprobs.get("tokens") or []
        values = logprobs.get("token_logprobs") or []
        if len(names) != len(values):
            raise ValueError(f"{len(names)} tokens but {len(values)} logprobs")
        for name in names:
            if not isinstance(name, str) or not name.startswith("token_id:"):
                raise ValueError(f"token {name!r} is not 'token_id:<id>'")
            into.tokens.append(int(name[len("token_id:") :]))
        into.logprobs += [float(v) if v is not None else float("nan") for v in values]
        if choice.get("finish_reason"):
            into.finish = choice["finish_reason"]
            into.matched = choice.get("stop_reason")
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise PolicyError(f"unexpected streamed completion chunk from {url}: {err}") from None


def continuation_seed(seed: int | None, piece: int) -> int | None:
    """The seed of the ``piece``-th request of one turn (0: the turn's own)."""
    if seed is None or piece == 0:
        return seed
    return (seed * 1_000_003 + piece) & 0x7FFFFFFF


async def sample_across_syncs(
    policy: OpenAICompatPolicy,
    client: httpx.AsyncClient,
    observation: list[int],
    stop: StopCondition,
    cap: int,
    seed: int | None,
) -> StampedTokens:
    """One turn whose request may be cut by weight syncs and goes on after each."""
    tokens: list[int] = []
    logprobs: list[float] = []
    runs: list[VersionRun] = []
    stamped = None
    """The weights of the first piece that sampled a token: the turn's oldest."""
    piece = StreamedPiece()
    lost = 0
    for index in range(10_000):
        piece = StreamedPiece()
        if index:  # a continuation: a server lost meanwhile is re-probed first
            await policy.served.before_request()
        async with policy.gate.request():
            weights = policy.weights  # fixed while this piece is in flight
            policy.served.refuse_unvouched(weights)
            request = TurnRequest(
                observation + tokens, stop, cap - len(tokens), policy.temperature,
                policy.top_p, continuation_seed(seed, index), policy.served_model(),
            )  # fmt: skip
            try:
                await stream_piece(policy, client, policy.wire.body(request), piece)
            except httpx.TransportError as err:
                lost += 1
                if lost > policy.retries:
                    raise PolicyError(
                        f"policy server {policy.url} lost the stream {lost} times "
                        f"(last: {type(err).__name__}: {err})"
                    ) from None
                policy.custody.lose(f"{policy.url}: {type(err).__name__}: {err}")
                piece.finish = ABORTED  # go on from what arrived
        if piece.tokens and stamped is None:
            stamped = weights
        tokens += piece.tokens
        logprobs += piece.logprobs
        proof = weights.proof if weights.proof != "none" else None
        runs.append(VersionRun(len(piece.tokens), weights.version, proof))
        if piece.finish != ABORTED or len(tokens) >= cap:
            break
    finish = "length" if piece.finish == ABORTED else piece.finish
    eos_by_server = finish == "stop" and piece.matched is None
    out: TokensWithLogprobs = turn_result(
        tokens, logprobs, finish, policy.eos_token_ids, policy.url, eos_by_server
    )
    merged = merge_runs(runs)
    stamp = turn_stamp(stamped or weights, policy.model, seed)
    if len(merged) > 1:
        stamp["weights_runs"] = runs_to_log(merged)
    return StampedTokens(out.tokens, out.logprobs, out.stop_reason, stamp=stamp)
