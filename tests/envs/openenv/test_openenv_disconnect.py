"""OpenEnv sessions and servers that go away mid-episode (issue 46).

* a client that leaves during a step: its session is cancelled, so the ReTool program
  it started in the sandbox is stopped instead of running to its end for nobody;
* an OpenEnv server killed (SIGKILL) during an episode: our adapter raises
  :class:`OpenEnvUnavailable`, transient, so the collector retries the group rather
  than scoring a step that never ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import websockets
from support import machine_skips
from support.env_servers import free_port

from agentenvs.envs.errors import is_transient
from agentenvs.envs.openenv.adapter import OpenEnvUnavailable
from agentenvs.envs.openenv.server import serve_openenv
from agentenvs.envs.registry import make
from agentenvs.envs.retool.protocol import code_action
from agentenvs.sandbox.pool.worker import children_of, process_name

pytestmark = pytest.mark.services


def children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (the server thread starts the sandbox's)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def programs_running() -> int:
    """Sandboxed programs among this process's descendants: what a worker's supervisor
    (``sandbox-super``, under ``bwrap``) runs."""
    return sum(
        process_name(program) == "python3"
        for worker in children(os.getpid())
        for supervisor in children_of(worker)
        if process_name(supervisor) == "sandbox-super"
        for program in children_of(supervisor)
    )


@machine_skips.needs(*machine_skips.LOCAL_SANDBOX)
async def test_a_session_whose_client_left_mid_step_is_cancelled():
    with serve_openenv("retool", {"timeout": 60}) as running:
        url = running.url.replace("http://", "ws://") + "/ws"
        before = programs_running()
        async with websockets.connect(url) as socket:
            await socket.send(json.dumps({"type": "reset", "data": {"task_index": 0}}))
            assert json.loads(await socket.recv())["type"] == "observation"
            action = {"text": code_action("import time; time.sleep(45)"), "stop_reason": "stop"}
            await socket.send(json.dumps({"type": "step", "data": action}))
            deadline = time.monotonic() + 30
            while programs_running() <= before:  # the program runs in the sandbox
                assert time.monotonic() < deadline, "the program never started"
                await asyncio.sleep(0.05)
        # The client is gone. Before: the program slept its 45 s out.
        deadline = time.monotonic() + 15
        while programs_running() > before:
            assert time.monotonic() < deadline, "the program outlived the session"
            await asyncio.sleep(0.1)


async def test_an_openenv_server_killed_mid_episode_is_unavailable(tokenizer):
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "agentenvs.envs.openenv.server", "guess_number", "--port",
         str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        config = make("openenv", url=f"http://127.0.0.1:{port}",
                      script=["<guess>50</guess>"] * 3)  # fmt: skip
        env = config.make_env(0, tokenizer)
        await env.initial_observation()
        tokens, stop = env.scripted_action()  # type: ignore[misc]
        assert not (await env.step(tokens, extra={"stop_reason": stop})).episode_done
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=20)
        tokens, stop = env.scripted_action()  # type: ignore[misc]
        with pytest.raises(OpenEnvUnavailable) as raised:
            await asyncio.wait_for(env.step(tokens, extra={"stop_reason": stop}), 30)
        assert is_transient(raised.value)
        await env.close()
    finally:
        server.kill()
        server.wait(timeout=20)
