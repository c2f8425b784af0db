"""A local Hugging Face transformers causal LM as a policy (torch).

Sampling is done here token by token rather than through ``model.generate`` so
that the three things a trainer needs are exact:

* the tokens are the ones sampled (the token that completes a stop string is
  kept; nothing is decoded and re-encoded);
* each token's logprob is the **temperature-scaled log-softmax over the full
  vocabulary**, ``log_softmax(logits / temperature)``, taken before top-p
  truncation (at temperature 0, greedy decoding, it is the plain log-softmax).
  At temperature 1 this equals a teacher-forced forward pass of the model on the
  final sequence, which is what importance ratios in PPO/GRPO compare against;
* the stop reason: ``eos`` (an end-of-sequence id), ``stop`` (a stop string
  completed by the last token, or a stop token id) or ``length`` (``max_tokens``
  or the model's context size).

The prompt is encoded once per turn and each new token reuses the KV cache
(``past_key_values``), so a turn costs linear, not quadratic, work. Generation
runs in a worker thread (``asyncio.to_thread``) behind a lock: the event loop
stays free for environments while the model works, one generation at a time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentenvs.envs.types import SamplerStopReason, StopCondition, TokensWithLogprobs
from agentenvs.rollout.policies.base import PolicyError, check_max_tokens, turn_token_cap
from agentenvs.rollout.policies.stop import split_stop


class HFSampler:
    """Token-by-token sampling with a KV cache; synchronous and thread-safe."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        eos_token_ids: Iterable[int] | None = None,
        device: str = "cpu",
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.eos_token_ids = (
            set(eos_token_ids) if eos_token_ids is not None else _eos_ids(model, tokenizer)
        )
        config = getattr(model, "config", None)
        self.context_size: int | None = getattr(config, "max_position_embeddings", None)
        self._lock = threading.Lock()

    def generate(
        self,
        prompt: list[int],
        *,
        stop: StopCondition,
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        generator: Any = None,
        cancel: threading.Event | None = None,
    ) -> TokensWithLogprobs:
        """Sample one turn. ``cancel``, when set from another thread, stops it early
        (the caller was cancelled, by a group timeout say) with a PolicyError."""
        import torch

        if not prompt:
            raise PolicyError("cannot sample from an empty observation")
        split = split_stop(stop)
        # An empty string would "complete" after every token: it is no stop here.
        stop_strings = [s for s in split.strings if s]
        stop_ids = set(split.ids)
        limit = max_tokens
        if self.context_size is not None:
            limit = min(limit, self.context_size - len(prompt))
        tokens: list[int] = []
        logprobs: list[float] = []
        reason: SamplerStopReason = "length"
        with self._lock, torch.inference_mode():
            if limit <= 0:
                return TokensWithLogprobs([], [], "length")
            ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
            out = self._prefill(prompt, ids)
            while True:
                logits = out.logits[0, -1].float()
                token, logprob = _pick(logits, temperature, top_p, generator, self.never_sample)
                tokens.append(token)
                logprobs.append(logprob)
                if token in self.eos_token_ids:
                    reason = "eos"
                    break
                if token in stop_ids or self._completes_stop_string(tokens, stop_strings):
                    reason = "stop"
                    break
                if len(tokens) >= limit:
                    break
                if cancel is not None and cancel.is_set():
                    raise PolicyError("generation cancelled")
                step = torch.tensor([[token]], dtype=torch.long, device=self.device)
                out = self._decode(step, out.past_key_values)
        return self._answer(prompt, TokensWithLogprobs(tokens, logprobs, reason))

    # What a vision sampler (``vision_hf.py``) extends: the forward passes and the answer.
    never_sample: frozenset[int] = frozenset()
    """Ids never sampled (a VLM's image markup); their logprobs are still reported raw."""

    def _prefill(self, prompt: list[int], ids: Any) -> Any:
        return self.model(input_ids=ids, use_cache=True)

    def _decode(self, step: Any, past: Any) -> Any:
        return self.model(input_ids=step, past_key_values=past, use_cache=True)

    def _answer(self, prompt: list[int], out: TokensWithLogprobs) -> TokensWithLogprobs:
        return out

    def sees_images(self) -> bool:
        return False

    def _completes_stop_string(self, tokens: list[int], stop_strings: list[str]) -> bool:
        """Whether the text of the generated tokens now contains a stop string.

        Checked after every token, so the first hit is the token that completes it.
        Only a tail window is decoded: a string of n characters spans at most 4n
        bytes, and every byte-level token carries at least one byte.
        """
        if not stop_strings:
            return False
        window = 4 * max(len(s) for s in stop_strings) + 4
        text = self.tokenizer.decode(tokens[-window:], skip_special_tokens=False)
        return any(s in text for s in stop_strings)


def _pick(
    logits: Any,
    temperature: float,
    top_p: float,
    generator: Any,
    never: frozenset[int] = frozenset(),
) -> tuple[int, float]:
    import torch

    banned = torch.tensor(sorted(never), dtype=torch.long) if never else None
    if temperature <= 0:
        logprobs = torch.log_softmax(logits, dim=-1)
        chosen = logits if banned is None else logits.index_fill(0, banned, float("-inf"))
        token = int(torch.argmax(chosen))
        return token, float(logprobs[token])
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    probs = logprobs.exp()
    if banned is not None:
        probs = probs.index_fill(0, banned, 0.0)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        sorted_probs[before >= top_p] = 0.0  # the most likely token always survives
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(logprobs[token])


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    candidates = [getattr(tokenizer, "eos_token_id", None)]
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        candidates.append(getattr(source, "eos_token_id", None))
    for value in candidates:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return ids


class HFPolicy:
    """A shared :class:`Policy` over one local model."""

    def __init__(
        self,
        model: str | Path | Any,
        tokenizer: Any = None,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int | None = None,
        seed: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        eos_token_ids: list[int] | None = None,
        weights_version: int | str | None = None,
    ) -> None:
        import torch

        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        check_max_tokens(max_tokens)
        self.model_name = str(model) if isinstance(model, str | Path) else type(model).__name__
        if isinstance(model, str | Path):
            model = _load_model(str(model), dtype, device)
        if tokenizer is None:
            tokenizer = _load_tokenizer(self.model_name)
        elif isinstance(tokenizer, str | Path):
            from agentenvs.rollout.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(str(tokenizer))
        model.eval()
        from agentenvs.rollout.policies.vision_hf import sampler_for

        self.sampler = sampler_for(model, tokenizer, eos_token_ids=eos_token_ids, device=device)
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.seed = seed
        self.weights_version = weights_version
        """The version of the model's weights (a :class:`~.base.VersionedPolicy`): a
        training loop that updates the model in place bumps it after each step."""
        self.generator = torch.Generator(device=device)
        if seed is not None:
            self.generator.manual_seed(seed)
        else:
            self.generator.seed()

    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        cap = turn_token_cap(self.max_tokens, max_tokens)
        cancel = threading.Event()
        try:
            return await asyncio.to_thread(
                self.sampler.generate,
                observation,  # as given: an ImageObservation keeps its images
                stop=stop,
                max_tokens=cap,
                temperature=self.temperature,
                top_p=self.top_p,
                generator=self.generator,
                cancel=cancel,
            )
        except asyncio.CancelledError:
            cancel.set()  # the worker thread stops at its next token and frees the model
            raise

    def sees_images(self) -> bool:
        """A vision-language model's sampler reads the images (``vision_hf.py``)."""
        return self.sampler.sees_images()

    def provenance(self) -> dict[str, Any]:
        return {
            "policy": "hf",
            "model": self.model_name,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "logprobs": "temperature-scaled log-softmax, before top-p",
        }


def _load_model(path: str, dtype: str, device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r} (try float32, bfloat16, float16)")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except ValueError as text_only:  # a vision-language checkpoint is not a causal LM class
        from agentenvs.rollout.policies.vision_hf import load_vision_model

        model = load_vision_model(path, torch_dtype, text_only)
    except OSError as err:
        raise ValueError(f"cannot load a causal LM from {path!r}: {err}") from err
    return model.to(device)


def _load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(
            f"no tokenizer found with the model at {path!r}; pass tokenizer=... ({err})"
        ) from err
