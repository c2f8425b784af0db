"""Isolation layers by name, and the capability report.

Every backend reports the same layer names (:data:`LAYERS`) in
:class:`~agentenvs.sandbox.base.Capabilities`; ``SandboxConfig.min_isolation`` lists
names that must be active, or the sandbox refuses to start. A report is measured, not
assumed: the local backend starts a worker and inspects it (namespace inodes, the
supervisor's uid and seccomp mode as the host sees them) and a probe child restricted
like an execution (rlimits, Landlock, writes to system dirs, the work dir's mount).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from agentenvs.sandbox.base import Capabilities, SandboxConfig, SandboxUnavailable

LAYERS: dict[str, str] = {
    "namespaces": "own user, pid, mount, IPC, UTS and network namespaces (bubblewrap)",
    "network_isolated": "no network: own network namespace, no IP sockets",
    "unprivileged_uid": "code runs as a non-root uid on the host (so RLIMIT_NPROC applies)",
    "seccomp": "seccomp filter denying ptrace, mount, unshare, io_uring, bpf, IP sockets..., "
    "and calls on another process's scheduling, priority, affinity or limits",
    "landlock": "Landlock: files writable only in the work dir; TCP bind/connect denied",
    "cgroup_memory": "cgroup memory limit on everything a worker runs",
    "cgroup_pids": "cgroup process-count limit on everything a worker runs",
    "rlimits": "per-execution rlimits: CPU, address space, file size, processes, open files, core",
    "no_new_privs": "no_new_privs: nothing can gain privileges through execve",
    "readonly_root": "system directories cannot be written",
    "tmpfs_workdir": "private, size-limited tmpfs work directory, wiped after each execution",
    "cleared_env": "environment replaced: no host variables (secrets) reach the code",
}


def unknown_layers(names: list[str]) -> list[str]:
    return [name for name in names if name not in LAYERS]


def enforce_minimum(caps: Capabilities, required: list[str]) -> None:
    """Raise :class:`SandboxUnavailable` unless every required layer is active."""
    unknown = unknown_layers(required)
    if unknown:
        raise SandboxUnavailable(
            f"unknown isolation layer(s) in min_isolation: {', '.join(unknown)} "
            f"(known: {', '.join(LAYERS)})"
        )
    missing = caps.missing(required)
    if missing:
        reasons = "; ".join(f"{name}: {caps.notes.get(name, 'not active')}" for name in missing)
        raise SandboxUnavailable(
            f"the {caps.backend} sandbox refuses to start: required isolation layer(s) "
            f"not active on this machine: {reasons}"
        )


def as_dict(caps: Capabilities, required: list[str] | None = None) -> dict[str, Any]:
    required = list(required or [])
    return {
        "backend": caps.backend,
        "active": {name: bool(caps.active.get(name, False)) for name in LAYERS}
        | {k: v for k, v in caps.active.items() if k not in LAYERS},
        "notes": dict(caps.notes),
        "required": required,
        "missing": caps.missing(required),
        "descriptions": dict(LAYERS),
    }


def capability_report(config: SandboxConfig | None = None, **overrides: Any) -> dict[str, Any]:
    """Measure which isolation layers the configured backend has on this machine.

    Synchronous and safe to call from anywhere (it runs its own event loop in a thread
    when one is already running). The sandbox is started without a minimum, inspected
    and closed; ``missing`` lists what ``min_isolation`` asks for but is not active.
    """
    from agentenvs.sandbox.factory import create, merged_config

    cfg = merged_config(config, **overrides)
    probe_cfg = cfg.model_copy(update={"min_isolation": [], "pool_size": 1})

    async def measure() -> Capabilities:
        sandbox = create(probe_cfg)
        try:
            await sandbox.start()
            return sandbox.capabilities()
        finally:
            await sandbox.close()

    caps = run_sync(measure())
    return as_dict(caps, cfg.min_isolation)


def run_sync(coro):  # type: ignore[no-untyped-def]
    """Run a coroutine to completion from sync code, even inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="agentenvs-sandbox-probe")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
