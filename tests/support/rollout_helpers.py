"""Small real envs, builders and policies for the rollout/collector tests.

They implement the token-level interface directly (no mocks): an env that counts
down turns, a builder that records what happened to it, and policies that count
how many calls are in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.errors import TransientError
from agentenvs.envs.types import (
    Env,
    EnvGroupBuilder,
    GroupDescription,
    StepResult,
    StopReason,
    TokensWithLogprobs,
    Trajectory,
    stop_metric,
)


class EnvHiccup(TransientError, RuntimeError):
    """A failure of the moment (a service restarting): the collector retries it."""


class CountdownEnv(Env):
    """Ends after ``turns`` actions; each observation extends the previous context.

    ``fail_at`` makes that turn's step raise: a ``RuntimeError`` (a bug: not
    retried), or with ``transient=True`` an :class:`EnvHiccup` (retried)."""

    def __init__(
        self,
        turns: int = 2,
        *,
        fail_at: int | None = None,
        transient: bool = False,
        prompt=(1, 2, 3),
    ) -> None:
        self.turns = turns
        self.fail_at = fail_at
        self.transient = transient
        self.context = list(prompt)
        self.taken = 0
        self.extras: list[dict] = []
        self.closed = False

    async def initial_observation(self):
        return list(self.context), ["</a>"]

    async def step(self, action, *, extra=None):
        self.taken += 1
        self.extras.append(dict(extra or {}))
        if self.fail_at is not None and self.taken == self.fail_at:
            error = EnvHiccup if self.transient else RuntimeError
            raise error(f"env broke at turn {self.taken}")
        self.context += list(action)
        if self.taken >= self.turns:
            return StepResult(1.0, True, [], [], metrics={stop_metric(StopReason.COMPLETED): 1})
        self.context += [7, 7]
        return StepResult(0.5, False, list(self.context), ["</a>"])


@dataclass
class RecordingBuilder(EnvGroupBuilder):
    """A group of CountdownEnvs that remembers every make_envs and cleanup call.

    ``env_factory(attempt, index)`` makes the env; attempts count from 1.
    """

    group_size: int = 2
    env_factory: Callable[[int, int], Env] = lambda attempt, index: CountdownEnv()
    task_id: str = "t"
    attempts: int = 0
    cleanups: int = 0
    made: list[list[Env]] = field(default_factory=list)
    active: int = 0
    tracker: InFlight | None = None
    env_name: str = ""
    config: dict[str, Any] = field(default_factory=dict)

    async def make_envs(self) -> Sequence[Env]:
        self.attempts += 1
        self.active += 1
        if self.tracker is not None:
            self.tracker.enter()
        envs = [self.env_factory(self.attempts, i) for i in range(self.group_size)]
        self.made.append(envs)
        return envs

    async def compute_group_rewards(self, trajectories: list[Trajectory], envs) -> list:
        return [(0.25, {"group_metric": 1}) for _ in trajectories]

    def logging_tags(self) -> list[str]:
        return ["recording"]

    def describe(self) -> GroupDescription:
        return GroupDescription(
            task_id=self.task_id,
            env_name=self.env_name,
            config=self.config,
            group_size=self.group_size,
        )

    async def cleanup(self) -> None:
        self.cleanups += 1
        if self.active:
            self.active -= 1
            if self.tracker is not None:
                self.tracker.leave()


@dataclass
class InFlight:
    now: int = 0
    peak: int = 0

    def enter(self) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        self.now -= 1


class EchoPolicy:
    """Answers ``[5, 6]`` with logprobs, optionally after a delay, counting calls in flight."""

    def __init__(self, delay: float = 0.0, tracker: InFlight | None = None) -> None:
        self.delay = delay
        self.tracker = tracker or InFlight()
        self.calls = 0

    async def __call__(self, observation, stop, *, max_tokens=None) -> TokensWithLogprobs:
        self.calls += 1
        self.tracker.enter()
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.tracker.leave()
        return TokensWithLogprobs([5, 6], [-0.5, -0.25], "stop")


class HangingPolicy:
    """Never answers until released: stands in for a sampler that stalls."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = 0

    async def __call__(self, observation, stop, *, max_tokens=None) -> TokensWithLogprobs:
        self.started += 1
        await self.release.wait()
        return TokensWithLogprobs([5], [0.0], "stop")
