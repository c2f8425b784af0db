"""Which weights a served policy's turns are stamped with, and keeping that claim true.

Each turn's answer is stamped with the weights that served it
(:attr:`ServedWeights.identity`, which a :class:`~agentenvs.rollout.weights.WeightSync`
replaces after a verified swap). Requests wait at :attr:`ServedWeights.gate` while
a swap is under way; inside a Ray actor that is the actor's gate, which a sync in
the driver closes and opens with the new weights. Before each request the proof is
kept honest (:mod:`agentenvs.rollout.weights.custody`): a new server instance loses
it, and a lost proof is re-probed with the fingerprint of exactly the identity that
was lost (:mod:`agentenvs.rollout.weights.reprobe`), when one is kept; a turn during
which a server was lost is stamped with what the re-probe says, or refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from agentenvs.envs.weights_identity import WeightsIdentity
from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.weights.custody import PROVEN, Fingerprint, WeightsCustody
from agentenvs.rollout.weights.engine import VLLMEngine
from agentenvs.rollout.weights.gate import SwapGate
from agentenvs.rollout.weights.instances import ServerInstances
from agentenvs.rollout.weights.reprobe import reprobe

if TYPE_CHECKING:
    from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy


class ServedWeights:
    """The identity, its custody, the swap gate and the server instances of one policy."""

    def __init__(
        self,
        policy: OpenAICompatPolicy,
        version: int | str | None,
        instance_check_interval: float,
        *,
        watch_instances: bool,
    ) -> None:
        self.policy = policy
        self.custody = WeightsCustody(WeightsIdentity(version=version), reprobe=self._reprobe)
        """The identity turns are stamped with, its proofs' fingerprints, and what
        takes its proof away."""
        self.left_paused: list[VLLMEngine] = []
        """Servers a failed sync paused and could not resume: resumed before anything
        else is asked of them (by the next sync or re-probe)."""
        self.gate = SwapGate()
        self.instances = ServerInstances(policy, instance_check_interval)
        """Each server's start time, read again at most every ``instance_check_interval``
        seconds while the weights are proven: a new instance loses the proof. Exact
        while a restart takes longer than the interval (vLLM's start-up takes 30 s
        and more)."""
        self.watch_instances = watch_instances
        self.url = policy.url

    @property
    def identity(self) -> WeightsIdentity:
        return self.custody.identity

    async def _reprobe(self, fingerprint: Fingerprint) -> None:
        await reprobe(self.policy, fingerprint)

    async def before_request(self) -> None:
        """A new server instance loses the proof; a lost proof is re-probed when this
        policy's sync left a way to."""
        if self.watch_instances and self.identity.proof in PROVEN:
            await self.instances.check_due()
        await self.custody.ensure_proven()

    def refuse_unvouched(self, weights: WeightsIdentity) -> None:
        if weights.failed:
            raise PolicyError(
                f"sampling refused: the weights on {self.url} are not vouched for "
                f"({weights.failed}); sync verified weights first"
            )

    async def after_loss(self, stamped: WeightsIdentity) -> WeightsIdentity:
        """A server was lost while a turn was under way: the answer may come from a
        restarted one. The identity to stamp after a re-probe, or a refusal."""
        await self.custody.ensure_proven()
        now = self.identity
        if now.failed:
            raise PolicyError(
                f"a server was lost during this turn and no longer serves the weights "
                f"it was sent to ({now.failed})"
            )
        return now if now.version == stamped.version else stamped


def turn_stamp(
    weights: WeightsIdentity, model: str | None, seed: int | None
) -> dict[str, str | int | float]:
    """What a turn records of the weights that served it (and its seed)."""
    if weights.path == "base" and weights.name is None:
        weights = replace(weights, name=model)  # the served model, once known
    stamp: dict[str, str | int | float] = {"weights": weights.label()}
    if weights.proof != "none":
        stamp["weights_proof"] = weights.proof
    if weights.version is not None:
        stamp["weights_version"] = weights.version
    if seed is not None:
        stamp["seed"] = seed
    return stamp
