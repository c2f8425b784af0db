"""After a lost proof: does every server still answer as it did when the identity was proven?

The fingerprint is the one of the identity that was lost (the custody keeps it with
the identity: :mod:`.custody`), whichever sync made it. The same probe is scored
again on every server it was scored on; the same answers (within the proof's repeat
tolerance) restore the identity as it was proven, anything else (a server restarted
with its base checkpoint, an adapter gone) means the servers run other weights, and
sampling is refused until a sync succeeds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from agentenvs.rollout.policies.base import PolicyError
from agentenvs.rollout.weights.custody import Fingerprint
from agentenvs.rollout.weights.engine import resume_all
from agentenvs.rollout.weights.probe import score_on_server
from agentenvs.rollout.weights.proof import differs

if TYPE_CHECKING:
    from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy


async def reprobe(policy: OpenAICompatPolicy, fingerprint: Fingerprint) -> None:
    """Restore ``fingerprint.identity`` or fail the policy's weights; a server that
    still does not answer leaves the proof lost (the next turn asks again)."""
    lost = policy.weights
    reason = policy.custody.lost or "the proof was lost"
    async with policy.gate.swap(opens_with=lambda: policy.weights):
        await resume_left_paused(policy)
        for url, recorded in fingerprint.scores.items():
            try:
                now = await score_on_server(policy, fingerprint.probe, fingerprint.model, url)
            except PolicyError as err:
                if err.status is None:
                    raise  # still unreachable: stays lost
                problem: str | None = f"the re-probe was refused: {err}"
            else:
                problem = differs(now, recorded, fingerprint.tolerance)
            if problem:
                policy.weights = replace(
                    lost,
                    failed=f"{url} no longer serves weights version {lost.version} "
                    f"({lost.label()}): {problem}; lost because {reason}",
                )
                return
        policy.weights = fingerprint.identity
        await policy.instances.record()


async def resume_left_paused(policy: OpenAICompatPolicy) -> None:
    """A server a failed sync left paused holds every request: resume it first."""
    left = policy.served.left_paused
    if left:
        policy.served.left_paused, failure = await resume_all(left)
        if failure is not None:
            raise failure
