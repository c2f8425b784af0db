"""Advantages for tree rollouts: compare a leaf with its tree, and a branch with its siblings.

A tree group (``collect/tree.py``) holds the leaves of one or more roots; ``tree``
says, for each leaf, its root, its path of child indices and the turn of each branch
point on that path. With ``r_l`` a leaf's total reward (step rewards plus group
reward) and a *node* the set of leaves whose path starts with a given prefix:

* the **value** of a node is the mean reward of its leaves:
  ``V(n) = mean_{l under n} r_l``; a leaf's own node has ``V = r_l``;
* ``tree_grpo``: GRPO over the leaves of one root, ``A_l = r_l - V(root)``, divided
  by the sample std (ddof=1) of the root's leaf rewards plus ``eps`` when
  ``normalize_std`` is set. One scalar per leaf, like today's estimators.
* ``tree_segment``: a per-turn advantage. A leaf's turns are cut at its branch
  points into segments; the segment that starts at the k-th branch point (turn
  ``b_k``) was chosen among siblings there, so its advantage is what choosing it
  gained: ``A_k = V(child_k) - V(parent_k)``, the value of the node it entered minus
  the value of the node it branched from (TreeRL-style local advantage, Hou et al.
  2025). Turns before the first branch point are shared by every leaf of the root
  and get 0. Along one leaf the segment advantages telescope:
  ``sum_k A_k = r_l - V(root)``, so the whole path gets the GRPO credit, spread over
  the decisions that earned it.

A root with a single leaf has no comparison and gets 0 everywhere. Store
:func:`tree_estimator_info` with the values, as with ``advantages.estimator_info``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, get_args

from agentenvs.envs.types import TrajectoryGroup
from agentenvs.rollout.data.advantages import group_advantages
from agentenvs.rollout.data.samples import (
    TrainingSample,
    gc_paused,
    trajectory_to_samples,
    trajectory_to_step_samples,
)

TreeEstimator = Literal["tree_grpo", "tree_segment"]
TREE_ESTIMATORS: tuple[str, ...] = get_args(TreeEstimator)

NodeKey = tuple[int, tuple[int, ...]]
"""(root, path prefix)."""


def _leaves(tree: dict[str, Any], count: int) -> list[dict[str, Any]]:
    leaves = tree.get("leaves") if isinstance(tree, dict) else None
    if not isinstance(leaves, list) or len(leaves) != count:
        raise ValueError(
            f"the tree describes {len(leaves) if isinstance(leaves, list) else 'no'} leaves "
            f"for {count} trajectories"
        )
    return leaves


def node_values(rewards: Sequence[float], tree: dict[str, Any]) -> dict[NodeKey, float]:
    """``V(n)`` for every node of every root: the mean reward of the leaves under it."""
    leaves = _leaves(tree, len(rewards))
    sums: dict[NodeKey, list[float]] = {}
    for leaf, reward in zip(leaves, rewards, strict=True):
        path = tuple(leaf["path"])
        for depth in range(len(path) + 1):
            sums.setdefault((int(leaf["root"]), path[:depth]), []).append(float(reward))
    return {node: math.fsum(values) / len(values) for node, values in sums.items()}


def tree_grpo(
    rewards: Sequence[float],
    tree: dict[str, Any],
    *,
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> list[float]:
    """Per leaf: GRPO over the leaves of its root."""
    leaves = _leaves(tree, len(rewards))
    by_root: dict[int, list[int]] = {}
    for index, leaf in enumerate(leaves):
        by_root.setdefault(int(leaf["root"]), []).append(index)
    out = [0.0] * len(rewards)
    for members in by_root.values():
        values = group_advantages(
            [rewards[i] for i in members], "grpo", normalize_std=normalize_std, eps=eps
        )
        for i, value in zip(members, values, strict=True):
            out[i] = value
    return out


def tree_segment(
    rewards: Sequence[float], tree: dict[str, Any], turns: Sequence[int]
) -> list[list[float]]:
    """Per leaf, per turn: the advantage of the segment the turn belongs to."""
    leaves = _leaves(tree, len(rewards))
    values = node_values(rewards, tree)
    out = []
    for leaf, count in zip(leaves, turns, strict=True):
        root, path = int(leaf["root"]), tuple(leaf["path"])
        starts = [int(t) for t in leaf["branch_turns"]]
        per_turn = [0.0] * count
        for k, start in enumerate(starts):
            gain = values[(root, path[: k + 1])] - values[(root, path[:k])]
            end = starts[k + 1] if k + 1 < len(starts) else count + 1
            for turn in range(start, min(end, count + 1)):
                per_turn[turn - 1] = gain
        out.append(per_turn)
    return out


def tree_estimator_info(
    estimator: TreeEstimator, *, normalize_std: bool = False, eps: float = 1e-6
) -> dict[str, Any]:
    if estimator not in TREE_ESTIMATORS:
        raise ValueError(f"unknown tree estimator {estimator!r}; choose one of {TREE_ESTIMATORS}")
    if normalize_std and estimator != "tree_grpo":
        raise ValueError("normalize_std applies to 'tree_grpo' only")
    info: dict[str, Any] = {"estimator": estimator, "normalize_std": normalize_std}
    if normalize_std:
        info["eps"] = eps
    return info


def tree_advantage_record(group: TrajectoryGroup, tree: dict[str, Any]) -> dict[str, Any]:
    """Both tree estimators of one group, named, as stored next to the group."""
    rewards = group.total_rewards()
    turns = [len(t.transitions) for t in group.trajectories]
    return {
        "tree_grpo": tree_grpo(rewards, tree),
        "tree_segment": tree_segment(rewards, tree, turns),
        "estimators": [tree_estimator_info("tree_grpo"), tree_estimator_info("tree_segment")],
    }


def tree_samples(
    groups: Sequence[TrajectoryGroup],
    trees: Sequence[dict[str, Any]],
    estimator: TreeEstimator = "tree_grpo",
    *,
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> list[TrainingSample]:
    """One sample per leaf (more after a prefix break), advantages by ``estimator``.

    Shared prefix tokens are identical across siblings (they are the same tokens);
    masks are today's. Under ``tree_segment`` each action's tokens carry its turn's
    advantage and ``TrainingSample.advantage`` is the leaf's total (the sum of its
    segments, which equals its unnormalised ``tree_grpo``).
    """
    tree_estimator_info(estimator, normalize_std=normalize_std, eps=eps)
    if len(groups) != len(trees):
        raise ValueError(f"{len(groups)} groups but {len(trees)} trees")
    samples: list[TrainingSample] = []
    with gc_paused():
        for group_index, (group, tree) in enumerate(zip(groups, trees, strict=True)):
            rewards = group.total_rewards()
            if estimator == "tree_grpo":
                scalars = tree_grpo(rewards, tree, normalize_std=normalize_std, eps=eps)
                for t, (traj, adv) in enumerate(zip(group.trajectories, scalars, strict=True)):
                    samples += trajectory_to_samples(
                        traj, adv, group_index=group_index, traj_index=t, reward=rewards[t]
                    )
                continue
            turns = [len(t.transitions) for t in group.trajectories]
            per_turn = tree_segment(rewards, tree, turns)
            for t, traj in enumerate(group.trajectories):
                samples += trajectory_to_step_samples(
                    traj, per_turn[t], group_index=group_index, traj_index=t, reward=rewards[t]
                )
    return samples
