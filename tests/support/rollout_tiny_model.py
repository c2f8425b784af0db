"""A tiny randomly initialised Llama-style causal LM over the test tokenizer's vocabulary.

Nothing can be downloaded here, so the HF and server policy tests build one on the
spot (2 layers, hidden size 32) with the library's own builder, and check sampled
logprobs against a teacher-forced forward pass.
"""

from __future__ import annotations

from agentenvs.rollout.policies.tiny_model import save_tiny_model

__all__ = ["save_tiny_model", "teacher_forced_logprobs"]


def teacher_forced_logprobs(model, sequence: list[int]) -> list[float]:
    """log p(sequence[i] | sequence[:i]) for i >= 1, from one forward pass (temperature 1)."""
    import torch

    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([sequence])).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
    return [0.0] + [float(logprobs[i - 1, sequence[i]]) for i in range(1, len(sequence))]
