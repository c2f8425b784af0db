"""The one root every agentenvs error derives from.

Catch :class:`AgentEnvsError` to handle anything this library raises on purpose.
Each concrete error also keeps the builtin base it always had (``ValueError`` for bad
input, ``RuntimeError`` for a failed operation, ``KeyError`` for an unknown name), so
``except ValueError`` written against an older version still works. Errors that come
from an HTTP answer carry its status code in :attr:`AgentEnvsError.status`.

This module imports nothing of the library, so every room (envs, rollout, sandbox)
can derive from it without loading the others.
"""

from __future__ import annotations


class AgentEnvsError(Exception):
    """Base of every error agentenvs raises on purpose.

    ``status`` is the HTTP status code of the answer that caused the error, when
    there was one (a retriever, sandbox or inference server said no), else ``None``.
    """

    status: int | None = None

    def __init__(self, *args: object, status: int | None = None) -> None:
        super().__init__(*args)
        if status is not None:
            self.status = status


class TransientError(AgentEnvsError):
    """An error worth trying again: the same call may succeed later.

    The collector does not retry an error raised by environment code (its
    ``make_envs``, ``initial_observation``, ``step`` or group rewards): a bug raises
    the same way every time, and retrying only hides it. Raise a subclass of this
    (or ``raise TransientError("retriever restarting") from err``) where a failure
    is of the moment: a service restarting, a worker that crashed, a busy server.
    Errors that already say so are transient too (:func:`is_transient`).
    """


RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
"""HTTP answers that mean "not now" rather than "never"."""


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is of the moment: a :class:`TransientError`, a connection
    failure or timeout (``ConnectionError``, ``TimeoutError``), or an agentenvs error
    carrying a retryable HTTP status (:data:`RETRYABLE_STATUS`)."""
    if isinstance(error, (TransientError, ConnectionError, TimeoutError)):
        return True
    return isinstance(error, AgentEnvsError) and error.status in RETRYABLE_STATUS
