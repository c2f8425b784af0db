"""True session forks on the docker backend (a private podman service, as in
``test_sandbox_docker.py``): the container's supervisor forks the state holder the same
way the local one does, and the forked family can no longer write files."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from support import machine_skips
from support.podman_service import require_podman

from agentenvs.sandbox import ExecStatus, SandboxConfig, create
from agentenvs.sandbox.backends.docker.backend import DockerSandbox
from agentenvs.sandbox.backends.docker.podman import PodmanService

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.services]


@pytest.fixture(scope="session")
def podman() -> PodmanService:
    return require_podman()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sandbox(podman: PodmanService) -> AsyncIterator[DockerSandbox]:
    config = SandboxConfig(
        backend="docker",
        timeout=5.0,
        memory_limit_mb=256,
        pool_size=1,
        docker_host=podman.docker_host,
    )
    # The fork needs Landlock; containers share the host's kernel: ask the machine.
    machine_skips.require("landlock")
    box = create(config)
    assert isinstance(box, DockerSandbox)
    async with box:
        caps = box.capabilities()
        assert caps.active.get("landlock"), ("the kernel offers Landlock", caps.notes)
        yield box


async def test_branches_of_a_container_session_each_keep_their_own_x(sandbox) -> None:
    async with sandbox.session() as parent:
        assert (await parent.run("x = 0\nopen('before.txt', 'w').write('kept')")).ok
        a, b = await parent.fork(), await parent.fork()
        try:
            assert a.forked_by == b.forked_by == "process", (a.fork_refusal, b.fork_refusal)
            assert a._worker is parent._worker is b._worker
            assert (await a.run("x = 1")).ok and (await b.run("x = 2")).ok
            assert [(await s.run("x")).stdout for s in (parent, a, b)] == ["0\n", "1\n", "2\n"]
            assert (await b.run("open('before.txt').read()")).stdout == "'kept'\n"
            denied = await a.run("open('after.txt', 'w')")
            assert denied.status == ExecStatus.ERROR and "PermissionError" in denied.stderr
        finally:
            await a.close()
            await b.close()
        assert (await parent.run("x")).stdout == "0\n"
