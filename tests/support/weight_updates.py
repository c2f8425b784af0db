"""Weight updates pushed to the suite's vLLM server: a loaded model, a perturbed copy, a LoRA adapter."""

from __future__ import annotations

import peft
import torch

from agentenvs.envs.guess_number import GuessNumberConfig
from agentenvs.envs.rendered_env import Limits
from support.vllm_server import LORA_RANK, restore_base_weights, vllm_server  # noqa: F401  (the session fixture)


def _load(directory):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)


def _perturbed(directory, out, seed: int, scale: float = 0.02):
    model = _load(directory)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    model.save_pretrained(out)
    return model


def _adapter(directory, out, seed: int):
    base = _load(directory)
    config = peft.LoraConfig(
        r=LORA_RANK,
        lora_alpha=2 * LORA_RANK,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"],
    )
    model = peft.get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:  # peft starts B at zero: make the adapter change something
                param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    model.save_pretrained(out)
    return model


def _group_builders(tokenizer):
    limits = Limits(max_turns=2, max_tokens_per_turn=12, on_truncated_action="pass")
    return [GuessNumberConfig(tasks=1, limits=limits).group_builder(0, 2, tokenizer)]
