"""Hand-written actions played through a token-level env, for the presets' knob tests.

Each text is encoded with the env's renderer; ``stop`` is what the sampler would report:
``eos`` adds the end-of-turn token, ``stop`` and ``length`` send the text as it is.
"""

from __future__ import annotations

import json

from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.types import StepResult


def encode(env: RenderedEnv, text: str, stop: str) -> list[int]:
    tokens = env.renderer.encode(text)
    return tokens + env.renderer.end_of_turn_tokens() if stop == "eos" else tokens


async def play_turns(env: RenderedEnv, turns: list[tuple[str, str]]) -> list[StepResult]:
    """Start the episode and play (text, sampler stop) pairs until it ends."""
    await env.initial_observation()
    results = []
    for text, stop in turns:
        results.append(await env.step(encode(env, text, stop), extra={"stop_reason": stop}))
        if results[-1].episode_done:
            break
    return results


async def play_texts(env: RenderedEnv, texts: list[str], stop: str = "eos") -> list[StepResult]:
    """:func:`play_turns` with one sampler stop for every text."""
    return await play_turns(env, [(text, stop) for text in texts])


def tool_call(code: str | None, name: str = "code_interpreter") -> str:
    """A Hermes tool call; ``code=None`` leaves the argument out."""
    arguments = {"code": code} if code is not None else {}
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
