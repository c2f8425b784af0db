"""Layer verdicts both process backends draw the same way from a worker's reports.

The host's view of a worker's process (``/proc/<pid>/status``, namespace inodes) and the
probe child's report (rlimits, the work dir's mount, the environment) mean the same for a
bubblewrap worker and a container; each backend's ``assess.py`` adds what only it can see.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

NAMESPACES = ("user", "pid", "mnt", "ipc", "uts", "net")


def status_field(pid: int, name: str) -> str:
    """A field of ``/proc/<pid>/status`` ("" when the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""
    match = re.search(rf"^{name}:\s*(.*)$", text, re.M)
    return match.group(1).strip() if match else ""


def same_namespace(pid: int, kind: str) -> bool | None:
    """Does ``pid`` share our namespace of ``kind`` (None when it cannot be seen)?"""
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino == os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return None


OTHER_PROCESS_NOTE = (
    "the supervisor's filter is loaded, but a run may change another process's priority "
    "(the children's filter did not load): runs could renice or prlimit the supervisor"
)
"""The seccomp layer's note when the probe child could renice its parent (issue #24)."""


def seccomp_stages_note(report: dict, hello: dict) -> str:
    """What the stages stacked on the supervisor's filter do here (issue #24)."""
    refused = report.get("other_process_calls")
    parts = [
        f"calls on other processes refused ({refused})"
        if refused and refused != "allowed"
        else "calls on other processes not checked"
    ]
    if hello.get("read_only_seccomp"):
        parts.append("metadata read-only in forked families")
    else:
        parts.append("no read-only stage: session forks replay")
    return "; ".join(parts)


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
