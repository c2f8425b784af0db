"""Proof that the server samples with the weights the trainer just pushed.

After a swap, the server continues a fixed probe prompt for a few tokens and
reports each sampled token's logprob; the trainer's own forward pass of the new
weights scores the same tokens. Only when the two agree within a tolerance fit
for the dtype are the weights trusted.

Why a continuation and not the prompt's own logprobs: vLLM computes prompt
logprobs without its prefix cache, so they would look right even when the
cache still holds the old weights' keys and values for the prompt, which is
exactly the trap a sync must close (measured here: 33 nats off without a reset,
4e-6 with one). Sampled tokens are computed on top of the cached prefix, so they
show it. The probe prompt is long enough to fill whole cache blocks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy

ReferenceLogprobs = Callable[[list[int], int], list[float] | Awaitable[list[float]]]
"""``(sequence, start) -> logprobs of sequence[start:]`` under the trainer's new weights."""

TOLERANCE = {"float32": 1e-3, "float16": 5e-2, "bfloat16": 1.5e-1}
"""Max |logprob difference| accepted per dtype: fp32 engines agree to ~1e-5 here."""


class VerificationError(AgentEnvsError, RuntimeError):
    """The server's logprobs on the probe do not match the trainer's new weights."""


@dataclass(frozen=True)
class Probe:
    prompt: list[int]
    max_tokens: int = 8
    seed: int = 20240917

    @classmethod
    def default(cls, vocab_size: int, *, length: int = 320, skip: int = 16) -> Probe:
        """A fixed, spread-out token sequence (ids ``skip`` and up, clear of the
        special tokens a small vocabulary starts with)."""
        span = max(1, vocab_size - skip)
        return cls(prompt=[skip + (i * 7919) % span for i in range(length)])


@dataclass
class ProbeResult:
    tokens: list[int]
    server: list[float]
    trainer: list[float]
    max_abs_diff: float
    tolerance: float
    extra: dict[str, Any] = field(default_factory=dict)
    url: str = ""
    """The server that answered the probe."""

    @property
    def matches(self) -> bool:
        return self.max_abs_diff <= self.tolerance


async def sample_probe(
    policy: OpenAICompatPolicy, probe: Probe, model: str, server: str | None = None
) -> tuple[list, list]:
    """One server's continuation of the probe and its per-token logprobs."""
    body = {
        "model": model,
        "prompt": list(probe.prompt),
        "max_tokens": probe.max_tokens,
        "temperature": 1.0,
        "seed": probe.seed,
        "logprobs": 1,
        "return_tokens_as_token_ids": True,
        "skip_special_tokens": False,
    }
    data = await policy.request("POST", "/v1/completions", body, server=server)
    try:
        logprobs = data["choices"][0]["logprobs"]
        tokens = [int(str(t).removeprefix("token_id:")) for t in logprobs["tokens"]]
        values = [float(v) for v in logprobs["token_logprobs"]]
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise VerificationError(f"the probe's answer has no token logprobs: {err}") from None
    if not tokens or len(tokens) != len(values):
        raise VerificationError(f"the probe got {len(tokens)} tokens and {len(values)} logprobs")
    return tokens, values


async def verify(
    policy: OpenAICompatPolicy,
    probe: Probe,
    model: str,
    reference: ReferenceLogprobs,
    tolerance: float,
    server: str | None = None,
) -> ProbeResult:
    tokens, served = await sample_probe(policy, probe, model, server)
    scored = reference(list(probe.prompt) + tokens, len(probe.prompt))
    trainer = list(await scored) if isinstance(scored, Awaitable) else list(scored)
    if len(trainer) != len(tokens):
        raise VerificationError(
            f"the trainer's reference gave {len(trainer)} logprobs for {len(tokens)} tokens"
        )
    diff = max(abs(a - b) for a, b in zip(served, trainer, strict=True))
    return ProbeResult(tokens, served, trainer, diff, tolerance, url=server or policy.url)


def torch_reference(model: Any) -> ReferenceLogprobs:
    """A reference from a torch causal LM (a peft model included): one
    teacher-forced forward pass in eval mode, log-softmax in fp32."""

    def score(sequence: list[int], start: int) -> list[float]:
        import torch

        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                device = next(model.parameters()).device
                logits = model(input_ids=torch.tensor([sequence], device=device)).logits[0]
                logprobs = torch.log_softmax(logits.float(), dim=-1)
        finally:
            model.train(was_training)
        return [float(logprobs[i - 1, sequence[i]]) for i in range(start, len(sequence))]

    return score
