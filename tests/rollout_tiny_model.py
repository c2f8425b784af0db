"""A tiny randomly initialised Llama-style causal LM over the test tokenizer's vocabulary.

Nothing can be downloaded here, so the HF and server policy tests build one on the
spot (2 layers, hidden size 32) and save it like any Hugging Face checkpoint.
"""

from __future__ import annotations

from pathlib import Path


def save_tiny_model(directory: Path, tokenizer, seed: int = 0) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
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
    # Larger output weights give a peaked next-token distribution, so sampling
    # exercises both likely and unlikely tokens.
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def teacher_forced_logprobs(model, sequence: list[int]) -> list[float]:
    """log p(sequence[i] | sequence[:i]) for i >= 1, from one forward pass (temperature 1)."""
    import torch

    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([sequence])).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
    return [0.0] + [float(logprobs[i - 1, sequence[i]]) for i in range(1, len(sequence))]
