"""``language="bash"``: shell scripts run by the same supervisor, confined like Python.

Same limits (time, output, file size, processes), same seccomp filter, Landlock and
namespaces: a bash script that starts Python gets no more than Python code gets.
"""

from __future__ import annotations

import pytest
from support.sandbox_escape.backends import sandbox_fixture

from agentenvs.sandbox import Sandbox, SandboxConfig

pytestmark = pytest.mark.asyncio(loop_scope="module")

CONFIG = SandboxConfig(
    timeout=2.0, memory_limit_mb=256, max_output_bytes=4096, max_file_bytes=1 << 20, pool_size=1
)


sandbox = sandbox_fixture(CONFIG)


async def test_bash_runs_with_stdin_and_exit_codes(sandbox: Sandbox) -> None:
    ok = await sandbox.run(
        'read name\necho "hello $name"\nfor i in 1 2 3; do echo $i; done | wc -l',
        stdin="world\n",
        language="bash",
    )
    assert ok.ok and ok.stdout.split() == ["hello", "world", "3"], ok
    failed = await sandbox.run("echo oops >&2\nexit 3", language="bash")
    assert failed.status.value == "error" and failed.return_code == 3, failed
    assert failed.stderr == "oops\n"


async def test_bash_gets_the_same_limits(sandbox: Sandbox) -> None:
    loop = await sandbox.run("while true; do :; done", language="bash")
    assert loop.status.value == "timeout", loop
    flood = await sandbox.run("while true; do echo flood; done", language="bash")
    assert flood.status.value == "output_limit" and flood.stdout_truncated, flood
    big = await sandbox.run("head -c 4000000 /dev/zero > big.bin", language="bash")
    assert big.status.value == "error", big  # RLIMIT_FSIZE
    after = await sandbox.run("ls -A | wc -l", language="bash")
    assert after.stdout.strip() == "0", after  # and the work dir is wiped after bash too


async def test_bash_is_confined_like_python(sandbox: Sandbox) -> None:
    result = await sandbox.run(
        "echo x > /usr/escape 2>/dev/null && echo wrote-usr\n"
        "cat /etc/shadow 2>/dev/null && echo read-shadow\n"
        "python3 -I -S -c 'import socket; socket.socket(socket.AF_INET)' 2>/dev/null "
        "&& echo inet-socket\n"
        "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status",
        language="bash",
    )
    assert result.ok, result
    assert "wrote-usr" not in result.stdout and "inet-socket" not in result.stdout
    assert "read-shadow" not in result.stdout
    assert "NoNewPrivs:\t1" in result.stdout and "Seccomp:\t2" in result.stdout, result.stdout


async def test_unknown_language_is_a_clear_sandbox_error(sandbox: Sandbox) -> None:
    result = await sandbox.run("puts 1", language="ruby")
    assert result.status.value == "sandbox_error"
    assert "ruby" in result.message and "bash" in result.message, result.message
