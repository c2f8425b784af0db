"""Real env servers on loopback for the serving and remote tests.

:func:`thread_server` runs an app under uvicorn in a thread of the test process
(fast: nothing to import again); :class:`ProcessServer` runs ``agentenvs serve`` in
a subprocess, so a test can kill it like a machine that died and start it again
on the same port.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def thread_server(app: Any) -> Iterator[str]:
    """Serve ``app`` on a free loopback port while the block runs; its base URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the env server thread did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()


@dataclass
class ProcessServer:
    """``agentenvs serve`` in a subprocess on a fixed loopback port."""

    envs: Sequence[str]
    port: int = field(default_factory=free_port)
    extra: Sequence[str] = ()
    log: Path | None = None
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ProcessServer:
        command = [sys.executable, "-m", "agentenvs.rollout.cli", "serve", *self.envs,
                   "--port", str(self.port), *self.extra]  # fmt: skip
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(command, stdout=out, stderr=out, env=dict(os.environ))
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"agentenvs serve exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("agentenvs serve did not answer /health in time")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL, as a machine that died: nothing is cleaned up by the server."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=20)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
