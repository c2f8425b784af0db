"""The sandbox backends the escape suite runs against.

Each entry says how to build a configured sandbox, what it needs of the machine (the
conditions of ``support.machine_skips``: where the machine lacks one, the test is skipped
with that tagged reason; any failure after that is a failure), and how to list host
processes the backend is responsible for, so the suite can tell "the pool's own workers"
from "something the program left running". Another backend is added by appending a
:class:`BackendSpec` to :data:`sandbox_backends`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from agentenvs.sandbox import Sandbox, SandboxConfig
from support import machine_skips


@dataclass(frozen=True)
class BackendSpec:
    name: str
    make: Callable[[SandboxConfig], Sandbox]
    needs: tuple[str, ...]
    """The machine conditions (``support.machine_skips``) the backend cannot run without."""
    stray_host_processes: Callable[[Sandbox], set[int]] = field(default=lambda sandbox: set())
    """Host pids that belong to the sandbox's programs rather than to its own workers."""
    expect_overrides: dict[str, set[str]] = field(default_factory=dict)
    """Program name -> expected statuses, where this backend legitimately differs."""


def host_uid_of(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
            if line.startswith("State:") and "Z" in line:
                return None
    except (OSError, ValueError):
        return None
    return None


def host_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _make_local(config: SandboxConfig) -> Sandbox:
    from agentenvs.sandbox.backends.local.backend import LocalSandbox

    return LocalSandbox(config, use_bwrap=True)


def _local_strays(sandbox: Sandbox) -> set[int]:
    """Processes running as one of the pool's dedicated uids that are not its workers."""
    uids = sandbox.sandbox_uids()  # type: ignore[attr-defined]
    candidates = {pid for pid in host_pids() if host_uid_of(pid) in uids}
    # listed after the scan: a supervisor may fork its next idle child in between
    return candidates - sandbox.host_pids()  # type: ignore[attr-defined]


sandbox_backends: list[BackendSpec] = [
    BackendSpec(
        name="local",
        make=_make_local,
        needs=machine_skips.LOCAL_SANDBOX,
        stray_host_processes=_local_strays,
    ),
]


# --- docker backend, run for real through a private podman service
# (tests/support/podman_service.py)
def _make_docker(config: SandboxConfig) -> Sandbox:
    from agentenvs.sandbox.backends.docker.backend import DockerSandbox
    from support.podman_service import shared_service

    service = shared_service()
    return DockerSandbox(
        config.model_copy(update={"backend": "docker", "docker_host": service.docker_host})
    )


def _docker_strays(sandbox: Sandbox) -> set[int]:
    """Processes of the containers' dedicated uids that are not their supervisors."""
    uids = sandbox.sandbox_uids()  # type: ignore[attr-defined]
    candidates = {pid for pid in host_pids() if host_uid_of(pid) in uids}
    # listed after the scan: a supervisor may fork its next idle child in between
    return candidates - sandbox.host_pids()  # type: ignore[attr-defined]


sandbox_backends.append(
    BackendSpec(
        name="docker",
        make=_make_docker,
        needs=machine_skips.DOCKER_SANDBOX,
        stray_host_processes=_docker_strays,
    )
)


@contextlib.asynccontextmanager
async def started(spec: BackendSpec, config: SandboxConfig) -> AsyncIterator[Sandbox]:
    """A started sandbox of ``spec``; a tagged skip where the machine lacks what it needs,
    an error when anything else stops it from starting."""
    machine_skips.require(*spec.needs)
    box = spec.make(config)
    await box.start()
    try:
        yield box
    finally:
        await box.close()


def sandbox_fixture(config: SandboxConfig):
    """A module-scoped ``sandbox`` fixture: one started sandbox per backend of this list.

    ``sandbox = sandbox_fixture(CONFIG)`` in a test module runs each of its tests on
    every backend the machine can run (the others are skipped, with the machine's reason).
    """
    import pytest
    import pytest_asyncio

    # Backends other than the local one start a real service (podman): `services`.
    params = [
        pytest.param(spec, id=spec.name, marks=() if spec.name == "local" else pytest.mark.services)
        for spec in sandbox_backends
    ]

    @pytest_asyncio.fixture(scope="module", loop_scope="module", params=params)
    async def sandbox(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
        async with started(request.param, config) as box:
            yield box

    return sandbox
