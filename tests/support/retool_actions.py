"""Playing one ReTool action through a rendered env (shared by the fork tests)."""

from __future__ import annotations

from agentenvs.envs.rendered_env import RenderedEnv


async def act(env: RenderedEnv, text: str):
    """One action, ended as a sampler would end it (stop sequence or end of turn)."""
    tokens = env.renderer.encode(text)
    if any(text.endswith(stop) for stop in env.stop_condition() if stop):
        return await env.step(tokens, extra={"stop_reason": "stop"})
    tokens += env.renderer.end_of_turn_tokens()
    return await env.step(tokens, extra={"stop_reason": "eos"})
