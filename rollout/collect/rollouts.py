"""Running episodes: one env with a policy, and one group of envs concurrently.

Each turn is :mod:`.turns` (sample, check, step), the same for single, group and
tree rollouts (``tree.py``); what differs is only how many episodes run and
whether they branch. The group-level steps both kinds share (make the envs, give
each its policy, score the group) are here as well.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from agentenvs.envs.types import (
    Env,
    EnvGroupBuilder,
    Metrics,
    RunsOwnGroup,
    Trajectory,
    TrajectoryGroup,
    Transition,
)
from agentenvs.rollout.collect.cancels import cancels_as_errors, forget_group_cancel
from agentenvs.rollout.collect.env_code import env_call
from agentenvs.rollout.collect.turns import (
    action_token_cap,
    finished_trajectory,
    play_action,
    sample_action,
)
from agentenvs.rollout.policies.base import Policy, PolicyFactory, TurnSlot, policy_for

T = TypeVar("T")


@dataclass(frozen=True)
class RolloutSlot:
    """Where the policy being made will act: which group (by store key) and which
    trajectory of it. Per-env policy factories that replay or look up recorded data
    read it from :data:`current_slot`; everything else can ignore it."""

    group_key: str | None
    traj_index: int


current_group_key: ContextVar[str | None] = ContextVar("agentenvs_group_key", default=None)
"""Set by the collector around each group so factories can tell groups apart."""

current_slot: ContextVar[RolloutSlot | None] = ContextVar("agentenvs_rollout_slot", default=None)
"""Set by :func:`do_group_rollout` while it calls a per-env policy factory."""


async def do_single_rollout(
    policy: Policy, env: Env, *, max_tokens: int | None = None, traj_index: int = 0
) -> Trajectory:
    """Run one episode to its end, one :mod:`turn <.turns>` after another.

    Each turn's token cap is asked of the env just before it is sampled
    (:func:`~.turns.action_token_cap`), so a per-episode budget shrinks it as the
    episode goes on; ``max_tokens`` bounds every turn on top of that."""
    ob, stop = await env_call(env.initial_observation(), env, "initial_observation")
    transitions: list[Transition] = []
    while True:
        slot = TurnSlot(current_group_key.get(), traj_index, len(transitions))
        cap = action_token_cap(env, max_tokens)
        action = await sample_action(policy, ob, stop, slot=slot, max_tokens=cap)
        transition, step = await play_action(env, ob, action)
        transitions.append(transition)
        if step.episode_done:
            return finished_trajectory(transitions, step)
        ob, stop = step.next_observation, step.next_stop_condition


def policy_in_slot(policy: Policy | PolicyFactory, env: Env, slot: RolloutSlot) -> Policy:
    """The policy that plays ``env`` (a per-env factory is called with ``slot`` set)."""
    token = current_slot.set(slot)
    try:
        return policy_for(policy, env)
    finally:
        current_slot.reset(token)


async def make_group_envs(builder: EnvGroupBuilder) -> list[Env]:
    """The group's envs; a builder that makes none is an error of the group."""
    envs = list(await env_call(builder.make_envs(), builder, "make_envs"))
    if not envs:
        raise ValueError(f"{type(builder).__name__}.make_envs() returned no envs")
    return envs


async def score_group(
    builder: EnvGroupBuilder,
    trajectories: list[Trajectory],
    envs: Sequence[Env],
    *,
    noun: str = "trajectories",
) -> TrajectoryGroup:
    """The trajectories with the builder's group rewards, metrics and tags."""
    scored: list[tuple[float, Metrics]] = list(
        await env_call(
            builder.compute_group_rewards(trajectories, envs), builder, "compute_group_rewards"
        )
    )
    if len(scored) != len(trajectories):
        raise ValueError(
            f"{type(builder).__name__}.compute_group_rewards returned {len(scored)} "
            f"rewards for {len(trajectories)} {noun}"
        )
    return TrajectoryGroup(
        trajectories=trajectories,
        group_rewards=[float(reward) for reward, _ in scored],
        group_metrics=[dict(metrics) for _, metrics in scored],
        tags=list(builder.logging_tags()),
    )


async def do_group_rollout(
    builder: EnvGroupBuilder, policy: Policy | PolicyFactory
) -> TrajectoryGroup:
    """Make the group's envs, run them concurrently, score the group.

    If one episode fails, its siblings are cancelled and the first error is raised
    as itself (not wrapped). ``builder.cleanup()`` is always awaited, on success,
    failure and cancellation (a collector timeout) alike. A builder that
    :class:`~agentenvs.envs.types.RunsOwnGroup` (tree rollouts: ``collect/tree.py``)
    is run through its ``group_rollout``.
    """
    if isinstance(builder, RunsOwnGroup):
        return await builder.group_rollout(policy)
    try:
        envs = await make_group_envs(builder)
        group_key = current_group_key.get()
        policies = [
            policy_in_slot(policy, env, RolloutSlot(group_key, index))
            for index, env in enumerate(envs)
        ]
        trajectories = await run_concurrently(
            [
                do_single_rollout(p, env, traj_index=i)
                for i, (p, env) in enumerate(zip(policies, envs, strict=True))
            ]
        )
        return await score_group(builder, trajectories, envs)
    finally:
        await builder.cleanup()


async def run_concurrently(coros: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """Run coroutines concurrently; on the first failure cancel the rest and raise it
    (as itself, not wrapped in an exception group). A ``CancelledError`` nobody asked of
    the collector is such a failure (:mod:`~.cancels`), not a child to ignore."""
    task = asyncio.current_task()
    before = task.cancelling() if task is not None else 0
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(cancels_as_errors(coro)) for coro in coros]
    except BaseExceptionGroup as errors:
        forget_group_cancel(before)
        raise first_error(errors) from None
    return [task.result() for task in tasks]


def first_error(errors: BaseExceptionGroup) -> BaseException:
    """The first error of a (possibly nested) exception group."""
    first = errors.exceptions[0]
    return first_error(first) if isinstance(first, BaseExceptionGroup) else first
