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

and from then on every turn is stamped ``proof="lost"``, never "verified". A
policy whose weights were proven by a :class:`~agentenvs.rollout.weights.sync.WeightSync`
has a re-probe (:attr:`WeightsCustody.recover`): before its next request it
scores the sync's probe again on every server and compares with what the servers
answered when the proof was made. The same answers restore the proof as it was
(an ``indistinguishable`` sync stays that); different ones mean the servers run
other weights, and sampling is refused until a sync succeeds. A copy of the
policy elsewhere (a Ray actor's) has no re-probe of its own: it keeps sampling and
stamps ``lost`` until the driver's next sync reaches it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import replace

from agentenvs.envs.weights_identity import WeightsIdentity

PROVEN = ("verified", "indistinguishable")
"""The proofs a loss takes away (``none`` had nothing to lose)."""

SEEN = 8
"""How many recent identities are kept for records of mixed-version groups."""


class WeightsCustody:
    """The identity a policy stamps its turns with, and what may take its proof away."""

    def __init__(self, identity: WeightsIdentity) -> None:
        self._identity = identity
        self.seen: deque[WeightsIdentity] = deque([identity], maxlen=SEEN)
        """The latest identity of each recent version, oldest first."""
        self.losses = 0
        """Connection losses and new instances seen (a request compares it before and after)."""
        self.lost: str | None = None
        """Why the proof was lost, when it was."""
        self.recover: Callable[[], Awaitable[None]] | None = None
        """Re-probes the servers and restores or fails the identity (set by a sync)."""
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
        for known in list(self.seen):
            if known.version == identity.version:
                self.seen.remove(known)
        self.seen.append(identity)

    def identity_of(self, version: object) -> WeightsIdentity | None:
        """The latest identity this policy held for ``version``, if still kept."""
        return next((i for i in reversed(self.seen) if i.version == version), None)

    def lose(self, reason: str) -> None:
        """A server may have changed under the proof: stamp ``lost`` until a re-probe."""
        self.losses += 1
        if self._identity.proof in PROVEN:
            self.identity = replace(self._identity, verified=False, proof="lost")
        if self._identity.proof == "lost":
            self.lost = self.lost or reason  # the first cause is the one reported

    async def ensure_proven(self) -> None:
        """Re-probe once when the proof was lost and a re-probe exists; concurrent
        callers wait for the one that runs."""
        if self._identity.proof != "lost" or self.recover is None:
            return
        async with self._guard():
            if self._identity.proof == "lost" and not self._identity.failed:
                await self.recover()

    def _guard(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._loop, self._lock = loop, asyncio.Lock()
        return self._lock
