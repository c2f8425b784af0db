"""One turn of an episode: the policy samples, its answer is checked, the env steps.

This is the one place where a policy meets an environment, shared by single,
group and tree rollouts (``rollouts.py``, ``tree.py``), so it is where policy
output is checked: anything that is not a well-formed :class:`TokensWithLogprobs`
is a :class:`PolicyError` here, before an env or a trainer ever sees it.

A turn is two calls, :func:`sample_action` then :func:`play_action`, because a tree
rollout may fork the env between them (the entropy trigger reads the sampled
action before deciding to branch); an ordinary episode calls them back to back.
"""

from __future__ import annotations

import math
from typing import get_args

from agentenvs.envs.types import (
    Env,
    Observation,
    SamplerStopReason,
    StepResult,
    StopCondition,
    TokensWithLogprobs,
    Trajectory,
    Transition,
    observation_images,
    stop_reason_from_metrics,
)
from agentenvs.envs.wire import IMAGES_SEEN_LOG, placements_digest
from agentenvs.rollout.collect.env_code import env_call
from agentenvs.rollout.policies.base import (
    Policy,
    PolicyError,
    SeesImages,
    TurnSlot,
    current_turn,
    turn_logs,
)

_SAMPLER_STOPS = frozenset(get_args(SamplerStopReason))


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


def action_token_cap(env: Env, ceiling: int | None = None) -> int | None:
    """The token cap of ``env``'s next action under ``ceiling``: its
    :meth:`~agentenvs.envs.types.Env.max_action_tokens`, asked now, just before the turn
    (a per-episode response budget makes it shrink as the episode goes on)."""
    caps = [cap for cap in (env.max_action_tokens(), ceiling) if cap is not None]
    return min(caps) if caps else None


async def sample_action(
    policy: Policy,
    observation: Observation,
    stop: StopCondition,
    *,
    slot: TurnSlot,
    max_tokens: int | None,
) -> TokensWithLogprobs:
    """The policy's checked action for this turn, sampled with ``slot`` as the current
    turn (seeded samplers and replay read it) and at most ``max_tokens`` tokens (the
    env's cap for this turn: :func:`action_token_cap`)."""
    shown = observation_images(observation)
    if shown and not (isinstance(policy, SeesImages) and policy.sees_images()):
        raise PolicyError(
            f"the observation shows {len(shown)} image(s) but {type(policy).__name__} "
            "cannot see images (a vision policy declares sees_images())"
        )
    token = current_turn.set(slot)
    try:
        output = await policy(observation, stop, max_tokens=max_tokens)
    finally:
        current_turn.reset(token)
    return check_policy_output(output, max_tokens)


async def play_action(
    env: Env, observation: Observation, action: TokensWithLogprobs
) -> tuple[Transition, StepResult]:
    """Step ``env`` with ``action`` (the sampler's stop reason passed on, so the env can
    tell a truncated action from a finished one); the turn's transition and the step.

    The transition's logs are the env's plus the policy's stamp (``policy/seed``,
    ``policy/weights_version``...)."""
    step = await env_call(
        env.step(action.tokens, extra={"stop_reason": action.stop_reason}), env, "step"
    )
    shown = observation_images(observation)
    seen = {IMAGES_SEEN_LOG: placements_digest(shown)} if shown else {}
    transition = Transition(
        ob=list(observation),
        ac=action,
        reward=step.reward,
        episode_done=step.episode_done,
        metrics=dict(step.metrics),
        logs={**step.logs, **turn_logs(action), **seen},
        images=shown,
    )
    return transition, step


def finished_trajectory(transitions: list[Transition], last: StepResult) -> Trajectory:
    """The trajectory of an episode whose last step was ``last``; its ``stop_reason``
    mirrors the one-hot ``stop/<reason>`` metric of that step."""
    return Trajectory(
        list(transitions),
        final_ob=list(last.next_observation),
        stop_reason=stop_reason_from_metrics(last.metrics),
    )
