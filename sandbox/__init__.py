"""agentenvs.sandbox: isolated execution of untrusted, model-written code.

Backends: ``local`` (bubblewrap + warm forked interpreters), ``docker`` (Docker SDK,
works with podman's Docker-compatible API) and ``sandboxfusion`` (HTTP client for
SandboxFusion's ``/run_code``). All share :class:`~agentenvs.sandbox.base.Sandbox`.
"""

from agentenvs.sandbox.base import (
    Capabilities,
    ExecResult,
    ExecStatus,
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    Session,
)
from agentenvs.sandbox.capabilities import LAYERS, capability_report
from agentenvs.sandbox.factory import create

__all__ = [
    "LAYERS",
    "Capabilities",
    "ExecResult",
    "ExecStatus",
    "Sandbox",
    "SandboxConfig",
    "SandboxUnavailable",
    "Session",
    "capability_report",
    "create",
]
