"""ReTool as a text-in/text-out gymnasium env, through the real local sandbox."""

from __future__ import annotations

from support import machine_skips

from agentenvs.envs.registry import make
from agentenvs.envs.retool.protocol import code_action, interpreter_block
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes


@machine_skips.needs(*machine_skips.LOCAL_SANDBOX)
def test_gymnasium_text_loop():
    import gymnasium

    from agentenvs.envs.registry import register_gymnasium

    register_gymnasium()
    env = gymnasium.make("agentenvs/ReTool-v0", disable_env_checker=True)
    try:
        config = make("retool")
        index = next(i for i, p in enumerate(config.problems()) if p.id == "mod-inverse-17-3120")
        prompt, info = env.reset(options={"task_index": index})
        assert "17d" in prompt and info["stop_sequences"] == ["</code>"]
        observation, reward, done, _, _ = env.step(code_action("print(pow(17, -1, 3120))"))
        assert observation == interpreter_block("2753") and not done
        observation, reward, done, _, info = env.step("<answer>\\boxed{2753}</answer>")
        assert (reward, done, info["stop_reason"]) == (1.0, True, "completed")
    finally:
        loop = env.unwrapped._loop
        loop.run_until_complete(close_shared_sandboxes())
        env.close()
