"""The smallest complete environment: guess a hidden number with higher/lower feedback.

It is the example for environment authors (a config, a TextEnv, an oracle) and the
environment the shared machinery is tested on.
"""

from __future__ import annotations

import random
import re
from typing import ClassVar

from pydantic import Field

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.forking import copy_task_state
from agentenvs.envs.rendered_env import Limits
from agentenvs.envs.renderers import RendererKind
from agentenvs.envs.rewards.identity import RewardIdentity, identity_of, reward_function
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.types import SamplerStopReason, StopReason

_GUESS = re.compile(r"<guess>\s*(-?\d+)\s*</guess>")


SPLITS = ("train", "test")
"""Each split draws its own hidden numbers; anything else is a typo, not a split."""


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; guess_number has {' and '.join(SPLITS)}")


class GuessNumberConfig(EnvConfig):
    """Guess a hidden integer; the environment answers higher or lower."""

    env_name: ClassVar[str] = "guess_number"
    gym_name: ClassVar[str] = "GuessNumber"
    default_renderer: ClassVar[RendererKind] = "chat"
    deterministic: ClassVar[bool] = True
    any_event_loop: ClassVar[bool] = True  # no sandbox, no subprocess

    low: int = 1
    high: int = 100
    tasks: int = Field(64, ge=1, description="How many hidden numbers the dataset holds.")
    limits: Limits = Field(default_factory=lambda: Limits(max_turns=10))

    def num_tasks(self, split: str = "train") -> int:
        check_split(split)
        return self.tasks

    def secret(self, task_index: int, split: str = "train") -> int:
        return random.Random(f"{self.seed}/{split}/{task_index}").randint(self.low, self.high)

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return GuessNumberEnv(self.secret(task_index, split), self.low, self.high)

    def reward_components(self) -> list[RewardIdentity]:
        """One reward component (the config does not change it)."""
        return [identity_of(guess_reward)]


INVALID_GUESS_REWARD = -0.1


@reward_function("guess", "1")
def guess_reward(guess: int | None, secret: int) -> float:
    """1 for the hidden number, a small penalty for a reply with no readable guess,
    0 for a wrong guess (the episode goes on)."""
    if guess is None:
        return INVALID_GUESS_REWARD
    return 1.0 if guess == secret else 0.0


class GuessNumberEnv(TextEnv):
    def __init__(self, secret: int, low: int, high: int) -> None:
        self.secret, self.low, self.high = secret, low, high
        self._lo, self._hi = low, high  # what the oracle still considers possible

    def initial_messages(self) -> list[Message]:
        return [
            {
                "role": "user",
                "content": f"I am thinking of a whole number from {self.low} to {self.high}. "
                "Reply with one guess as <guess>N</guess>; I will say higher or lower.",
            }
        ]

    def stop_sequences(self) -> list[str]:
        return ["</guess>"]

    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        match = _GUESS.search(action_text)
        if match is None:
            return TextStep(
                "Write your guess as <guess>N</guess>.",
                reward=guess_reward(None, self.secret),
                metrics={"invalid_actions": 1},
            )
        guess = int(match.group(1))
        if guess == self.secret:
            reward = guess_reward(guess, self.secret)
            return TextStep(reward=reward, done=True, stop_reason=StopReason.COMPLETED)
        hint = "higher" if guess < self.secret else "lower"
        if guess < self.secret:
            self._lo = max(self._lo, guess + 1)
        else:
            self._hi = min(self._hi, guess - 1)
        return TextStep(f"{guess} is wrong: go {hint}.")

    async def fork(self) -> GuessNumberEnv:
        """The whole state is three integers and the oracle's bounds: a copy is a fork."""
        return copy_task_state(self)

    def scripted_action(self, variant: str = "oracle") -> str | None:
        if variant == "oracle":
            return f"<guess>{(self._lo + self._hi) // 2}</guess>"
        if variant == "malformed":
            return "I think it is seven."
        return None
