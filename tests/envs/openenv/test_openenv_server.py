"""Our environments on OpenEnv's wire, driven by OpenEnv's own client (``GenericEnvClient``
from the installed ``openenv-core``), against a real uvicorn server on 127.0.0.1.

Each test compares what the client sees with the same task played in process, so a
server that renders, scores, ends or routes episodes wrongly fails here.
"""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from openenv.core.generic_client import GenericEnvClient
from support.guess_number_play import Step, assert_plays_as_in_process, bisect

from agentenvs.envs.openenv.server import openenv_app, release_app, serve_app, serve_openenv
from agentenvs.envs.registry import make

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def guess_server():
    with serve_openenv("guess_number", {"limits": {"max_turns": 8}}) as running:
        yield running


async def play(client: GenericEnvClient, task_index: int) -> list[Step]:
    """One episode by bisection over OpenEnv's session; the steps as (text, reward, done)."""
    first = await client.reset(task_index=task_index)
    assert first.observation["stop"] == ["</guess>"]

    async def send(text: str) -> Step:
        result = await client.step({"text": text})
        return result.observation["text"], result.reward, result.done

    return await bisect(send)


async def test_openenv_client_plays_guess_number_as_in_process(guess_server):
    async with GenericEnvClient(base_url=guess_server.url) as client:
        for task_index in (0, 7):
            remote = await play(client, task_index)  # one session, two episodes
            await assert_plays_as_in_process(task_index, remote)
            state = await client.state()
            assert state["task_id"] == f"train/{task_index}" and state["done"] is True


async def test_the_app_works_mounted_under_a_prefix():
    parent = FastAPI()
    app = openenv_app("guess_number", {"high": 10})
    parent.mount("/openenv/guess_number", app)
    try:
        with serve_app(parent) as running:
            base = f"{running.url}/openenv/guess_number"
            async with GenericEnvClient(base_url=base) as client:
                first = await client.reset(task_index=2)
                assert "from 1 to 10" in first.observation["text"]
                assert first.observation["task_id"] == "train/2"
            health = httpx.get(f"{base}/health", timeout=10).json()
            assert health["status"] == "healthy"
            schema = httpx.get(f"{base}/schema", timeout=10).json()
            assert schema["action"]["required"] == ["text"]
    finally:
        release_app(app)


async def test_max_turns_ends_the_episode_with_its_reason(guess_server):
    async with GenericEnvClient(base_url=guess_server.url) as client:
        await client.reset(task_index=3)
        results = [await client.step({"text": "<guess>0</guess>"}) for _ in range(8)]
    assert [r.done for r in results] == [False] * 7 + [True]
    assert results[-1].observation["stop_reason"] == "max_turns"
    assert results[-1].observation["turn"] == 8


async def test_a_cut_off_action_ends_the_episode_unjudged(guess_server):
    secret = make("guess_number").secret(4)
    async with GenericEnvClient(base_url=guess_server.url) as client:
        await client.reset(task_index=4)
        # The right answer, but the sampler hit its cap: ended as max_tokens, no reward.
        result = await client.step({"text": f"<guess>{secret}</guess>", "stop_reason": "length"})
    assert result.done and result.reward == 0.0
    assert result.observation["stop_reason"] == "max_tokens"


async def test_bad_requests_get_errors_that_say_why(guess_server):
    async with GenericEnvClient(base_url=guess_server.url) as client:
        with pytest.raises(RuntimeError, match=r"unknown field\(s\) \['task'\]"):
            await client.reset(task=1)
        with pytest.raises(RuntimeError, match="out of range"):
            await client.reset(task_index=10_000)
        with pytest.raises(RuntimeError, match="reset first"):
            await client.step({"text": "<guess>5</guess>"})
        await client.reset(task_index=0)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            await client.step({"txt": "<guess>5</guess>"})
        secret = make("guess_number").secret(0)
        assert (await client.step({"text": f"<guess>{secret}</guess>"})).done
        with pytest.raises(RuntimeError, match="is over; reset"):
            await client.step({"text": "<guess>5</guess>"})
    # HTTP /reset is stateless (a fresh env answers); HTTP /step has no episode.
    reset = httpx.post(f"{guess_server.url}/reset", json={"task_index": 1}, timeout=10)
    assert reset.json()["observation"]["task_id"] == "train/1"
    step = httpx.post(f"{guess_server.url}/step", json={"action": {"text": "x"}}, timeout=10)
    assert step.status_code == 409 and "WebSocket" in step.json()["detail"]


def test_the_standalone_server_refuses_a_host_beyond_loopback(capsys):
    """OpenEnv's wire has no credential: exposing it is `agentenvs serve --token`'s job."""
    from agentenvs.envs.openenv.server import main

    with pytest.raises(SystemExit) as exited:
        main(["guess_number", "--host", "0.0.0.0"])
    assert exited.value.code == 2
    assert "--token" in capsys.readouterr().err
