"""Client-asked limits against the server's: a request may lower them, never raise them.

Why: the server's limits (``agentenvs sandbox serve --timeout --memory-mb
--max-output-kb``) are what its operator sized the machine for. A client asking for
3000 MB on a 1024 MB server, or an hour on a 10 s server, gets the server's limit, and
the response says so (``agentenvs.clamped``) instead of failing the request: SandboxFusion
clients send their own defaults (verl sends ``run_timeout`` on every call) and should keep
working against a stricter server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentenvs.sandbox.base import SandboxConfig
from agentenvs.sandbox.server.request import RunCodeRequest


@dataclass(frozen=True)
class Clamp:
    """One limit the request asked above the server's: what it asked, what it got."""

    requested: float
    applied: float

    def as_dict(self) -> dict[str, float]:
        return {"requested": self.requested, "applied": self.applied}


@dataclass
class AppliedLimits:
    """The limits one run gets, and which of the request's values were lowered to them."""

    run_timeout: float
    memory_limit_mb: int
    max_output_bytes: int
    clamped: dict[str, Clamp] = field(default_factory=dict)


def _at_most(
    name: str, requested: float | None, ceiling: float, clamped: dict[str, Clamp]
) -> float:
    if requested is None:
        return ceiling
    if requested > ceiling:
        clamped[name] = Clamp(requested, ceiling)
        return ceiling
    return requested


def apply_limits(request: RunCodeRequest, config: SandboxConfig) -> AppliedLimits:
    """The run's limits: each the request's value, or the server's when it asked more."""
    clamped: dict[str, Clamp] = {}
    timeout = _at_most("run_timeout", request.run_timeout, config.timeout, clamped)
    _at_most("compile_timeout", request.compile_timeout, config.timeout, clamped)
    memory = request.memory_limit_MB
    memory_mb = _at_most(
        "memory_limit_MB",
        memory if memory and memory > 0 else None,
        config.memory_limit_mb,
        clamped,
    )
    output = _at_most(
        "max_output_bytes", request.max_output_bytes, config.max_output_bytes, clamped
    )
    return AppliedLimits(
        run_timeout=float(timeout),
        memory_limit_mb=int(memory_mb),
        max_output_bytes=int(output),
        clamped=clamped,
    )
