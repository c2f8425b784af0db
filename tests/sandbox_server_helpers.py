"""Run ``agentenvs sandbox serve`` as a real process on 127.0.0.1 for the server tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``python -m agentenvs.rollout.cli sandbox serve`` (the real command), stopped after."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix="agentenvs-serve-", suffix=".log")[1])
        argv = [sys.executable, "-m", "agentenvs.rollout.cli", "sandbox", "serve"]
        argv += ["--host", "127.0.0.1", "--port", str(self.port), *args]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): {self.log_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/v1/ping", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the server did not answer within {timeout:g} s: {self.log_text()}")

    def kill(self) -> None:
        """SIGKILL, as a crash would: no shutdown handler runs."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.unlink(missing_ok=True)
