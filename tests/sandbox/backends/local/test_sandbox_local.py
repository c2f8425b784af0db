"""The local backend: results, limits, the warm pool, the capability report, the factory.

Everything runs for real: bubblewrap workers with Debian's Python. Skipped only where
the machine lacks them (``support.machine_skips.LOCAL_SANDBOX``).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
import pytest_asyncio
from support import machine_skips

from agentenvs.sandbox import (
    LAYERS,
    ExecStatus,
    SandboxConfig,
    SandboxUnavailable,
)
from agentenvs.sandbox.backends.local.backend import LocalSandbox

needs_sandbox = machine_skips.needs(*machine_skips.LOCAL_SANDBOX)
pytestmark = pytest.mark.asyncio(loop_scope="module")

CONFIG = SandboxConfig(
    timeout=3.0, pool_size=2, memory_limit_mb=256, max_output_bytes=4096, workdir_size_mb=16
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sandbox():
    machine_skips.require(*machine_skips.LOCAL_SANDBOX)
    sb = LocalSandbox(CONFIG)
    await sb.start()
    yield sb
    await sb.close()


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _children_of(pid: int) -> set[int]:
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(name))
    return found


# ---------------------------------------------------------------------------- results


@needs_sandbox
async def test_prints_and_shows_the_last_expression_like_a_notebook(sandbox):
    result = await sandbox.run("print('hi')\nx = 20\nx + 22")
    assert result.status == ExecStatus.OK
    assert result.stdout == "hi\n42\n"
    assert result.return_code == 0 and not result.stdout_truncated


@needs_sandbox
@pytest.mark.parametrize("code", ["None", "x = 5", "1 + 1;", "print('a');", "import math"])
async def test_no_display_for_none_assignments_and_trailing_semicolons(sandbox, code):
    result = await sandbox.run(code)
    assert result.ok, result
    assert result.stdout in ("", "a\n")


@needs_sandbox
async def test_traceback_shows_only_the_programs_frames(sandbox):
    result = await sandbox.run("def f():\n    raise KeyError('k')\nf()")
    assert result.status == ExecStatus.ERROR and result.return_code == 1
    assert 'File "<cell>", line 2, in f' in result.stderr
    assert result.stderr.rstrip().endswith("KeyError: 'k'")
    assert "supervisor" not in result.stderr


@needs_sandbox
async def test_syntax_error_is_an_error_not_a_sandbox_failure(sandbox):
    result = await sandbox.run("def (:")
    assert result.status == ExecStatus.ERROR
    assert "SyntaxError" in result.stderr


@needs_sandbox
@pytest.mark.parametrize(
    ("code", "status", "rc"),
    [
        ("import sys; sys.exit(0)", ExecStatus.OK, 0),
        ("import sys; sys.exit(3)", ExecStatus.ERROR, 3),
        ("raise SystemExit('bye')", ExecStatus.ERROR, 1),
        ("import os; os._exit(7)", ExecStatus.ERROR, 7),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", ExecStatus.ERROR, -11),
    ],
)
async def test_exit_codes_and_signals(sandbox, code, status, rc):
    result = await sandbox.run(code)
    assert result.status == status, result
    assert result.return_code == rc


@needs_sandbox
async def test_stdout_and_stderr_are_separate_and_non_utf8_is_replaced(sandbox):
    result = await sandbox.run(
        "import sys\nprint('out')\nprint('err', file=sys.stderr)\n_ = sys.stdout.buffer.write(b'\\xff!')"
    )
    assert result.ok
    assert result.stdout == "out\n\ufffd!"
    assert result.stderr == "err\n"


@needs_sandbox
async def test_stdin_is_delivered_including_large_inputs(sandbox):
    result = await sandbox.run("print(input()[::-1])", stdin="abc\n")
    assert result.stdout == "cba\n"
    big = "x" * 1_000_000
    result = await sandbox.run("import sys; print(len(sys.stdin.read()))", stdin=big)
    assert result.stdout == "1000000\n"


@needs_sandbox
async def test_numpy_and_sympy_are_preloaded(sandbox):
    code = (
        "import sys\n"
        "preloaded = 'numpy' in sys.modules and 'sympy' in sys.modules\n"
        "import numpy as np, sympy as sp\n"
        "x = sp.Symbol('x')\n"
        "print(preloaded, int(np.arange(10).sum()), sp.integrate(2 * x, (x, 0, 3)))"
    )
    result = await sandbox.run(code)
    assert result.stdout == "True 45 9\n", result


@needs_sandbox
async def test_nothing_survives_between_runs(sandbox):
    first = await sandbox.run(
        "secret = 1\nopen('f.txt', 'w').write('x')\nimport os; os.listdir('.')"
    )
    assert first.stdout == "['f.txt']\n"
    for _ in range(CONFIG.pool_size):  # whichever worker answers
        after = await sandbox.run("import os\nprint('secret' in globals(), os.listdir('.'))")
        assert after.stdout == "False []\n"


# ---------------------------------------------------------------------------- limits


@needs_sandbox
async def test_wall_timeout(sandbox):
    result = await sandbox.run(
        "import time\nprint('before', flush=True)\ntime.sleep(60)", timeout=0.5
    )
    assert result.status == ExecStatus.TIMEOUT
    assert result.stdout == "before\n"  # what was printed before the kill is kept
    assert "timed out" in result.message


@needs_sandbox
async def test_cpu_limit_is_a_timeout():
    sb = LocalSandbox(CONFIG.model_copy(update={"cpu_seconds": 1, "timeout": 30, "pool_size": 1}))
    async with sb:
        result = await sb.run("while True:\n    pass")
    assert result.status == ExecStatus.TIMEOUT
    assert "CPU" in result.message


@needs_sandbox
async def test_memory_limit_per_call(sandbox):
    code = "x = bytearray(150 * 1024 * 1024)\nprint(len(x))"
    assert (await sandbox.run(code, memory_limit_mb=512)).stdout == f"{150 * 1024 * 1024}\n"
    small = await sandbox.run(code, memory_limit_mb=64)
    assert small.status == ExecStatus.MEMORY, small
    assert "MemoryError" in small.stderr


@needs_sandbox
async def test_output_limit_truncates_and_kills(sandbox):
    result = await sandbox.run("print('a' * 10000)\nprint('never')")
    assert result.status == ExecStatus.OUTPUT_LIMIT
    assert result.stdout_truncated and not result.stderr_truncated
    assert result.stdout == "a" * CONFIG.max_output_bytes


# ---------------------------------------------------------------------------- the pool


@needs_sandbox
async def test_concurrent_runs_spread_over_the_pool(sandbox):
    before = sandbox.stats["max_busy"]
    results = await asyncio.gather(
        *(sandbox.run("import time; time.sleep(0.3); 'done'") for _ in range(4))
    )
    assert all(r.stdout == "'done'\n" for r in results)
    assert sandbox.stats["max_busy"] == max(before, CONFIG.pool_size)


@needs_sandbox
async def test_a_dead_idle_worker_is_replaced_and_the_run_retried(sandbox):
    victims = [slot.worker for slot in sandbox._slots if slot.worker is not None]
    for worker in victims:
        os.kill(worker.supervisor_pid, signal.SIGKILL)
    for _ in range(500):  # until the host has seen them die (bubblewrap exits after)
        if not any(w.alive for w in victims):
            break
        await asyncio.sleep(0.02)
    results = [await sandbox.run("print(6 * 7)") for _ in range(3)]
    assert all(r.ok and r.stdout == "42\n" for r in results), results
    assert all(not w.alive for w in victims)


@needs_sandbox
async def test_worker_killed_during_an_execution_reports_sandbox_error(sandbox):
    async def kill_busy_worker() -> None:
        await asyncio.sleep(0.5)
        for slot in sandbox._slots:
            if slot.worker is not None and slot.worker._lock.locked():
                os.kill(slot.worker.supervisor_pid, signal.SIGKILL)

    result, _ = await asyncio.gather(
        sandbox.run("import time; time.sleep(5)", timeout=10), kill_busy_worker()
    )
    assert result.status == ExecStatus.SANDBOX_ERROR
    assert "died" in result.message
    assert (await sandbox.run("1 + 1")).stdout == "2\n"


@needs_sandbox
async def test_cancelled_run_does_not_leave_the_pool_broken(sandbox):
    task = asyncio.ensure_future(sandbox.run("import time; time.sleep(5)", timeout=10))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    results = await asyncio.gather(*(sandbox.run("print('ok')") for _ in range(4)))
    assert all(r.stdout == "ok\n" for r in results)


@needs_sandbox
async def test_no_leaked_processes_fds_or_cgroups_after_many_runs_and_close():
    fds_before = _fd_count()
    children_before = _children_of(os.getpid())  # the module's sandbox's workers
    sb = LocalSandbox(CONFIG.model_copy(update={"timeout": 1.0}))
    await sb.start()
    await sb.run("print(0)")
    fds_warm = _fd_count()
    cgroup_dirs = [w.cgroup.memory for w in sb._all_workers() if w.cgroup and w.cgroup.memory]
    programs = [
        "print(1)",
        "raise ValueError",
        "while True: pass",
        "print('x' * 100000)",
        "import os\nif os.fork() == 0:\n    os.setsid()\n    import time; time.sleep(60)",
    ]
    for round_ in range(12):
        results = await asyncio.gather(*(sb.run(p, timeout=0.3) for p in programs))
        assert [r.status for r in results] == [
            ExecStatus.OK,
            ExecStatus.ERROR,
            ExecStatus.TIMEOUT,
            ExecStatus.OUTPUT_LIMIT,
            ExecStatus.OK,
        ], round_
        assert _fd_count() == fds_warm
        # only the workers themselves (bubblewrap) are our children
        assert _children_of(os.getpid()) - children_before <= sb.host_pids()
    pids = sb.host_pids()
    await sb.close()
    assert _fd_count() == fds_before
    assert _children_of(os.getpid()) == children_before
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert cgroup_dirs and not any(path.exists() for path in cgroup_dirs)


@needs_sandbox
async def test_closed_sandbox_refuses_politely():
    sb = LocalSandbox(CONFIG.model_copy(update={"pool_size": 1}))
    await sb.start()
    await sb.close()
    result = await sb.run("print(1)")
    assert result.status == ExecStatus.SANDBOX_ERROR and "closed" in result.message
    with pytest.raises(SandboxUnavailable):
        await sb.start()


# ---------------------------------------------------------------------------- capabilities


@needs_sandbox
async def test_capability_report_names_every_layer_and_explains_inactive_ones(sandbox):
    caps = sandbox.capabilities()
    assert caps.backend == "local"
    assert set(LAYERS) <= set(caps.active)
    for name, active in caps.active.items():
        if not active:
            assert caps.notes.get(name), f"{name} is inactive without a reason"
    # measured facts this backend guarantees whenever bubblewrap runs
    for layer in (
        "namespaces",
        "network_isolated",
        "readonly_root",
        "tmpfs_workdir",
        "cleared_env",
        "rlimits",
        "no_new_privs",
    ):
        assert caps.active[layer], (layer, caps.notes.get(layer))
    # and the README's other layers (seccomp, Landlock, cgroup memory and pids limits, an
    # unprivileged uid) wherever the machine offers them, asked of the machine itself:
    # the report may not quietly drop one the kernel has
    for layer in sorted(machine_skips.offered_layers()):
        assert caps.active[layer], (layer, caps.notes.get(layer))


@needs_sandbox
async def test_min_isolation_is_enforced_with_a_clear_message():
    config = CONFIG.model_copy(
        update={"pool_size": 1, "min_isolation": ["namespaces", "cgroup_memory"]}
    )
    sb = LocalSandbox(config, use_cgroups=False)
    with pytest.raises(SandboxUnavailable, match=r"cgroup_memory: disabled by configuration"):
        await sb.start()
    assert sb.host_pids() == set()
    with pytest.raises(SandboxUnavailable, match="unknown isolation layer"):
        await LocalSandbox(CONFIG.model_copy(update={"min_isolation": ["telepathy"]})).start()


@needs_sandbox
async def test_min_isolation_met_starts(sandbox):
    active = [name for name, on in sandbox.capabilities().active.items() if on]
    async with LocalSandbox(
        CONFIG.model_copy(update={"pool_size": 1, "min_isolation": active})
    ) as sb:
        assert (await sb.run("'fine'")).stdout == "'fine'\n"


@needs_sandbox
async def test_direct_launcher_without_bubblewrap_reports_what_it_lacks():
    async with LocalSandbox(CONFIG.model_copy(update={"pool_size": 1}), use_bwrap=False) as sb:
        caps = sb.capabilities()
        result = await sb.run("import os\nprint(os.getuid() != 0)\nwhile True: pass", timeout=0.5)
    assert result.status == ExecStatus.TIMEOUT and result.stdout == "True\n"
    assert not caps.active["namespaces"] and "use_bwrap=False" in caps.notes["namespaces"]
    assert not caps.active["tmpfs_workdir"]
    if os.geteuid() == 0:
        assert caps.active["unprivileged_uid"]
