"""Any text environment with an LLM judge on its final step.

:class:`JudgedTextEnv` wraps a :class:`~agentenvs.envs.text.TextEnv`: every step is the
wrapped env's, and when a step ends the episode the judge reads the episode (what the
env's ``read`` function picks: question, the model's answer, the reference) and its
verdict joins the step: ``add`` puts the judged reward on top of the env's,
``replace`` puts it in place of the final step's reward. The verdict's fields go
into the step's logs (``judge/status``, ``judge/verdict``, ``judge/score``,
``judge/model``, ``judge/prompt_sha256``, ``judge/weights``) and its reward and
failure into the metrics, so each record says how its reward was computed.

An episode ended by a shared limit (turns, tokens, context) is not judged: the
limit hook is synchronous, and the env's own ending reward stands; its final step
logs ``judge/status: not_judged`` so nobody mistakes it for a judged one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from agentenvs.envs.rewards.judge import JudgeInput, raise_for_verdict, shared_judge
from agentenvs.envs.rewards.judge_settings import JudgeSettings
from agentenvs.envs.rewards.verdict import LOG_PREFIX
from agentenvs.envs.text import Message, TextEnv, TextStep
from agentenvs.envs.types import SamplerStopReason

Reader = Callable[[Any], JudgeInput]
"""Reads the judge's input off the wrapped env once its episode is over."""

NOT_JUDGED = "not_judged"


class JudgedTextEnv(TextEnv):
    """``inner`` with its final step judged. Attributes it does not define are the
    wrapped env's (``correct``, ``tool_calls``, ...), so code reading an episode's
    state reads on as before; :func:`unwrap` gives the wrapped env itself."""

    def __init__(self, inner: TextEnv, settings: JudgeSettings, read: Reader) -> None:
        self.inner = inner
        self.settings = settings
        self.read = read
        self.verdict: Any = None
        """The episode's verdict once judged (a :class:`~.verdict.Verdict`)."""

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not yet set (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def start(self) -> None:
        await self.inner.start()  # declared on TextEnv: its default would shadow __getattr__

    def initial_messages(self) -> list[Message]:
        return self.inner.initial_messages()

    def stop_sequences(self) -> list[str]:
        return self.inner.stop_sequences()

    def tools(self) -> list[dict[str, Any]] | None:
        return self.inner.tools()

    def scripted_action(self, variant: str = "oracle") -> str | None:
        return self.inner.scripted_action(variant)

    async def step(self, action_text: str, *, stop_reason: SamplerStopReason) -> TextStep:
        result = await self.inner.step(action_text, stop_reason=stop_reason)
        if not result.done:
            return result
        return await self.judged(result)

    async def judged(self, result: TextStep) -> TextStep:
        """``result`` (a final step) with the judge's verdict joined in."""
        verdict = await shared_judge(self.settings).judge(self.read(self.inner))
        self.verdict = verdict
        raise_for_verdict(verdict, self.settings.base_url)  # never scored by a dead judge
        if self.settings.combine == "replace":
            reward = verdict.reward
        else:
            reward = result.reward + verdict.reward
        return dataclasses.replace(
            result,
            reward=reward,
            metrics={**result.metrics, **verdict.metrics()},
            logs={**result.logs, **verdict.logs()},
        )

    def on_limit(self, reason: str) -> TextStep | None:
        ending = self.inner.on_limit(reason)
        marker = {f"{LOG_PREFIX}status": NOT_JUDGED}
        if ending is None:
            return TextStep(logs=marker)
        return dataclasses.replace(ending, logs={**ending.logs, **marker})

    async def fork(self) -> JudgedTextEnv:
        return JudgedTextEnv(await self.inner.fork(), self.settings, self.read)

    async def close(self) -> None:
        await self.inner.close()


def judged(inner: TextEnv, settings: JudgeSettings | None, read: Reader) -> TextEnv:
    """``inner`` judged by ``settings``, or ``inner`` itself when there is no judge."""
    return inner if settings is None else JudgedTextEnv(inner, settings, read)


def unwrap(env: Any) -> Any:
    """The environment a :class:`JudgedTextEnv` wraps (anything else as it is)."""
    return env.inner if isinstance(env, JudgedTextEnv) else env
