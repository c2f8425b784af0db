"""ReTool forks on the real local sandbox: each branch's interpreter state is its own."""

from __future__ import annotations

import pytest
import pytest_asyncio
from support import machine_skips
from support.retool_actions import act
from support.sandbox_server_helpers import module_server

from agentenvs.envs.registry import make
from agentenvs.envs.retool.protocol import code_action, interpreter_block
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    machine_skips.needs(*machine_skips.LOCAL_SANDBOX),
]


server = module_server()
"""A SandboxFusion-compatible server (``agentenvs sandbox serve``) over the local sandbox."""


@pytest_asyncio.fixture(loop_scope="module", scope="module", autouse=True)
async def _close_sandboxes_after_module():
    yield
    await close_shared_sandboxes()


async def test_stateful_branches_each_read_their_own_variable(tokenizer):
    env = make("retool", execution="stateful").make_env(0, tokenizer)
    await env.initial_observation()
    await act(env, code_action("base = 10"))
    branch = await env.fork()
    try:
        assert branch.context == env.context and branch.history == env.history
        assert branch.task._session is not env.task._session
        await act(env, code_action("x = 1"))
        await act(branch, code_action("x = 2"))
        read_a = await act(env, code_action("print(base + x)"))
        read_b = await act(branch, code_action("print(base + x)"))
        text_a = env.renderer.decode(read_a.next_observation)
        text_b = branch.renderer.decode(read_b.next_observation)
        assert interpreter_block("11") in text_a and interpreter_block("12") not in text_a
        assert interpreter_block("12") in text_b and interpreter_block("11") not in text_b
        # The episode records stay apart too.
        assert env.task.tool_calls == branch.task.tool_calls == 3
        assert env.task._texts[-2] == code_action("x = 1")
        assert branch.task._texts[-2] == code_action("x = 2")
    finally:
        await env.close()
        await branch.close()


async def test_sandboxfusion_fork_copies_the_kept_cells_and_branches_apart(server, tokenizer):
    env = make(
        "retool", execution="stateful", sandbox={"backend": "sandboxfusion", "url": server.url}
    ).make_env(0, tokenizer)
    await env.initial_observation()
    await act(env, code_action("base = 10"))
    branch = await env.fork()
    try:
        assert branch.task._session.cells == env.task._session.cells
        await act(env, code_action("x = 1"))
        await act(branch, code_action("x = 2"))
        read_a = await act(env, code_action("print(base + x)"))
        read_b = await act(branch, code_action("print(base + x)"))
        assert interpreter_block("11") in env.renderer.decode(read_a.next_observation)
        assert interpreter_block("12") in branch.renderer.decode(read_b.next_observation)
        assert len(env.task._session.cells) == len(branch.task._session.cells) == 3
    finally:
        await env.close()
        await branch.close()


async def test_a_fork_of_a_fork_keeps_the_whole_history(tokenizer):
    env = make("retool", execution="stateful").make_env(0, tokenizer)
    await env.initial_observation()
    await act(env, code_action("items = [1]"))
    first = await env.fork()
    await act(first, code_action("items.append(2)"))
    second = await first.fork()
    await act(second, code_action("items.append(3)"))
    try:
        seen = []
        for episode in (env, first, second):
            step = await act(episode, code_action("print(items)"))
            seen.append(episode.renderer.decode(step.next_observation))
        assert interpreter_block("[1]") in seen[0]
        assert interpreter_block("[1, 2]") in seen[1]
        assert interpreter_block("[1, 2, 3]") in seen[2]
    finally:
        for episode in (env, first, second):
            await episode.close()


async def test_stateless_fork_copies_the_episode_and_nothing_else(tokenizer):
    env = make("retool").make_env(0, tokenizer)
    await env.initial_observation()
    await act(env, code_action("print(6 * 7)"))
    branch = await env.fork()
    assert branch.task._session is None and branch.task.last_output == env.task.last_output
    final = await act(branch, "The answer is \\boxed{42}.")
    assert final.episode_done and not env.done
    assert branch.task.stop_reason == "completed" and env.task.stop_reason is None
    await env.close()


async def test_a_finished_episode_does_not_fork(tokenizer):
    from agentenvs.envs.types import ForkUnsupported

    env = make("retool").make_env(0, tokenizer)
    await env.initial_observation()
    await act(env, "The answer is \\boxed{1}.")
    with pytest.raises(ForkUnsupported):
        await env.fork()
