"""What an execution's child can do, measured from inside it (the capability probe).

The host asks once per sandbox; the child is restricted exactly like an execution, so the
report (rlimits, seccomp mode, which system dirs are writable, sockets, interfaces) is
what the code would find, not what the configuration intended.
"""

from __future__ import annotations

import errno
import os
import resource
import socket


def probe_report(state: dict, workdir: str) -> dict:
    """The report, from inside a restricted child (``state``: what restricting it gave)."""
    report = {"restrict": state, "uid": os.getuid(), "env_keys": sorted(os.environ)}
    report["rlimits"] = {
        name: list(resource.getrlimit(getattr(resource, f"RLIMIT_{name}")))
        for name in ("CPU", "AS", "FSIZE", "NPROC", "NOFILE", "CORE")
    }
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    report["no_new_privs"] = status.get("NoNewPrivs", "").strip() == "1"
    report["seccomp_mode"] = status.get("Seccomp", "").strip()
    writes = {}
    for target in ("/", "/usr", "/etc", "/var/tmp", "/home"):
        path = os.path.join(target, ".agentenvs-probe")
        try:
            with open(path, "w") as f:
                f.write("x")
            os.unlink(path)
            writes[target] = "writable"
        except OSError as exc:
            writes[target] = errno.errorcode.get(exc.errno or 0, str(exc))
    report["system_writes"] = writes
    try:
        with open(os.path.join(workdir, ".agentenvs-probe"), "w") as f:
            f.write("x")
        os.unlink(os.path.join(workdir, ".agentenvs-probe"))
        report["workdir_writable"] = True
    except OSError:
        report["workdir_writable"] = False
    report["workdir_mount"] = None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if left.split()[4] == workdir:
                    fstype, _source, options = right.split()[:3]
                    report["workdir_mount"] = {"fstype": fstype, "options": options}
    except OSError:
        pass
    report["other_process_calls"] = other_process_calls()
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
        report["inet_socket"] = "allowed"
    except OSError as exc:
        report["inet_socket"] = errno.errorcode.get(exc.errno or 0, str(exc))
    try:
        with open("/proc/net/dev") as f:
            report["interfaces"] = [line.split(":")[0].strip() for line in f.readlines()[2:]]
    except OSError:
        report["interfaces"] = None
    return report


def other_process_calls() -> str:
    """Whether this child may change its parent's priority ("allowed", or the errno).

    The parent is the supervisor; the priority set is the one it already has, so the
    probe changes nothing even where the call is allowed (issue #24: the children's
    seccomp filter refuses every call on another process's scheduling and limits).
    """
    parent = os.getppid()
    try:
        os.setpriority(os.PRIO_PROCESS, parent, os.getpriority(os.PRIO_PROCESS, parent))
        return "allowed"
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))
