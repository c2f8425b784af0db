"""The escape suite: adversarial programs against every sandbox backend on this machine.

For every program: its expected outcome, then the host is unharmed (a canary file in the
host's /tmp is untouched, a host TCP listener saw no connection, no secret from the
host's environment leaked), nothing the program started is still alive (seen from the
host), and the next execution in the same pool works.

Backends come from ``tests/support/sandbox_escape/backends.py``; one that cannot run here is
skipped with the reason.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from support.sandbox_escape.backends import BackendSpec, sandbox_backends, started
from support.sandbox_escape.fail_closed import DEVICE_PROGRAMS, FAIL_CLOSED_FAMILIES
from support.sandbox_escape.programs import (
    CONCURRENT_READER,
    CONCURRENT_WRITER,
    FAMILY_PROGRAMS,
    PROGRAMS,
    SESSION_PROGRAMS,
    Context,
    FamilyProgram,
    Program,
    SessionProgram,
)

from agentenvs.sandbox import Sandbox, SandboxConfig

pytestmark = pytest.mark.asyncio(loop_scope="module")

ESCAPE_CONFIG = SandboxConfig(
    timeout=2.0,
    memory_limit_mb=256,
    max_output_bytes=16 * 1024,
    max_file_bytes=8 * 1024 * 1024,
    workdir_size_mb=32,
    max_processes=32,
    pool_size=2,
)


class Listener:
    """A TCP server on the host's loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Context]:
    canary_secret = "canary-" + secrets.token_hex(8)
    canary = Path("/tmp") / f"agentenvs-canary-{secrets.token_hex(6)}"
    canary.write_text(canary_secret)
    env_secret = "envsecret-" + secrets.token_hex(8)
    os.environ["AGENTENVS_ESCAPE_SECRET"] = env_secret
    listener = Listener()
    ctx = Context(
        canary_path=str(canary),
        canary_secret=canary_secret,
        env_secret=env_secret,
        port=listener.port,
        max_output_bytes=ESCAPE_CONFIG.max_output_bytes,
        connections_accepted=lambda: listener.accepted,
    )
    yield ctx
    listener.close()
    os.environ.pop("AGENTENVS_ESCAPE_SECRET", None)
    canary.unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def processes_before(context: Context) -> None:
    context.processes_before.clear()
    context.processes_before.update(_descendants(os.getpid()))


@pytest_asyncio.fixture(
    scope="module", loop_scope="module", params=sandbox_backends, ids=lambda spec: spec.name
)
async def backend(
    request: pytest.FixtureRequest, context: Context
) -> AsyncIterator[tuple[BackendSpec, Sandbox]]:
    spec: BackendSpec = request.param
    async with started(spec, ESCAPE_CONFIG) as sandbox:
        yield spec, sandbox


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


async def _eventually_empty(probe, patience: float = 5.0) -> set[int]:
    """Poll ``probe`` until it returns an empty set or ``patience`` seconds pass."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while (found := probe()) and loop.time() < deadline:
        await asyncio.sleep(0.02)
    return found


def _describe(pids: set[int]) -> dict[int, str]:
    described = {}
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            fields = ("Name", "State", "PPid", "NSpid")
            summary = " ".join(line for line in status if line.startswith(fields))
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            described[pid] = f"{summary} | {cmdline.decode()[:120]}"
        except OSError:
            described[pid] = "?"
    return described


def _helper_processes() -> set[int]:
    """Long-lived services other suites' fixtures started in this pytest process (podman)."""
    helpers = set()
    for pid in _descendants(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith((b"podman", b"/usr/bin/podman", b"conmon", b"/usr/bin/conmon")):
            helpers |= {pid} | _descendants(pid)
    return helpers


async def assert_host_and_pool_unharmed(spec: BackendSpec, sandbox: Sandbox, ctx: Context) -> None:
    assert Path(ctx.canary_path).read_text() == ctx.canary_secret, "host canary file changed"
    assert ctx.connections_accepted() == 0, "the sandbox reached a host TCP listener"
    # Nothing the program started is alive on the host...
    # Killed before the answer, reaped before the next execution: allow the kernel a moment
    # to finish tearing killed processes down; a survivor stays and fails the check.
    strays = await _eventually_empty(lambda: spec.stray_host_processes(sandbox))
    assert strays == set(), f"host processes left behind: {_describe(strays)}"
    if hasattr(sandbox, "host_pids"):
        strays = await _eventually_empty(
            lambda: (
                _descendants(os.getpid())
                - sandbox.host_pids()
                - _helper_processes()
                - ctx.processes_before
            )
        )
        assert strays == set(), f"host processes left behind: {_describe(strays)}"
    # (Inside the sandbox nothing can be listed: /proc shows a run no process of another
    # Landlock domain, and every run has its own; the host's view above is the check.)
    # The pool still works.
    nxt = await sandbox.run("print(sum(range(10)))")
    assert nxt.ok and nxt.stdout == "45\n", nxt


def _expected(spec: BackendSpec, name: str, default: set[str]) -> set[str]:
    return spec.expect_overrides.get(name, default)


@pytest.mark.parametrize("program", PROGRAMS + DEVICE_PROGRAMS, ids=lambda p: p.name)
async def test_escape_program(
    backend: tuple[BackendSpec, Sandbox], context: Context, program: Program
) -> None:
    spec, sandbox = backend
    result = await sandbox.run(context.fill(program.code), timeout=program.timeout)
    assert result.status.value in _expected(spec, program.name, program.expect), result
    assert context.env_secret not in result.stdout + result.stderr
    if program.check is not None:
        program.check(result, context)
    if program.host_check is not None:
        program.host_check(sandbox)
    if program.followup is not None:
        code, expected = program.followup
        # the next execution lands on whichever worker is idle: ask both
        for _ in range(ESCAPE_CONFIG.pool_size):
            after = await sandbox.run(code)
            assert after.ok and after.stdout.strip() == expected, after
    await assert_host_and_pool_unharmed(spec, sandbox, context)


async def test_concurrent_sandboxes_cannot_see_each_others_work_dir(
    backend: tuple[BackendSpec, Sandbox], context: Context
) -> None:
    spec, sandbox = backend

    async def reader() -> str:
        await asyncio.sleep(0.4)
        result = await sandbox.run(CONCURRENT_READER)
        assert result.ok, result
        return result.stdout

    writer, seen = await asyncio.gather(sandbox.run(context.fill(CONCURRENT_WRITER)), reader())
    assert writer.ok and writer.stdout == "a done\n", writer
    assert seen.strip() == "found []", seen
    # and a second, independent sandbox instance sees nothing either
    other = spec.make(ESCAPE_CONFIG.model_copy(update={"pool_size": 1}))
    async with other:
        writer, seen = await asyncio.gather(
            sandbox.run(context.fill(CONCURRENT_WRITER)), _later(other)
        )
    assert writer.ok, writer
    assert seen.strip() == "found []", seen
    await assert_host_and_pool_unharmed(spec, sandbox, context)


async def _later(sandbox: Sandbox) -> str:
    await asyncio.sleep(0.4)
    result = await sandbox.run(CONCURRENT_READER)
    assert result.ok, result
    return result.stdout


@pytest.mark.parametrize("program", SESSION_PROGRAMS, ids=lambda p: p.name)
async def test_escape_session_program(
    backend: tuple[BackendSpec, Sandbox], context: Context, program: SessionProgram
) -> None:
    spec, sandbox = backend
    async with sandbox.session() as session:
        for index, (code, expect, stdout) in enumerate(program.cells):
            if index in program.idle_before:
                await asyncio.sleep(program.idle_before[index])
            result = await session.run(context.fill(code))
            assert result.status.value in expect, (code, result)
            if stdout is not None:
                assert result.stdout == stdout, (code, result)
    await assert_host_and_pool_unharmed(spec, sandbox, context)


@pytest.mark.parametrize("program", FAMILY_PROGRAMS + FAIL_CLOSED_FAMILIES, ids=lambda p: p.name)
async def test_escape_fork_family_program(
    backend: tuple[BackendSpec, Sandbox], context: Context, program: FamilyProgram
) -> None:
    """Issues #24 and #40: a forked branch cannot change its parent's future (scheduling,
    limits, the family's process count, files, memory), nor talk to it or watch it, in
    either direction; the parent's cells after the branch's still work."""
    spec, sandbox = backend

    async def cells(session, listed) -> None:
        for code, expect, stdout in listed:
            result = await session.run(context.fill(code), timeout=program.timeout)
            assert result.status.value in expect, (code, result)
            if stdout is not None:
                assert result.stdout == stdout, (code, result)

    async with sandbox.session() as parent:
        await cells(parent, program.before)
        branch = await parent.fork()
        try:
            assert branch.forked_by == program.forked_by, branch.fork_refusal  # type: ignore[attr-defined]
            await cells(branch, program.branch)
            await asyncio.sleep(program.idle_before.get("after", 0.0))
            await cells(parent, program.after)
            await asyncio.sleep(program.idle_before.get("branch_after", 0.0))
            await cells(branch, program.branch_after)
            assert branch.replays == parent.replays == 0, "a holder was lost"  # type: ignore[attr-defined]
        finally:
            await branch.close()
    await assert_host_and_pool_unharmed(spec, sandbox, context)
