"""Running episodes: one env with a policy, and one group of envs concurrently.

These two functions are the only place where a policy meets an environment, so
they are where policy output is checked: anything that is not a well-formed
:class:`TokensWithLogprobs` is a :class:`PolicyError` here, before an env or a
trainer ever sees it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import get_args

from agentenvs.envs.types import (
    Env,
    EnvGroupBuilder,
    SamplerStopReason,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
    stop_reason_from_metrics,
)
from agentenvs.rollout.policies.base import (
    Policy,
    PolicyError,
    PolicyFactory,
    TurnSlot,
    current_turn,
    policy_for,
    turn_logs,
)

_SAMPLER_STOPS = frozenset(get_args(SamplerStopReason))


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


def check_policy_output(output: object, max_tokens: int | None = None) -> TokensWithLogprobs:
    """The policy's answer if it is well formed, else a :class:`PolicyError` saying why."""
    if not isinstance(output, TokensWithLogprobs):
        raise PolicyError(f"policy returned {type(output).__name__}, expected TokensWithLogprobs")
    tokens = output.tokens
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens
    ):
        raise PolicyError("policy returned tokens that are not a list of non-negative ints")
    if output.logprobs is not None:
        if len(output.logprobs) != len(tokens):
            raise PolicyError(
                f"policy returned {len(output.logprobs)} logprobs for {len(tokens)} tokens"
            )
        if any(not isinstance(lp, int | float) or math.isnan(lp) for lp in output.logprobs):
            raise PolicyError("policy returned a logprob that is not a number")
    if output.stop_reason not in _SAMPLER_STOPS:
        raise PolicyError(
            f"policy returned stop_reason {output.stop_reason!r}; "
            f"expected one of {sorted(_SAMPLER_STOPS)}"
        )
    if max_tokens is not None and len(tokens) > max_tokens:
        raise PolicyError(f"policy returned {len(tokens)} tokens, over max_tokens={max_tokens}")
    return output


async def do_single_rollout(
    policy: Policy, env: Env, *, max_tokens: int | None = None, traj_index: int = 0
) -> Trajectory:
    """Run one episode to its end.

    The sampler's stop reason goes into :meth:`Env.step` so the env can tell a
    truncated action from a finished one; the trajectory's ``stop_reason`` mirrors
    the one-hot ``stop/<reason>`` metric of the final step.
    """
    ob, stop = await env.initial_observation()
    transitions: list[Transition] = []
    while True:
        turn = current_turn.set(TurnSlot(current_group_key.get(), traj_index, len(transitions)))
        try:
            output = await policy(ob, stop, max_tokens=max_tokens)
        finally:
            current_turn.reset(turn)
        action = check_policy_output(output, max_tokens)
        step = await env.step(action.tokens, extra={"stop_reason": action.stop_reason})
        transitions.append(
            Transition(
                ob=list(ob),
                ac=action,
                reward=step.reward,
                episode_done=step.episode_done,
                metrics=dict(step.metrics),
                logs={**step.logs, **turn_logs(action)},  # the policy's seed, weights
            )
        )
        if step.episode_done:
            return Trajectory(
                transitions,
                final_ob=list(step.next_observation),
                stop_reason=stop_reason_from_metrics(step.metrics),
            )
        ob, stop = step.next_observation, step.next_stop_condition


def turn_token_cap(env: Env) -> int | None:
    """The env's per-action token cap, if it declares one (RenderedEnv's limits)."""
    limits = getattr(env, "limits", None)
    cap = getattr(limits, "max_tokens_per_turn", None)
    return cap if isinstance(cap, int) else None


async def do_group_rollout(
    builder: EnvGroupBuilder, policy: Policy | PolicyFactory
) -> TrajectoryGroup:
    """Make the group's envs, run them concurrently, score the group.

    If one episode fails, its siblings are cancelled and the first error is raised
    as itself (not wrapped). ``builder.cleanup()`` is always awaited, on success,
    failure and cancellation (a collector timeout) alike. A builder with its own
    ``group_rollout`` (tree rollouts: ``collect/tree.py``) is run through it.
    """
    if hasattr(type(builder), "group_rollout"):
        return await builder.group_rollout(policy)  # type: ignore[attr-defined]
    try:
        envs: Sequence[Env] = list(await builder.make_envs())
        if not envs:
            raise ValueError(f"{type(builder).__name__}.make_envs() returned no envs")
        group_key = current_group_key.get()
        policies = []
        for index, env in enumerate(envs):
            token = current_slot.set(RolloutSlot(group_key, index))
            try:
                policies.append(policy_for(policy, env))
            finally:
                current_slot.reset(token)
        trajectories = await _run_all(
            [
                do_single_rollout(p, env, max_tokens=turn_token_cap(env), traj_index=i)
                for i, (p, env) in enumerate(zip(policies, envs, strict=True))
            ]
        )
        scored = list(await builder.compute_group_rewards(trajectories, envs))
        if len(scored) != len(trajectories):
            raise ValueError(
                f"{type(builder).__name__}.compute_group_rewards returned {len(scored)} "
                f"rewards for {len(trajectories)} trajectories"
            )
        return TrajectoryGroup(
            trajectories=trajectories,
            group_rewards=[float(reward) for reward, _ in scored],
            group_metrics=[dict(metrics) for _, metrics in scored],
            tags=list(builder.logging_tags()),
        )
    finally:
        await builder.cleanup()


async def _run_all(coros: list) -> list[Trajectory]:
    """Run episodes concurrently; on the first failure cancel the rest and raise it."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(coro) for coro in coros]
    except BaseExceptionGroup as errors:
        raise first_error(errors) from None
    return [task.result() for task in tasks]


def first_error(errors: BaseExceptionGroup) -> BaseException:
    first = errors.exceptions[0]
    return first_error(first) if isinstance(first, BaseExceptionGroup) else first
