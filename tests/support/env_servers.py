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
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", loop="asyncio"
    )
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
        try:
            wait_for_health(self.process, self.url, timeout, "agentenvs serve")
        except RuntimeError:
            self.kill()
            raise
        return self

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


ORS_SERVER_MODULE = Path(__file__).with_name("ors_arithmetic_env.py")


@contextlib.contextmanager
def ors_arithmetic_server(timeout: float = 90.0) -> Iterator[str]:
    """The SDK-written ORS environment (``ors_arithmetic_env.py``: ``arithmetic`` and
    ``plainanswer``) served by the SDK's own ``Server.run`` in a subprocess on loopback,
    as an ORS author runs one; its base URL while the block runs."""
    port = free_port()
    quiet = {"OPENREWARD_DISABLE_UPDATE_CHECK": "1", "OPENREWARD_LOG_LEVEL": "WARNING"}
    server = subprocess.Popen([sys.executable, str(ORS_SERVER_MODULE), str(port)],
                              env={**os.environ, **quiet}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(server, url, timeout, "the ORS server")
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)


def wait_for_health(process: subprocess.Popen, url: str, timeout: float, what: str) -> None:
    """Until ``url``/health answers 200; a clear error when ``process`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer /health in time")
        time.sleep(0.1)
