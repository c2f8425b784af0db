"""ReTool tells a program that crashed (the model's doing: it reads the crash and the
episode goes on) from a sandbox worker that died under it (the infrastructure's:
:class:`SandboxFailure`, transient, so the collector retries the group and never
scores the model on it). The worker is the real local sandbox's, SIGKILLed while the
model's program runs (issue 46)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import pytest_asyncio
from support import machine_skips

from agentenvs.envs.errors import is_transient
from agentenvs.envs.registry import make
from agentenvs.envs.rendered_env import RenderedEnv
from agentenvs.envs.retool.env import SandboxFailure
from agentenvs.envs.retool.protocol import code_action
from agentenvs.envs.retool.sandboxes import close_shared_sandboxes, shared_sandbox
from agentenvs.sandbox.pool.worker import children_of, process_name

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    machine_skips.needs(*machine_skips.LOCAL_SANDBOX),
]


@pytest_asyncio.fixture(loop_scope="module", scope="module", autouse=True)
async def _close_sandboxes_after_module():
    yield
    await close_shared_sandboxes()


async def play(env: RenderedEnv, code: str, observation: list[int]) -> tuple[str, list[int]]:
    """One code action; the interpreter's answer as text and the next observation."""
    tokens = env.renderer.encode(code_action(code))
    stop = (
        "stop" if any(code_action(code).endswith(s) for s in env.stop_condition() if s) else "eos"
    )
    if stop == "eos":
        tokens += env.renderer.end_of_turn_tokens()
    result = await env.step(tokens, extra={"stop_reason": stop})
    assert not result.episode_done
    start = len(observation) + len(tokens)
    return env.renderer.decode(result.next_observation[start:]), result.next_observation


def descendants(pid: int) -> list[int]:
    return [d for child in children_of(pid) for d in (child, *descendants(child))]


@pytest.mark.parametrize("execution", ["stateless", "stateful"])
async def test_a_crashed_program_is_read_and_a_killed_worker_is_a_sandbox_failure(
    execution, tokenizer
):
    config = make("retool", execution=execution, sandbox_retries=0, timeout=30)
    env = config.make_env(0, tokenizer)
    observation, _ = await env.initial_observation()
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    answer, observation = await play(env, crash, observation)
    assert "killed by signal SIGSEGV" in answer  # the model's program: shown, not raised

    sandbox = await shared_sandbox(config.sandbox)
    running = asyncio.ensure_future(play(env, "import time; time.sleep(25)", observation))
    deadline = time.monotonic() + 30
    while not any(process_name(p) == "python3" for w in sandbox.host_pids()
                  for p in (w, *descendants(w))):  # fmt: skip
        assert time.monotonic() < deadline, "the program never started in a worker"
        await asyncio.sleep(0.05)
    for pid in sandbox.host_pids():
        if process_name(pid) == "bwrap":
            os.kill(pid, signal.SIGKILL)
    with pytest.raises(SandboxFailure) as raised:
        await asyncio.wait_for(running, timeout=60)
    assert is_transient(raised.value)
    await env.close()
