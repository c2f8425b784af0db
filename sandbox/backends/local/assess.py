"""Measure which isolation layers a started local worker really has.

Two viewpoints: the host looks at the supervisor process from outside (namespace
inodes, real uid, seccomp mode, cgroup membership), and a probe child, restricted
exactly like an execution, reports from inside (rlimits, Landlock, what it can write,
its work dir's mount, its environment).
"""

from __future__ import annotations

from pathlib import Path

from agentenvs.sandbox.backends.local.worker import Worker
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
from agentenvs.sandbox.pool.environment import sandbox_environment


def _in_cgroup(pid: int, path: Path | None) -> bool:
    if path is None:
        return False
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    return any(line.endswith("/" + path.name) for line in text.splitlines())


def assess(
    worker: Worker,
    probe: dict,
    *,
    plan_notes: dict[str, str],
    cgroup_notes: dict[str, str],
    seccomp_reason: str,
    limits: dict,
) -> Capabilities:
    caps = Capabilities(backend="local")
    active, notes = caps.active, caps.notes
    pid = worker.supervisor_pid or 0
    report = probe.get("report", {}) if probe.get("ok") else {}
    if not report:
        notes["probe"] = (
            f"the probe execution failed: {probe.get('message', '')} {probe.get('stderr', '')}"
        )

    shared = [kind for kind in NAMESPACES if same_namespace(pid, kind) is not False]
    active["namespaces"] = worker.plan.mode == "bwrap" and not shared
    if not active["namespaces"]:
        notes["namespaces"] = (
            plan_notes.get("namespaces") or f"shares the host's {', '.join(shared)} namespace(s)"
        )
    else:
        notes["namespaces"] = "bubblewrap: " + ", ".join(NAMESPACES)

    own_netns = same_namespace(pid, "net") is False
    ip_refused = report.get("inet_socket") not in (None, "allowed")
    active["network_isolated"] = own_netns or ip_refused
    if own_netns:
        notes["network_isolated"] = (
            f"own network namespace (interfaces: {report.get('interfaces')})"
        )
    elif ip_refused:
        notes["network_isolated"] = "no network namespace, but IP sockets are refused by seccomp"
    else:
        notes["network_isolated"] = "the code shares the host's network"

    uids = status_field(pid, "Uid").split()
    active["unprivileged_uid"] = bool(uids) and all(u != "0" for u in uids[:2])
    notes["unprivileged_uid"] = (
        f"host uid {uids[0] if uids else '?'}"
        if active["unprivileged_uid"]
        else "the sandbox runs as root on the host (start the host as root to get a dedicated uid)"
    )

    seccomp_mode = status_field(pid, "Seccomp")
    active["seccomp"] = seccomp_mode == "2" and report.get("seccomp_mode") == "2"
    if not active["seccomp"]:
        notes["seccomp"] = (
            seccomp_reason or worker.hello.get("seccomp_error") or f"seccomp mode {seccomp_mode!r}"
        )
    elif report.get("other_process_calls") == "allowed":
        active["seccomp"] = False
        notes["seccomp"] = OTHER_PROCESS_NOTE
    else:
        notes["seccomp"] = seccomp_stages_note(report, worker.hello)

    restrict = report.get("restrict", {})
    active["landlock"] = bool(restrict.get("landlock"))
    notes["landlock"] = (
        f"Landlock ABI {worker.hello.get('landlock_abi')}"
        if active["landlock"]
        else str(worker.hello.get("landlock_error") or "Landlock restriction failed")
    )

    for controller in ("memory", "pids"):
        name = f"cgroup_{controller}"
        path = getattr(worker.cgroup, controller, None) if worker.cgroup else None
        active[name] = _in_cgroup(pid, path)
        if active[name]:
            notes[name] = str(path)
        else:
            errors = worker.cgroup.errors if worker.cgroup else {}
            notes[name] = (
                errors.get(controller) or cgroup_notes.get(controller) or "cgroups disabled"
            )

    active["rlimits"], notes["rlimits"] = rlimits_layer(report, limits)

    active["no_new_privs"] = (
        bool(report.get("no_new_privs")) and status_field(pid, "NoNewPrivs") == "1"
    )
    if not active["no_new_privs"]:
        notes["no_new_privs"] = "PR_SET_NO_NEW_PRIVS is not set"

    writes = report.get("system_writes", {})
    writable = [path for path, outcome in writes.items() if outcome == "writable"]
    active["readonly_root"] = bool(writes) and not writable
    notes["readonly_root"] = (
        "writes refused: " + ", ".join(f"{p} ({o})" for p, o in writes.items())
        if active["readonly_root"]
        else f"writable: {', '.join(writable) or 'unknown'}"
    )

    active["tmpfs_workdir"], notes["tmpfs_workdir"] = tmpfs_workdir_layer(
        report, otherwise="the work dir is a host directory (no private tmpfs without bubblewrap)"
    )

    allowed = set(sandbox_environment("/")) | {"PWD", "LC_CTYPE"}
    active["cleared_env"], notes["cleared_env"] = cleared_env_layer(report, allowed)
    return caps
