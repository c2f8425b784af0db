"""The server's live sessions: groups (one builder each) and their episodes.

A group session owns a private copy of its builder and every env made from it or
forked off it; closing it (the client's ``DELETE``, its idle timeout, or the
server stopping) runs the builder's cleanup and closes every fork, so a client
that vanished leaves nothing running past ``idle_timeout``. Until then nothing is
lost: a client that disconnected mid-step finds the step's result kept (the env
work runs shielded from the request's cancellation) and can ask again.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.serving.errors import TooManySessions, UnknownSession
from agentenvs.envs.types import Env, EnvGroupBuilder

logger = logging.getLogger(__name__)

FORGOTTEN_IDS = 4096
"""How many closed or expired session ids are remembered to say why they are gone."""


@dataclass(frozen=True)
class SessionLimits:
    """Per-server and per-session bounds.

    ``max_groups``: group sessions held at once (beyond it, 429). ``max_envs_per_group``:
    roots plus forks one group may hold open. ``max_steps_per_env``: steps one episode
    may take. ``idle_timeout``: seconds without a request before a group is closed.
    """

    max_groups: int = 1024
    max_envs_per_group: int = 256
    max_steps_per_env: int = 10_000
    idle_timeout: float = 300.0

    def __post_init__(self) -> None:
        for name in ("max_groups", "max_envs_per_group", "max_steps_per_env"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.idle_timeout > 0:
            raise ValueError(f"idle_timeout must be positive, got {self.idle_timeout}")


@dataclass
class EnvSession:
    """One live episode: the env, what it last showed, and how far it got."""

    env_id: str
    group: GroupSession
    env: Env
    last_ob: list[int] | None = None
    turns: int = 0
    done: bool = False
    closed: bool = False
    last_action: list[int] | None = None
    last_answer: dict[str, Any] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class GroupSession:
    group_id: str
    builder: EnvGroupBuilder
    env_name: str
    envs: dict[str, EnvSession] = field(default_factory=dict)
    roots: list[str] = field(default_factory=list)
    last_used: float = field(default_factory=time.monotonic)
    closed: bool = False

    def touch(self) -> None:
        self.last_used = time.monotonic()


class SessionTable:
    """Every group and env session of one server (see the module docstring)."""

    def __init__(self, limits: SessionLimits) -> None:
        self.limits = limits
        self.groups: dict[str, GroupSession] = {}
        self.envs: dict[str, EnvSession] = {}
        self._gone: OrderedDict[str, str] = OrderedDict()
        self.expired_total = 0
        self.closed_total = 0

    def open_group(self, builder: EnvGroupBuilder, env_name: str) -> GroupSession:
        """A session over a private copy of ``builder`` (``copy.copy`` honours the
        builder's ``__getstate__``: live envs of another session never travel)."""
        if len(self.groups) >= self.limits.max_groups:
            raise TooManySessions(
                f"this server holds {len(self.groups)} group sessions, its limit "
                f"(max_groups={self.limits.max_groups}); close some or try later"
            )
        group = GroupSession(f"g-{secrets.token_hex(8)}", copy.copy(builder), env_name)
        self.groups[group.group_id] = group
        return group

    def add_env(self, group: GroupSession, env: Env, *, root: bool) -> EnvSession:
        if len(group.envs) >= self.limits.max_envs_per_group:
            raise TooManySessions(
                f"group {group.group_id} holds {len(group.envs)} envs, its limit "
                f"(max_envs_per_group={self.limits.max_envs_per_group})"
            )
        session = EnvSession(f"e-{secrets.token_hex(8)}", group, env)
        group.envs[session.env_id] = session
        if root:
            group.roots.append(session.env_id)
        self.envs[session.env_id] = session
        return session

    def group(self, group_id: str) -> GroupSession:
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownSession(self._missing("group", group_id))
        group.touch()
        return group

    def env(self, env_id: str) -> EnvSession:
        session = self.envs.get(env_id)
        if session is None:
            raise UnknownSession(self._missing("env", env_id))
        session.group.touch()
        return session

    def _missing(self, kind: str, session_id: str) -> str:
        why = self._gone.get(session_id)
        if why:
            return f"{kind} session {session_id} is gone: {why}"
        return f"unknown {kind} session {session_id} (never made here; a restarted server "\
               "forgets its sessions)"  # fmt: skip

    def _forget(self, session_id: str, why: str) -> None:
        self._gone[session_id] = why
        while len(self._gone) > FORGOTTEN_IDS:
            self._gone.popitem(last=False)

    async def close_env(self, session: EnvSession) -> None:
        if session.closed:
            return
        session.closed = True
        try:
            await session.env.close()
        except Exception as err:  # a close failure must not keep the others open
            logger.warning("closing env %s failed: %r", session.env_id, err)

    async def close_group(self, group_id: str, why: str = "closed by the client") -> bool:
        group = self.groups.pop(group_id, None)
        if group is None:
            return False
        group.closed = True
        self._forget(group_id, why)
        forks = [s for s in group.envs.values() if s.env_id not in group.roots]
        for session in group.envs.values():
            self.envs.pop(session.env_id, None)
            self._forget(session.env_id, f"its group {group_id} was {why}")
        for session in forks:  # the builder's cleanup closes the roots it made
            await self.close_env(session)
        try:
            await group.builder.cleanup()
        except Exception as err:
            logger.warning("cleanup of group %s failed: %r", group_id, err)
        for session in group.envs.values():  # roots a builder's cleanup left open
            await self.close_env(session)  # (close is idempotent by the Env contract)
        # Each env session points back at its group: without this the pair (and the env,
        # its renderer, its token lists) waits for a full garbage collection, which with
        # thousands of sessions held pauses every step for a few hundred milliseconds.
        group.envs.clear()
        self.closed_total += 1
        return True

    async def expire_idle(self, now: float | None = None) -> list[str]:
        """Close the groups idle for longer than ``idle_timeout``; their ids."""
        now = time.monotonic() if now is None else now
        idle = [
            g.group_id
            for g in self.groups.values()
            if now - g.last_used > self.limits.idle_timeout
            and not any(s.lock.locked() for s in g.envs.values())
        ]
        for group_id in idle:
            why = f"closed after {self.limits.idle_timeout:g} s without a request (idle timeout)"
            await self.close_group(group_id, why)
            self.expired_total += 1
        return idle

    async def sweep_forever(self) -> None:
        interval = min(5.0, max(0.05, self.limits.idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(Exception):
                await self.expire_idle()

    async def close_all(self) -> None:
        for group_id in list(self.groups):
            await self.close_group(group_id, "closed when the server stopped")
