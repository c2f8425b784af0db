"""Trajectories to training samples: the token sequences a trainer sees, with their masks.

One trajectory becomes one sample while every observation extends the previous
context (previous observation + previous action); an observation that does not
extend it (a chat template that rewrote earlier turns, a context reset) closes the
current sample and opens a new one. This is the merge rule of the Tinker
cookbook's ``trajectory_to_data``, so the Tinker hand-off reproduces it exactly.

Inside a sample:

* ``tokens`` is what the policy saw and sampled, in order, never re-tokenized;
* ``loss_mask`` is 1 exactly on sampled action tokens, 0 on the prompt and on every
  environment/tool observation token;
* ``logprobs`` holds the sampler's logprob on each sampled token and 0.0 elsewhere
  (and 0.0 everywhere a policy gave none: ``has_logprobs`` then says so);
* ``advantages`` holds the trajectory's scalar advantage on action tokens and 0.0
  elsewhere (under a per-step estimator, each action's tokens carry its step's).

An action whose transition carries the metric ``parse_error_masked`` >= 1 (the
cookbook's convention for malformed turns that should not be trained on) keeps
its tokens and logprobs but gets mask 0 and advantage 0.

This module sits on the training hot path: it only slices and extends lists (C
loops), never walks tokens one by one in Python.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.types import ImagePlacement, Trajectory, TrajectoryGroup
from agentenvs.rollout.weights.token_versions import VERSION_LOG, Version, token_versions

PARSE_ERROR_MASKED_METRIC = "parse_error_masked"
"""Transition metric (same key as the Tinker cookbook) that excludes an action from the loss."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector around bulk list building.

    Building samples allocates many lists; each allocation burst triggers
    collections, and every full collection walks every list already alive (all the
    trajectories in memory), which doubled the cost of this module in the
    benchmark. The code inside creates no reference cycles, so nothing is lost by
    collecting afterwards. Nested use and a collector the caller disabled are left
    as they were.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(slots=True)
class TrainingSample:
    """One training sequence cut from a trajectory; every list has ``len(tokens)`` entries."""

    tokens: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    advantages: list[float]
    group_index: int
    traj_index: int
    sample_index: int
    """0 for the first sample of a trajectory, 1, 2, ... after each prefix break."""
    reward: float
    """Total reward of the trajectory (step rewards plus group reward)."""
    has_logprobs: bool = True
    """False when some action in this sample came from a policy without logprobs (0.0 there)."""
    prompt_length: int = 0
    """Tokens before the first sampled token: the prompt a verl-style batch left-pads."""
    advantage: float = 0.0
    """The trajectory's scalar advantage (what ``advantages`` holds on trained tokens)."""
    anchor_keys: list[str] = field(default_factory=list)
    """Per step of this sample, the env's ``anchor_key`` log ("" where it gave none):
    the state the step acted in, so a trainer can group steps across trajectories
    (GiGPO). Empty when no step had one."""
    collected: dict[str, Any] | None = None
    """What the collector recorded for this sample's turns and its trajectory's reward
    (:func:`agentenvs.rollout.collect.fingerprints.sample_fingerprints`), set by
    :func:`~agentenvs.rollout.data.training_data.samples_from_records` from a store that
    has it and carried by the JSONL hand-off, so ``agentenvs check`` can check the
    hand-off without its store. None: not recorded."""
    images: list[ImagePlacement] = field(default_factory=list)
    """The images ``tokens`` shows, offsets into it (each a run of placeholder ids with
    its recorded count and pixel hash); always masked out of the loss, never trained."""
    token_versions: list[Version | None] = field(default_factory=list)
    """Per token, the weights version that sampled it (None on prompt and observation
    tokens); an action cut by a weight sync holds several
    (:mod:`agentenvs.rollout.weights.token_versions`). Empty when no turn was stamped."""

    def __len__(self) -> int:
        return len(self.tokens)


def _check_advantages(
    groups: Sequence[TrajectoryGroup], advantages: Sequence[Sequence[float | Sequence[float]]]
) -> None:
    if len(groups) != len(advantages):
        raise ValueError(f"{len(groups)} groups but advantages for {len(advantages)}")
    for i, (group, group_advantages) in enumerate(zip(groups, advantages, strict=True)):
        if len(group.trajectories) != len(group_advantages):
            raise ValueError(
                f"group {i} has {len(group.trajectories)} trajectories "
                f"but {len(group_advantages)} advantages"
            )


def trajectory_to_samples(
    traj: Trajectory,
    advantage: float,
    *,
    group_index: int = 0,
    traj_index: int = 0,
    reward: float = 0.0,
) -> list[TrainingSample]:
    """Cut one trajectory into samples at every prefix break (see the module docstring)."""
    advantage = float(advantage)
    samples: list[TrainingSample] = []
    tokens: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    advantages: list[float] = []
    has_logprobs = True
    prompt_length = -1
    anchors: list[str] = []
    images: tuple[ImagePlacement, ...] = ()
    versions: list[Version | None] = []
    stamped = False

    def close() -> None:
        samples.append(
            TrainingSample(
                tokens=tokens,
                loss_mask=mask,
                logprobs=logprobs,
                advantages=advantages,
                group_index=group_index,
                traj_index=traj_index,
                sample_index=len(samples),
                reward=reward,
                has_logprobs=has_logprobs,
                prompt_length=len(tokens) if prompt_length < 0 else prompt_length,
                advantage=advantage,
                anchor_keys=anchors if any(anchors) else [],
                images=list(images),
                token_versions=versions if stamped else [],
            )
        )

    for transition in traj.transitions:
        ob = transition.ob
        n = len(tokens)
        shown = transition.images
        if n == 0:
            delta = ob
        elif len(ob) >= n and ob[:n] == tokens and _same_images(shown, images, n):
            delta = ob[n:]
        else:
            close()
            tokens, mask, logprobs, advantages = [], [], [], []
            has_logprobs, prompt_length, anchors = True, -1, []
            versions, stamped = [], False
            n, delta = 0, ob
        anchors.append(str(transition.logs.get("anchor_key", "")))
        images = shown

        action = transition.ac
        action_tokens = action.tokens
        k = len(delta)
        m = len(action_tokens)
        if m and prompt_length < 0:
            prompt_length = n + k
        masked = float(transition.metrics.get(PARSE_ERROR_MASKED_METRIC, 0.0)) >= 1.0

        tokens += delta
        tokens += action_tokens
        versions += [None] * k
        if VERSION_LOG in transition.logs:
            stamped = True
            versions += token_versions(transition)
        else:
            versions += [None] * m
        if masked:
            mask += [0] * (k + m)
            advantages += [0.0] * (k + m)
        else:
            mask += [0] * k
            mask += [1] * m
            advantages += [0.0] * k
            advantages += [advantage] * m
        action_logprobs = action.logprobs
        if action_logprobs is None:
            if m:
                has_logprobs = False
            logprobs += [0.0] * (k + m)
        else:
            if len(action_logprobs) != m:
                raise ValueError(
                    f"group {group_index} trajectory {traj_index}: action has {m} tokens "
                    f"but {len(action_logprobs)} logprobs"
                )
            logprobs += [0.0] * k
            logprobs += action_logprobs

    if tokens:
        close()
    return samples


def _same_images(
    shown: tuple[ImagePlacement, ...], before: tuple[ImagePlacement, ...], n: int
) -> bool:
    """Whether an observation whose tokens extend the sample also shows the same images
    in that prefix: identical placeholder ids over other pixels are another context."""
    if not shown and not before:
        return True
    return tuple(p for p in shown if p.offset < n) == before


def spread_step_advantages(
    samples: list[TrainingSample], traj: Trajectory, per_step: Sequence[float]
) -> None:
    """Put each step's advantage on that step's trained tokens, in order.

    Samples built with advantage 1.0 carry it exactly on the trained action tokens;
    those come in step order, ``len(action)`` per step (none for a step masked as a
    parse error), so the steps can be laid over them without re-deriving the merge.
    ``TrainingSample.advantage`` becomes the sum over the trajectory's steps.
    """
    if len(per_step) != len(traj.transitions):
        raise ValueError(
            f"{len(per_step)} step advantages for a trajectory of {len(traj.transitions)} steps"
        )
    spans = [
        (float(value), len(tr.ac.tokens))
        for tr, value in zip(traj.transitions, per_step, strict=True)
        if float(tr.metrics.get(PARSE_ERROR_MASKED_METRIC, 0.0)) < 1.0
    ]
    spans.reverse()
    value, left = spans.pop() if spans else (0.0, 0)
    total = math.fsum(float(v) for v in per_step)
    for sample in samples:
        advantages = sample.advantages
        for position, trained in enumerate(sample.loss_mask):
            if not trained:
                continue
            while left == 0 and spans:
                value, left = spans.pop()
            advantages[position] = value
            left -= 1
        sample.advantage = total


def trajectory_to_step_samples(
    traj: Trajectory,
    per_step: Sequence[float],
    *,
    group_index: int = 0,
    traj_index: int = 0,
    reward: float = 0.0,
) -> list[TrainingSample]:
    """Like :func:`trajectory_to_samples`, with one advantage per step (GiGPO, tree segments)."""
    made = trajectory_to_samples(
        traj, 1.0, group_index=group_index, traj_index=traj_index, reward=reward
    )
    spread_step_advantages(made, traj, per_step)
    return made


def trajectories_to_samples(
    groups: list[TrajectoryGroup], advantages: Sequence[Sequence[float | Sequence[float]]]
) -> list[TrainingSample]:
    """Every trajectory of every group as samples, in group then trajectory order.

    ``advantages[g][t]`` is trajectory ``t`` of group ``g``'s scalar advantage, or
    a list with one advantage per step for a per-step estimator (see
    :func:`agentenvs.rollout.data.advantages.compute_advantages`).
    """
    _check_advantages(groups, advantages)
    samples: list[TrainingSample] = []
    with gc_paused():
        for group_index, (group, group_advantages) in enumerate(
            zip(groups, advantages, strict=True)
        ):
            rewards = group.total_rewards()
            for traj_index, (traj, advantage, reward) in enumerate(
                zip(group.trajectories, group_advantages, rewards, strict=True)
            ):
                made = (
                    trajectory_to_step_samples
                    if isinstance(advantage, Sequence)
                    else (trajectory_to_samples)
                )
                samples += made(
                    traj,
                    advantage,  # type: ignore[arg-type]
                    group_index=group_index,
                    traj_index=traj_index,
                    reward=reward,
                )
    return samples
