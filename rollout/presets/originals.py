"""The trainer half of each preset: the original's own training settings, with sources.

An environment preset (``envs/*/config.py``) reproduces what the original's
environment does; what its *trainer* did (group size, learning rate, KL, clipping,
response budget, discount, ...) lives in the original's launch script and trainer
defaults, out of any environment's reach. This module writes those settings down as
data, each value with the file and line it was read from, so ``agentenvs preset show``
can hand them to verl, TRL or the Tinker cookbook (:mod:`agentenvs.rollout.presets.emit`).

Sources were read at the commits the issue compared (Search-R1 a14dc3a, verl 9886706,
verl-agent d0b9724). A value the script does not set is the trainer's default at that
commit and cites the default's file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Knob:
    """One training setting of an original, in our vocabulary (see ``KNOBS``)."""

    name: str
    value: Any
    source: str
    """``file:line`` in the original's repository at its commit (``Original.repo``)."""
    note: str = ""


@dataclass(frozen=True)
class Original:
    """Where a preset's settings come from."""

    repo: str
    commit: str
    script: str
    model: str
    """The model the script trains (the preset cannot choose it for you)."""


@dataclass(frozen=True)
class TrainerHalf:
    preset: str
    env: str
    original: Original
    knobs: tuple[Knob, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def value(self, name: str, default: Any = None) -> Any:
        for knob in self.knobs:
            if knob.name == name:
                return knob.value
        return default

    def knob(self, name: str) -> Knob | None:
        return next((k for k in self.knobs if k.name == name), None)


KNOBS: dict[str, str] = {
    "estimator": "advantage estimator (names as in agentenvs.rollout.data.advantages)",
    "normalize_std": "GRPO/GiGPO: divide by the group's std",
    "group_size": "trajectories per task (G)",
    "prompts_per_step": "tasks per training step (verl data.train_batch_size)",
    "mini_batch_size": "tasks per optimiser step (verl ppo_mini_batch_size)",
    "ppo_epochs": "passes over each batch",
    "learning_rate": "actor learning rate",
    "warmup_ratio": "share of the steps the learning rate warms up over",
    "grad_clip": "gradient norm clip",
    "kl_loss_coef": "KL to the reference policy as a loss term (0: none)",
    "kl_loss_type": "estimator of that KL term",
    "kl_reward_coef": "KL to the reference policy as a reward penalty (0: none)",
    "clip_low": "PPO ratio clip below 1 (1 - clip_low)",
    "clip_high": "PPO ratio clip above 1 (1 + clip_high)",
    "clip_c": "dual-clip bound for negative advantages",
    "entropy_coeff": "entropy bonus",
    "loss_agg": "how per-token losses are averaged",
    "max_prompt_tokens": "longest prompt the trainer accepts",
    "max_response_tokens": "response budget of a whole episode (all turns)",
    "max_turn_tokens": "response budget of one turn (one generation call)",
    "temperature": "sampling temperature",
    "top_p": "nucleus sampling",
    "gamma": "discount (GiGPO's step returns; GAE otherwise)",
    "step_advantage_w": "GiGPO: weight of the step-level advantage",
    "invalid_action_penalty": "penalty per format-invalid step (verl-agent applies it in the trainer)",
    "total_epochs": "passes over the training set",
    "total_steps": "training steps",
}
"""Our names for the settings, and what each means."""

SEARCH_R1_SCRIPT = "scripts/nq_hotpotqa/v0.2/train_grpo.sh"
SEARCH_R1_DEFAULTS = "verl/trainer/config/ppo_trainer.yaml"


def _s(line: int, path: str = SEARCH_R1_SCRIPT) -> str:
    return f"{path}:{line}"


SEARCH_R1 = TrainerHalf(
    preset="search_r1",
    env="search_r1",
    original=Original(
        repo="PeterGriffinJin/Search-R1",
        commit="a14dc3a",
        script=SEARCH_R1_SCRIPT,
        model="Qwen/Qwen2.5-7B (the script's active line; 3B and 14B variants commented)",
    ),
    knobs=(
        Knob("estimator", "grpo", _s(38)),
        Knob("normalize_std", True, "verl/trainer/ppo/core_algos.py:152"),
        Knob("group_size", 5, _s(59), "rollout.n_agent: Search-R1's agent repeat"),
        Knob("prompts_per_step", 512, _s(31)),
        Knob("mini_batch_size", 256, _s(45)),
        Knob("ppo_epochs", 1, _s(39, SEARCH_R1_DEFAULTS)),
        Knob("learning_rate", 1e-6, _s(42)),
        Knob("warmup_ratio", 0.285, _s(43), "v0.1/train_grpo.sh uses 0.95"),
        Knob("grad_clip", 1.0, _s(32, SEARCH_R1_DEFAULTS)),
        Knob("kl_loss_coef", 0.001, _s(56), "use_kl_loss=true at line 44"),
        Knob("kl_loss_type", "low_var_kl", _s(57)),
        Knob(
            "kl_reward_coef",
            0.0,
            "verl/trainer/ppo/ray_trainer.py:792",
            "the reward penalty applies only without use_kl_loss, which line 44 sets",
        ),
        Knob("clip_low", 0.2, _s(34, SEARCH_R1_DEFAULTS)),
        Knob("clip_high", 0.2, _s(34, SEARCH_R1_DEFAULTS)),
        Knob("entropy_coeff", 0.001, _s(35, SEARCH_R1_DEFAULTS)),
        Knob("loss_agg", "token-mean", "verl/trainer/ppo/core_algos.py (masked_mean over tokens)"),
        Knob("max_prompt_tokens", 4096, _s(33)),
        Knob("max_turn_tokens", 500, _s(34), "data.max_response_length: per generation turn"),
        Knob("temperature", 1.0, _s(60)),
        Knob("top_p", 0.95, _s(71, SEARCH_R1_DEFAULTS)),
        Knob("gamma", 1.0, _s(153, SEARCH_R1_DEFAULTS)),
        Knob("total_epochs", 15, _s(72)),
        Knob("total_steps", 1005, _s(73), "v0.1/train_grpo.sh: 305"),
    ),
    notes=(
        "state_masking=true (line 61): retrieved <information> tokens get no loss; agentenvs "
        "masks every observation token the same way.",
        "max_turns=4 (line 76) and retriever.topk=3 (line 78) are environment knobs: the "
        "search_r1 environment preset sets them.",
    ),
)

RETOOL_SCRIPT = "recipe/retool/run_qwen2_7b_dapo.sh"


def _r(line: int, path: str = RETOOL_SCRIPT) -> str:
    return f"{path}:{line}"


VERL_RETOOL = TrainerHalf(
    preset="verl_retool",
    env="retool",
    original=Original(
        repo="volcengine/verl",
        commit="9886706",
        script=RETOOL_SCRIPT,
        model="the recipe's multi-turn SFT of Qwen2.5-7B-Instruct (line 12)",
    ),
    knobs=(
        Knob("estimator", "grpo", _r(26)),
        Knob("normalize_std", True, "verl/trainer/config/algorithm.py:369"),
        Knob("group_size", 16, _r(43)),
        Knob("prompts_per_step", 64, _r(41)),
        Knob("mini_batch_size", 16, _r(42)),
        Knob("ppo_epochs", 1, _r(94, "verl/trainer/config/actor/actor.yaml")),
        Knob("learning_rate", 1e-6, _r(39)),
        Knob("kl_loss_coef", 0.0, _r(31), "use_kl_loss=False at line 30"),
        Knob("kl_reward_coef", 0.0, _r(29), "use_kl_in_reward=False at line 28"),
        Knob("clip_low", 0.2, _r(33)),
        Knob("clip_high", 0.28, _r(34)),
        Knob("clip_c", 10.0, _r(77)),
        Knob("entropy_coeff", 0.0, _r(78, "verl/trainer/config/actor/actor.yaml")),
        Knob("loss_agg", "token-mean", _r(75, "verl/trainer/config/actor/actor.yaml")),
        Knob("max_prompt_tokens", 2048, _r(37)),
        Knob("max_response_tokens", 16384, _r(38), "one budget across all turns"),
        Knob("temperature", 1.0, _r(11, "verl/trainer/config/rollout/rollout.yaml")),
        Knob("top_p", 1.0, _r(17, "verl/trainer/config/rollout/rollout.yaml")),
        Knob("gamma", 1.0, _r(72, "verl/trainer/config/ppo_trainer.yaml")),
        Knob("total_epochs", 1, _r(109)),
    ),
    notes=(
        "max_turns=16 (line 36) is an environment knob: the verl_retool environment preset "
        "sets it.",
        "The recipe's dataset is DAPO-Math-17k (line 9); evaluation on AIME 2024/2025.",
    ),
)

GIGPO_SCRIPT = "examples/gigpo_trainer/run_alfworld.sh"
GIGPO_DEFAULTS = "verl/trainer/config/ppo_trainer.yaml"


def _g(line: int, path: str = GIGPO_SCRIPT) -> str:
    return f"{path}:{line}"


GIGPO = TrainerHalf(
    preset="gigpo",
    env="alfworld",
    original=Original(
        repo="langfengQ/verl-agent",
        commit="d0b9724",
        script=GIGPO_SCRIPT,
        model="Qwen/Qwen2.5-1.5B-Instruct (line 29)",
    ),
    knobs=(
        Knob("estimator", "gigpo", _g(19)),
        Knob("normalize_std", True, _g(10), 'mode="mean_std_norm", passed at line 56'),
        Knob("group_size", 8, _g(9), "env.rollout.n at line 60"),
        Knob("prompts_per_step", 16, _g(7), "data.train_batch_size at line 22"),
        Knob("mini_batch_size", 256, _g(32)),
        Knob("ppo_epochs", 1, _g(63, GIGPO_DEFAULTS)),
        Knob("learning_rate", 1e-6, _g(30)),
        Knob("grad_clip", 1.0, _g(49, GIGPO_DEFAULTS)),
        Knob("kl_loss_coef", 0.01, _g(35), "use_kl_loss=True at line 34"),
        Knob("kl_loss_type", "low_var_kl", _g(36)),
        Knob("kl_reward_coef", 0.0, _g(53), "use_kl_in_reward=False"),
        Knob("clip_low", 0.2, _g(52, GIGPO_DEFAULTS)),
        Knob("clip_high", 0.2, _g(53, GIGPO_DEFAULTS)),
        Knob("clip_c", 3.0, _g(54, GIGPO_DEFAULTS)),
        Knob("entropy_coeff", 0.001, _g(56, GIGPO_DEFAULTS)),
        Knob("loss_agg", "token-mean", _g(55, GIGPO_DEFAULTS)),
        Knob("max_prompt_tokens", 2048, _g(24)),
        Knob("max_turn_tokens", 512, _g(25), "data.max_response_length: each step is one row"),
        Knob("temperature", 1.0, _g(106, GIGPO_DEFAULTS)),
        Knob("top_p", 1.0, _g(108, GIGPO_DEFAULTS)),
        Knob("gamma", 0.95, _g(54)),
        Knob("step_advantage_w", 1.0, _g(55)),
        Knob("invalid_action_penalty", 0.1, _g(52), "use_invalid_action_penalty=True at line 51"),
        Knob("total_epochs", 150, _g(70)),
    ),
    notes=(
        "env.max_steps=50 (line 59) is an environment knob: the gigpo environment preset sets "
        "it (limits.max_turns).",
        "verl-agent subtracts the invalid-action penalty from the step's own score and return "
        "in the trainer; agentenvs' env pays it as a step reward. "
        "GigpoSettings(penalty_metric='invalid_format', penalty=0.1) moves it back "
        "(docs/advantages.md).",
    ),
)

TRAINER_HALVES: dict[str, TrainerHalf] = {h.preset: h for h in (SEARCH_R1, VERL_RETOOL, GIGPO)}
