"""A private podman service (Docker-compatible API) for the docker backend's tests.

One service per test process, over a temporary state directory, with the sandbox image
built into it once (the build is timed: :data:`STATE`). The service runs detached under a
watchdog (see ``agentenvs.sandbox.backends.docker.podman``), so process-leak checks of other tests
do not see it, and it stops when the test process ends, however it ends.

Tests call :func:`require_podman` (from a fixture: it skips, with the reason, where podman
cannot run); code without fixtures (the escape suite's backend list) uses
:func:`podman_unavailable` and :func:`shared_service`.
"""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass

import pytest

from agentenvs.sandbox.backends.docker.image import ImageInfo, ensure_image
from agentenvs.sandbox.backends.docker.podman import (
    PodmanService,
    PodmanUnavailable,
    unavailable_reason,
)


@dataclass
class _State:
    service: PodmanService | None = None
    image: ImageInfo | None = None
    error: str | None = None
    checked: bool = False


STATE = _State()
_lock = threading.Lock()


def _start() -> None:
    reason = unavailable_reason()
    if reason:
        STATE.error = reason
        return
    try:
        service = PodmanService.start_new()
    except PodmanUnavailable as exc:
        STATE.error = f"podman cannot run here: {exc}"
        return
    atexit.register(service.stop)
    try:
        import docker

        client = docker.DockerClient(base_url=service.docker_host)
        try:
            STATE.image = ensure_image(client)
            # A container must really start (runtime, cgroups, ulimits all fine).
            client.containers.run(
                STATE.image.tag, ["/usr/bin/python3", "-I", "-S", "-c", "pass"], remove=True
            )
        finally:
            client.close()
    except Exception as exc:  # ImageBuildError, or the engine refusing to run it
        service.stop()
        STATE.error = f"podman cannot run the sandbox image here: {exc}"
        return
    STATE.service = service


def podman_unavailable() -> str | None:
    """None when the shared service is up (starting it on first call), else why not."""
    with _lock:
        if not STATE.checked:
            STATE.checked = True
            _start()
    return STATE.error


def shared_service() -> PodmanService:
    reason = podman_unavailable()
    if reason or STATE.service is None:
        raise PodmanUnavailable(reason or "podman service not started")
    return STATE.service


def require_podman() -> PodmanService:
    """The running shared service, or skip the calling test with the reason."""
    reason = podman_unavailable()
    if reason:
        pytest.skip(reason)
    return shared_service()
