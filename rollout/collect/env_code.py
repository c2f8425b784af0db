"""Which errors came out of environment code, so the collector can judge a retry.

A group attempt is retried with fresh envs when it fails; that helps when a
server or worker hiccupped and hides a bug when the environment's own code
raised (the same ``KeyError`` every time, three times over). The calls into an
environment (``make_envs``, ``initial_observation``, ``step``, group rewards) go
through :func:`env_call`, which notes an error raised there on the attempt's
:class:`EnvErrors` (a context variable the attempt sets; outside a collector
nothing is noted). The error itself is raised on unchanged, so code that catches
``KeyError`` from a rollout still does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass
class EnvErrors:
    """The errors one group attempt saw raised by environment code (by identity)."""

    raised: list[tuple[BaseException, str]] = field(default_factory=list)

    def where(self, error: BaseException) -> str | None:
        """The environment call ``error`` came out of (``"GuessEnv.step"``), else None."""
        return next((call for seen, call in self.raised if seen is error), None)


_current: ContextVar[EnvErrors | None] = ContextVar("agentenvs_env_errors", default=None)


@contextmanager
def noting_env_errors() -> Iterator[EnvErrors]:
    """Note the errors environment code raises meanwhile (tasks started inside share it)."""
    errors = EnvErrors()
    token = _current.set(errors)
    try:
        yield errors
    finally:
        _current.reset(token)


async def env_call(call: Awaitable[T], owner: object, method: str) -> T:
    """``await call``; an ``Exception`` it raises is noted as raised in ``owner.method``.

    The name (an env's :meth:`~agentenvs.envs.types.Env.label`, else the class name) is
    made only when an error is noted: this wraps every step of every episode."""
    try:
        return await call
    except Exception as error:
        noted = _current.get()
        if noted is not None:
            noted.raised.append((error, f"{_name(owner)}.{method}"))
        raise


def _name(owner: object) -> str:
    from agentenvs.envs.types import Env

    return owner.label() if isinstance(owner, Env) else type(owner).__name__
