"""The charts reward: exact integer match."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentenvs.envs.rewards.identity import RewardIdentity, identity_of, reward_function


@reward_function("correct", "1")
def answer_reward(answer: int | None, expected: int) -> float:
    """1 for the exact integer, 0 for any other answer or none."""
    return 1.0 if answer is not None and answer == expected else 0.0


def reward_components(config: Mapping[str, Any]) -> list[RewardIdentity]:
    return [identity_of(answer_reward)]
