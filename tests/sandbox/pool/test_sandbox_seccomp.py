"""Issue #24: the seccomp stages stacked on the supervisor's filter, tested in a fork.

``children`` (every child of the supervisor): calls on another process's scheduling,
priority, affinity, I/O priority or limits are refused; the same calls on the caller
itself (pid 0) work, as ``os.nice``, ``resource.setrlimit`` and bash's ``ulimit`` need.
``read_only`` (the holders of a family that forked): no mode, owner, time, xattr or lock
change on any file, while reading stays possible. The escape suite runs the hostile
programs through real sandboxes (``tests/support/sandbox_escape/programs.py``).
"""

from __future__ import annotations

import json
import os
import resource
import tempfile

import pytest
from support import machine_skips
from support.sandbox_escape.backends import sandbox_fixture

from agentenvs.sandbox import Sandbox, SandboxConfig
from agentenvs.sandbox.pool.seccomp import build_seccomp_program
from agentenvs.sandbox.supervisor.restrictions import apply_seccomp

pytestmark = machine_skips.needs("seccomp")

sandbox = sandbox_fixture(SandboxConfig(timeout=5.0, pool_size=1))


@pytest.mark.asyncio(loop_scope="module")
async def test_the_capability_report_shows_the_stages(sandbox: Sandbox) -> None:
    """The probe child tried to renice its parent (to the value it has): refused."""
    caps = sandbox.capabilities()  # measured when the sandbox started
    assert caps.active["seccomp"], caps.notes["seccomp"]
    assert "calls on other processes refused (EPERM)" in caps.notes["seccomp"], caps.notes
    assert "metadata read-only in forked families" in caps.notes["seccomp"], caps.notes


def _in_fork(stage: str, body) -> dict:
    """Run ``body()`` in a forked child that loaded ``stage``; its JSON answer."""
    program = build_seccomp_program()
    assert program.bpf is not None, program.reason
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            error = apply_seccomp(program.stages[stage])
            out = {"error": error} if error else body()
        except BaseException as exc:  # reported, never raised in the fork
            out = {"error": repr(exc)}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        answer = json.loads(f.read())
    os.waitpid(pid, 0)
    assert "error" not in answer, answer
    return answer


def _outcome(call) -> str:
    try:
        call()
        return "allowed"
    except OSError as exc:
        return f"errno {exc.errno}"


def test_children_stage_refuses_calls_on_other_processes_only() -> None:
    parent = os.getpid()

    def body() -> dict:
        nice = os.getpriority(os.PRIO_PROCESS, parent)
        same_limit = resource.prlimit(parent, resource.RLIMIT_NOFILE)
        return {
            "setpriority(parent)": _outcome(lambda: os.setpriority(os.PRIO_PROCESS, parent, nice)),
            "setpriority(pgrp 0)": _outcome(lambda: os.setpriority(os.PRIO_PGRP, 0, 19)),
            "setpriority(uid 0)": _outcome(lambda: os.setpriority(os.PRIO_USER, 0, 19)),
            "sched_setscheduler(parent)": _outcome(
                lambda: os.sched_setscheduler(parent, os.SCHED_OTHER, os.sched_param(0))
            ),
            "sched_setaffinity(parent)": _outcome(
                lambda: os.sched_setaffinity(parent, os.sched_getaffinity(parent))
            ),
            "prlimit(parent, set)": _outcome(
                lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE, same_limit)
            ),
            "prlimit(parent, get)": _outcome(
                lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE)
            ),
            "nice(self)": _outcome(lambda: os.nice(1)),
            "sched_setaffinity(self)": _outcome(
                lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))
            ),
            "setrlimit(self)": _outcome(
                lambda: resource.setrlimit(
                    resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)
                )
            ),
            "prlimit(0, set)": _outcome(
                lambda: resource.prlimit(
                    0, resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)
                )
            ),
        }

    answer = _in_fork("children", body)
    refused = {k for k, v in answer.items() if v == "errno 1"}
    assert refused == {
        "setpriority(parent)",
        "setpriority(pgrp 0)",
        "setpriority(uid 0)",
        "sched_setscheduler(parent)",
        "sched_setaffinity(parent)",
        "prlimit(parent, set)",
    }, answer
    assert set(answer) - refused == {k for k, v in answer.items() if v == "allowed"}, answer


def test_read_only_stage_refuses_metadata_changes_but_not_reading() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f")
        with open(path, "w") as f:
            f.write("kept")
        before = os.stat(path)

        def body() -> dict:
            import fcntl

            fd = os.open(path, os.O_RDONLY)
            with open(path) as f:
                content = f.read()
            return {
                "read": content,
                "chmod": _outcome(lambda: os.chmod(path, 0)),
                "fchmod": _outcome(lambda: os.fchmod(fd, 0)),
                "chmod dir": _outcome(lambda: os.chmod(tmp, 0)),
                "utime": _outcome(lambda: os.utime(path, (0, 0))),
                "chown": _outcome(lambda: os.chown(path, os.getuid(), os.getgid())),
                "setxattr": _outcome(lambda: os.setxattr(path, "user.x", b"1")),
                "flock": _outcome(lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)),
                "lockf": _outcome(lambda: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)),
                "getlk": _outcome(
                    lambda: fcntl.fcntl(fd, fcntl.F_GETLK, bytes(32))  # reading a lock: fine
                ),
            }

        answer = _in_fork("read_only", body)
        assert answer.pop("read") == "kept"
        assert answer.pop("getlk") == "allowed", answer
        assert set(answer.values()) == {"errno 1"}, answer
        after = os.stat(path)
        assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)
