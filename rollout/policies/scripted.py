"""The scripted policy: each environment's own oracle (or another named variant).

It drives the demo and the tests without a model. The env decides the action
text; :meth:`RenderedEnv.scripted_action` tokenizes it and ends the turn the way a
sampler would (on a stop sequence, or with the end-of-turn token).

It has no logprobs, so it returns ``logprobs=None``: zeros would read as "every
token had probability 1" in ``view``/``summary``, and a trainer computing an
importance ratio against them would train on a made-up sampler. With ``None`` the
training samples say ``has_logprobs=False`` and the views show ``-``.
"""

from __future__ import annotations

import inspect
from typing import Any

from agentenvs.envs.types import Env, ScriptedActions, StopCondition, TokensWithLogprobs
from agentenvs.rollout.policies.base import PolicyError


class ScriptedPolicy:
    """A :data:`PolicyFactory`: one :class:`ScriptedEnvPolicy` per env."""

    per_env = True

    def __init__(self, variant: str = "oracle", weights_version: int | str | None = None) -> None:
        self.variant = variant
        self.weights_version = weights_version
        """Declared (a :class:`~.base.VersionedPolicy`) so a test or a demo can stand in
        for a trained policy's version; recorded with every group."""

    def __call__(self, env: Env) -> ScriptedEnvPolicy:
        return ScriptedEnvPolicy(env, self.variant)

    def provenance(self) -> dict[str, Any]:
        return {"policy": "scripted", "variant": self.variant}


class ScriptedEnvPolicy:
    def __init__(self, env: Env, variant: str) -> None:
        self.env = env
        self.variant = variant

    def sees_images(self) -> bool:
        """The env's own oracle answers: whatever images it shows are its own."""
        return True

    async def __call__(
        self, observation: list[int], stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        if not isinstance(self.env, ScriptedActions):
            raise PolicyError(f"environment {self.env.label()} has no scripted policy")
        answer = self.env.scripted_action(self.variant)
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is None:
            raise PolicyError(
                f"environment {self.env.label()} has no scripted variant {self.variant!r}"
            )
        tokens, stop_reason = answer
        tokens = list(tokens)
        if max_tokens is not None and len(tokens) > max_tokens:
            # Behave like a sampler that hit its cap.
            tokens, stop_reason = tokens[:max_tokens], "length"
        return TokensWithLogprobs(tokens, None, stop_reason)
