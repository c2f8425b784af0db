"""A preset's trainer half in each trainer's own vocabulary.

Three targets, field names checked against the installed packages (tests):

* **verl 0.9.1**: Hydra overrides (``key=value``) of ``verl.trainer.main_ppo``;
* **TRL**: keyword arguments of ``trl.GRPOConfig``;
* **Tinker cookbook**: fields of ``tinker_cookbook.rl.train.Config`` and of our
  ``AgentenvsDatasetBuilder`` (``dataset_builder.*``).

Every knob a target cannot express is returned with the reason, never dropped in
silence: a reproduction that cannot be set up one to one must say where it differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentenvs.rollout.presets.originals import TrainerHalf

TARGETS = ("verl", "trl", "cookbook")


@dataclass
class Emitted:
    """What one target can take (``settings``) and what it cannot (``left_out``: knob -> why)."""

    target: str
    settings: dict[str, Any] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "settings": self.settings, "left_out": self.left_out}


_VERL_FIELDS = {
    "group_size": "actor_rollout_ref.rollout.n",
    "prompts_per_step": "data.train_batch_size",
    "mini_batch_size": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "ppo_epochs": "actor_rollout_ref.actor.ppo_epochs",
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
    "gamma": "algorithm.gamma",
    "normalize_std": "algorithm.norm_adv_by_std_in_grpo",
    "total_epochs": "trainer.total_epochs",
    "total_steps": "trainer.total_training_steps",
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


def verl_overrides(half: TrainerHalf) -> Emitted:
    """Hydra overrides for verl 0.9.1's ``main_ppo``."""
    emitted = Emitted("verl")
    settings = emitted.settings
    for knob in half.knobs:
        name, value = knob.name, knob.value
        if name == "estimator":
            if value == "gigpo":
                emitted.left_out[name] = _GIGPO_HERE.format(target="verl 0.9.1")
            else:
                settings["algorithm.adv_estimator"] = value
        elif name == "kl_loss_coef":
            settings["actor_rollout_ref.actor.use_kl_loss"] = value > 0
            settings["actor_rollout_ref.actor.kl_loss_coef"] = value
        elif name == "kl_reward_coef":
            settings["algorithm.use_kl_in_reward"] = value > 0
            settings["algorithm.kl_ctrl.kl_coef"] = value
        elif name == "max_turn_tokens":
            emitted.left_out[name] = _PER_TURN
        elif name == "step_advantage_w":
            emitted.left_out[name] = _GIGPO_HERE.format(target="verl 0.9.1")
        elif name == "invalid_action_penalty":
            emitted.left_out[name] = _PENALTY
        elif name == "normalize_std" and half.value("estimator") != "grpo":
            emitted.left_out[name] = "applies to verl's grpo estimator only"
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


def trl_kwargs(half: TrainerHalf) -> Emitted:
    """Keyword arguments for ``trl.GRPOConfig`` (TRL computes its own GRPO advantages)."""
    emitted = Emitted("trl")
    settings, out = emitted.settings, emitted.left_out
    direct = {
        "group_size": "num_generations",
        "learning_rate": "learning_rate",
        "warmup_ratio": "warmup_ratio",
        "grad_clip": "max_grad_norm",
        "ppo_epochs": "num_iterations",
        "clip_low": "epsilon",
        "clip_high": "epsilon_high",
        "temperature": "temperature",
        "top_p": "top_p",
        "max_response_tokens": "max_completion_length",
        "total_epochs": "num_train_epochs",
        "total_steps": "max_steps",
    }
    for knob in half.knobs:
        name, value = knob.name, knob.value
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
        elif name == "prompts_per_step":
            mini = half.value("mini_batch_size")
            if mini:
                settings["steps_per_generation"] = max(1, value // mini)
            out[name] = (
                f"{value} tasks x {half.value('group_size')} completions per generation: set "
                "per_device_train_batch_size x processes x gradient_accumulation_steps to "
                f"{(mini or value) * half.value('group_size', 1)} completions per optimiser step"
            )
        elif name == "mini_batch_size":
            continue  # folded into steps_per_generation above
        elif name == "max_turn_tokens":
            out[name] = _PER_TURN
        elif name == "max_prompt_tokens":
            out[name] = "GRPOConfig has no prompt length limit in this TRL version"
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
        elif name in direct:
            settings[direct[name]] = value
        else:
            out[name] = "no GRPOConfig field for it"
    return emitted


def cookbook_fields(half: TrainerHalf) -> Emitted:
    """Fields of ``tinker_cookbook.rl.train.Config`` (and ``dataset_builder.*``)."""
    emitted = Emitted("cookbook")
    settings, out = emitted.settings, emitted.left_out
    for knob in half.knobs:
        name, value = knob.name, knob.value
        if name == "estimator":
            out[name] = (
                "the cookbook centres each group's rewards (our dr_grpo); for "
                f"{value} compute advantages with agentenvs and use assemble_tinker_data"
            )
        elif name == "group_size":
            settings["dataset_builder.group_size"] = value
        elif name == "prompts_per_step":
            settings["dataset_builder.batch_size"] = value
            mini = half.value("mini_batch_size")
            if mini:
                settings["num_substeps"] = max(1, value // mini)
        elif name == "mini_batch_size":
            continue  # num_substeps above
        elif name == "learning_rate":
            settings["learning_rate"] = value
        elif name == "temperature":
            settings["temperature"] = value
        elif name == "max_turn_tokens":
            settings["max_tokens"] = value  # the cookbook samples one turn per call
        elif name == "max_response_tokens":
            out[name] = (
                "an episode budget: the environment preset's limits.max_response_tokens; the "
                "cookbook's max_tokens is per sampling call"
            )
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
        else:
            out[name] = "no cookbook field for it"
    return emitted


def emit(half: TrainerHalf, target: str) -> Emitted:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {TARGETS}")
    return {"verl": verl_overrides, "trl": trl_kwargs, "cookbook": cookbook_fields}[target](half)
