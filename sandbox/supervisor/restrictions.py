"""What a forked child may no longer do: rlimits, no_new_privs, Landlock, seccomp.

Everything here is irreversible by design: a process that calls it cannot undo it, and
its children inherit it. The seccomp filter is compiled on the host and loaded once into
the supervisor (every child inherits it); a second one, the calls on other processes
(scheduling, priority, affinity, limits: only on the caller itself), is loaded by every
child on top (``CHILD_SECCOMP``; the supervisor keeps those calls to renice long runs);
the Landlock ruleset is prepared once in the supervisor and applied in each child;
rlimits are set per execution (soft = hard, so the code cannot raise them again).
"""

from __future__ import annotations

import ctypes
import os
import resource
import struct

PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

# Landlock: the syscall numbers are the same on x86_64 and aarch64 (unified table).
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
LL_EXECUTE = 1 << 0
LL_WRITE_FILE = 1 << 1
LL_READ_FILE = 1 << 2
LL_READ_DIR = 1 << 3
LL_TRUNCATE = 1 << 14
LL_IOCTL_DEV = 1 << 15
LL_NET_BIND_TCP = 1 << 0
LL_NET_CONNECT_TCP = 1 << 1
LL_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
LL_SCOPE_SIGNAL = 1 << 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]


def prctl(option: int, arg2: int = 0) -> int:
    return _libc.prctl(option, arg2, 0, 0, 0)


SUPERVISOR_NAME = b"sandbox-super"
IDLE_NAME = b"sandbox-idle"
"""The process name of a pre-forked child still waiting for its request."""


def set_name(name: bytes) -> None:
    buf = ctypes.create_string_buffer(name[:15])
    _libc.prctl(PR_SET_NAME, ctypes.addressof(buf), 0, 0, 0)


class Landlock:
    """A Landlock ruleset prepared once in the supervisor, applied in each child.

    Read-only beneath ``read`` paths, read-write beneath ``write`` paths, write access to
    the single files in ``write_files`` (``/dev/null``...). Everything else the process
    could reach through the mounts is denied by the kernel, and (ABI >= 4) every TCP
    bind/connect; (ABI >= 6) signals to processes outside the child's domain (the
    supervisor) are refused too.
    """

    def __init__(self, spec: dict, *, scope_signals: bool) -> None:
        self.fd = -1
        self.error: str | None = None
        self.abi = int(
            _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
        )
        if self.abi < 1:
            self.error = f"kernel has no Landlock ({os.strerror(ctypes.get_errno())})"
            self.abi = 0
            return
        fs = (1 << 13) - 1  # ABI 1: execute .. make_sym
        if self.abi >= 2:
            fs |= 1 << 13  # refer
        if self.abi >= 3:
            fs |= LL_TRUNCATE
        if self.abi >= 5:
            fs |= LL_IOCTL_DEV
        net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP if self.abi >= 4 else 0
        scoped = 0
        if self.abi >= 6:
            scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | (LL_SCOPE_SIGNAL if scope_signals else 0)
        if self.abi >= 6:
            attr = struct.pack("=QQQ", fs, net, scoped)
        elif self.abi >= 4:
            attr = struct.pack("=QQ", fs, net)
        else:
            attr = struct.pack("=Q", fs)
        buf = ctypes.create_string_buffer(attr, len(attr))
        fd = int(_libc.syscall(SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), 0))
        if fd < 0:
            self.error = f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"
            return
        self.fd = fd
        os.set_inheritable(fd, False)
        read = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR
        file_rights = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | (fs & LL_TRUNCATE)
        for path in spec.get("read", []):
            self._add(path, read, read & file_rights)
        for path in spec.get("write", []):
            self._add(path, fs, fs & file_rights)
        for path in spec.get("write_files", []):
            self._add(path, None, LL_READ_FILE | LL_WRITE_FILE | (fs & LL_TRUNCATE))
        self.scoped = scoped

    def _add(self, path: str, dir_rights: int | None, file_rights: int) -> None:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # absent paths are simply not granted
        try:
            rights = dir_rights if os.path.isdir(path) else file_rights
            if rights is None:
                return
            attr = struct.pack("=Qi", rights, pfd)
            buf = ctypes.create_string_buffer(attr, len(attr))
            if (
                _libc.syscall(SYS_LANDLOCK_ADD_RULE, self.fd, LANDLOCK_RULE_PATH_BENEATH, buf, 0)
                != 0
            ):
                self.error = f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}"
        finally:
            os.close(pfd)

    def restrict_self(self) -> bool:
        if self.fd < 0:
            return False
        return _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, self.fd, 0) == 0


def apply_seccomp(bpf: bytes) -> str | None:
    """Load a classic-BPF seccomp program into this process; None on success."""

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    if len(bpf) % 8:
        return "seccomp program size is not a multiple of 8"
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = SockFprog(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
        return f"PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}"
    rc = _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0)
    if rc != 0:
        return f"PR_SET_SECCOMP failed: {os.strerror(ctypes.get_errno())}"
    return None


def vm_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _set_limit(kind: int, value: int) -> None:
    """Set soft = hard = value, never above the current hard limit (that would fail)."""
    _, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))


CHILD_SECCOMP: list[bytes] = []
"""The program every child of the supervisor loads (set by the supervisor at start-up)."""
READ_ONLY_SECCOMP: list[bytes] = []
"""The program a holder loads with its read-only Landlock layer once its family forked:
no file's mode, owner, times, xattrs, flags or locks may change (``forking``)."""


class RestrictionFailed(RuntimeError):
    """A child could not drop what it must: it never runs user code."""


def drop_metadata_changes() -> str | None:
    """Load ``READ_ONLY_SECCOMP`` (irreversible); why not, or None."""
    if not READ_ONLY_SECCOMP:
        return "the read-only seccomp filter was not given by the host"
    for bpf in READ_ONLY_SECCOMP:
        error = apply_seccomp(bpf)
        if error is not None:
            return f"the read-only seccomp filter: {error}"
    return None


def restrict_static(landlock: Landlock | None) -> dict:
    """The restrictions that do not depend on the request. Irreversible by design."""
    state = {}
    for bpf in CHILD_SECCOMP:
        error = apply_seccomp(bpf)
        if error is not None:  # fail closed: this child exits before any user code
            raise RestrictionFailed(f"the children's seccomp filter: {error}")
    state["child_seccomp"] = bool(CHILD_SECCOMP)
    prctl(PR_SET_DUMPABLE, 1)  # the supervisor is not dumpable; its children may be
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # under memory pressure, the code dies before the supervisor
    except OSError:
        pass
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    state["no_new_privs"] = prctl(PR_SET_NO_NEW_PRIVS, 1) == 0
    state["landlock"] = bool(landlock and landlock.restrict_self())
    if landlock is not None and landlock.fd >= 0 and not state["landlock"]:
        # the supervisor prepared a ruleset: a child that cannot enter it never runs code
        raise RestrictionFailed(f"Landlock: {os.strerror(ctypes.get_errno())}")
    return state


def apply_limits(limits: dict, *, cpu: tuple[int, int] | None, vm_base: int | None = None) -> None:
    """rlimits for one execution; soft = hard, so the code cannot raise them again."""
    if cpu is not None:
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft_cpu, hard_cpu = cpu
        if hard != resource.RLIM_INFINITY:
            hard_cpu = min(hard_cpu, hard)
            soft_cpu = min(soft_cpu, hard_cpu)
        resource.setrlimit(resource.RLIMIT_CPU, (soft_cpu, hard_cpu))
    memory = limits.get("memory_bytes")
    if memory:
        base = vm_bytes() if vm_base is None else vm_base
        _set_limit(resource.RLIMIT_AS, base + int(memory))
    if limits.get("max_file_bytes") is not None:
        _set_limit(resource.RLIMIT_FSIZE, int(limits["max_file_bytes"]))
    if limits.get("max_processes"):
        _set_limit(resource.RLIMIT_NPROC, int(limits["max_processes"]))
    _set_limit(resource.RLIMIT_NOFILE, int(limits.get("max_open_files", 512)))
    _set_limit(resource.RLIMIT_MEMLOCK, 0)
    _set_limit(resource.RLIMIT_MSGQUEUE, 0)


def restrict_process(
    limits: dict, landlock: Landlock | None, *, cpu: tuple[int, int] | None
) -> dict:
    """Drop what this (freshly forked) process may do. Irreversible by design."""
    apply_limits(limits, cpu=cpu)
    return restrict_static(landlock)


def cpu_limits(limits: dict) -> tuple[int, int]:
    cpu = float(limits.get("cpu_seconds") or float(limits.get("timeout", 10)) + 1)
    soft = max(1, int(cpu + 0.999))
    return soft, soft + 1
