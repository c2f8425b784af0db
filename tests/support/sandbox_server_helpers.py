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
from collections.abc import Iterator
from pathlib import Path

import httpx

from support import machine_skips


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``python -m agentenvs.rollout.cli sandbox serve`` (the real command), stopped after."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix="agentenvs-serve-", suffix=".log")[1])
        argv = [sys.executable, "-m", "agentenvs.rollout.cli", "sandbox", "serve"]
        argv += ["--host", "127.0.0.1", "--port", str(self.port), *args]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
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


def started(*args: str, env: dict[str, str] | None = None) -> ServerProcess:
    """A ready server; a server that exits or does not answer raises (with its log).

    Check the machine first (:func:`on_backend` does): after that, a server that cannot
    start is a failure, whatever its log says, never a skip.
    """
    proc = ServerProcess(*args, env=env)
    try:
        proc.wait_ready()
    except BaseException:
        proc.stop()
        raise
    return proc


def on_backend(backend: str, args: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str]]:
    """``serve`` arguments (their ``--backend`` replaced) and environment for ``backend``.

    ``docker`` runs against this test process's private podman service
    (tests/support/podman_service.py). The calling test is skipped (tagged,
    ``support.machine_skips``) only where the machine cannot run the backend at all.
    """
    rest = list(args)
    if "--backend" in rest:
        at = rest.index("--backend")
        del rest[at : at + 2]
    env: dict[str, str] = {}
    if backend == "docker":
        from support.podman_service import require_podman

        env["DOCKER_HOST"] = require_podman().docker_host
    elif backend == "local":
        machine_skips.require(*machine_skips.LOCAL_SANDBOX)
    return ("--backend", backend, *rest), env


def post_run_code(url: str, body: object, *, expect: int = 200) -> dict:
    """POST ``body`` (any JSON, even malformed) to ``/run_code``; check the HTTP status."""
    import json

    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(
        f"{url}/run_code",
        content=data,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code == expect, (response.status_code, response.text[:2000])
    return response.json()


def module_server(*args: str, backends: tuple[str, ...] = ("local",)):
    """A module-scoped ``server`` fixture: ``server = module_server("--timeout", "5")``;
    with ``backends=("local", "docker")`` every test of the module runs on each."""
    import pytest

    # The docker backend starts a real podman service: `services` (left out by test-fast).
    params = [
        pytest.param(name, id=name, marks=pytest.mark.services if name == "docker" else ())
        for name in backends
    ]

    @pytest.fixture(scope="module", params=params)
    def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
        argv, env = on_backend(request.param, args)
        proc = started(*argv, env=env)
        try:
            yield proc
        finally:
            proc.stop()

    return server


def run_python(server: ServerProcess, code: str, **fields: object) -> dict:
    """``/run_code`` with Python ``code`` and any other fields; the 200 answer's body."""
    return post_run_code(server.url, {"code": code, "language": "python", **fields})
