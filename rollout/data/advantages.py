"""Group-relative advantage estimators over each group's total rewards.

All of them compare a trajectory with the other trajectories of its group (the G
attempts at one task), so no value network is needed. The names mean what their
papers mean (formulas in ``docs/advantages.md``):

* ``grpo``: ``(r_i - mean(r)) / (std(r) + eps)`` with the sample std (ddof=1, as
  TRL, verl and DeepSeekMath compute it). ``normalize_std=False`` keeps only the
  centring, as verl's ``norm_adv_by_std_in_grpo=False`` and TRL's
  ``scale_rewards="none"`` do; the record then says so.
* ``dr_grpo``: ``r_i - mean(r)``, never divided by the std (Dr. GRPO, Liu et al. 2025:
  the std term biases the update towards too-easy and too-hard tasks).
* ``rloo``: ``r_i - mean_{j != i} r_j`` (the leave-one-out baseline of Ahmadian et
  al. 2024), which equals ``G / (G - 1) * (r_i - mean(r))``.
* ``gigpo`` (per step, not per trajectory): see :mod:`agentenvs.rollout.data.gigpo`;
  :func:`compute_advantages` returns one list of step advantages per trajectory for it.

A group of one trajectory has no baseline to compare with and gets advantage 0.
Store :func:`estimator_info` next to the advantages so the data says how it was made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, get_args, overload

from agentenvs.envs.types import TrajectoryGroup

Estimator = Literal["grpo", "dr_grpo", "rloo"]
"""Estimators that give each trajectory one scalar, from its group's total rewards."""
ESTIMATORS: tuple[str, ...] = get_args(Estimator)
StepEstimator = Literal["gigpo"]
"""Estimators that give each step its own advantage (they need the steps, not only rewards)."""
STEP_ESTIMATORS: tuple[str, ...] = get_args(StepEstimator)
ALL_ESTIMATORS: tuple[str, ...] = ESTIMATORS + STEP_ESTIMATORS

DIVIDES_BY_STD: dict[str, bool] = {"grpo": True, "dr_grpo": False, "rloo": False}
"""What each scalar estimator does with the std when ``normalize_std`` is not given."""


def _resolve(estimator: str, normalize_std: bool | None) -> bool:
    """Check the pair and say whether the std divides (``None``: the estimator's own rule)."""
    if estimator in STEP_ESTIMATORS:
        raise ValueError(
            f"{estimator!r} gives one advantage per step, not per trajectory: use "
            f"compute_advantages(groups, {estimator!r}) or samples_from_records(..., "
            f"estimator={estimator!r}); a collector cannot store it as a group's scalars"
        )
    if estimator not in ESTIMATORS:
        raise ValueError(
            f"unknown advantage estimator {estimator!r}; choose one of {ALL_ESTIMATORS}"
        )
    if normalize_std is None:
        return DIVIDES_BY_STD[estimator]
    if normalize_std and estimator != "grpo":
        raise ValueError(
            f"normalize_std applies to 'grpo' only; {estimator!r} never divides by the std"
        )
    return bool(normalize_std)


def group_advantages(
    rewards: Sequence[float],
    estimator: Estimator = "grpo",
    *,
    normalize_std: bool | None = None,
    eps: float = 1e-6,
) -> list[float]:
    """Advantages of one group's total rewards."""
    divide = _resolve(estimator, normalize_std)
    size = len(rewards)
    if size < 2:
        return [0.0] * size
    rewards = [float(r) for r in rewards]
    mean = math.fsum(rewards) / size
    centred = [r - mean for r in rewards]
    if estimator == "rloo":
        scale = size / (size - 1)
        return [scale * c for c in centred]
    if divide:
        std = math.sqrt(math.fsum(c * c for c in centred) / (size - 1))
        return [c / (std + eps) for c in centred]
    return centred


@overload
def compute_advantages(
    groups: Sequence[TrajectoryGroup],
    estimator: Estimator = "grpo",
    *,
    normalize_std: bool | None = None,
    eps: float | None = None,
    gigpo: Any = None,
) -> list[list[float]]: ...


@overload
def compute_advantages(
    groups: Sequence[TrajectoryGroup],
    estimator: StepEstimator,
    *,
    normalize_std: bool | None = None,
    eps: float | None = None,
    gigpo: Any = None,
) -> list[list[list[float]]]: ...


def compute_advantages(
    groups: Sequence[TrajectoryGroup],
    estimator: Estimator | StepEstimator = "grpo",
    *,
    normalize_std: bool | None = None,
    eps: float | None = None,
    gigpo: Any = None,
) -> list[list[float]] | list[list[list[float]]]:
    """Per group, per trajectory: the scalar advantage of its total reward.

    For ``"gigpo"``, per group, per trajectory, per step (a list as long as the
    trajectory's transitions); ``gigpo`` takes a
    :class:`~agentenvs.rollout.data.gigpo.GigpoSettings` (default: the values of
    verl-agent's ALFWorld script), and ``normalize_std`` / ``eps`` override its own.
    """
    if estimator in STEP_ESTIMATORS:
        from agentenvs.rollout.data.gigpo import GigpoSettings, gigpo_advantages

        settings = gigpo if gigpo is not None else GigpoSettings()
        settings = settings.with_overrides(normalize_std=normalize_std, eps=eps)
        return [gigpo_advantages(group, settings) for group in groups]
    if gigpo is not None:
        raise ValueError(f"gigpo settings given for the {estimator!r} estimator")
    _resolve(estimator, normalize_std)
    eps = 1e-6 if eps is None else eps
    return [
        group_advantages(group.total_rewards(), estimator, normalize_std=normalize_std, eps=eps)
        for group in groups
    ]


def estimator_info(
    estimator: Estimator = "grpo", *, normalize_std: bool | None = None, eps: float = 1e-6
) -> dict[str, Any]:
    """How the advantages were computed, as JSON-ready data to store with them.

    ``normalize_std`` is always written out (resolved), so a record made before
    ``grpo`` divided by default (``{"estimator": "grpo", "normalize_std": false}``)
    is still recomputed the way it was made.
    """
    divide = _resolve(estimator, normalize_std)
    info: dict[str, Any] = {"estimator": estimator, "normalize_std": divide}
    if divide:
        info["eps"] = eps
    return info


def remove_constant_reward_groups(groups: Sequence[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """The groups whose trajectories did not all get the same total reward.

    A constant-reward group has zero advantage everywhere under every scalar
    estimator here, so it only costs compute. Unlike the cookbook this may return
    an empty list: the caller decides what an all-constant batch means. (Under
    ``gigpo`` a constant-reward group can still have step advantages.)
    """
    kept = []
    for group in groups:
        rewards = group.total_rewards()
        if any(r != rewards[0] for r in rewards[1:]):
            kept.append(group)
    return kept
