"""Measure which isolation layers a started local worker really has.

Two viewpoints: the host looks at the supervisor process from outside (namespace
inodes, real uid, seccomp mode, cgroup membership), and a probe child, restricted
exactly like an execution, reports from inside (rlimits, Landlock, what it can write,
its work dir's mount, its environment).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from agentenvs.sandbox.base import Capabilities
from agentenvs.sandbox.local.launch import sandbox_environment
from agentenvs.sandbox.local.worker import Worker

NAMESPACES = ("user", "pid", "mnt", "ipc", "uts", "net")


def _status_field(pid: int, name: str) -> str:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""
    match = re.search(rf"^{name}:\s*(.*)$", text, re.M)
    return match.group(1).strip() if match else ""


def _same_namespace(pid: int, kind: str) -> bool | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino == os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return None


def _in_cgroup(pid: int, path: Path | None) -> bool:
    if path is None:
        return False
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    return any(line.endswith("/" + path.name) for line in text.splitlines())


def rlimits_layer(report: dict, limits: dict) -> tuple[bool, str]:
    """Are the per-execution rlimits the supervisor reported all set (and a note)?"""
    rlimits = report.get("rlimits", {})
    finite = {
        name
        for name, value in rlimits.items()
        if value and value[0] != -1 and value[0] < 2**62 and (name != "CORE" or value[0] == 0)
    }
    wanted = {"CPU", "AS", "FSIZE", "NPROC", "NOFILE", "CORE"}
    if not limits.get("memory_bytes"):
        wanted.discard("AS")
    if wanted <= finite:
        return True, ", ".join(f"{k}={v[0]}" for k, v in sorted(rlimits.items()))
    return False, f"not set: {', '.join(sorted(wanted - finite))}"


def tmpfs_workdir_layer(report: dict, *, otherwise: str) -> tuple[bool, str]:
    """Is the work dir a writable, size-limited tmpfs (note ``otherwise`` if not)?"""
    mount = report.get("workdir_mount") or {}
    active = (
        mount.get("fstype") == "tmpfs"
        and "size=" in mount.get("options", "")
        and bool(report.get("workdir_writable"))
    )
    return active, (f"tmpfs {mount.get('options', '')}" if active else otherwise)


def cleared_env_layer(report: dict, allowed: set[str]) -> tuple[bool, str]:
    """Does sandboxed code see no environment variable beyond ``allowed``?"""
    extra = sorted(set(report.get("env_keys", [])) - allowed)
    active = bool(report) and not extra
    return active, (
        f"only: {', '.join(report.get('env_keys', []))}" if active else f"extra: {extra}"
    )


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

    shared = [kind for kind in NAMESPACES if _same_namespace(pid, kind) is not False]
    active["namespaces"] = worker.plan.mode == "bwrap" and not shared
    if not active["namespaces"]:
        notes["namespaces"] = (
            plan_notes.get("namespaces") or f"shares the host's {', '.join(shared)} namespace(s)"
        )
    else:
        notes["namespaces"] = "bubblewrap: " + ", ".join(NAMESPACES)

    own_netns = _same_namespace(pid, "net") is False
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

    uids = _status_field(pid, "Uid").split()
    active["unprivileged_uid"] = bool(uids) and all(u != "0" for u in uids[:2])
    notes["unprivileged_uid"] = (
        f"host uid {uids[0] if uids else '?'}"
        if active["unprivileged_uid"]
        else "the sandbox runs as root on the host (start the host as root to get a dedicated uid)"
    )

    seccomp_mode = _status_field(pid, "Seccomp")
    active["seccomp"] = seccomp_mode == "2" and report.get("seccomp_mode") == "2"
    if not active["seccomp"]:
        notes["seccomp"] = (
            seccomp_reason or worker.hello.get("seccomp_error") or f"seccomp mode {seccomp_mode!r}"
        )

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
        bool(report.get("no_new_privs")) and _status_field(pid, "NoNewPrivs") == "1"
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
