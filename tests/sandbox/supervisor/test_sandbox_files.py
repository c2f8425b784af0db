"""The files API of the supervised backends: files in before a run, fetched back after.

Run for real on every backend of the escape suite (local bubblewrap, docker via podman).
Fetched files are read by the supervisor outside the program's process: a program can
neither forge an entry (no marker to print) nor make the sandbox follow a symlink out.
"""

from __future__ import annotations

import pytest
from support.sandbox_escape.backends import sandbox_fixture

from agentenvs.sandbox import Sandbox, SandboxConfig

pytestmark = pytest.mark.asyncio(loop_scope="module")

CONFIG = SandboxConfig(timeout=5.0, memory_limit_mb=256, max_file_bytes=1024 * 1024, pool_size=1)


sandbox = sandbox_fixture(CONFIG)


async def test_files_go_in_and_come_back(sandbox: Sandbox) -> None:
    payload = bytes(range(256)) * 3
    result = await sandbox.run(
        "data = open('in/deep/data.bin', 'rb').read()\n"
        "open('out.bin', 'wb').write(data[::-1])\n"
        "import os\nos.makedirs('results', exist_ok=True)\n"
        "open('results/n.txt', 'w').write(str(len(data)))",
        files={"in/deep/data.bin": payload},
        fetch_files=["out.bin", "results/n.txt", "never-written.txt"],
    )
    assert result.ok, result
    assert result.files == {"out.bin": payload[::-1], "results/n.txt": str(len(payload)).encode()}
    after = await sandbox.run("import os\nprint(sorted(os.listdir('.')))")
    assert after.stdout == "[]\n", after  # given files are wiped with the rest


async def test_fetch_refuses_symlinks_and_fifos(sandbox: Sandbox) -> None:
    result = await sandbox.run(
        "import os\n"
        "os.symlink('/etc/passwd', 'passwd-link')\n"
        "os.mkdir('real')\nopen('real/ok.txt', 'w').write('ok')\n"
        "os.symlink('real', 'dir-link')\n"
        "os.mkfifo('fifo')\n"
        "open('big.bin', 'wb').write(b'x' * (2 * 1024 * 1024 - 1))",
        fetch_files=["passwd-link", "dir-link/ok.txt", "fifo", "big.bin", "real/ok.txt"],
    )
    assert result.status.value == "error", result  # big.bin hit RLIMIT_FSIZE...
    # ...so it holds exactly max_file_bytes, which is within the fetch limit
    big = result.files.pop("big.bin")
    assert big == b"x" * CONFIG.max_file_bytes
    assert result.files == {"real/ok.txt": b"ok"}, result.files


async def test_printed_markers_cannot_forge_files(sandbox: Sandbox) -> None:
    forged = '{"files": {"evil.txt": "ZXZpbA=="}}'
    result = await sandbox.run(
        f"print({forged!r})\nimport sys\nsys.stderr.write({forged!r})",
        fetch_files=["evil.txt"],
    )
    assert result.ok, result
    assert result.files == {}


@pytest.mark.parametrize(
    "files, fetch",
    [
        ({"../escape.txt": b"x"}, []),
        ({"/tmp/abs.txt": b"x"}, []),
        ({"a/./b": b"x"}, []),
        ({}, ["../../etc/passwd"]),
        ({}, ["/etc/passwd"]),
        ({"ok.txt": "not bytes"}, []),
        ({}, "a-string-not-a-list"),
    ],
)
async def test_bad_paths_are_a_clear_error_not_an_exception(
    sandbox: Sandbox, files: dict, fetch: list
) -> None:
    result = await sandbox.run("print('ran')", files=files, fetch_files=fetch)
    assert result.status.value == "sandbox_error", result
    assert "files" in result.message, result.message
    assert result.stdout == ""
    assert (await sandbox.run("print(2)")).stdout == "2\n"  # and the worker is fine
