"""Group-relative advantage estimators over each group's total rewards.

All three compare a trajectory with the other trajectories of its group (the G
attempts at one task), so no value network is needed:

* ``grpo``: ``r_i - mean(r)``, optionally divided by ``std(r) + eps`` (sample std,
  ddof=1, as TRL and verl compute it) when ``normalize_std`` is set (DeepSeekMath).
* ``dr_grpo``: ``r_i - mean(r)``, never divided by the std (Dr. GRPO, Liu et al. 2025:
  the std term biases the update towards too-easy and too-hard tasks).
* ``rloo``: ``r_i - mean_{j != i} r_j`` (the leave-one-out baseline of Ahmadian et
  al. 2024), which equals ``G / (G - 1) * (r_i - mean(r))``.

A group of one trajectory has no baseline to compare with and gets advantage 0.
Store :func:`estimator_info` next to the advantages so the data says how it was made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, get_args

from agentenvs.envs.types import TrajectoryGroup

Estimator = Literal["grpo", "dr_grpo", "rloo"]
ESTIMATORS: tuple[str, ...] = get_args(Estimator)


def _check(estimator: str, normalize_std: bool) -> None:
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; choose one of {ESTIMATORS}")
    if normalize_std and estimator != "grpo":
        raise ValueError(
            f"normalize_std applies to 'grpo' only; {estimator!r} never divides by the std"
        )


def group_advantages(
    rewards: Sequence[float],
    estimator: Estimator = "grpo",
    *,
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> list[float]:
    """Advantages of one group's total rewards."""
    _check(estimator, normalize_std)
    size = len(rewards)
    if size < 2:
        return [0.0] * size
    rewards = [float(r) for r in rewards]
    mean = math.fsum(rewards) / size
    centred = [r - mean for r in rewards]
    if estimator == "rloo":
        scale = size / (size - 1)
        return [scale * c for c in centred]
    if estimator == "grpo" and normalize_std:
        std = math.sqrt(math.fsum(c * c for c in centred) / (size - 1))
        return [c / (std + eps) for c in centred]
    return centred


def compute_advantages(
    groups: Sequence[TrajectoryGroup],
    estimator: Estimator = "grpo",
    *,
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> list[list[float]]:
    """Per group, per trajectory: the scalar advantage of its total reward."""
    _check(estimator, normalize_std)
    return [
        group_advantages(group.total_rewards(), estimator, normalize_std=normalize_std, eps=eps)
        for group in groups
    ]


def estimator_info(
    estimator: Estimator = "grpo", *, normalize_std: bool = False, eps: float = 1e-6
) -> dict[str, Any]:
    """How the advantages were computed, as JSON-ready data to store with them."""
    _check(estimator, normalize_std)
    info: dict[str, Any] = {"estimator": estimator, "normalize_std": normalize_std}
    if normalize_std:
        info["eps"] = eps
    return info


def remove_constant_reward_groups(groups: Sequence[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """The groups whose trajectories did not all get the same total reward.

    A constant-reward group has zero advantage everywhere under every estimator
    here, so it only costs compute. Unlike the cookbook this may return an empty
    list: the caller decides what an all-constant batch means.
    """
    kept = []
    for group in groups:
        rewards = group.total_rewards()
        if any(r != rewards[0] for r in rewards[1:]):
            kept.append(group)
    return kept
