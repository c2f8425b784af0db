"""ReTool on the sandboxfusion backend, against our SandboxFusion-compatible server.

The server is ``agentenvs sandbox serve`` (the local backend behind SandboxFusion's
``POST /run_code`` contract) running as its own process on 127.0.0.1, not
SandboxFusion itself; the rollout is the real CLI with
``--set sandbox.backend=sandboxfusion --set sandbox.url=...``.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import machine_skips
from support.retool_cli_helpers import AGENTENVS, run_retool_rollout

pytestmark = machine_skips.needs(*machine_skips.LOCAL_SANDBOX)  # the served local sandbox


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [AGENTENVS, "sandbox", "serve", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            if server.poll() is not None:
                pytest.fail(f"agentenvs sandbox serve exited: {server.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{url}/v1/ping", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("agentenvs sandbox serve did not answer within 90 s")
            time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.mark.parametrize("execution", ["stateless", "stateful"])
def test_rollout_cli_with_the_sandboxfusion_backend(server_url: str, tmp_path: Path, execution):
    records = run_retool_rollout(
        tmp_path / "retool.jsonl",
        "--set",
        "sandbox.backend=sandboxfusion",
        "--set",
        f"sandbox.url={server_url}",
        "--set",
        f"execution={execution}",
        "--set",
        "protocol=tool_call",
    )
    assert {r["env_config"]["sandbox"]["backend"] for r in records} == {"sandboxfusion"}
