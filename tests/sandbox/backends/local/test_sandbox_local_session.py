"""Stateful sessions of the local backend: variables persist, bad cells do not take them.

A cell that times out, crashes, exhausts memory, calls ``os._exit``, fork-bombs or kills
its state holder is killed, and the variables of earlier cells survive.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
import pytest_asyncio
from support import machine_skips

from agentenvs.sandbox import ExecStatus, SandboxConfig
from agentenvs.sandbox.backends.local.backend import LocalSandbox

needs_sandbox = machine_skips.needs(*machine_skips.LOCAL_SANDBOX)
pytestmark = [needs_sandbox, pytest.mark.asyncio(loop_scope="module")]

CONFIG = SandboxConfig(timeout=2.0, pool_size=1, memory_limit_mb=256, max_output_bytes=4096)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sandbox():
    sb = LocalSandbox(CONFIG)
    await sb.start()
    yield sb
    await sb.close()


async def test_variables_functions_and_unpicklable_objects_persist(sandbox):
    async with sandbox.session() as s:
        first = await s.run(
            "import numpy as np\n"
            "x = 41\n"
            "gen = (i * i for i in range(10))\n"
            "square = lambda v: v * v\n"
            "log = open('log.txt', 'w')\n"
            "def bump():\n"
            "    global x\n"
            "    x += 1\n"
            "    return x"
        )
        assert first.ok, first
        assert (await s.run("bump()")).stdout == "42\n"
        assert (
            await s.run("next(gen), next(gen), square(x), int(np.sum([x, 1]))")
        ).stdout == "(0, 1, 1764, 43)\n"
        assert (
            await s.run("log.write('kept'); log.flush(); open('log.txt').read()")
        ).stdout == "'kept'\n"


async def test_an_exception_keeps_what_ran_before_it_like_jupyter(sandbox):
    async with sandbox.session() as s:
        result = await s.run("a = 1\nraise ValueError('stop')\nb = 2")
        assert result.status == ExecStatus.ERROR and "ValueError: stop" in result.stderr
        assert (await s.run("a, 'b' in globals()")).stdout == "(1, False)\n"


@pytest.mark.parametrize(
    ("name", "cell", "statuses"),
    [
        ("timeout", "while True:\n    x = -1", {ExecStatus.TIMEOUT}),
        ("sleep", "x = -1\nimport time; time.sleep(60)", {ExecStatus.TIMEOUT}),
        (
            "crash",
            "x = -1\nimport os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
            {ExecStatus.ERROR},
        ),
        ("os_exit_0", "x = -1\nimport os; os._exit(0)", {ExecStatus.OK}),
        ("os_exit_3", "x = -1\nimport os; os._exit(3)", {ExecStatus.ERROR}),
        (
            "memory",
            "x = -1\nblocks = [b'\\x01' * (64 << 20) for _ in range(64)]",
            {ExecStatus.MEMORY},
        ),
        (
            "fork_bomb",
            "x = -1\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
            {ExecStatus.TIMEOUT, ExecStatus.ERROR},
        ),
        ("output_flood", "x = -1\nwhile True:\n    print('spam')", {ExecStatus.OUTPUT_LIMIT}),
        (
            "kills_state_holder",
            "x = -1\nimport os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos._exit(1)",
            {ExecStatus.ERROR},
        ),
        (
            "kills_everything",
            "x = -1\nimport os, signal\nos.kill(-1, signal.SIGKILL)\nos._exit(1)",
            {ExecStatus.ERROR},
        ),
    ],
)
async def test_a_killed_cell_leaves_earlier_variables_intact(sandbox, name, cell, statuses):
    async with sandbox.session() as s:
        assert (await s.run("x = 42\nfiles = ['a']")).ok
        result = await s.run(cell)
        assert result.status in statuses, (name, result)
        if result.status != ExecStatus.OK:
            assert "earlier" in result.message, result.message
        after = await s.run("x, files")
        assert after.ok and after.stdout == "(42, ['a'])\n", (name, after)
        # and the session keeps working normally
        assert (await s.run("x += 1\nx")).stdout == "43\n"


async def test_cell_timeout_override(sandbox):
    async with sandbox.session() as s:
        result = await s.run("import time; time.sleep(1.5); 'slow but fine'", timeout=5)
        assert result.stdout == "'slow but fine'\n"
        assert (await s.run("import time; time.sleep(5)", timeout=0.3)).status == ExecStatus.TIMEOUT


async def test_files_persist_within_a_session_but_not_across(sandbox):
    async with sandbox.session() as s:
        await s.run("open('notes.txt', 'w').write('hello')")
        assert (await s.run("open('notes.txt').read()")).stdout == "'hello'\n"
    async with sandbox.session() as other:
        assert (await other.run("import os; os.listdir('.')")).stdout == "[]\n"
        assert (await other.run("'x' in globals()")).stdout == "False\n"


async def test_sessions_are_isolated_and_do_not_block_runs(sandbox):
    async with sandbox.session() as a, sandbox.session() as b:
        await a.run("secret = 'a'")
        assert (await b.run("'secret' in globals()")).stdout == "False\n"
        results = await asyncio.gather(
            a.run("import time; time.sleep(0.3); secret"), sandbox.run("print('stateless')")
        )
        assert [r.stdout for r in results] == ["'a'\n", "stateless\n"]


async def test_state_is_replayed_when_the_worker_dies(sandbox):
    async with sandbox.session() as s:
        await s.run("x = 40")
        await s.run("x += 2")
        worker = s._worker
        os.kill(worker.supervisor_pid, signal.SIGKILL)  # the whole worker, from outside
        for _ in range(500):  # until the host has seen it die (bubblewrap exits after)
            if not worker.alive:
                break
            await asyncio.sleep(0.02)
        result = await s.run("x")
        assert result.ok and result.stdout == "42\n", result
        assert "replaying 2 earlier cell(s)" in result.message
        assert s.replays == 1


async def test_closing_a_session_kills_its_worker(sandbox):
    session = sandbox.session()
    async with session:
        await session.run(
            "import os\nif os.fork() == 0:\n    os.setsid()\n    import time; time.sleep(60)"
        )
        pids = session._worker.host_pids()
        assert pids
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert (await session.run("1")).status == ExecStatus.SANDBOX_ERROR
