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
