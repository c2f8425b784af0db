"""The harness jail holds hostile code: no network but its gateway, no host files, a time limit.

A harness runs whatever its model writes, so each probe here is a program the model could
write: reach the internet or a service on the host's loopback, read the host's files,
write outside its work dir, outlive its time limit. The gateway's socket is the one way
out, and it works.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import machine_skips

from agentenvs.envs.harness.jail import (
    APP,
    SOCKET_NAME,
    JailError,
    JailSpec,
    run_jailed,
    workdir,
)

pytestmark = [
    machine_skips.needs("bubblewrap", "user-namespaces", "debian-python"),
    pytest.mark.asyncio,
]

PROBE = r"""
import json, os, socket
found = {}
def attempt(name, action):
    try:
        action()
        found[name] = "allowed"
    except Exception as err:
        found[name] = type(err).__name__
attempt("internet", lambda: socket.create_connection(("1.1.1.1", 80), timeout=2))
attempt("host_loopback", lambda: socket.create_connection(("127.0.0.1", int(os.environ["HOST_PORT"])), timeout=2))
attempt("read_host_root", lambda: os.listdir("/root"))
attempt("read_host_work", lambda: os.listdir(os.environ["HOST_DIR"]))
attempt("write_usr", lambda: open("/usr/agentenvs-probe", "w"))
attempt("write_app", lambda: open("/app/made-here", "w").write("ok"))
found["uid"] = os.getuid()
found["pid_one"] = open("/proc/1/cmdline").read().split("\0")[0]
print(json.dumps(found))
"""


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder the jail's unprivileged uid can pass through (pytest's own are 0700)."""
    root = Path(tempfile.mkdtemp(prefix="agentenvs-jail-test-"))
    os.chmod(root, 0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _listening() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server, server.getsockname()[1]


async def test_hostile_code_reaches_nothing_outside(tmp_path: Path) -> None:
    host, port = _listening()
    try:
        spec = JailSpec(
            ["/usr/bin/python3", "-c", PROBE],
            tmp_path / "jail",
            env={"HOST_PORT": str(port), "HOST_DIR": str(Path.cwd())},
            timeout=60,
        )
        result = await run_jailed(spec)
    finally:
        host.close()
    assert result.returncode == 0, result.output
    found = json.loads(result.output.strip().splitlines()[-1])
    assert found["internet"] == "OSError" and found["host_loopback"] == "ConnectionRefusedError"
    assert found["read_host_root"] == "FileNotFoundError"
    assert found["read_host_work"] == "FileNotFoundError"
    assert found["write_usr"] == "OSError"  # read-only file system
    assert found["write_app"] == "allowed" and (workdir(spec) / "made-here").read_text() == "ok"
    assert found["uid"] == 1000 and found["pid_one"] != "/sbin/init"
    if os.geteuid() == 0:  # the host sees a stranger's files, not root's
        assert (workdir(spec) / "made-here").stat().st_uid != 0


async def test_the_time_limit_kills_the_whole_jail(tmp_path: Path) -> None:
    spec = JailSpec(["/bin/sh", "-c", "sleep 300 & sleep 300"], tmp_path / "jail", timeout=1.5)
    result = await asyncio.wait_for(run_jailed(spec), 30)
    assert result.timed_out and result.returncode is None
    assert result.seconds < 20


async def test_the_gateway_socket_is_the_one_way_out(tmp_path: Path) -> None:
    gateway = tmp_path / "gateway"
    gateway.mkdir()
    path = gateway / SOCKET_NAME
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    os.chmod(path, 0o666)

    def answer() -> None:
        connection, _ = server.accept()
        with connection:
            connection.sendall(b"gateway:" + connection.recv(100))

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    client = (
        "import socket; s = socket.create_connection(('127.0.0.1', 8000), timeout=10); "
        "s.sendall(b'hello'); print(s.recv(100).decode())"
    )
    spec = JailSpec(
        ["/usr/bin/python3", "-c", client], tmp_path / "jail", gateway=gateway, timeout=60
    )
    result = await run_jailed(spec)
    server.close()
    assert result.returncode == 0, result.output
    assert result.output.strip().endswith("gateway:hello")
    assert APP == "/app"


async def test_a_folder_the_jail_cannot_reach_is_one_clear_error(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    spec = JailSpec(["/bin/true"], private / "jail")
    if os.geteuid() != 0:  # the jail runs as the caller, who may pass its own folders
        assert (await run_jailed(spec)).returncode == 0
        return
    with pytest.raises(JailError, match="not reachable by the jail's unprivileged uid"):
        await run_jailed(spec)
