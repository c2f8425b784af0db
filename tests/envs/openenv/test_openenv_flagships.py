"""Search-R1, ReTool and ALFWorld served on OpenEnv's wire and played by OpenEnv's own
client, in lockstep with the same task in process: every observation, reward and
ending must match. The oracle's actions come from the in-process copy (the server's
scripted policy does not cross the wire), so the remote episode is solved by text alone.

The services are the real ones: Search-R1's BM25 retriever over the shipped corpus,
ReTool's local sandbox, ALFWorld's engine in worker processes.
"""

from __future__ import annotations

import pytest
from openenv.core.generic_client import GenericEnvClient

from agentenvs.envs.openenv.server import serve_openenv
from agentenvs.envs.registry import make
from agentenvs.envs.text import Message

pytestmark = pytest.mark.services

FLAGSHIPS = {
    "search_r1": {},
    "retool": {},
    "alfworld": {"data": "shipped"},
}


def as_messages(observation: str | Message | list[Message] | None) -> list[Message]:
    if observation is None:
        return []
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    return [observation] if isinstance(observation, dict) else list(observation)


@pytest.mark.parametrize("env_name", sorted(FLAGSHIPS))
async def test_openenv_client_solves_the_task_as_in_process(env_name):
    config = FLAGSHIPS[env_name]
    local = make(env_name, **config)
    task = local.make_text_env(0)
    start = getattr(task, "start", None)
    if callable(start):
        await start()
    try:
        with serve_openenv(env_name, config) as running:
            async with GenericEnvClient(base_url=running.url, message_timeout_s=120) as client:
                first = await client.reset(task_index=0)
                assert first.observation["messages"] == task.initial_messages()
                assert first.observation["tools"] == task.tools()
                assert first.observation["stop"] == task.stop_sequences()
                assert first.observation["renderer"] == local.renderer_kind
                for _ in range(local.limits.max_turns):
                    prepare = getattr(task, "prepare_scripted", None)
                    if callable(prepare):
                        await prepare("oracle")
                    text = task.scripted_action("oracle")
                    assert text is not None
                    mine = await task.step(text, stop_reason="stop")
                    theirs = await client.step({"text": text})
                    assert theirs.reward == pytest.approx(mine.reward)
                    if mine.done:
                        break
                    assert not theirs.done
                    assert theirs.observation["messages"] == as_messages(mine.observation)
                assert mine.done and theirs.done
                assert theirs.observation["stop_reason"] == (mine.stop_reason or "completed")
                assert theirs.reward > 0  # the oracle solved it over the wire
    finally:
        await task.close()
        shutdown = getattr(local, "shutdown", None)
        if callable(shutdown):
            shutdown()
