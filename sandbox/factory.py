"""Create a sandbox from a config: the one place that knows every backend.

Backends are imported lazily, so ``import agentenvs.sandbox`` stays cheap and a backend's
optional dependencies (docker SDK, httpx clients) are only needed when it is chosen.
"""

from __future__ import annotations

from typing import Any

from agentenvs.envs.references import Registry, UnknownNameError
from agentenvs.sandbox.base import Sandbox, SandboxConfig


class UnknownBackendError(UnknownNameError, ValueError):
    """A sandbox backend name that is not registered."""


BACKENDS = Registry(
    "sandbox backend",
    {
        "local": "agentenvs.sandbox.backends.local.backend:LocalSandbox",
        "docker": "agentenvs.sandbox.backends.docker.backend:DockerSandbox",
        "sandboxfusion": "agentenvs.sandbox.backends.sandboxfusion:SandboxFusionSandbox",
    },
    unknown=UnknownBackendError,
)
"""Backend name -> its :class:`Sandbox` class, imported when chosen."""


def merged_config(config: SandboxConfig | None = None, **overrides: Any) -> SandboxConfig:
    """``config`` with ``overrides`` applied and validated (unknown fields raise)."""
    base = config.model_dump() if config is not None else {}
    return SandboxConfig.model_validate({**base, **overrides})


def backend_class(name: str) -> type[Sandbox]:
    return BACKENDS.load(name)


def create(config: SandboxConfig | None = None, **overrides: Any) -> Sandbox:
    """A sandbox for ``config.backend`` (not started: use ``async with`` or ``await start()``).

    >>> sandbox = create(backend="local", timeout=5, pool_size=2)
    """
    cfg = merged_config(config, **overrides)
    return backend_class(cfg.backend)(cfg)
