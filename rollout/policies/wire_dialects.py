"""The two ways a served policy asks for tokens: request bodies out, sampled tokens back.

Token-in/token-out over HTTP, so nothing is re-tokenized on either side:

* ``vllm``: ``POST {url}/v1/completions`` with ``prompt`` as a list of token ids,
  ``logprobs: 1`` and ``return_tokens_as_token_ids: true`` so each sampled token
  comes back as ``"token_id:<id>"`` in ``choices[0].logprobs.tokens`` next to
  ``token_logprobs``. ``include_stop_str_in_output`` and
  ``skip_special_tokens: false`` keep the stop text and special tokens, so the
  tokens are exactly what was sampled. ``finish_reason`` is ``length`` or
  ``stop``; a stop whose last token is an end-of-sequence id (or whose
  ``stop_reason`` is null, vLLM's mark for EOS) is reported as ``eos``.
* ``sglang``: SGLang's native ``POST {url}/generate`` with ``input_ids`` and
  ``return_logprob: true``; tokens from ``output_ids`` (or the ids inside
  ``meta_info.output_token_logprobs``, a list of ``(logprob, token_id, text)``),
  and ``meta_info.finish_reason.type``. ``no_stop_trim`` keeps the stop string.

A dialect knows nothing of connections, retries or weights: it is the pure part,
so each wire format can be read (and tested) on its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agentenvs.envs.types import SamplerStopReason, StopCondition, TokensWithLogprobs
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.policies.stop import split_stop

Api = Literal["vllm", "sglang"]


@dataclass(frozen=True)
class TurnRequest:
    """What one sampling request asks for, whatever the dialect."""

    prompt: list[int]
    stop: StopCondition
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None = None
    model: str | None = None
    """The served model's name (vLLM routes by it: a LoRA adapter's name, or the
    base model's); SGLang's native endpoint takes none."""


class Dialect(Protocol):
    """One wire format: where a sampling request goes, its body, and how to read the answer."""

    api: Api
    path: str

    def body(self, request: TurnRequest) -> dict[str, Any]: ...

    def parse(self, data: dict[str, Any], url: str) -> TokensWithLogprobs: ...


class VLLMCompletions:
    """vLLM's OpenAI-compatible ``/v1/completions`` with token ids in and out."""

    api: Api = "vllm"
    path = "/v1/completions"

    def __init__(self, eos_token_ids: Iterable[int] = ()) -> None:
        self.eos_token_ids = set(eos_token_ids)

    def body(self, request: TurnRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "prompt": list(request.prompt),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "n": 1,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        body.update(split_stop(request.stop).request_fields())
        if request.seed is not None:
            body["seed"] = request.seed
        return body

    def parse(self, data: dict[str, Any], url: str) -> TokensWithLogprobs:
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
            raise PolicyError(f"unexpected completions response from {url}: {err}") from None
        if not tokens and (choice.get("text") or "") != "":
            raise PolicyError(
                f"{url} returned text but no token ids; it must honour "
                "return_tokens_as_token_ids with logprobs (vLLM >= 0.5)"
            )
        # vLLM leaves stop_reason null when the model's own EOS ended the turn.
        eos_by_server = finish == "stop" and matched is None
        return turn_result(list(tokens), values, finish, self.eos_token_ids, url, eos_by_server)


class SGLangGenerate:
    """SGLang's native ``/generate`` with ``input_ids``."""

    api: Api = "sglang"
    path = "/generate"

    def __init__(self, eos_token_ids: Iterable[int] = ()) -> None:
        self.eos_token_ids = set(eos_token_ids)

    def body(self, request: TurnRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "max_new_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        params.update(split_stop(request.stop).request_fields())
        if request.seed is not None:
            params["sampling_seed"] = request.seed
        return {
            "input_ids": list(request.prompt),
            "sampling_params": params,
            "return_logprob": True,
        }

    def parse(self, data: dict[str, Any], url: str) -> TokensWithLogprobs:
        try:
            meta = data["meta_info"]
            pairs = meta.get("output_token_logprobs") or []
            tokens = data.get("output_ids")
            if tokens is None:
                tokens = [int(p[1]) for p in pairs]
            values = [float(p[0]) for p in pairs] if pairs else None
            finish_info = meta.get("finish_reason") or {}
            finish = finish_info.get("type") if isinstance(finish_info, dict) else finish_info
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise PolicyError(f"unexpected /generate response from {url}: {err}") from None
        if finish == "abort":
            raise PolicyError(f"{url} aborted the request: {finish_info}")
        return turn_result(list(tokens), values, finish, self.eos_token_ids, url, False)


def dialect(api: Api, eos_token_ids: Iterable[int] = ()) -> Dialect:
    """The dialect named ``api``."""
    if api == "vllm":
        return VLLMCompletions(eos_token_ids)
    if api == "sglang":
        return SGLangGenerate(eos_token_ids)
    raise ValueError(f"api must be 'vllm' or 'sglang', got {api!r}")


def turn_result(
    tokens: list[int],
    values: Any,
    finish: str | None,
    eos_token_ids: set[int],
    url: str,
    eos_by_server: bool,
) -> TokensWithLogprobs:
    """One answer of an engine as a turn: logprobs checked against the tokens, and the
    stop said as the collector reads it (``length``, ``eos`` for the model's own end, else
    ``stop``). Shared by every wire form, the image path included."""
    logprobs = None
    if values is not None:
        if len(values) != len(tokens):
            raise PolicyError(f"{url} returned {len(values)} logprobs for {len(tokens)} tokens")
        logprobs = [float(v) if v is not None else float("nan") for v in values]
    reason: SamplerStopReason
    if finish == "length":
        reason = "length"
    elif (tokens and tokens[-1] in eos_token_ids) or eos_by_server:
        reason = "eos"
    else:
        reason = "stop"
    return TokensWithLogprobs(tokens, logprobs, reason)


def _token_id(token: str) -> int:
    if not isinstance(token, str) or not token.startswith("token_id:"):
        raise ValueError(
            f"token {token!r} is not 'token_id:<id>'; the server ignored return_tokens_as_token_ids"
        )
    return int(token[len("token_id:") :])
