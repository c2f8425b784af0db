"""ALFWorld's reward, as the records name it.

The reward is computed inline by the episode's step (``ALFWorldTextEnv._step``): the
success reward when the game is won, a penalty for an unreadable or (optionally) an
inadmissible action, and ``_answer`` carries the penalty of a move that did not win.
This module names that code as the env's reward components, so a change to it shows
as a changed code hash in ``agentenvs check`` (docs/rewards.md).
"""

from __future__ import annotations

from agentenvs.envs.rewards.identity import RewardIdentity, identify

REWARD_VERSION = "1"
"""Bump when ALFWorld's reward rules change on purpose."""


def reward_components() -> list[RewardIdentity]:
    """The step that scores each action, with the helper that carries its reward."""
    from agentenvs.envs.alfworld.env import ALFWorldTextEnv

    return [
        identify(
            ALFWorldTextEnv._step, "step_reward", REWARD_VERSION, depends=(ALFWorldTextEnv._answer,)
        )
    ]
