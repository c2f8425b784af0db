"""agentenvs.sandbox: isolated execution of untrusted, model-written code.

Backends: ``local`` (bubblewrap + warm forked interpreters), ``docker`` (Docker SDK,
works with podman's Docker-compatible API) and ``sandboxfusion`` (HTTP client for
SandboxFusion's ``/run_code``). All share :class:`~agentenvs.sandbox.base.Sandbox`.

Where things live:

- ``base.py``, ``capabilities.py``, ``factory.py``, ``cli.py``: the public interface.
- ``supervisor/``: the kit that runs *inside* the sandbox (stdlib only, shipped as source).
- ``pool/``: the host side of supervised workers: the pool, sessions, health checks,
  the wire protocol and the worker errors both process backends share.
- ``backends/``: ``local/`` (bubblewrap), ``docker/`` (containers), ``sandboxfusion.py``.
- ``server/``: ``agentenvs sandbox serve``, SandboxFusion's HTTP API over any backend.

The names below are exported lazily (as httpx-style faces do): ``import agentenvs.sandbox``
loads no backend, and ``from agentenvs.sandbox import create`` loads only the interface.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentenvs.sandbox.backends.docker.backend import DockerSandbox
    from agentenvs.sandbox.backends.local.backend import LocalSandbox
    from agentenvs.sandbox.backends.sandboxfusion import SandboxFusionSandbox
    from agentenvs.sandbox.base import (
        Capabilities,
        ExecResult,
        ExecStatus,
        Sandbox,
        SandboxConfig,
        SandboxUnavailable,
        Session,
        SessionForkError,
    )
    from agentenvs.sandbox.capabilities import LAYERS, capability_report
    from agentenvs.sandbox.factory import create

_EXPORTS: dict[str, str] = {
    "Capabilities": "agentenvs.sandbox.base",
    "ExecResult": "agentenvs.sandbox.base",
    "ExecStatus": "agentenvs.sandbox.base",
    "Sandbox": "agentenvs.sandbox.base",
    "SandboxConfig": "agentenvs.sandbox.base",
    "SandboxUnavailable": "agentenvs.sandbox.base",
    "Session": "agentenvs.sandbox.base",
    "SessionForkError": "agentenvs.sandbox.base",
    "LAYERS": "agentenvs.sandbox.capabilities",
    "capability_report": "agentenvs.sandbox.capabilities",
    "create": "agentenvs.sandbox.factory",
    "LocalSandbox": "agentenvs.sandbox.backends.local.backend",
    "DockerSandbox": "agentenvs.sandbox.backends.docker.backend",
    "SandboxFusionSandbox": "agentenvs.sandbox.backends.sandboxfusion",
}
"""Public name -> the module that defines it (imported on first access)."""

__all__ = [
    "LAYERS",
    "Capabilities",
    "DockerSandbox",
    "ExecResult",
    "ExecStatus",
    "LocalSandbox",
    "Sandbox",
    "SandboxConfig",
    "SandboxFusionSandbox",
    "SandboxUnavailable",
    "Session",
    "SessionForkError",
    "capability_report",
    "create",
]


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
