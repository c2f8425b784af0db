"""TRL: a real ``GRPOTrainer`` step on CPU over guess_number through our ``rollout_func``.

The trainer is TRL's own (``trl`` from PyPI) with a tiny randomly initialised
Llama built here. The proof that environment tokens are masked is taken from the
trainer's own backward pass: a hook on the model's final hidden states (the
input of the LM head) records their gradient, and at every position whose
next token is an environment observation (``env_mask`` 0), or prompt, or
padding, it is exactly zero, while positions predicting sampled tokens get
gradient. Rewards differ inside each group, so advantages are not zero and a
missing mask would show.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from support.rollout_tiny_model import save_tiny_model
from support.trl_args import cpu_grpo_args

from agentenvs.envs.registry import make
from agentenvs.rollout.collect.rollouts import current_slot
from agentenvs.rollout.collect.store import read_records
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.scripted import ScriptedPolicy
from agentenvs.rollout.trainers.trl.rollout_func import (
    _consecutive_runs,
    env_reward,
    make_rollout_func,
    parse_task_key,
    task_dataset,
    task_key,
)
from agentenvs.rollout.trainers.trl.weight_sync import VLLMWeightSyncCallback

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


class MixedScripted:
    """Even trajectories of a group play the oracle, odd ones a malformed player."""

    per_env = True

    def __call__(self, env):
        slot = current_slot.get()
        odd = slot is not None and slot.traj_index % 2 == 1
        return ScriptedPolicy("malformed" if odd else "oracle")(env)


def variety_reward(prompts, completions, completion_ids, **_):
    """A second reward so a random model's completions differ in total reward."""
    return [0.01 * len(set(ids)) for ids in completion_ids]


@pytest.fixture(scope="module")
def trl_tokenizer(tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.padding_side = "left"  # what GRPOTrainer asks of its processing class
    return tok


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-trl"), tokenizer)


class HiddenStateGrads:
    """Records, for each backward pass, the token ids and the gradient of the loss
    w.r.t. the final hidden states (what the LM head projects to logits)."""

    def __init__(self, backbone: torch.nn.Module) -> None:
        self.captured: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.handle = backbone.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs, output):
        hidden = output.last_hidden_state
        if not hidden.requires_grad:
            return
        input_ids = kwargs.get("input_ids", args[0] if args else None).detach().clone()

        def keep(grad):
            self.captured.append((input_ids, grad.detach().clone()))

        hidden.register_hook(keep)


def run_one_step(tmp_path, model_dir, tokenizer, config, *, policy, reward_funcs):
    from transformers import AutoModelForCausalLM
    from trl import GRPOTrainer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rollout = make_rollout_func(
        config, tokenizer, policy=policy, max_tokens=12, store=tmp_path / "trl.jsonl"
    )
    outputs: list[dict] = []
    modes: list[bool] = []

    def recording_rollout(prompts, trainer):
        out = rollout(prompts, trainer)
        outputs.append(out)
        modes.append(trainer.model.training)
        return out

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=cpu_grpo_args(tmp_path / "out", max_steps=1, learning_rate=1e-2),
        train_dataset=task_dataset(config, n=2),
        processing_class=tokenizer,
        rollout_func=recording_rollout,
    )
    grads = HiddenStateGrads(model.base_model)
    try:
        trainer.train()
    finally:
        grads.handle.remove()
    changed = any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    return trainer, outputs, modes, grads.captured, changed


def check_masked_positions_get_no_gradient(outputs, captured):
    """Map each trained row back to its rollout and check every position."""
    (out,) = outputs
    (input_ids, grad) = captured[0] if len(captured) == 1 else pytest.fail("one backward expected")
    width_p = max(len(p) for p in out["prompt_ids"])
    per_position = grad.abs().sum(-1)  # [B, L]: zero iff the whole hidden-state gradient is zero
    trained_rows = 0
    for row in range(input_ids.shape[0]):
        tokens = input_ids[row].tolist()
        matches = [
            i
            for i in range(len(out["prompt_ids"]))
            if tokens[width_p - len(out["prompt_ids"][i]) : width_p] == out["prompt_ids"][i]
            and tokens[width_p : width_p + len(out["completion_ids"][i])]
            == out["completion_ids"][i]
        ]
        assert matches, "a trained row is not one of the rollouts"
        mask = out["env_mask"][matches[0]]
        assert 0 in mask and 1 in mask  # observations inside the completion
        # Position t predicts token t + 1; completion token j sits at width_p + j.
        predicts = {width_p + j - 1: keep for j, keep in enumerate(mask)}
        for t in range(per_position.shape[1]):
            value = float(per_position[row, t])
            if predicts.get(t, 0) == 0:
                assert value == 0.0, f"row {row}: gradient at position {t}, not a trained token"
        sampled = [float(per_position[row, t]) for t, keep in predicts.items() if keep]
        trained_rows += any(v > 0 for v in sampled)
    assert trained_rows >= 2, "no row received gradient on its sampled tokens"


def test_task_keys_round_trip():
    assert parse_task_key(task_key("test", 12)) == ("test", 12)
    with pytest.raises(ValueError, match="task_dataset"):
        parse_task_key([{"role": "user", "content": "hi"}])


def test_a_task_drawn_twice_in_a_row_makes_two_groups_of_num_generations():
    """TRL's sampler can put the same task in consecutive slots; each of its
    ``num_generations`` blocks is one group (else the group size changes between
    batches and a trajectory store refuses the next batch as another run)."""
    a, b = ("train", 0), ("train", 1)
    assert _consecutive_runs([a, a, a, a, b, b], 2) == [(a, 2), (a, 2), (b, 2)]
    assert _consecutive_runs([a, a, a, a, b, b]) == [(a, 4), (b, 2)]


def test_weight_sync_callback_picks_the_path_from_the_model(tmp_path, tokenizer):
    import peft

    from agentenvs.rollout.policies.tiny_model import build_tiny_model
    from agentenvs.rollout.weights.probe import Probe
    from agentenvs.rollout.weights.sync import WeightSync

    policy = OpenAICompatPolicy("http://127.0.0.1:9", tokenizer=tokenizer)  # never contacted
    sync = WeightSync(policy, probe=Probe.default(len(tokenizer)))
    model = build_tiny_model(tokenizer)
    assert VLLMWeightSyncCallback(sync, tmp_path).resolve_path(model) == "full"
    with pytest.raises(ValueError, match="needs a peft model"):
        VLLMWeightSyncCallback(sync, tmp_path, path="lora").resolve_path(model)
    adapted = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj"]))
    assert VLLMWeightSyncCallback(sync, tmp_path).resolve_path(adapted) == "lora"
    with pytest.raises(ValueError, match="path must be"):
        VLLMWeightSyncCallback(sync, tmp_path, path="nccl")  # type: ignore[arg-type]


def test_grpo_trainer_step_masks_environment_tokens(tmp_path, model_dir, trl_tokenizer):
    """Scripted players (oracle vs malformed) give different rewards; the model being
    trained scores and updates on the multi-turn completions."""
    config = make("guess_number", tasks=2, low=1, high=8, limits={"max_turns": 4})
    trainer, outputs, _, captured, changed = run_one_step(
        tmp_path,
        model_dir,
        trl_tokenizer,
        config,
        policy=MixedScripted(),
        reward_funcs=[env_reward],
    )
    (out,) = outputs
    assert len(out["completion_ids"]) == 4
    assert all(t >= 2 for t in out["env_turns"])  # multi-turn: observations in between
    assert out["env_reward"][0] != out["env_reward"][1]
    assert out["env_stop_reason"][0] == "completed" and out["env_stop_reason"][1] == "max_turns"
    check_masked_positions_get_no_gradient(outputs, captured)
    assert changed
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(math.isfinite(x) for x in losses)
    # Every group went to the trajectory file, viewable with `agentenvs view`.
    records = read_records(tmp_path / "trl.jsonl")
    assert len(records) == 2 and all(r.group and len(r.group.trajectories) == 2 for r in records)


def test_grpo_trainer_samples_with_its_own_model(tmp_path, model_dir, trl_tokenizer):
    """The default policy: the trainer's own weights sample the actions; the trainer
    stays in training mode after the rollout."""
    config = make(
        "guess_number",
        tasks=2,
        limits={"max_turns": 3, "max_tokens_per_turn": 6, "on_truncated_action": "pass"},
    )
    trainer, outputs, modes, captured, changed = run_one_step(
        tmp_path,
        model_dir,
        trl_tokenizer,
        config,
        policy=None,
        reward_funcs=[env_reward, variety_reward],
    )
    assert modes == [True]
    (out,) = outputs
    assert all(lp < 0 for mask, lps in zip(out["env_mask"], out["logprobs"], strict=True)
               for keep, lp in zip(mask, lps, strict=True) if keep)  # fmt: skip
    assert set(out["weights_version"]) == {0}
    check_masked_positions_get_no_gradient(outputs, captured)
    assert changed
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(math.isfinite(x) for x in losses)
