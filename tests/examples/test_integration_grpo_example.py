"""examples/grpo_torch.py: the plain-torch GRPO loop over guess_number on CPU.

The masking check does not rely on the rewards: the advantages are set to 1.0 on
*every* response position (observations and padding included), so only the loss
mask can keep those positions out of the gradient, and the gradient of the loss
w.r.t. the logits must be exactly zero at every position that predicts a
prompt, observation or padding token.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys

import pytest
import torch
from support.paths import EXAMPLES

from agentenvs.envs.registry import make
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import read_records
from agentenvs.rollout.data.advantages import compute_advantages
from agentenvs.rollout.data.samples import trajectories_to_samples
from agentenvs.rollout.policies.hf import HFPolicy
from agentenvs.rollout.trainers.verl.handoff import to_verl_batch

EXAMPLE = EXAMPLES / "grpo_torch.py"
MULTI_TURN = {
    "tasks": 2,
    "low": 1,
    "high": 8,
    "limits": {"max_turns": 3, "max_tokens_per_turn": 6, "on_truncated_action": "pass"},
}


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("grpo_torch_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def collected_batch(example, model, tokenizer):
    config = make("guess_number", **MULTI_TURN)
    policy = HFPolicy(model, tokenizer, max_tokens=6, seed=1)
    builders = [config.group_builder(i, 3, tokenizer) for i in range(2)]
    result = asyncio.run(collect(builders, policy, CollectOptions(progress=False)))
    groups = [r.group for r in result.ok]
    samples = trajectories_to_samples(groups, compute_advantages(groups))
    return samples, to_verl_batch(samples, tokenizer.pad_token_id)


def test_masked_tokens_get_zero_gradient(example, tokenizer):
    model = example.build_tiny_model(tokenizer, seed=0)
    samples, batch = collected_batch(example, model, tokenizer)
    assert all(0 in s.loss_mask[s.prompt_length :] for s in samples)  # observations inside
    batch["advantages"] = torch.ones_like(batch["advantages"])  # even where masked

    model.train()
    logits = example.forward_logits(model, batch)
    logits.retain_grad()
    loss, stats = example.grpo_loss(logits, batch, clip_eps=0.2)
    loss.backward()
    assert math.isfinite(loss.item()) and stats["trained_tokens"] == int(
        batch["response_mask"].sum()
    )
    # The sampler's logprobs are the model's own (temperature 1, same weights): ratio 1.
    assert abs(stats["approx_kl"]) < 1e-5 and stats["clip_fraction"] == 0.0

    width_p = batch["prompts"].shape[1]
    per_position = logits.grad.abs().sum(-1)  # [B, P + R]
    mask = batch["response_mask"]
    for row in range(per_position.shape[0]):
        trained = {width_p + j - 1 for j in range(mask.shape[1]) if mask[row, j]}
        for t in range(per_position.shape[1]):
            if t not in trained:
                assert per_position[row, t] == 0.0, f"row {row}: gradient at position {t}"
        assert all(per_position[row, t] > 0 for t in trained)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_training_loop_runs_and_bumps_weights_version(example, tokenizer, tmp_path):
    history = example.train(
        env_config=MULTI_TURN,
        tokenizer=tokenizer,
        steps=2,
        groups=1,
        group_size=3,
        max_tokens=6,
        warmup_steps=2,
        out=tmp_path / "grpo.jsonl",
    )
    assert [h.weights_version for h in history] == [0, 1]
    assert all(math.isfinite(h.loss) and h.trained_tokens > 0 for h in history)
    records = read_records(tmp_path / "grpo.jsonl")
    assert [r.provenance["policy"]["weights_version"] for r in records] == [0, 1]


def test_warm_start_lowers_the_oracle_loss(example, tokenizer):
    model = example.build_tiny_model(tokenizer, seed=0)
    config = make("guess_number", **MULTI_TURN)
    losses = example.warm_start(model, tokenizer, config, steps=4, episodes=4)
    assert len(losses) == 4 and losses[-1] < losses[0]


def test_grpo_loss_refuses_rows_without_sampler_logprobs(example, tokenizer):
    """A batch from the scripted policy (no logprobs, 0.0 stands in) would give each
    token the ratio p_new / 1: the loss refuses it and names the rows."""
    from agentenvs.rollout.policies.scripted import ScriptedPolicy

    config = make("guess_number", **MULTI_TURN)
    builders = [config.group_builder(0, 2, tokenizer)]
    result = asyncio.run(
        collect(builders, ScriptedPolicy("oracle"), CollectOptions(progress=False))
    )
    groups = [r.group for r in result.ok]
    samples = trajectories_to_samples(groups, [[1.0, 1.0]])
    batch = to_verl_batch(samples, tokenizer.pad_token_id)
    assert not batch["has_logprobs"].any()
    logits = torch.zeros(*batch["input_ids"].shape, len(tokenizer))
    with pytest.raises(ValueError, match=r"rows \[0, 1\] have no sampler logprobs"):
        example.grpo_loss(logits, batch)
