"""The charts reward: exact integer match."""

from __future__ import annotations

from agentenvs.envs.rewards.identity import reward_function


@reward_function("correct", "1")
def answer_reward(answer: int | None, expected: int) -> float:
    """1 for the exact integer, 0 for any other answer or none."""
    return 1.0 if answer is not None and answer == expected else 0.0
