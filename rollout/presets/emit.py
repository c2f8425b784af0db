"""A preset's trainer half in each trainer's own vocabulary.

Three targets, field names checked against the installed packages (tests):

* **verl 0.9.1**: Hydra overrides (``key=value``) of ``verl.trainer.main_ppo``;
* **TRL**: keyword arguments of ``trl.GRPOConfig``;
* **Tinker cookbook**: fields of ``tinker_cookbook.rl.train.Config`` and of our
  ``AgentenvsDatasetBuilder`` (``dataset_builder.*``: the environment, its preset and
  the budgets the original's trainer kept, which the environment keeps here).

Batch sizes come from :mod:`.batches`, in rows, so each target's batch trains the same
rows per optimiser step and optimiser steps per batch as the original wherever the
trainer can express it, and says where it cannot.

Every knob a target cannot express is returned with the reason, never dropped in
silence: a reproduction that cannot be set up one to one must say where it differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentenvs.rollout.presets.batches import (
    BATCH_KNOBS,
    BatchPlan,
    cookbook_batch,
    trl_batch,
    verl_batch,
)
from agentenvs.rollout.presets.originals import TrainerHalf

TARGETS = ("verl", "trl", "cookbook")


@dataclass
class Emitted:
    """What one target can take (``settings``) and what it cannot (``left_out``: knob -> why),
    and the batch those settings make (``batch``: rows per optimiser step and optimiser
    steps per batch, with ``batch.differs`` saying how and why they are not the original's)."""

    target: str
    batch: BatchPlan
    settings: dict[str, Any] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "settings": self.settings,
            "left_out": self.left_out,
            "batch": {
                **self.batch.figures.to_json(),
                "describe": self.batch.figures.describe(),
                "differs": self.batch.differs,
                "requires": self.batch.requires,
            },
        }


_VERL_FIELDS = {
    "learning_rate": "actor_rollout_ref.actor.optim.lr",
    "warmup_ratio": "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
    "grad_clip": "actor_rollout_ref.actor.optim.clip_grad",
    "kl_loss_type": "actor_rollout_ref.actor.kl_loss_type",
    "clip_low": "actor_rollout_ref.actor.clip_ratio_low",
    "clip_high": "actor_rollout_ref.actor.clip_ratio_high",
    "clip_c": "actor_rollout_ref.actor.clip_ratio_c",
    "entropy_coeff": "actor_rollout_ref.actor.entropy_coeff",
    "loss_agg": "actor_rollout_ref.actor.loss_agg_mode",
    "max_prompt_tokens": "data.max_prompt_length",
    "max_response_tokens": "data.max_response_length",
    "temperature": "actor_rollout_ref.rollout.temperature",
    "top_p": "actor_rollout_ref.rollout.top_p",
    "val_temperature": "actor_rollout_ref.rollout.val_kwargs.temperature",
    "val_top_p": "actor_rollout_ref.rollout.val_kwargs.top_p",
    "val_n": "actor_rollout_ref.rollout.val_kwargs.n",
    "val_do_sample": "actor_rollout_ref.rollout.val_kwargs.do_sample",
    "gamma": "algorithm.gamma",
    "normalize_std": "algorithm.norm_adv_by_std_in_grpo",
    "micro_rows_per_gpu": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "dynamic_batch": "actor_rollout_ref.actor.use_dynamic_bsz",
    "max_tokens_per_gpu": "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "total_epochs": "trainer.total_epochs",
    "total_steps": "trainer.total_training_steps",
}
_VERL_BOTH = {  # one knob, the same value for the rollout's and the reference model's pass
    "log_prob_rows_per_gpu": "log_prob_micro_batch_size_per_gpu",
    "log_prob_max_tokens_per_gpu": "log_prob_max_token_len_per_gpu",
}

_PER_TURN = (
    "a per-turn budget: the environment preset sets it (limits.max_tokens_per_turn); the "
    "trainer's response length is the whole episode's"
)
_PENALTY = (
    "agentenvs' environment pays it (the preset's invalid_action_penalty); for GiGPO's "
    "per-step placement use GigpoSettings(penalty_metric='invalid_format')"
)
_GIGPO_HERE = (
    "GiGPO is not in {target}: compute it with agentenvs (compute_advantages(groups, "
    "'gigpo') or samples_from_records(..., estimator='gigpo')) and hand the samples over"
)
_GIGPO_VERL = (
    "verl 0.9.1 has no gigpo estimator (its default, gae, would train a critic): grpo with "
    "norm_adv_by_std_in_grpo is GiGPO's episode-level term (mode mean_std_norm); the step-level "
    "term needs agentenvs: " + _GIGPO_HERE.format(target="verl 0.9.1")
)
_MEMORY = "memory only (the update is the same): {where}"
_NO_EVAL = {
    "trl": "GRPOConfig evaluates with the training temperature and top_p",
    "cookbook": "the cookbook's evaluators (evaluator_builders) bring their own sampling",
}


def verl_overrides(half: TrainerHalf) -> Emitted:
    """Hydra overrides for verl 0.9.1's ``main_ppo``."""
    emitted = Emitted("verl", verl_batch(half))
    settings = emitted.settings
    settings.update(emitted.batch.settings)
    gigpo = half.value("estimator") == "gigpo"
    for knob in half.knobs:
        name, value = knob.name, knob.value
        if name in BATCH_KNOBS:
            continue
        if name == "estimator":
            settings["algorithm.adv_estimator"] = "grpo" if gigpo else value
            if gigpo:
                emitted.left_out[name] = _GIGPO_VERL
        elif name == "kl_loss_coef":
            settings["actor_rollout_ref.actor.use_kl_loss"] = value > 0
            settings["actor_rollout_ref.actor.kl_loss_coef"] = value
        elif name == "kl_reward_coef":
            settings["algorithm.use_kl_in_reward"] = value > 0
            settings["algorithm.kl_ctrl.kl_coef"] = value
        elif name == "max_turn_tokens":
            emitted.left_out[name] = _PER_TURN
        elif name in ("step_advantage_w", "gamma") and gigpo:
            emitted.left_out[name] = (
                "GiGPO's step-level term (agentenvs' GigpoSettings); verl's grpo does not use it"
            )
        elif name == "invalid_action_penalty":
            emitted.left_out[name] = _PENALTY
        elif name == "normalize_std" and half.value("estimator") not in ("grpo", "gigpo"):
            emitted.left_out[name] = "applies to verl's grpo estimator only"
        elif name == "gpus":
            settings["trainer.n_gpus_per_node"] = value
            settings["trainer.nnodes"] = 1
        elif name in _VERL_BOTH:
            for model in ("rollout", "ref"):
                settings[f"actor_rollout_ref.{model}.{_VERL_BOTH[name]}"] = value
        elif name in _VERL_FIELDS:
            settings[_VERL_FIELDS[name]] = value
        else:
            emitted.left_out[name] = "no verl field for it"
    return emitted


def verl_command_line(emitted: Emitted) -> list[str]:
    """``key=value`` arguments, as a launch script writes them."""

    def show(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return [f"{key}={show(value)}" for key, value in emitted.settings.items()]


_TRL_FIELDS = {
    "learning_rate": "learning_rate",
    "warmup_ratio": "warmup_ratio",
    "grad_clip": "max_grad_norm",
    "clip_low": "epsilon",
    "clip_high": "epsilon_high",
    "temperature": "temperature",
    "top_p": "top_p",
    "max_response_tokens": "max_completion_length",
    "val_n": "num_generations_eval",
    "total_epochs": "num_train_epochs",
    "total_steps": "max_steps",
}


def trl_kwargs(half: TrainerHalf) -> Emitted:
    """Keyword arguments for ``trl.GRPOConfig`` (TRL computes its own GRPO advantages)."""
    emitted = Emitted("trl", trl_batch(half))
    settings, out = emitted.settings, emitted.left_out
    settings.update(emitted.batch.settings)
    for knob in half.knobs:
        name, value = knob.name, knob.value
        if name in BATCH_KNOBS:
            continue
        if name == "estimator":
            if value != "grpo":
                out[name] = _GIGPO_HERE.format(target="TRL")
        elif name == "normalize_std":
            settings["scale_rewards"] = "group" if value else "none"
        elif name == "kl_loss_coef":
            settings["beta"] = value
        elif name == "kl_loss_type":
            if value != "low_var_kl":
                out[name] = "TRL's KL term is the k3 estimator only"
            # low_var_kl is k3 (verl clamps it to [-10, 10]; TRL does not): nothing to set.
        elif name == "kl_reward_coef":
            if value:
                out[name] = "TRL has no KL reward penalty (only the loss term, beta)"
        elif name == "loss_agg":
            if value == "token-mean":
                settings["loss_type"] = "dapo"  # normalised by the batch's trained tokens
            else:
                out[name] = f"no TRL loss_type aggregates as {value!r}"
        elif name == "max_turn_tokens":
            out[name] = _PER_TURN
        elif name == "max_prompt_tokens":
            out[name] = (
                f"GRPOConfig has no prompt limit in TRL 1.16: make the environment with "
                f"limits.max_prompt_tokens={value}"
            )
        elif name == "clip_c":
            out[name] = "TRL has no dual-clip bound (its delta clips the ratio from above)"
        elif name == "entropy_coeff":
            if value:
                out[name] = "TRL's GRPO has no entropy bonus"
        elif name == "gamma":
            if value != 1.0:
                out[name] = "TRL does not discount (one reward per completion)"
        elif name == "step_advantage_w":
            out[name] = _GIGPO_HERE.format(target="TRL")
        elif name == "invalid_action_penalty":
            out[name] = _PENALTY
        elif name in ("val_temperature", "val_top_p", "val_do_sample"):
            out[name] = _NO_EVAL["trl"]
        elif name in ("micro_rows_per_gpu", "log_prob_rows_per_gpu", "dynamic_batch",
                      "max_tokens_per_gpu", "log_prob_max_tokens_per_gpu", "gpus"):  # fmt: skip
            out[name] = _MEMORY.format(
                where="choose per_device_train_batch_size for your GPUs; batch.requires says "
                "what it must multiply to"
            )
        elif name in _TRL_FIELDS:
            settings[_TRL_FIELDS[name]] = value
        else:
            out[name] = "no GRPOConfig field for it"
    return emitted


def _cookbook_env_config(half: TrainerHalf) -> dict[str, Any]:
    """The environment preset, plus the budgets the original's trainer kept (a whole
    trajectory's response, the first prompt): in the cookbook the environment keeps them."""
    limits: dict[str, int] = {}
    if half.value("row_unit") == "trajectory" and half.value("max_response_tokens"):
        limits["max_response_tokens"] = half.value("max_response_tokens")
    if half.value("max_prompt_tokens"):
        limits["max_prompt_tokens"] = half.value("max_prompt_tokens")
    return {"preset": half.preset, **({"limits": limits} if limits else {})}


def cookbook_fields(half: TrainerHalf) -> Emitted:
    """Fields of ``tinker_cookbook.rl.train.Config`` (and ``dataset_builder.*``)."""
    emitted = Emitted("cookbook", cookbook_batch(half))
    settings, out = emitted.settings, emitted.left_out
    settings["dataset_builder.env"] = half.env
    settings["dataset_builder.env_config"] = _cookbook_env_config(half)
    settings.update(emitted.batch.settings)
    for knob in half.knobs:
        name, value = knob.name, knob.value
        if name in BATCH_KNOBS:
            continue
        if name == "estimator":
            out[name] = (
                "the cookbook centres each group's rewards (our dr_grpo); for "
                f"{value} compute advantages with agentenvs and use assemble_tinker_data"
            )
        elif name == "learning_rate":
            settings["learning_rate"] = value
        elif name == "temperature":
            settings["temperature"] = value
        elif name == "max_turn_tokens":
            settings["max_tokens"] = value  # the cookbook samples one turn per call
        elif name == "max_response_tokens":
            if half.value("row_unit") == "trajectory":
                # the environment ends the episode at the budget (dataset_builder.env_config);
                # with no per-turn cap a turn may take all of it
                settings.setdefault("max_tokens", value)
            else:
                out[name] = "a row is one step here: max_tokens is each row's budget"
        elif name == "max_prompt_tokens":
            continue  # dataset_builder.env_config.limits.max_prompt_tokens
        elif name == "kl_reward_coef":
            settings["kl_penalty_coef"] = value
        elif name == "kl_loss_coef":
            if value:
                out[name] = (
                    "the cookbook's KL is a reward penalty (kl_penalty_coef), not a loss term"
                )
        elif name in ("clip_low", "clip_high"):
            settings["loss_fn"] = "ppo"
            config = settings.setdefault("loss_fn_config", {})
            if name == "clip_low":
                config["clip_low_threshold"] = round(1.0 - value, 10)
            else:
                config["clip_high_threshold"] = round(1.0 + value, 10)
        elif name == "total_steps":
            settings["max_steps"] = value
        elif name == "step_advantage_w":
            out[name] = _GIGPO_HERE.format(target="the cookbook")
        elif name == "invalid_action_penalty":
            out[name] = _PENALTY
        elif name == "gamma" and value == 1.0:
            continue  # the cookbook does not discount either
        elif name == "normalize_std":
            out[name] = "the cookbook never divides by the std"
        elif name.startswith("val_"):
            out[name] = _NO_EVAL["cookbook"]
        elif name in ("micro_rows_per_gpu", "log_prob_rows_per_gpu", "dynamic_batch",
                      "max_tokens_per_gpu", "log_prob_max_tokens_per_gpu", "gpus"):  # fmt: skip
            out[name] = _MEMORY.format(where="Tinker sizes its own passes")
        else:
            out[name] = "no cookbook field for it"
    return emitted


def emit(half: TrainerHalf, target: str) -> Emitted:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {TARGETS}")
    return {"verl": verl_overrides, "trl": trl_kwargs, "cookbook": cookbook_fields}[target](half)
