"""A PyTRIO ``SamplingClient`` as an agentenvs policy.

PyTRIO (``pip install pytrio``) exposes a Tinker-like remote trainer: a sampling
client (``sample``/``sample_async``), ``forward_backward`` and ``optim_step`` on a
training client, and ``save_weights_and_get_sampling_client`` to sample from new
weights. :class:`PyTrioSamplingPolicy` lets the agentenvs collector sample with
that client: the observation goes out as token ids, and the sampled token ids,
their logprobs and the stop reason come back exactly as the service returned
them. Training data goes back through
:func:`agentenvs.rollout.trainers.pytrio.handoff.to_pytrio_datums`; ``examples/pytrio_grpo.py``
is a complete synchronous GRPO step.

Stop reasons: PyTRIO's sequences carry a free-form ``stop_reason`` string.
``length`` (or ``max_tokens``) is ours ``length``; an action whose last token is
an end-of-sequence id (pass ``eos_token_ids``), or a reason of ``eos``, is
``eos``; anything else that finished is ``stop``. An aborted or failed sequence
is a :class:`PolicyError`, so the collector retries the group.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentenvs.envs.types import SamplerStopReason, StopCondition, TokensWithLogprobs
from agentenvs.rollout.policies.base import PolicyError, check_max_tokens, turn_token_cap

_LENGTH = frozenset({"length", "max_tokens", "max_length"})
_EOS = frozenset({"eos", "eos_token", "end_of_sequence"})
_FAILED = frozenset({"abort", "aborted", "error", "cancelled", "canceled"})


def pytrio_stop_reason(
    raw: str | None, tokens: list[int], eos_token_ids: Iterable[int], max_tokens: int
) -> SamplerStopReason:
    """PyTRIO's stop reason string as ours (see the module docstring)."""
    reason = (raw or "").strip().lower()
    if reason in _FAILED:
        raise PolicyError(f"PyTRIO sampling ended with stop_reason {raw!r}")
    if reason in _LENGTH:
        return "length"
    if reason in _EOS or (tokens and tokens[-1] in set(eos_token_ids)):
        return "eos"
    if not reason and len(tokens) >= max_tokens:
        return "length"
    return "stop"


class PyTrioSamplingPolicy:
    """A shared :class:`~agentenvs.rollout.policies.base.Policy` over a PyTRIO
    ``SamplingClient`` (one sample per call, token ids in and out).

    ``weights_version`` is recorded in each collected group's provenance; bump it
    (make a new policy) each time ``save_weights_and_get_sampling_client`` gives
    a client for new weights.
    """

    def __init__(
        self,
        sampling_client: Any,
        *,
        max_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        seed: int | None = None,
        eos_token_ids: Iterable[int] = (),
        weights_version: int | str | None = None,
    ) -> None:
        check_max_tokens(max_tokens)
        self.client = sampling_client
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.seed = seed
        self.eos_token_ids = frozenset(eos_token_ids)
        self.weights_version = weights_version

    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        from pytrio.errors.base import PyTrioError
        from pytrio.types import ModelInput, SamplingParams

        cap = turn_token_cap(self.max_tokens, max_tokens)
        params = SamplingParams(
            max_tokens=cap,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            stop=list(stop) or None,
        )
        try:
            response = await self.client.sample_async(
                prompt=ModelInput.from_ints(list(observation)),
                num_samples=1,
                sampling_params=params,
                return_text=False,
            )
        except PyTrioError as error:
            raise PolicyError(f"PyTRIO sampling failed: {error}") from error
        if not response.sequences:
            raise PolicyError("PyTRIO returned no sequence")
        sequence = response.sequences[0]
        tokens = [int(t) for t in sequence.tokens]
        logprobs = _logprobs(sequence.logprobs, len(tokens))
        reason = pytrio_stop_reason(sequence.stop_reason, tokens, self.eos_token_ids, cap)
        return TokensWithLogprobs(tokens, logprobs, reason)

    def provenance(self) -> dict[str, Any]:
        return {
            "policy": "pytrio",
            "model": getattr(self.client, "model_id", None),
            "sampling_run": getattr(self.client, "sampling_run_cuid", None),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
        }


def _logprobs(values: list[float | None] | None, count: int) -> list[float] | None:
    """The service's per-token logprobs, or None when it left any out.

    A missing value cannot be invented; the turn then counts as having no
    logprobs (``has_logprobs`` is False on its training sample).
    """
    if values is None:
        return None
    if len(values) != count:
        raise PolicyError(f"PyTRIO returned {len(values)} logprobs for {count} tokens")
    if any(v is None for v in values):
        return None
    return [float(v) for v in values]  # type: ignore[arg-type]
