"""The client's WebSocket (``envs/remote/socket.py``) against a real env server behind a
TCP proxy the test cuts: the groups of one event loop share one socket, the calls of
one moment travel as one frame, and a step whose answer the cut lost is sent again on a
new socket and played once."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from support.env_servers import thread_server
from support.tcp_proxy import TcpProxy

from agentenvs.envs.guess_number import GuessNumberConfig, GuessNumberEnv
from agentenvs.envs.remote import RemoteDataset
from agentenvs.envs.serving.app import ServedEnvs, create_app
from agentenvs.envs.text import TextEnv, TextStep
from agentenvs.rollout.tokenizer import load_tokenizer

pytestmark = pytest.mark.services
STEP_SECONDS = 0.4
"""Long enough for the test to cut the connection while steps are being played."""


class SlowGuessEnv(GuessNumberEnv):
    played = 0

    async def step(self, action_text: str, *, stop_reason) -> TextStep:  # type: ignore[override]
        await asyncio.sleep(STEP_SECONDS)
        SlowGuessEnv.played += 1
        return await super().step(action_text, stop_reason=stop_reason)


class SlowConfig(GuessNumberConfig):
    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return SlowGuessEnv(self.secret(task_index, split), self.low, self.high)


async def test_a_cut_socket_is_reopened_and_the_lost_steps_are_played_once():
    builtin = load_tokenizer("builtin")
    app = create_app(ServedEnvs(["slow"], builtin, classes={"slow": SlowConfig}))
    with thread_server(app) as url:
        proxy = TcpProxy("127.0.0.1", int(url.rsplit(":", 1)[1]))
        try:
            dataset = RemoteDataset.open(proxy.url, "slow", group_size=2, n_groups=2,
                                         tokenizer=builtin, call_retries=4, timeout=30)  # fmt: skip
            groups = [await builder.make_envs() for builder in dataset.builders]
            envs = [env for group in groups for env in group]
            await asyncio.gather(*(env.initial_observation() for env in envs))
            sockets = {id(env.connection._socket) for env in envs}
            assert len(sockets) == 1  # two groups, one socket
            action = builtin.encode("<guess>50</guess>", add_special_tokens=False)
            before = proxy.connections
            stepping = [asyncio.ensure_future(env.step(action)) for env in envs]
            await asyncio.sleep(STEP_SECONDS / 2)
            proxy.cut()  # the steps are being played: their answers will find no socket
            await asyncio.sleep(STEP_SECONDS)
            proxy.restore()
            results = await asyncio.gather(*stepping)
            assert all("50" in builtin.decode(r.next_observation[-40:]) for r in results)
            assert proxy.connections >= before + 1  # the socket was opened again
            assert SlowGuessEnv.played == 4  # each step once, though sent twice
            for env in envs:
                state = httpx.get(f"{url}/v1/envs/{env.env_id}").json()
                assert state["turns"] == 1
                assert env.turns == 1
            for builder in dataset.builders:
                await builder.cleanup()
            assert envs[0].connection._socket is None
        finally:
            proxy.close()


async def test_a_step_whose_answer_is_late_fails_after_the_call_timeout():
    """The call's own timer ends the wait (``timeout``, here shorter than the step), the
    socket stays usable, and the step it gave up on was still played once on the server."""
    builtin = load_tokenizer("builtin")
    app = create_app(ServedEnvs(["slow"], builtin, classes={"slow": SlowConfig}))
    with thread_server(app) as url:
        dataset = RemoteDataset.open(url, "slow", group_size=1, n_groups=1, tokenizer=builtin,
                                     timeout=30)  # fmt: skip
        (env,) = await dataset.builders[0].make_envs()
        try:
            await env.initial_observation()  # the socket is open: only the step is timed
            env.connection.timeout = STEP_SECONDS / 4
            action = builtin.encode("<guess>50</guess>", add_special_tokens=False)
            with pytest.raises(TimeoutError):  # without the timer: the late answer, no error
                await env.step(action)
            await asyncio.sleep(STEP_SECONDS)  # the server finishes the step and keeps it
            assert httpx.get(f"{url}/v1/envs/{env.env_id}").json()["turns"] == 1
            assert not env.connection._socket._waiting  # nothing left waiting
        finally:
            await dataset.builders[0].cleanup()
