"""True forks of a local notebook session: the state holder is forked inside its worker.

With the real bubblewrap sandbox: two branches of one session set ``x`` differently and
each reads its own while the parent keeps its value; a fork of a fork; a fork killed (by
the host or by its own cell) leaves its siblings' state alone; a branch cannot signal its
parent or a sibling; forks made after cells that allocated memory or opened files get
their own offsets, and nobody in a forked family can write files any more (the work dir
is one tmpfs per worker); a fork refused by the supervisor falls back to a replay; and
1,000 forks and closes leave no process, worker or descriptor behind.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import pytest_asyncio
from support import machine_skips

from agentenvs.sandbox import ExecStatus, SandboxConfig
from agentenvs.sandbox.backends.local.backend import LocalSandbox
from agentenvs.sandbox.base import SessionForkError
from agentenvs.sandbox.pool.supervised import SESSION_FORK_LIMIT
from agentenvs.sandbox.pool.worker import children_of

# The in-worker fork needs Landlock (the forked family loses write access through it).
needs_sandbox = machine_skips.needs(*machine_skips.LOCAL_SANDBOX, "landlock")
pytestmark = [needs_sandbox, pytest.mark.asyncio(loop_scope="module")]

CONFIG = SandboxConfig(timeout=5.0, pool_size=1, memory_limit_mb=512, max_output_bytes=4096)
MANY_FORKS = 1000

COUNT_PROCESSES = (
    "import os\n"
    "states = [open(f'/proc/{p}/stat').read().rsplit(') ', 1)[1][0]"
    " for p in os.listdir('/proc') if p.isdigit()]\n"
    "len(states), sum(s in 'ZX' for s in states)"
)
"""(processes, zombies) in the worker's pid namespace, as the sandboxed code sees them:
the session's holder and this cell, once nothing else is left (``/proc`` shows a process
only those it may trace: not the supervisor, no other branch of its family)."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sandbox():
    sb = LocalSandbox(CONFIG)
    await sb.start()
    caps = sb.capabilities()
    if not caps.active.get("landlock"):  # the kernel has it (the marker asked): our failure
        await sb.close()
        pytest.fail(f"the kernel offers Landlock but the sandbox has none: {caps.notes}")
    yield sb
    await sb.close()


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


async def value(session, expression: str) -> str:
    result = await session.run(expression)
    assert result.ok, result
    return result.stdout.strip()


async def test_two_branches_each_read_their_own_x_and_the_parent_keeps_its_own(sandbox):
    async with sandbox.session() as parent:
        assert (await parent.run("import random\nx = 0\nseed = random.random()")).ok
        a = await parent.fork()
        b = await parent.fork()
        try:
            assert a.forked_by == b.forked_by == "process", (a.fork_refusal, b.fork_refusal)
            assert a._worker is parent._worker is b._worker
            assert (await a.run("x = 1")).ok and (await b.run("x = 2")).ok
            assert await value(a, "x") == "1"
            assert await value(b, "x") == "2"
            assert await value(parent, "x") == "0"
            # A process fork copies values a replay would draw anew.
            seeds = {await value(s, "seed") for s in (parent, a, b)}
            assert len(seeds) == 1
        finally:
            await a.close()
            await b.close()
        assert await value(parent, "x") == "0"


async def test_a_fork_of_a_fork_has_its_own_future(sandbox):
    async with sandbox.session() as root:
        assert (await root.run("trail = ['root']")).ok
        child = await root.fork()
        assert (await child.run("trail.append('child')")).ok
        grandchild = await child.fork()
        try:
            assert grandchild.forked_by == "process", grandchild.fork_refusal
            assert (await grandchild.run("trail.append('grandchild')")).ok
            assert (await child.run("trail.append('child again')")).ok
            assert await value(root, "trail") == "['root']"
            assert await value(child, "trail") == "['root', 'child', 'child again']"
            assert await value(grandchild, "trail") == "['root', 'child', 'grandchild']"
        finally:
            await grandchild.close()
            await child.close()


async def test_closing_the_parent_first_leaves_its_forks_running(sandbox):
    parent = sandbox.session()
    assert (await parent.run("x = 'kept'")).ok
    fork = await parent.fork()
    try:
        await parent.close()
        assert fork._worker.alive
        assert await value(fork, "x") == "'kept'"
        assert fork.replays == 0
    finally:
        await fork.close()
    assert not fork._worker and not parent._worker


async def test_forks_of_forks_fall_back_to_replay_when_landlock_layers_run_out(sandbox):
    async with sandbox.session() as root:
        assert (await root.run("depth = 0")).ok
        chain = [root]
        try:
            for _ in range(16):  # Landlock allows 16 layers per process, one per generation
                chain.append(await chain[-1].fork())
                assert (await chain[-1].run("depth += 1")).ok
            methods = [s.forked_by for s in chain[1:]]
            first_replay = methods.index("replay")
            assert first_replay > 8
            assert set(methods[:first_replay]) == {"process"}
            assert "Landlock layer" in chain[1 + first_replay].fork_refusal
            assert [await value(s, "depth") for s in chain] == [str(i) for i in range(17)]
        finally:
            for session in chain[1:]:
                await session.close()


async def test_killing_one_fork_leaves_its_siblings_and_parent_intact(sandbox):
    async with sandbox.session() as parent:
        assert (await parent.run("x = 'parent'")).ok
        doomed, sibling = await parent.fork(), await parent.fork()
        try:
            assert (await sibling.run("x = 'sibling'")).ok
            # The doomed fork's cell kills its own state holder (its parent process):
            # that fork's state is rebuilt by replay, nobody else notices.
            killed = await doomed.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
            assert killed.status == ExecStatus.ERROR, killed
            assert await value(doomed, "x") == "'parent'"
            assert doomed.replays == 1
            await doomed.close()  # the host kills its holder
            assert await value(sibling, "x") == "'sibling'"
            assert await value(parent, "x") == "'parent'"
            assert sibling.replays == parent.replays == 0
        finally:
            await doomed.close()
            await sibling.close()


KILL_EVERY_OTHER_PID = (
    "import os, signal\n"
    "denied = visible = 0\n"
    "for pid in range(2, 4096):\n"
    "    if pid in (os.getpid(), os.getppid()):\n"
    "        continue\n"
    "    visible += os.path.exists(f'/proc/{pid}')\n"
    "    try:\n"
    "        os.kill(pid, signal.SIGKILL)\n"
    "    except PermissionError:\n"
    "        denied += 1\n"
    "    except ProcessLookupError:\n"
    "        pass\n"
    "(denied, visible)"
)
"""Every pid of the worker's namespace but the cell's own and its holder's (by number:
/proc shows a branch no process outside its own Landlock domain)."""


async def test_branches_and_their_parent_cannot_signal_or_see_each_other(sandbox):
    """Issue #40, classes 3 and 4: after a fork, parent and fork are sibling Landlock
    domains, in both directions: no signal lands, no process is visible in /proc."""
    async with sandbox.session() as parent:
        assert (await parent.run("x = 'parent'")).ok
        attacker, sibling = await parent.fork(), await parent.fork()
        try:
            assert (await sibling.run("x = 'sibling'")).ok
            result = await attacker.run(KILL_EVERY_OTHER_PID)
            assert result.ok, result
            denied, visible = eval(result.stdout)
            assert denied >= 2 and visible == 0, result  # the parent and the sibling
            result = await parent.run(KILL_EVERY_OTHER_PID)
            denied, visible = eval(result.stdout)
            assert denied >= 2 and visible == 0, result  # both forks
            assert await value(sibling, "x") == "'sibling'"
            assert await value(attacker, "x") == "'parent'"
            assert await value(parent, "x") == "'parent'"
            assert sibling.replays == parent.replays == attacker.replays == 0
        finally:
            await attacker.close()
            await sibling.close()


async def test_a_fork_cannot_reach_another_callers_session(sandbox):
    async with sandbox.session() as mine, sandbox.session() as theirs:
        assert (await theirs.run("secret = 'theirs'")).ok
        assert (await mine.run("x = 1")).ok
        fork = await mine.fork()
        try:
            assert fork._worker is mine._worker is not theirs._worker
            # The fork sees its own holder and this cell: not its parent's holder (another
            # Landlock domain), not the supervisor, not the other session's worker.
            assert await value(fork, COUNT_PROCESSES) == "(2, 0)"
            killed = await fork.run("import os, signal\nos.kill(-1, signal.SIGKILL)")
            assert killed.status != ExecStatus.SANDBOX_ERROR, killed
            assert await value(theirs, "secret") == "'theirs'"
            assert await value(mine, "x") == "1"  # outside the fork's Landlock domain
            assert theirs.replays == mine.replays == 0
        finally:
            await fork.close()


async def test_malformed_session_requests_get_a_clear_answer(sandbox):
    async with sandbox.session() as session:
        assert (await session.run("x = 1")).ok
        worker = session._worker
        for request in (
            {"op": "session_fork", "session": "0"},
            {"op": "session_fork", "session": True},
            {"op": "session_fork", "session": 99},
            {"op": "session_close", "session": None},
        ):
            answer = await worker.request(request, 10)
            assert answer["ok"] is False and answer["message"] == "no such session", request
        answer = await worker.request({"op": "cell", "session": 99, "code": "x"}, 10)
        assert answer["status"] == "sandbox_error" and "no such session" in answer["message"]
        assert await value(session, "x") == "1"


async def test_a_closed_session_cannot_be_forked(sandbox):
    session = sandbox.session()
    assert (await session.run("x = 1")).ok
    await session.close()
    with pytest.raises(SessionForkError, match="closed"):
        await session.fork()


async def test_fork_after_memory_and_open_files_gets_its_own_offsets_and_no_writes(sandbox):
    async with sandbox.session() as parent:
        setup = await parent.run(
            "import numpy as np\n"
            "big = np.arange(20_000_000, dtype=np.int64)  # 160 MB, copied on write\n"
            "with open('notes.txt', 'w') as f:\n"
            "    f.write('0123456789')\n"
            "reader = open('notes.txt', 'rb', buffering=0)\n"
            "reader.read(2)"
        )
        assert setup.ok, setup
        branch = await parent.fork()
        try:
            assert branch.forked_by == "process", branch.fork_refusal
            assert await value(branch, "big[-1] + 1; big[:] = 7; int(big.sum())") == str(
                7 * 20_000_000
            )
            assert await value(parent, "int(big[-1])") == "19999999"
            # Each side reads on from offset 2 with an offset of its own.
            assert await value(branch, "reader.read(3)") == "b'234'"
            assert await value(parent, "reader.read(5)") == "b'23456'"
            assert await value(branch, "reader.read(1)") == "b'5'"
            # The work dir is shared by the worker: after a fork, nobody may write to it.
            for session in (parent, branch):
                denied = await session.run("open('mine.txt', 'w')")
                assert denied.status == ExecStatus.ERROR and "PermissionError" in denied.stderr
                denied = await session.run("open('notes.txt', 'a')")
                assert "PermissionError" in denied.stderr
            assert await value(branch, "open('notes.txt').read()") == "'0123456789'"
        finally:
            await branch.close()


async def test_state_that_would_stay_shared_is_replayed_instead(sandbox):
    async with sandbox.session() as parent:
        assert (await parent.run("import os\nr, w = os.pipe()\nx = 5")).ok
        by_pipe = await parent.fork()
        try:
            assert by_pipe.forked_by == "replay"
            assert "pipe" in by_pipe.fork_refusal
            assert by_pipe._worker is not parent._worker
            assert await value(by_pipe, "x") == "5"
        finally:
            await by_pipe.close()
        assert (
            await parent.run("os.close(r); os.close(w)\nimport mmap\nm = mmap.mmap(-1, 4096)")
        ).ok
        by_mapping = await parent.fork()
        try:
            assert by_mapping.forked_by == "replay"
            assert "shared memory mapping" in by_mapping.fork_refusal
        finally:
            await by_mapping.close()
        assert (await parent.run("m.close(); writer = open('w.txt', 'w')")).ok
        by_writer = await parent.fork()
        try:
            assert by_writer.forked_by == "replay"
            assert "open for writing" in by_writer.fork_refusal
        finally:
            await by_writer.close()


SYSV = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.shmat.restype = ctypes.c_void_p\n"
    "CREATE = 0o1000 | 0o600\n"
    "def sysv(kind):\n"
    "    return open(f'/proc/sysvipc/{kind}').read().splitlines()[1:]\n"
)
"""ctypes access to System V IPC, which the worker's one IPC namespace holds for all."""


async def test_system_v_objects_never_outlive_a_cell_in_a_forked_family(sandbox):
    async with sandbox.session() as parent:
        assert (await parent.run(SYSV + "queue = libc.msgget(4242, CREATE)\nqueue >= 0")).ok
        refused = await parent.fork()
        try:
            assert refused.forked_by == "replay" and "System V" in refused.fork_refusal
        finally:
            await refused.close()
        assert (await parent.run("libc.msgctl(queue, 0, None)\nx = 'kept'")).ok
        branch = await parent.fork()
        try:
            assert branch.forked_by == "process", branch.fork_refusal
            made = await branch.run("libc.msgget(4343, CREATE) >= 0")
            assert made.ok and made.stdout == "True\n", made
            # Gone when the cell ended: the parent (or a sibling) cannot find it.
            assert await value(parent, "sysv('msg'), libc.msgget(4343, 0)") == "([], -1)"
            attached = await branch.run(
                "segment = libc.shmget(4444, 4096, CREATE)\n"
                "address = libc.shmat(segment, None, 0)\n"
                "address not in (None, ctypes.c_void_p(-1).value)"
            )
            assert attached.status == ExecStatus.ERROR
            assert "System V shared memory" in attached.message, attached
            assert await value(parent, "sysv('shm'), libc.shmget(4444, 0, 0)") == "([], -1)"
            assert await value(branch, "x") == "'kept'"  # the earlier cells, replayed
        finally:
            await branch.close()


async def test_the_per_worker_bound_falls_back_to_replay(sandbox):
    async with sandbox.session() as parent:
        assert (await parent.run("x = 3")).ok
        forks = []
        try:
            for _ in range(SESSION_FORK_LIMIT):
                forks.append(await parent.fork())
            methods = [f.forked_by for f in forks]
            assert methods == ["process"] * (SESSION_FORK_LIMIT - 1) + ["replay"]
            assert "limit" in forks[-1].fork_refusal
            assert {await value(f, "x") for f in forks} == {"3"}
        finally:
            for fork in forks:
                await fork.close()


async def test_a_thousand_forks_and_closes_leave_nothing_behind(sandbox):
    async with sandbox.session() as parent:
        assert (await parent.run("x = 42")).ok
        assert await value(parent, COUNT_PROCESSES) == "(2, 0)"
        host_pids = sandbox.host_pids()
        fds = open_fds()
        methods = set()
        for i in range(MANY_FORKS):
            fork = await parent.fork()
            methods.add(fork.forked_by)
            if i % 100 == 0:
                assert await value(fork, "x") == "42"
                assert await value(fork, COUNT_PROCESSES) == "(2, 0)"  # its own holder and cell
            await fork.close()
        assert methods == {"process"}
        assert await value(parent, COUNT_PROCESSES) == "(2, 0)"
        assert sandbox.host_pids() == host_pids
        assert sandbox._session_workers() == [parent._worker]
        await asyncio.sleep(0.2)  # session spares are refilled in the background
        assert len(open_fds() - fds) <= 8
        assert await value(parent, "x") == "42"


def _state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


async def test_a_parked_holder_resumed_from_outside_is_stopped_again_and_replaced(sandbox):
    """Issue #40, class 4, the supervisor's own watch: no process of the sandbox can
    resume a parked holder (Landlock scopes signals), so the test does it from the host.
    The holder is stopped again at once (the supervisor's SIGCHLD), and its session's
    next request replaces it and replays the kept cells: its state, which ran outside
    any request, is not trusted."""
    async with sandbox.session() as session:
        assert (await session.run("x = 7")).ok
        worker = session._worker
        parked: list[int] = []
        for _ in range(100):  # the finished cell is re-parented once its holder is reaped
            parked = [pid for pid in children_of(worker.supervisor_pid) if _state(pid) == "T"]
            if parked:
                break
            await asyncio.sleep(0.01)
        (holder,) = parked
        os.kill(holder, signal.SIGCONT)
        await asyncio.sleep(0.2)
        assert _state(holder) == "T", "a resumed holder must be stopped again"
        result = await session.run("x")
        assert result.ok and result.stdout == "7\n", result
        assert session.replays == 1 and "outside a request" in result.message, result
