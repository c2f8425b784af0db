"""What a policy may still claim about its weights between two syncs.

A sync proves that the servers ran the pushed weights at the moment it probed
them. That proof is the client's belief from then on, and the server can change
under it: a server killed and restarted comes back with its ``--model``
checkpoint (measured: a full-reload policy kept stamping 62 turns "v1, verified"
while the base model served them), and a sync step that failed half-way leaves
servers in an unknown state. So the custody of a proven identity is lost when

* a request to a server fails at the connection (refused, reset, closed early),
* a server answers as a new instance (:mod:`.engine` reads its start time), or
* a step of a sync fails,

and from then on every turn is stamped ``proof="lost"``, never "verified".

Each proof leaves a :class:`Fingerprint`: the identity it proved, the probe, and
what every server answered to it. The fingerprint is kept *with the identity*,
not with the sync that made it, so however many syncs share a policy, a lost
proof is re-probed against the fingerprint of exactly the identity that was
lost (:meth:`WeightsCustody.ensure_proven`): before the next request the same
probe is scored again on every server. The same answers restore the identity
as it was proven (an ``indistinguishable`` one stays that); different ones mean
the servers run other weights, and sampling is refused until a sync succeeds.
An identity no fingerprint proves (a version set by hand, a copy of the policy
in a Ray actor) stays ``lost`` until a sync reaches it: never restored, never
"indistinguishable" by default.

Fingerprints of recent identities (and of the base checkpoint a server started
with) are also the candidates a later sync must tell its new weights from
(:mod:`.proof`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace

from agentenvs.envs.weights_identity import WeightsIdentity
from agentenvs.rollout.weights.probe import Probe
from agentenvs.rollout.weights.proof import Candidate, Tolerance

PROVEN = ("verified", "indistinguishable")
"""The proofs a loss takes away (``none`` had nothing to lose)."""

SEEN = 8
"""How many recent identities (and fingerprints) are kept."""


def same_weights(a: WeightsIdentity, b: WeightsIdentity) -> bool:
    """Whether two identities name the same weights, whatever their proof says."""
    return (a.version, a.path, a.name, a.source, a.sha256) == (
        b.version,
        b.path,
        b.name,
        b.source,
        b.sha256,
    )


def same_files(a: WeightsIdentity, b: WeightsIdentity) -> bool:
    """The same weights on disk (pushed again under another version), or the same identity."""
    return bool(a.sha256 and a.sha256 == b.sha256) or same_weights(a, b)


@dataclass(frozen=True)
class Fingerprint:
    """What the servers answered to a probe while serving one identity."""

    identity: WeightsIdentity
    """The identity as proven (its proof and power), or the base checkpoint (proof
    ``none``: recorded as a candidate, never restored)."""
    probe: Probe
    model: str
    """The name the probe was scored under (an adapter's, or the base model's)."""
    scores: Mapping[str, tuple[float, ...]]
    """Server URL -> its teacher-forced scores."""
    tolerance: Tolerance
    """The tolerance of the proof (its repeat tolerance as the proof saw it)."""

    def candidate(self, url: str) -> Candidate | None:
        scores = self.scores.get(url)
        if scores is None:
            return None
        identity = self.identity
        label = "base" if identity.path == "base" else f"v{identity.version}"
        return Candidate(f"{label} ({identity.label()})", scores)


Reprobe = Callable[[Fingerprint], Awaitable[None]]
"""Scores a fingerprint's probe again and restores its identity or fails it."""


class WeightsCustody:
    """The identity a policy stamps its turns with, and what may take its proof away."""

    def __init__(self, identity: WeightsIdentity, reprobe: Reprobe | None = None) -> None:
        self._identity = identity
        self.seen: deque[WeightsIdentity] = deque([identity], maxlen=SEEN)
        """The latest identity of each recent version, oldest first."""
        self.fingerprints: deque[Fingerprint] = deque(maxlen=SEEN)
        """The latest fingerprint of each recent weights, oldest first."""
        self.base_fingerprints: list[Fingerprint] = []
        """The base checkpoint's, one per probe: never pushed out by later syncs, since a
        restarted server serves it again."""
        self.proven_versions: set[int | str | None] = set()
        """Every version this policy ever held proven (turns were stamped with it)."""
        self.losses = 0
        """Connection losses and new instances seen (a request compares it before and after)."""
        self.lost: str | None = None
        """Why the proof was lost, when it was."""
        self.reprobe = reprobe
        """Re-scores a fingerprint on the servers (the policy's, set when it is made)."""
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def identity(self) -> WeightsIdentity:
        return self._identity

    @identity.setter
    def identity(self, identity: WeightsIdentity) -> None:
        self._identity = identity
        if identity.proof != "lost":
            self.lost = None
        if identity.proof in PROVEN:
            self.proven_versions.add(identity.version)
        for known in list(self.seen):
            if known.version == identity.version:
                self.seen.remove(known)
        self.seen.append(identity)

    def identity_of(self, version: object) -> WeightsIdentity | None:
        """The latest identity this policy held for ``version``, if still kept."""
        return next((i for i in reversed(self.seen) if i.version == version), None)

    def remember(self, fingerprint: Fingerprint) -> None:
        """Keep a fingerprint, replacing an older one of the same weights (the same
        identity, or the same files pushed again under another version) and probe."""
        if fingerprint.identity.path == "base":
            others = [f for f in self.base_fingerprints if f.probe != fingerprint.probe]
            self.base_fingerprints = [*others, fingerprint]
            return
        for known in list(self.fingerprints):
            if known.probe == fingerprint.probe and same_files(
                known.identity, fingerprint.identity
            ):
                self.fingerprints.remove(known)
        self.fingerprints.append(fingerprint)

    def candidates(self, probe: Probe) -> list[Fingerprint]:
        """Every kept fingerprint of ``probe``: the base checkpoint's, then recent ones."""
        kept = [*self.base_fingerprints, *self.fingerprints]
        return [f for f in kept if f.probe == probe]

    def fingerprint_of(self, identity: WeightsIdentity) -> Fingerprint | None:
        """The latest fingerprint that proved these very weights, if one is kept."""
        return next(
            (
                f
                for f in reversed(self.fingerprints)
                if f.identity.proof in PROVEN and same_weights(f.identity, identity)
            ),
            None,
        )

    def lose(self, reason: str) -> None:
        """A server may have changed under the proof: stamp ``lost`` until a re-probe."""
        self.losses += 1
        if self._identity.proof in PROVEN:
            self.identity = replace(self._identity, verified=False, proof="lost")
        if self._identity.proof == "lost":
            self.lost = self.lost or reason  # the first cause is the one reported

    async def ensure_proven(self) -> None:
        """Re-probe once when the proof was lost and a fingerprint of the lost identity
        is kept; concurrent callers wait for the one that runs."""
        if self._identity.proof != "lost" or self.reprobe is None:
            return
        async with self._guard():
            if self._identity.proof != "lost" or self._identity.failed:
                return
            fingerprint = self.fingerprint_of(self._identity)
            if fingerprint is not None:
                await self.reprobe(fingerprint)

    def _guard(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._loop, self._lock = loop, asyncio.Lock()
        return self._lock
