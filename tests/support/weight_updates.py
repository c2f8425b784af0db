"""Weight updates pushed to the suite's vLLM server: a loaded model, a perturbed copy, a LoRA adapter."""

from __future__ import annotations

import peft
import pytest
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


def _lora_config() -> peft.LoraConfig:
    """Rank 8 on every projection the suite's server can serve adapters for."""
    return peft.LoraConfig(
        r=LORA_RANK,
        lora_alpha=2 * LORA_RANK,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"],
    )


def _adapter(directory, out, seed: int):
    model = peft.get_peft_model(_load(directory), _lora_config())
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


def one_rl_step(
    directory, out, *, lr: float, lora: bool, seed: int = 0, tokens: list[list[int]] | None = None
):
    """One AdamW step (grad norm clipped to 1.0) of a GRPO-like loss, saved to ``out``.

    The size of update a real RL step makes, unlike the perturbations above: the
    model samples 8 sequences of 48 tokens (or scores ``tokens``), each gets an
    advantage of +1 or -1, and the loss is ``-mean(advantage * logprob)``. Adam's
    first step moves every trained parameter by about ``lr``. Returns the trained
    model (a peft model on the LoRA path) in eval mode.
    """
    torch.manual_seed(seed)
    model = _load(directory)
    if lora:
        model = peft.get_peft_model(model, _lora_config())
    if tokens is None:
        with torch.no_grad():
            start = torch.randint(16, model.config.vocab_size, (8, 1))
            sampled = model.generate(
                input_ids=start, attention_mask=torch.ones_like(start), do_sample=True,
                max_new_tokens=47, min_new_tokens=47, pad_token_id=0,
            )  # fmt: skip
    else:
        sampled = torch.tensor(tokens)
    advantages = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(sampled))])
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr)
    logits = model(input_ids=sampled).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, sampled[:, 1:, None])[..., 0]
    loss = -(advantages[:, None] * logprobs).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    optimizer.step()
    model.eval()
    model.save_pretrained(out)
    return model


@pytest.fixture
def realistic_policy(vllm_server, tokenizer):  # noqa: F811
    """A policy on the session server; the base weights are put back after the test."""
    from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy

    policy = OpenAICompatPolicy(
        vllm_server.url, tokenizer=tokenizer, seed=11, weights_version=0, max_tokens=12
    )
    yield policy
    restore_base_weights(vllm_server)
