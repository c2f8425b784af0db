"""The forks of one tree rollout: made under a bound, counted, always cleaned up.

A fork holds real resources (a forked game engine, a sandbox session), so a tree
must not grow them without limit and must give every one of them back, on success,
failure and cancellation alike, exactly once. The ledger is that bookkeeping, apart
from the branching logic (``tree.py``), so each can be read on its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from agentenvs.envs.types import Env
from agentenvs.rollout.collect.attempts import describe_error

logger = logging.getLogger(__name__)

MAX_FAILURES_KEPT = 20
"""Failure messages kept per tree (the count is always exact)."""


@dataclass
class ForkLedger:
    """Forks of one group: at most ``max_live`` open at once."""

    max_live: int = 64
    made: int = 0
    """Forks made (successfully) so far."""
    refused: int = 0
    """Forks not attempted because ``max_live`` forks were open."""
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    """The first :data:`MAX_FAILURES_KEPT` failures, as ``Type: message``."""
    peak_live: int = 0
    _live: list[Env] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.max_live < 1:
            raise ValueError(f"max_live forks must be at least 1, got {self.max_live}")

    @property
    def live(self) -> int:
        return len(self._live)

    async def fork(self, env: Env) -> Env | None:
        """A fork of ``env``, or None when the bound is reached or the fork failed.

        A failed fork is an outcome of the tree (recorded), not an error of the group:
        the branch point simply gets fewer children.
        """
        if len(self._live) >= self.max_live:
            self.refused += 1
            return None
        try:
            clone = await env.fork()
        except Exception as err:  # any env's failure to copy itself is recorded, not raised
            self.failed += 1
            if len(self.failures) < MAX_FAILURES_KEPT:
                self.failures.append(describe_error(err))
            return None
        self.made += 1
        self._live.append(clone)
        self.peak_live = max(self.peak_live, len(self._live))
        return clone

    async def release(self, env: Env) -> None:
        """Close a fork whose episode ended (a no-op for envs the ledger did not make)."""
        for i, live in enumerate(self._live):
            if live is env:
                del self._live[i]
                await _close(env)
                return

    async def close_all(self) -> None:
        """Close every fork still open. Idempotent; never raises."""
        live, self._live = self._live, []
        for env in live:
            await _close(env)

    def to_json(self) -> dict[str, object]:
        return {
            "forks": self.made,
            "fork_failures": self.failed,
            "fork_failure_messages": list(self.failures),
            "forks_refused": self.refused,
            "peak_live_forks": self.peak_live,
            "max_live_forks": self.max_live,
        }


async def _close(env: Env) -> None:
    try:
        await env.close()
    except Exception:  # cleanup must not mask the rollout's outcome
        logger.exception("closing a forked environment failed")
