"""ReTool's stateful fork on the local sandbox is a fork of the interpreter, not a replay.

``test_fork_retool.py`` checks that branches read their own variables; here: that the
copy is the parent's very interpreter (a value drawn from unseeded randomness is the
same in both, which no replay could promise), that it lives on the episode's worker,
and that ``session_fork='replay'`` still rebuilds the copy on a worker of its own.
"""

from __future__ import annotations

import pytest
import pytest_asyncio
from support import machine_skips
from support.retool_actions import act as take_action

from agentenvs.envs.registry import make
from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.retool.protocol import code_action, interpreter_block
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    machine_skips.needs(*machine_skips.LOCAL_SANDBOX),
]


@pytest_asyncio.fixture(loop_scope="module", scope="module", autouse=True)
async def _close_sandboxes_after_module():
    yield
    await close_shared_sandboxes()


async def act(env: RenderedEnv, text: str) -> str:
    """One code action (as ``test_fork_retool.py`` takes it); the decoded observation."""
    step = await take_action(env, text)
    return env.renderer.decode(step.next_observation)


async def stateful_episode(tokenizer, **sandbox) -> RenderedEnv:
    options = {"sandbox": sandbox} if sandbox else {}
    env = make("retool", execution="stateful", **options).make_env(0, tokenizer)
    await env.initial_observation()
    await act(env, code_action("import random\ndraw = random.random()\nx = 0"))
    return env


async def test_the_fork_is_the_same_interpreter_on_the_same_worker(tokenizer):
    env = await stateful_episode(tokenizer)
    branch = await env.fork()
    try:
        session, copy = env.task._session, branch.task._session
        assert copy.forked_by == "process", copy.fork_refusal
        assert copy._worker is session._worker
        drawn = await act(env, code_action("print(draw)"))
        assert drawn == await act(branch, code_action("print(draw)"))
        await act(branch, code_action("x = 2"))
        assert interpreter_block("0") in await act(env, code_action("print(x)"))
        assert interpreter_block("2") in await act(branch, code_action("print(x)"))
    finally:
        await branch.close()
        await env.close()


async def test_replay_is_still_there_when_configured(tokenizer):
    env = await stateful_episode(tokenizer, session_fork="replay")
    branch = await env.fork()
    try:
        copy = branch.task._session
        assert copy.forked_by == "replay" and "session_fork" in copy.fork_refusal
        assert copy._worker is not env.task._session._worker
        assert interpreter_block("0") in await act(branch, code_action("print(x)"))
    finally:
        await branch.close()
        await env.close()
