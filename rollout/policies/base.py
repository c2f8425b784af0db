"""What the collector needs from a policy: context tokens in, sampled tokens out.

A policy returns the tokens it sampled *exactly*, including the stop sequence or
end-of-sequence token that ended the turn, with per-token logprobs when it has
them, and why it stopped. Nothing downstream re-tokenizes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from agentenvs.envs.types import Env, StopCondition, TokensWithLogprobs


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
