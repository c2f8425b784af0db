"""``agentenvs serve`` picks its event loop from what the served environments declare:
uvloop (less CPU per step) for environments whose episodes run on any loop, asyncio's own
for any that may start the local sandbox (its workers start as another user, which
uvloop's process spawner refuses)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from support import machine_skips
from support.env_servers import ProcessServer

from agentenvs.envs.remote import RemoteDataset
from agentenvs.envs.serving.run import event_loop_for
from agentenvs.rollout.tokenizer import load_tokenizer

pytestmark = pytest.mark.services


def test_the_loop_follows_what_every_served_env_declares() -> None:
    assert event_loop_for(["guess_number"]) == "uvloop"
    assert event_loop_for(["guess_number", "search_r1"]) == "uvloop"
    assert event_loop_for(["retool"]) == "asyncio"
    assert event_loop_for(["guess_number", "retool"]) == "asyncio"  # one is enough
    assert event_loop_for(["harbor"]) == "asyncio"  # undeclared: the safe default


async def _play_oracle(url: str, env: str) -> tuple[float, dict]:
    """Open one group on ``url``, play the oracle's episode over ``/v1/ws``: its last
    reward and metrics."""
    dataset = RemoteDataset.open(url, env, group_size=1, n_groups=1,
                                 tokenizer=load_tokenizer("builtin"))  # fmt: skip
    builder = dataset.builders[0]
    (remote,) = await builder.make_envs()
    try:
        await remote.initial_observation()
        for _ in range(10):
            tokens, stop = await remote.scripted_action("oracle")
            result = await remote.step(tokens, extra={"stop_reason": stop})
            if result.episode_done:
                return result.reward, dict(result.metrics)
        raise AssertionError(f"the {env} oracle did not end its episode in 10 turns")
    finally:
        await builder.cleanup()


@machine_skips.needs(*machine_skips.LOCAL_SANDBOX)
def test_guess_number_is_served_on_uvloop_and_retool_runs_its_sandbox_on_asyncio() -> None:
    """Before the loop was chosen per env, every server ran asyncio's loop; a server that
    picked uvloop for ReTool could not start a sandbox worker (the step's tool call
    fails: ``WorkerStartError``, asserted in tests/sandbox/backends/local)."""
    for env, loop in (("guess_number", "uvloop"), ("retool", "asyncio")):
        server = ProcessServer([env]).start()
        try:
            info = httpx.get(f"{server.url}/v1/info").json()
            assert info["event_loop"] == loop, (env, info)
            reward, metrics = asyncio.run(_play_oracle(server.url, env))
            assert reward > 0, (env, reward, metrics)  # the oracle won
            if env == "retool":  # its code ran in the local sandbox, as the oracle wrote it
                assert metrics.get("exec/ok") == 1, metrics
        finally:
            server.stop()
