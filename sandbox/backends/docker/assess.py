"""Measure which isolation layers a started sandbox container really has.

Three viewpoints, as for the local backend: the engine's record of the container
(``HostConfig``: network mode, read-only root, capabilities, limits), the host's view of
the container's pid 1 when the engine runs on this machine (namespace inodes, real uid,
seccomp mode), and a probe child forked by the supervisor and restricted exactly like an
execution (rlimits, Landlock, what it can write, its work dir's mount, its environment).
The layer names are the shared ones (:data:`agentenvs.sandbox.capabilities.LAYERS`).
"""

from __future__ import annotations

from pathlib import Path

from agentenvs.sandbox.base import Capabilities
from agentenvs.sandbox.pool.assess import (
    NAMESPACES,
    OTHER_PROCESS_NOTE,
    cleared_env_layer,
    rlimits_layer,
    same_namespace,
    seccomp_stages_note,
    status_field,
    tmpfs_workdir_layer,
)

ENGINE_ADDED_ENV = {"PWD", "LC_CTYPE"}


def _engine_userns(info: dict) -> bool:
    options = " ".join(str(o) for o in info.get("SecurityOptions") or [])
    return "userns" in options or "rootless" in options


def assess(
    *,
    hello: dict,
    probe: dict,
    host_config: dict,
    host_pid: int | None,
    engine_info: dict,
    allowed_env: set[str],
    seccomp_note: str,
    limits: dict,
) -> Capabilities:
    caps = Capabilities(backend="docker")
    active, notes = caps.active, caps.notes
    report = probe.get("report", {}) if probe.get("ok") else {}
    if not report:
        notes["probe"] = (
            f"the probe execution failed: {probe.get('message', '')} {probe.get('stderr', '')}"
        )
    local = bool(host_pid) and Path(f"/proc/{host_pid}").exists()

    # namespaces: containers always get their own pid/mnt/ipc/uts/net; the user namespace
    # only with userns-remap or a rootless engine.
    if local:
        assert host_pid is not None
        shared = [kind for kind in NAMESPACES if same_namespace(host_pid, kind) is not False]
    else:
        shared = [] if _engine_userns(engine_info) else ["user"]
    active["namespaces"] = not shared
    notes["namespaces"] = (
        "container namespaces: " + ", ".join(NAMESPACES)
        if not shared
        else f"container shares the host's {', '.join(shared)} namespace(s)"
        + (
            " (no userns-remap / rootless engine: the code runs as a dedicated non-root uid "
            "with no capabilities instead)"
            if shared == ["user"]
            else ""
        )
    )

    interfaces = report.get("interfaces")
    no_network = host_config.get("NetworkMode") == "none"
    only_loopback = interfaces is not None and set(interfaces) <= {"lo"}
    active["network_isolated"] = no_network and (only_loopback or interfaces is None)
    notes["network_isolated"] = (
        f"network mode none (interfaces: {interfaces})"
        if active["network_isolated"]
        else f"network mode {host_config.get('NetworkMode')!r}, interfaces {interfaces}"
    )

    uid = hello.get("uid")
    host_uid = status_field(host_pid, "Uid").split()[:1] if local and host_pid else []
    active["unprivileged_uid"] = uid not in (None, 0) and (not host_uid or host_uid[0] != "0")
    notes["unprivileged_uid"] = (
        f"uid {uid} in the container" + (f", {host_uid[0]} on the host" if host_uid else "")
        if active["unprivileged_uid"]
        else "the supervisor runs as root"
    )

    mode = report.get("seccomp_mode")
    active["seccomp"] = mode == "2"
    layers = []
    if hello.get("seccomp"):
        layers.append("the sandbox's filter")
    if "seccomp" in " ".join(str(o) for o in engine_info.get("SecurityOptions") or []):
        layers.append("the engine's default profile")
    notes["seccomp"] = (
        "filters: " + (", ".join(layers) or "mode 2")
        if active["seccomp"]
        else seccomp_note or str(hello.get("seccomp_error") or f"seccomp mode {mode!r}")
    )
    if active["seccomp"] and report.get("other_process_calls") == "allowed":
        active["seccomp"] = False
        notes["seccomp"] = OTHER_PROCESS_NOTE
    elif active["seccomp"]:
        notes["seccomp"] += "; " + seccomp_stages_note(report, hello)

    restrict = report.get("restrict", {})
    active["landlock"] = bool(restrict.get("landlock"))
    notes["landlock"] = (
        f"Landlock ABI {hello.get('landlock_abi')}"
        if active["landlock"]
        else str(hello.get("landlock_error") or "Landlock restriction failed in the container")
    )

    memory = int(host_config.get("Memory") or 0)
    active["cgroup_memory"] = memory > 0
    notes["cgroup_memory"] = (
        f"container memory limit {memory // (1024 * 1024)} MB (swap {host_config.get('MemorySwap')})"
        if memory
        else "no container memory limit"
    )
    pids = int(host_config.get("PidsLimit") or 0)
    active["cgroup_pids"] = pids > 0
    notes["cgroup_pids"] = f"container pids limit {pids}" if pids > 0 else "no container pids limit"

    active["rlimits"], notes["rlimits"] = rlimits_layer(report, limits)

    no_new_privs = "no-new-privileges" in " ".join(host_config.get("SecurityOpt") or [])
    active["no_new_privs"] = bool(report.get("no_new_privs")) and no_new_privs
    notes["no_new_privs"] = (
        "security_opt no-new-privileges + PR_SET_NO_NEW_PRIVS"
        if active["no_new_privs"]
        else "no_new_privs is not set"
    )

    writes = report.get("system_writes", {})
    writable = [path for path, outcome in writes.items() if outcome == "writable"]
    active["readonly_root"] = (
        bool(host_config.get("ReadonlyRootfs")) and bool(writes) and not writable
    )
    notes["readonly_root"] = (
        "read-only root; writes refused: " + ", ".join(f"{p} ({o})" for p, o in writes.items())
        if active["readonly_root"]
        else f"writable: {', '.join(writable) or 'root filesystem not read-only'}"
    )

    mount = report.get("workdir_mount") or {}
    active["tmpfs_workdir"], notes["tmpfs_workdir"] = tmpfs_workdir_layer(
        report, otherwise=f"work dir mount: {mount}"
    )

    active["cleared_env"], notes["cleared_env"] = cleared_env_layer(
        report, allowed_env | ENGINE_ADDED_ENV
    )
    # Engines differ in how they record cap_drop=ALL (podman lists every capability), so
    # on a local engine look at the supervisor itself: no effective, no bounding set.
    dropped = [str(c).upper().removeprefix("CAP_") for c in host_config.get("CapDrop") or []]
    if local and host_pid:
        sets = {name: status_field(host_pid, name) for name in ("CapEff", "CapPrm", "CapBnd")}
        active["capabilities_dropped"] = all(v and int(v, 16) == 0 for v in sets.values())
        notes["capabilities_dropped"] = ", ".join(f"{k} {v}" for k, v in sets.items())
    else:
        active["capabilities_dropped"] = "ALL" in dropped
        notes["capabilities_dropped"] = f"cap_drop: {', '.join(dropped) or 'none'}"
    return caps
