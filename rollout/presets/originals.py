"""The trainer half of each preset: the original's own training settings, with sources.

An environment preset (``envs/*/config.py``) reproduces what the original's
environment does; what its *trainer* did (group size, learning rate, KL, clipping,
response budget, discount, ...) lives in the original's launch script and trainer
defaults, out of any environment's reach. This module writes those settings down as
data, each value with the file and line it was read from, so ``agentenvs preset show``
can hand them to verl, TRL or the Tinker cookbook (:mod:`agentenvs.rollout.presets.emit`).

Sources were read at the commits the issue compared (Search-R1 a14dc3a, verl 9886706,
verl-agent d0b9724: CloudEngineHub/verl-agent's mirror of langfengQ's). A value the script
does not set is the trainer's default at that commit and cites the default's file.

Batch sizes are given as the originals *train* them, in rows: ``row_unit`` says what a
row is (a whole trajectory, or one step of one) and ``rows_per_optimiser_step`` how many
rows one optimiser step takes, whatever unit the script's own setting counts in (verl's
``ppo_mini_batch_size`` counts prompts, and is multiplied by ``rollout.n``; Search-R1 and
verl-agent keep ``rollout.n=1`` and repeat the batch themselves, so theirs counts rows).
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
    "prompts_per_step": "tasks per training batch (verl data.train_batch_size, in prompts)",
    "row_unit": "what one training row is: a whole trajectory, or one step of one",
    "rows_per_optimiser_step": "training rows per optimiser step (rows, in row_unit)",
    "ppo_epochs": "passes over each batch",
    "micro_rows_per_gpu": "rows per forward/backward pass on one GPU (memory only)",
    "log_prob_rows_per_gpu": "rows per log-prob pass on one GPU (memory only)",
    "dynamic_batch": "micro-batches packed by tokens instead of rows (memory only)",
    "max_tokens_per_gpu": "dynamic_batch: tokens per update micro-batch on one GPU",
    "log_prob_max_tokens_per_gpu": "dynamic_batch: tokens per log-prob micro-batch on one GPU",
    "gpus": "GPUs the original ran on (the per-GPU sizes are per these)",
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
    "val_temperature": "validation sampling temperature (0: greedy)",
    "val_top_p": "validation nucleus sampling",
    "val_n": "validation samples per task",
    "val_do_sample": "validation samples (true) or decodes greedily (false)",
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
        Knob("prompts_per_step", 512, _s(31), "x n_agent=5: 2,560 trajectory rows per batch"),
        Knob(
            "row_unit",
            "trajectory",
            "verl/trainer/ppo/ray_trainer.py:702",
            "the batch is repeated n_agent times; each copy's whole episode is one row",
        ),
        Knob(
            "rows_per_optimiser_step",
            256,
            _s(45),
            "ppo_mini_batch_size=256 counts rows: rollout.n is 1 (ppo_trainer.yaml:90) and the "
            "worker multiplies by it (verl/workers/fsdp_workers.py:100), while n_agent repeats "
            "the batch itself: 10 optimiser steps per 2,560-row batch",
        ),
        Knob("ppo_epochs", 1, _s(39, SEARCH_R1_DEFAULTS)),
        Knob(
            "micro_rows_per_gpu",
            8,
            _s(46),
            "ppo_micro_batch_size=64 over 8 GPUs (verl/workers/fsdp_workers.py:98)",
        ),
        Knob(
            "log_prob_rows_per_gpu",
            16,
            _s(50),
            "log_prob_micro_batch_size=128 over 8 GPUs (the reference model's too, line 54)",
        ),
        Knob("gpus", 8, _s(66)),
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
        Knob(
            "max_prompt_tokens",
            2048,
            _s(35),
            "data.max_start_length: the first prompt keeps its last 2,048 tokens "
            "(search_r1/llm_agent/generation.py:223)",
        ),
        Knob(
            "max_response_tokens",
            4096,
            _s(33),
            "data.max_prompt_length=4096 also cuts each trajectory's response (actions and "
            "retrieved blocks) to its first 4,096 tokens (search_r1/llm_agent/generation.py:165)",
        ),
        Knob("max_turn_tokens", 500, _s(34), "data.max_response_length: per generation turn"),
        Knob("temperature", 1.0, _s(60)),
        Knob("top_p", 0.95, _s(71, SEARCH_R1_DEFAULTS)),
        Knob(
            "val_temperature",
            0.0,
            "verl/trainer/ppo/ray_trainer.py:508",
            "validation sets do_sample=False: greedy (verl/workers/rollout/vllm_rollout/"
            "vllm_rollout.py:163)",
        ),
        Knob(
            "val_n",
            1,
            "verl/trainer/ppo/ray_trainer.py:501",
            "the n_agent repeat is commented out for validation",
        ),
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
        Knob("prompts_per_step", 64, _r(41), "x rollout.n=16: 1,024 trajectory rows per batch"),
        Knob(
            "row_unit",
            "trajectory",
            "verl/experimental/agent_loop/agent_loop.py:330",
            "the tool agent loop returns one row per episode: every turn in one response",
        ),
        Knob(
            "rows_per_optimiser_step",
            256,
            _r(42),
            "ppo_mini_batch_size=16 counts prompts: the worker multiplies it by rollout.n=16 "
            "(line 43; verl/workers/fsdp_workers.py:235): 4 optimiser steps per batch",
        ),
        Knob("ppo_epochs", 1, _r(94, "verl/trainer/config/actor/actor.yaml")),
        Knob("dynamic_batch", True, _r(79), "use_dynamic_bsz: micro-batches packed by tokens"),
        Knob("max_tokens_per_gpu", 18432, _r(51), "(2048 + 16384) x 1, set at line 81"),
        Knob("log_prob_max_tokens_per_gpu", 73728, _r(52), "4 x 18432, set at line 85"),
        Knob("gpus", 8, _r(102)),
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
        Knob(
            "val_temperature",
            1.0,
            _r(97),
            "the agent loop samples validation with val_kwargs' temperature and top_p "
            "(verl/experimental/agent_loop/agent_loop.py:343)",
        ),
        Knob("val_top_p", 0.6, _r(96)),
        Knob("val_n", 30, _r(44), "n_resp_per_prompt_val, set at line 98"),
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
        Knob(
            "row_unit",
            "step",
            "agent_system/multi_turn_rollout/rollout_loop.py:269",
            "every active step of every episode is its own row (prompt: that step's window)",
        ),
        Knob(
            "rows_per_optimiser_step",
            256,
            _g(32),
            "ppo_mini_batch_size=256 counts step rows: rollout.n is 1 (ppo_trainer.yaml:133; "
            "the group is env.rollout.n=8, line 60) and the worker multiplies by it "
            "(verl/workers/fsdp_workers.py:150). A batch holds as many rows as the 128 "
            "episodes took steps, padded to a multiple of 64 "
            "(agent_system/multi_turn_rollout/utils.py:86): ceil(rows / 256) optimiser steps "
            "(verl/workers/actor/dp_actor.py:338)",
        ),
        Knob("ppo_epochs", 1, _g(63, GIGPO_DEFAULTS)),
        Knob("micro_rows_per_gpu", 32, _g(33)),
        Knob("log_prob_rows_per_gpu", 32, _g(40), "the reference model's too, line 49"),
        Knob("gpus", 2, _g(66)),
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
        Knob(
            "max_response_tokens",
            512,
            _g(25),
            "data.max_response_length: a row is one step, so a row's response is one reply; "
            "an episode has no budget of its own (50 steps)",
        ),
        Knob("max_turn_tokens", 512, _g(25), "data.max_response_length: each step is one row"),
        Knob("temperature", 1.0, _g(106, GIGPO_DEFAULTS)),
        Knob("top_p", 1.0, _g(108, GIGPO_DEFAULTS)),
        Knob("val_temperature", 0.4, _g(47)),
        Knob("val_do_sample", True, _g(48)),
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
