"""The two ways a supervised worker fails, shared by the pool and both backends."""

from __future__ import annotations

from agentenvs.envs.errors import AgentEnvsError, TransientError


class WorkerDead(TransientError, RuntimeError):
    """A worker stopped answering; ``delivered`` says whether the request had reached it
    (only an undelivered request is safe to retry elsewhere). Transient: an episode
    that met it is retried by the collector with fresh envs."""

    def __init__(self, message: str, *, delivered: bool) -> None:
        super().__init__(message)
        self.delivered = delivered


class WorkerStartError(AgentEnvsError, RuntimeError):
    """The worker could not be started (the message carries the launcher's stderr)."""
