"""An example third-party agentenvs environment: spell a word backwards.

Everything a plugin needs: an EnvConfig subclass (the registry entry, validated
config, task count), a TextEnv (task logic on strings), and a scripted oracle.
"""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field

from agentenvs.envs.config import EnvConfig
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.types import SamplerStopReason

WORDS = ("planet", "rollout", "token", "reward", "gradient", "sandbox", "policy", "context")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class ReverseWordConfig(EnvConfig):
    """Spell a word backwards; one try per turn, with feedback."""

    env_name: ClassVar[str] = "reverse_word"
    gym_name: ClassVar[str] = "ReverseWord"

    words: list[str] = Field(default_factory=lambda: list(WORDS), min_length=1)

    def num_tasks(self, split: str = "train") -> int:
        return len(self.words)

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return ReverseWordEnv(self.words[task_index % len(self.words)])


class ReverseWordEnv(TextEnv):
    def __init__(self, word: str) -> None:
        self.word = word

    def initial_messages(self) -> list[Message]:
        return [
            {
                "role": "user",
                "content": f"Spell '{self.word}' backwards. Reply as <answer>...</answer>.",
            }
        ]

    def stop_sequences(self) -> list[str]:
        return ["</answer>"]

    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        match = _ANSWER.search(action_text)
        if match is None:
            return TextStep("Put your answer in <answer>...</answer>.", reward=-0.1)
        if match.group(1).strip() == self.word[::-1]:
            return TextStep(reward=1.0, done=True)
        return TextStep("Not quite; try again.")

    def scripted_action(self, variant: str = "oracle") -> str | None:
        if variant == "oracle":
            return f"<answer>{self.word[::-1]}</answer>"
        return None
