"""A tiny randomly initialised causal LM over any tokenizer's vocabulary.

Nothing is downloaded for smoke runs, tests and the worked examples, yet the
Hugging Face policy path should run for real: a two-layer Llama-style model is
built on the spot and can be saved like any checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def build_tiny_model(
    tokenizer: Any, *, hidden_size: int = 32, seed: int = 0, sharpen: float = 40.0
) -> Any:
    """A 2-layer model; ``sharpen`` scales the output layer so next-token
    distributions are peaked and sampled turns vary in length and ending."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    return model


def save_tiny_model(directory: str | Path, tokenizer: Any, **options: Any) -> Path:
    """Build a tiny model and save it with its tokenizer, loadable by ``make_policy("hf")``."""
    directory = Path(directory)
    build_tiny_model(tokenizer, **options).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


VLLM_HIDDEN_SIZE = 128
"""vLLM's CPU attention supports head sizes of 32 and up; the default tiny model
(hidden 32 over 4 heads: head size 8) loads, reports ready, then kills the engine
on its first request. Hidden 128 over 4 heads gives head size 32."""


def save_vllm_tiny_model(directory: str | Path, tokenizer: Any, *, seed: int = 0) -> Path:
    """The tiny model sized for vLLM-CPU, saved with its tokenizer and chat template."""
    return save_tiny_model(directory, tokenizer, hidden_size=VLLM_HIDDEN_SIZE, seed=seed)
