"""ReTool on the sandboxfusion backend, against a real SandboxFusion-compatible server.

The server is ``agentenvs sandbox serve`` (the local backend behind SandboxFusion's
``POST /run_code`` contract) on 127.0.0.1; the rollout is the real CLI with
``--set sandbox.backend=sandboxfusion --set sandbox.url=...``.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

AGENTENVS = str(Path(sys.executable).parent / "agentenvs")

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (bwrap) is not installed, so the served local sandbox cannot run",
)


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
    out = tmp_path / "retool.jsonl"
    command = [
        AGENTENVS,
        "rollout",
        "retool",
        "--groups",
        "2",
        "--group-size",
        "2",
        "--out",
        str(out),
        "--set",
        "sandbox.backend=sandboxfusion",
        "--set",
        f"sandbox.url={server_url}",
        "--set",
        f"execution={execution}",
        "--set",
        "protocol=tool_call",
        "--json-summary",
        "--no-progress",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0 and summary["trajectories"] == 4
    assert summary["mean_reward"] == 1.0
    assert summary["stop_reasons"] == {"completed": 4}
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["env_config"]["sandbox"]["backend"] for r in records} == {"sandboxfusion"}
    assert "Traceback" not in done.stderr
