"""GiGPO: group-in-group advantages, one per step (Feng et al. 2025, arXiv:2505.10978).

GiGPO adds a step-level comparison to GRPO's episode-level one. Within one group
(the G attempts at a task), steps that acted in the same environment state (the
same *anchor state*: ALFWorld exports a hash of it as the step log ``anchor_key``)
form a step group, and each step's discounted return is compared with the others
of its step group. Per step ``t`` of trajectory ``i``:

* episode level (paper Eq. 3): ``A^E_i = (R_i - mean(R)) / F``, ``R_i`` the
  trajectory's total reward, ``F`` the std (ddof=1) plus ``eps`` or 1;
* discounted return (Eq. 5): ``G_{i,t} = sum_{k>=t} gamma^(k-t) r_{i,k}``;
* step level (Eqs. 6-7): ``A^S_{i,t} = (G_{i,t} - mean_{S}(G)) / F_S`` over the
  step group ``S`` of steps with the same anchor state as ``(i, t)``;
* combined (Eq. 8): ``A_{i,t} = A^E_i + w * A^S_{i,t}`` (``step_advantage_w``).

Two details follow verl-agent's code (``gigpo/core_gigpo.py`` at d0b9724) rather than
the paper's text, because that code produced the published numbers:

* ``episode_stats="steps"`` (verl-agent's ``compute_mean_std_cross_steps=True``):
  the episode-level mean and std are taken over the group's *steps*, each carrying
  its trajectory's reward, so longer trajectories weigh more. ``"trajectories"`` is
  the paper's Eq. 3 (one value per trajectory).
* ``penalty_metric`` / ``penalty``: verl-agent subtracts its invalid-action
  penalty from the penalised step's own episode score and own return only
  (``apply_invalid_action_penalty``), after discounting. Our ALFWorld env pays the
  penalty as a step reward instead (so it is discounted into earlier steps and
  summed into ``R_i``); naming the metric that marks a penalised step
  (``invalid_format``) and the coefficient lets this module move the penalty back to
  where verl-agent puts it.

Where we differ on purpose (docs/advantages.md): a group of one trajectory gets
episode advantage 0 (verl-agent: the raw score when the group has a single row);
a step without an anchor key is its own step group (advantage 0), where verl-agent
would pool every anchor-less step of the group into one. A group whose steps carry
no anchor key at all is refused: GiGPO there would silently be GRPO.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from agentenvs.envs.types import TrajectoryGroup

ANCHOR_KEY_LOG = "anchor_key"
"""The step log naming a step's state (``envs/alfworld/env.py`` writes it)."""


@dataclass(frozen=True)
class GigpoSettings:
    """GiGPO's knobs; the defaults are verl-agent's ALFWorld script
    (``examples/gigpo_trainer/run_alfworld.sh``: gamma 0.95, w 1.0, mean_std_norm)."""

    gamma: float = 0.95
    step_advantage_w: float = 1.0
    normalize_std: bool = True
    """verl-agent's ``mode``: True is ``mean_std_norm``, False is ``mean_norm``."""
    episode_stats: Literal["steps", "trajectories"] = "steps"
    eps: float = 1e-6
    penalty_metric: str | None = None
    """A transition metric (>= 1 on a penalised step) whose penalty is verl-agent's
    per-step one: moved out of the returns and onto the step itself."""
    penalty: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], not {self.gamma}")
        if self.episode_stats not in ("steps", "trajectories"):
            raise ValueError(
                f"episode_stats is 'steps' or 'trajectories', not {self.episode_stats!r}"
            )
        if self.eps <= 0:
            raise ValueError(f"eps must be positive, not {self.eps}")
        if self.penalty and self.penalty_metric is None:
            raise ValueError("penalty needs penalty_metric (the metric marking penalised steps)")

    def with_overrides(
        self, *, normalize_std: bool | None = None, eps: float | None = None
    ) -> GigpoSettings:
        changes: dict[str, Any] = {}
        if normalize_std is not None:
            changes["normalize_std"] = bool(normalize_std)
        if eps is not None:
            changes["eps"] = float(eps)
        return replace(self, **changes) if changes else self

    def info(self) -> dict[str, Any]:
        """JSON-ready, like :func:`~agentenvs.rollout.data.advantages.estimator_info`."""
        return {"estimator": "gigpo", **asdict(self)}


def _normalised(values: Sequence[float], divide: bool, eps: float) -> list[float]:
    """``v - mean``, over ``std + eps`` when ``divide``; a single value gives 0."""
    if len(values) < 2:
        return [0.0] * len(values)
    mean = math.fsum(values) / len(values)
    centred = [v - mean for v in values]
    if not divide:
        return centred
    std = math.sqrt(math.fsum(c * c for c in centred) / (len(values) - 1))
    return [c / (std + eps) for c in centred]


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """``G_t = r_t + gamma * G_{t+1}``, from the last step back (paper Eq. 5)."""
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        out[t] = running
    return out


@dataclass
class _Steps:
    """One group's steps, flattened in (trajectory, step) order."""

    owner: list[tuple[int, int]]
    anchor: list[str]
    episode_score: list[float]
    """Per step: its trajectory's reward, less the step's own penalty (verl-agent's row)."""
    step_return: list[float]
    episode: list[float]
    """Per trajectory: its reward with no per-step penalty taken off."""


def _steps(group: TrajectoryGroup, settings: GigpoSettings) -> _Steps:
    steps = _Steps([], [], [], [], [])
    for i, (traj, group_reward) in enumerate(
        zip(group.trajectories, group.group_rewards, strict=True)
    ):
        marked = [
            float(tr.metrics.get(settings.penalty_metric, 0.0)) >= 1.0
            if settings.penalty_metric
            else False
            for tr in traj.transitions
        ]
        cut = [settings.penalty if m else 0.0 for m in marked]
        # The env's own reward without the per-step penalty; the group reward is the outcome,
        # paid at the last step.
        rewards = [tr.reward + c for tr, c in zip(traj.transitions, cut, strict=True)]
        if rewards:
            rewards[-1] += float(group_reward)
        episode = math.fsum(rewards)
        steps.episode.append(episode)
        for t, (tr, ret, c) in enumerate(
            zip(traj.transitions, discounted_returns(rewards, settings.gamma), cut, strict=True)
        ):
            steps.owner.append((i, t))
            steps.anchor.append(str(tr.logs.get(ANCHOR_KEY_LOG, "") or ""))
            steps.episode_score.append(episode - c)
            steps.step_return.append(ret - c)
    return steps


def _episode_part(group: TrajectoryGroup, steps: _Steps, settings: GigpoSettings) -> list[float]:
    if len(group.trajectories) < 2:
        return [0.0] * len(steps.owner)
    divide, eps = settings.normalize_std, settings.eps
    if settings.episode_stats == "steps":
        return _normalised(steps.episode_score, divide, eps)
    totals = steps.episode
    mean = math.fsum(totals) / len(totals)
    scale = 1.0
    if divide:
        centred = [t - mean for t in totals]
        scale = math.sqrt(math.fsum(c * c for c in centred) / (len(totals) - 1)) + eps
    return [(score - mean) / scale for score in steps.episode_score]


def _step_part(steps: _Steps, settings: GigpoSettings) -> list[float]:
    members: dict[str, list[int]] = {}
    for row, anchor in enumerate(steps.anchor):
        if anchor:
            members.setdefault(anchor, []).append(row)
    out = [0.0] * len(steps.owner)
    for rows in members.values():
        values = _normalised(
            [steps.step_return[r] for r in rows], settings.normalize_std, settings.eps
        )
        for row, value in zip(rows, values, strict=True):
            out[row] = value
    return out


def gigpo_advantages(
    group: TrajectoryGroup, settings: GigpoSettings | None = None
) -> list[list[float]]:
    """Per trajectory, per step: ``A^E + w * A^S`` (see the module docstring)."""
    settings = settings or GigpoSettings()
    steps = _steps(group, settings)
    if steps.owner and not any(steps.anchor):
        raise ValueError(
            f"gigpo needs each step's {ANCHOR_KEY_LOG!r} log (the state it acted in); no step "
            "of this group has one. Environments that name their states (alfworld) export it; "
            "for others use grpo"
        )
    episode = _episode_part(group, steps, settings)
    step = _step_part(steps, settings)
    out: list[list[float]] = [[0.0] * len(traj.transitions) for traj in group.trajectories]
    for (i, t), e, s in zip(steps.owner, episode, step, strict=True):
        out[i][t] = e + settings.step_advantage_w * s
    return out
