"""Probing a server: what it serves, scored on fixed tokens, beside the trainer's pass.

Two measurements, each catching what the other cannot:

* **teacher-forced scoring** of the probe's sequences at every position (vLLM's
  ``prompt_logprobs``), on the server and with the trainer's forward pass: many
  positions, so :mod:`.proof` can tell the new weights from the previous ones
  at realistic learning rates;
* **a sampled continuation** of the probe prompt, rescored by the trainer. vLLM
  computes prompt logprobs without its prefix cache, so they would look right
  even when the cache still holds the old weights' keys and values for the
  prompt, which is exactly the trap a sync must close (measured here: 33 nats
  off without a reset, 4e-6 with one). Sampled tokens are computed on top of the
  cached prefix, so they show it. The probe prompt is long enough to fill whole
  cache blocks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.rollout.weights.proof import (
    MIN_SCORED_TOKENS,
    NOISE,
    Candidate,
    Separation,
    Tolerance,
    rms,
    separate,
)

if TYPE_CHECKING:
    from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy

ReferenceLogprobs = Callable[[list[int], int], list[float] | Awaitable[list[float]]]
"""``(sequence, start) -> logprobs of sequence[start:]`` under the trainer's new weights."""

TOLERANCE = {dtype: Tolerance.for_dtype(dtype).max for dtype in NOISE}
"""Max |logprob difference| accepted per dtype on one position: the measured noise
of :data:`~.proof.NOISE` times :data:`~.proof.NOISE_FACTOR`."""


class VerificationError(AgentEnvsError, RuntimeError):
    """The server's logprobs on the probe do not match the trainer's new weights."""


@dataclass(frozen=True)
class Probe:
    prompt: list[int]
    """The prompt the server continues (the prefix-cache check)."""
    max_tokens: int = 8
    seed: int = 20240917
    scored: tuple[tuple[int, ...], ...] = ()
    """Sequences scored teacher-forced at every position after their first; empty:
    the prompt itself."""
    min_scored_tokens: int = MIN_SCORED_TOKENS

    def __post_init__(self) -> None:
        if len(self.prompt) < 2:
            raise ValueError("a probe prompt needs at least two tokens")
        if self.scored_tokens < self.min_scored_tokens:
            raise ValueError(
                f"the probe scores {self.scored_tokens} tokens; at least "
                f"{self.min_scored_tokens} are needed to tell new weights from old"
            )

    @property
    def sequences(self) -> tuple[tuple[int, ...], ...]:
        return self.scored or (tuple(self.prompt),)

    @property
    def scored_tokens(self) -> int:
        return sum(max(0, len(s) - 1) for s in self.sequences)

    @classmethod
    def default(
        cls, vocab_size: int, *, length: int = 320, skip: int = 16, sequences: int = 4
    ) -> Probe:
        """Fixed, spread-out token sequences (ids ``skip`` and up, clear of the special
        tokens a small vocabulary starts with), each on its own stride."""
        span = max(1, vocab_size - skip)
        strides = (7919, 104729, 15485863, 32452843)[: max(1, sequences)]
        rows = tuple(
            tuple(skip + (i * k + n) % span for i in range(length)) for n, k in enumerate(strides)
        )
        return cls(prompt=list(rows[0]), scored=rows)

    @classmethod
    def from_prompts(
        cls, prompts: Sequence[Sequence[int]], *, length: int = 512, max_sequences: int = 8
    ) -> Probe:
        """In-distribution probes: the run's own prompt token ids (each cut to
        ``length``), where the update moves logprobs most. The longest prompt is the
        one the server continues."""
        rows = tuple(tuple(int(t) for t in p[:length]) for p in prompts if len(p) >= 2)
        rows = rows[:max_sequences]
        if not rows:
            raise ValueError("no prompt of two or more tokens to probe with")
        return cls(prompt=list(max(rows, key=len)), scored=rows)


ProbeStatus = Literal["verified", "indistinguishable", "mismatch"]


@dataclass
class ProbeResult:
    """One server's probe after a load."""

    tokens: list[int]
    """The sampled continuation of the probe prompt."""
    server: list[float]
    trainer: list[float]
    max_abs_diff: float
    """Largest difference on the continuation (the prefix-cache check)."""
    tolerance: Tolerance
    separation: Separation
    """The teacher-forced comparison: agreement with the new weights, distance from
    every other candidate."""
    after: list[float] = field(default_factory=list)
    """The server's teacher-forced scores (the fingerprint a re-probe compares to)."""
    extra: dict[str, Any] = field(default_factory=dict)
    url: str = ""
    """The server that answered the probe."""

    @property
    def status(self) -> ProbeStatus:
        if self.max_abs_diff > self.tolerance.max:
            return "mismatch"
        return self.separation.status

    @property
    def matches(self) -> bool:
        """The server agrees with the trainer's new weights (verified or not told apart)."""
        return self.status != "mismatch"

    def describe(self) -> str:
        return (
            f"continuation max |diff| {self.max_abs_diff:.3g} (tolerance "
            f"{self.tolerance.max:.3g}); teacher-forced {self.separation.describe()}"
        )


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


async def score_on_server(
    policy: OpenAICompatPolicy, probe: Probe, model: str, server: str | None = None
) -> list[float]:
    """The server's teacher-forced logprob of every scored position, all sequences
    in order (vLLM's ``prompt_logprobs``)."""
    return await score_sequences(policy, probe.sequences, model, server, probe.seed)


async def score_sequences(
    policy: OpenAICompatPolicy,
    sequences: Sequence[Sequence[int]],
    model: str,
    server: str | None,
    seed: int,
) -> list[float]:
    """The server's teacher-forced logprob of every position after the first, of
    each sequence in order."""
    scores: list[float] = []
    for sequence in sequences:
        body = {
            "model": model,
            "prompt": list(sequence),
            "max_tokens": 1,
            "temperature": 1.0,
            "seed": seed,
            "prompt_logprobs": 0,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
        }
        data = await policy.request("POST", "/v1/completions", body, server=server)
        scores += _prompt_logprobs(data, sequence)
    return scores


def _prompt_logprobs(data: dict[str, Any], sequence: Sequence[int]) -> list[float]:
    """``choices[0].prompt_logprobs``: None for the first token, then one
    ``{token: {"logprob": x, ...}}`` per position, holding at least the prompt's own
    token (keys are ids, or ``token_id:N`` strings)."""
    try:
        rows = data["choices"][0]["prompt_logprobs"]
        if rows is None or len(rows) != len(sequence):
            raise ValueError(f"{0 if rows is None else len(rows)} rows for {len(sequence)} tokens")
        out = []
        for token, row in zip(sequence[1:], rows[1:], strict=True):
            by_id = {int(str(k).removeprefix("token_id:")): v for k, v in row.items()}
            entry = by_id[token]
            out.append(float(entry["logprob"] if isinstance(entry, dict) else entry))
        return out
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        raise VerificationError(
            f"the server's answer has no prompt logprobs for the probe: {err!r}"
        ) from None


async def score_with_reference(reference: ReferenceLogprobs, probe: Probe) -> list[float]:
    """The trainer's teacher-forced logprob of every scored position."""
    scores: list[float] = []
    for sequence in probe.sequences:
        scored = list(await _resolve(reference(list(sequence), 1)))
        if len(scored) != len(sequence) - 1:
            raise VerificationError(
                f"the trainer's reference gave {len(scored)} logprobs "
                f"for {len(sequence) - 1} tokens"
            )
        scores += scored
    return scores


async def verify(
    policy: OpenAICompatPolicy,
    probe: Probe,
    model: str,
    reference: ReferenceLogprobs,
    tolerance: Tolerance,
    *,
    candidates: Sequence[Candidate],
    new: Sequence[float] | None = None,
    server: str | None = None,
) -> ProbeResult:
    """Probe one server after a load: its continuation against the trainer, and its
    teacher-forced scores against the trainer's (``new``) and against each other
    candidate it could be serving. The first sequence is scored twice: a server whose
    answers move on the same weights widens its own separation unit."""
    tokens, served = await sample_probe(policy, probe, model, server)
    trainer = list(await _resolve(reference(list(probe.prompt) + tokens, len(probe.prompt))))
    if len(trainer) != len(tokens):
        raise VerificationError(
            f"the trainer's reference gave {len(trainer)} logprobs for {len(tokens)} tokens"
        )
    diff = max(abs(a - b) for a, b in zip(served, trainer, strict=True))
    after = await score_on_server(policy, probe, model, server)
    again = await score_sequences(policy, probe.sequences[:1], model, server, probe.seed)
    tolerance = tolerance.with_observed_repeat(rms(again, after[: len(again)]))
    new = list(new) if new is not None else await score_with_reference(reference, probe)
    separation = separate(after, new, candidates, tolerance)
    return ProbeResult(
        tokens, served, trainer, diff, tolerance, separation, after, url=server or policy.url
    )


async def _resolve(value: Any) -> Any:
    return await value if isinstance(value, Awaitable) else value


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
