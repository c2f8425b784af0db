"""What the collector needs from a policy: context tokens in, sampled tokens out.

A policy returns the tokens it sampled *exactly*, including the stop sequence or
end-of-sequence token that ended the turn, with per-token logprobs when it has
them, and why it stopped. Nothing downstream re-tokenizes them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agentenvs.envs.types import Env, Logs, StopCondition, TokensWithLogprobs


@runtime_checkable
class Policy(Protocol):
    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs: ...


PolicyFactory = Callable[[Env], Policy]
"""Makes a policy for one env: scripted and replay policies need to know their env."""


class PolicyError(RuntimeError):
    """The policy could not produce an action (a dead server, a bad response)."""


def policy_for(policy: Policy | PolicyFactory, env: Env) -> Policy:
    """Accept a shared policy or a per-env factory; factories are marked by ``per_env``."""
    if getattr(policy, "per_env", False):
        return policy(env)  # type: ignore[call-arg, return-value]
    return policy  # type: ignore[return-value]


@dataclass(frozen=True)
class TurnSlot:
    """Which turn of which trajectory of which group a policy call samples.

    Set by the rollout loop around each policy call (:data:`current_turn`), so a
    shared policy can give every sample of a group its own seed, and the same
    seed again when the same group is collected again.
    """

    group_key: str | None
    traj_index: int
    turn: int


current_turn: ContextVar[TurnSlot | None] = ContextVar("agentenvs_current_turn", default=None)


@dataclass
class StampedTokens(TokensWithLogprobs):
    """A policy's answer plus what it wants recorded with the turn (seed, weights).

    The rollout loop copies ``stamp`` into the transition's logs under
    ``policy/<key>``, so the store keeps it per turn.
    """

    stamp: Logs = field(default_factory=dict)


def turn_logs(action: TokensWithLogprobs) -> Logs:
    """The ``policy/...`` log entries of an action (none for a plain one)."""
    stamp = getattr(action, "stamp", None) or {}
    return {f"policy/{key}": value for key, value in stamp.items()}


def derive_seed(base: int, slot: TurnSlot) -> int:
    """A seed per (group, trajectory, turn) from the run's base seed.

    The same base seed on every request makes every episode of a GRPO group
    identical; hashing the slot in gives each its own, reproducibly.
    """
    text = f"{base}:{slot.group_key}:{slot.traj_index}:{slot.turn}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFFFFFF
