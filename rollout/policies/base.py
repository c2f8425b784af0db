"""What the collector needs from a policy: context tokens in, sampled tokens out.

A policy returns the tokens it sampled *exactly*, including the stop sequence or
end-of-sequence token that ended the turn, with per-token logprobs when it has
them, and why it stopped. Nothing downstream re-tokenizes them.

:class:`Policy` is the whole requirement. Everything else the collector, the
executors and the weight sync may ask of a policy is an optional capability,
declared here so a policy author can see it and a type checker can check it:

* :class:`PerEnvFactory` (``per_env = True``): called with each env to make that
  env's policy (scripted and replay policies need to know their env).
* :class:`SelfDescribing` (``provenance()``): what the records say sampled them.
* :class:`VersionedPolicy` (``weights_version``): which version of the weights it
  samples with, recorded with every group so a trainer can judge staleness.
* :class:`TracksWeights` (``weights``): the full :class:`WeightsIdentity`, which a
  Ray executor ships to the copies it builds in its actors.
* :class:`GatedPolicy` (``gate``): a :class:`SwapGate` a weight sync closes while
  it swaps, so no request is labelled with weights that did not serve it.
* :class:`ClosablePolicy` (``aclose()``): resources (an HTTP client) to release.
* :class:`SeesImages` (``sees_images()``): reads the images of an
  :class:`~agentenvs.envs.types.ImageObservation`; the collector refuses to send one
  to a policy that would read only its tokens.

A policy that answers with :class:`StampedTokens` gets its stamp recorded per turn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.envs.types import Env, Logs, StopCondition, TokensWithLogprobs

if TYPE_CHECKING:
    from agentenvs.envs.weights_identity import WeightsIdentity
    from agentenvs.rollout.weights.gate import SwapGate


@runtime_checkable
class Policy(Protocol):
    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs: ...


DEFAULT_MAX_TOKENS = 256
"""The tokens a turn may sample when neither the policy nor the env sets a cap."""


def turn_token_cap(own: int | None, env_cap: int | None) -> int:
    """How many tokens one turn may sample: the policy's own ``max_tokens`` and the env's cap.

    A policy's ``max_tokens``, when the user set it, bounds every turn and an env cap can
    only lower it. Left unset (None), the env's cap for this turn rules, so a preset's
    per-turn budget (Search-R1's 500 tokens) or what is left of a per-episode budget
    (ReTool's 16384) is what is sampled without a matching policy flag; where the env sets
    no cap either, :data:`DEFAULT_MAX_TOKENS`."""
    if own is None:
        return DEFAULT_MAX_TOKENS if env_cap is None else env_cap
    return own if env_cap is None else min(own, env_cap)


def check_max_tokens(max_tokens: int | None) -> None:
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1 (or None: the env's cap), got {max_tokens}")


PolicyFactory = Callable[[Env], Policy]
"""Makes a policy for one env: scripted and replay policies need to know their env."""


@runtime_checkable
class PerEnvFactory(Protocol):
    """Makes one policy per env; the collector calls it with each env it builds.

    Marked by ``per_env = True`` (a class attribute, or an attribute set on a plain
    function), because a factory and a shared policy are both callables and cannot
    be told apart otherwise. ``per_env = False`` is a shared policy."""

    per_env: bool

    def __call__(self, env: Env) -> Policy: ...


@runtime_checkable
class SelfDescribing(Protocol):
    """Says what it is for the records (model, sampling settings, weights).

    Asked when a group finishes, so what is learnt while sampling (a model name
    found on the server) is recorded. A policy without it is recorded by its
    class name."""

    def provenance(self) -> dict[str, Any]: ...


@runtime_checkable
class VersionedPolicy(Protocol):
    """Samples with a known version of the weights (None: not known).

    Recorded in each group's provenance; a weight sync bumps it, and streaming
    collection drops groups sampled too many versions ago. A policy made by name
    declares it as a ``weights_version`` constructor option (``hf``, ``openai``,
    ``scripted``); :func:`~agentenvs.rollout.policies.make_policy` refuses
    ``weights_version=`` for one that does not (``replay``, ``interactive``: they
    sample with no trained weights)."""

    weights_version: int | str | None


@runtime_checkable
class TracksWeights(Protocol):
    """Knows the full identity of the weights it samples with, not only the version.

    Settable: a Ray executor moves the copies it built in its actors to the
    driver's identity after a sync."""

    weights: WeightsIdentity


@runtime_checkable
class GatedPolicy(Protocol):
    """Sends its requests through a :class:`SwapGate` a weight sync closes while it
    swaps; the Ray executor links the gates of its actors' copies to it."""

    gate: SwapGate


@runtime_checkable
class ClosablePolicy(Protocol):
    """Holds resources (an HTTP client) that whoever made it releases at the end."""

    async def aclose(self) -> None: ...


@runtime_checkable
class SeesImages(Protocol):
    """Reads an observation's images (:func:`~agentenvs.envs.types.observation_images`)
    along with its tokens: a vision model's policy, or one that answers from the env
    itself (scripted, replay). ``False`` when this instance cannot (a text-only model
    behind a policy class that can serve both). A policy that does not declare it is
    never sent an observation with images: it would answer a context it never saw."""

    def sees_images(self) -> bool: ...


class PolicyError(AgentEnvsError, RuntimeError):
    """The policy could not produce an action (a dead server, a bad response)."""


def is_per_env(policy: object) -> bool:
    """True for a :class:`PerEnvFactory` whose ``per_env`` marker is set."""
    return isinstance(policy, PerEnvFactory) and bool(policy.per_env)


def policy_for(policy: Policy | PolicyFactory, env: Env) -> Policy:
    """Accept a shared policy or a per-env factory; factories are marked by ``per_env``."""
    if is_per_env(policy):
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
    stamp = action.stamp if isinstance(action, StampedTokens) else {}
    return {f"policy/{key}": value for key, value in stamp.items()}


def derive_seed(base: int, slot: TurnSlot) -> int:
    """A seed per (group, trajectory, turn) from the run's base seed.

    The same base seed on every request makes every episode of a GRPO group
    identical; hashing the slot in gives each its own, reproducibly.
    """
    text = f"{base}:{slot.group_key}:{slot.traj_index}:{slot.turn}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFFFFFF
