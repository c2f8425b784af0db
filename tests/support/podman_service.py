"""A private podman service (Docker-compatible API) for the docker backend's tests.

One service per test process, over a temporary state directory, with the sandbox image
built into it once. The service runs detached under a watchdog (see
``agentenvs.sandbox.backends.docker.podman``), so process-leak checks of other tests do
not see it, and it stops when the test process ends, however it ends.

Tests call :func:`require_podman` (from a fixture); code without fixtures (the escape
suite's backend list) uses :func:`shared_service`. The only skip is the machine's:
podman, runc or Debian's Python missing (``support.machine_skips``, probed on the
machine itself). Everything after that is ours and fails the calling tests when it goes
wrong, with the first error: the service not coming up, the image builder failing, the
first container not running.
"""

from __future__ import annotations

import atexit
import threading
import traceback
from dataclasses import dataclass

from agentenvs.sandbox.backends.docker.image import ImageInfo, ensure_image
from agentenvs.sandbox.backends.docker.podman import PodmanService
from support import machine_skips


class PodmanSetupError(RuntimeError):
    """The shared service, the sandbox image or its first container failed: our bug or
    the engine's, never a reason to skip."""


@dataclass
class _State:
    service: PodmanService | None = None
    image: ImageInfo | None = None
    error: str | None = None
    checked: bool = False


STATE = _State()
_lock = threading.Lock()


def _start() -> None:
    service = PodmanService.start_new()
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
    except BaseException:
        service.stop()
        raise
    STATE.service = service


def shared_service() -> PodmanService:
    """The running shared service (started on the first call); raises
    :class:`PodmanSetupError` with the first failure's traceback on this and every later
    call when it could not be set up. Check the machine first (:func:`require_podman`)."""
    with _lock:
        if not STATE.checked:
            STATE.checked = True
            try:
                _start()
            except Exception:
                STATE.error = traceback.format_exc()
    if STATE.error is not None or STATE.service is None:
        raise PodmanSetupError(
            "the shared podman service or the sandbox image failed (not a machine "
            f"condition: a failure to fix):\n{STATE.error or 'not started'}"
        )
    return STATE.service


def require_podman() -> PodmanService:
    """The running shared service; a tagged skip only where the machine cannot run the
    docker backend at all (:data:`machine_skips.DOCKER_SANDBOX`)."""
    machine_skips.require(*machine_skips.DOCKER_SANDBOX)
    return shared_service()
