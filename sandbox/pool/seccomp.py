"""The seccomp policy: which system calls sandboxed code may not make.

The filter is compiled on the host with ``pyseccomp`` (libseccomp) into a classic-BPF
program; the supervisor loads it into itself before serving, so every execution inherits
it and cannot remove it. Default allow, with a deny list: a default-deny list would break
numpy/sympy on the next libc update, while the calls below are exactly the kernel attack
surface and escape routes that untrusted Python has no business using. Foreign
architectures (x32, i386 through ``int 0x80``) are killed by libseccomp's arch check.

Two more programs (``SeccompProgram.stages``, issue #24) are stacked on it later, by
the processes that must lose more than the supervisor:

- ``children``: loaded by every child of the supervisor (runs, session holders and
  cells, forks): the calls that change *another* process's scheduling, priority, CPU
  affinity, I/O priority, memory placement or resource limits are allowed only on the
  caller itself (pid/who 0). User code runs under the supervisor's uid, so without it a
  run could renice, ``SCHED_IDLE``, pin or ``prlimit`` the supervisor that forks every
  later run, and a forked branch its family's holders. The supervisor keeps these calls
  (it renices long runs, ``processes.py``).
- ``read_only``: loaded by every holder of a session family once it forked, with the
  read-only Landlock layer (``supervisor/forking.py``): no file's mode, owner, times,
  extended attributes, inode flags or locks may change any more. Landlock does not
  cover these, and the family shares one tmpfs: without it a branch could ``chmod`` the
  parent's files away from it, and modes, times, xattrs and locks would be a channel
  between branches.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import tempfile
from dataclasses import dataclass, field

DENIED_SYSCALLS: tuple[str, ...] = (
    # debugging / reading other processes
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    # namespaces, mounts, root changes
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    # kernel attack surface
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "lookup_dcookie",
    # the machine itself
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "syslog",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "sethostname",
    "setdomainname",
)

CLONE_NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
PRIO_PROCESS = 0
IOPRIO_WHO_PROCESS = 1
SELF_ONLY_SYSCALLS: tuple[tuple[str, int], ...] = (
    # (name, index of the pid argument): denied unless that argument is 0 (the caller)
    ("setpriority", 1),
    ("sched_setscheduler", 0),
    ("sched_setparam", 0),
    ("sched_setattr", 0),
    ("sched_setaffinity", 0),
    ("ioprio_set", 1),
    ("migrate_pages", 0),
    ("move_pages", 0),
)
"""Calls that act on the process a pid argument names: only pid 0 (the caller) passes.
``setpriority`` and ``ioprio_set`` also need ``which`` to name a process (a process
group or a uid would include the supervisor); ``prlimit64`` is below (reading another
process's limits stays allowed, setting them does not)."""
OTHER_PROCESS_DENIED: tuple[str, ...] = ("process_madvise",)
"""Calls on another process through a pidfd, which a filter cannot compare: denied."""
METADATA_SYSCALLS: tuple[str, ...] = (
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "setxattrat",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "removexattrat",
    "flock",
)
"""What the ``read_only`` stage denies outright: every change of a file's mode, owner,
times or extended attributes, and ``flock`` (a lock is state the family would share)."""
METADATA_IOCTLS = (
    0x40086602,  # FS_IOC_SETFLAGS (chattr: noatime, nodump...)
    0x40046602,  # FS_IOC32_SETFLAGS
    0x401C5820,  # FS_IOC_FSSETXATTR
)
LOCK_FCNTLS = (6, 7, 37, 38, 1024)
"""F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE: locks and leases on files
the family shares (reading them, ``F_GETLK``, stays allowed)."""
TIOCSTI = 0x5412
TIOCLINUX = 0x541C


@dataclass(frozen=True)
class SeccompProgram:
    bpf: bytes | None
    reason: str = ""
    """Why there is no program, when there is none."""
    stages: dict[str, bytes] = field(default_factory=dict)
    """Programs stacked on it later: ``children`` (no calls on other processes) and
    ``read_only`` (no metadata changes, once a family forked)."""


def build_seccomp_program() -> SeccompProgram:
    """Compile the policy for this machine's architecture."""
    try:
        import pyseccomp as sc
    except Exception as exc:  # missing package or missing libseccomp.so
        return SeccompProgram(None, f"pyseccomp/libseccomp unavailable: {exc}")
    try:
        deny = sc.ERRNO(errno.EPERM)
        filt = sc.SyscallFilter(sc.ALLOW)
        for name in DENIED_SYSCALLS:
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                filt.add_rule(deny, name)  # fails for names that are not syscalls here
        # clone3 passes its flags in memory, where a filter cannot look: pretend it does not
        # exist, and libc falls back to clone(), whose flags we can check.
        filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for bit in _bits(CLONE_NAMESPACE_FLAGS):
            filt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
        # Only Unix-domain sockets (multiprocessing uses them); no IP, netlink or packet.
        filt.add_rule(deny, "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
        filt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
        filt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, TIOCLINUX))
        bpf = _export(filt)
        stages = {
            "children": _export(_child_filter(sc, deny)),
            "read_only": _export(_read_only_filter(sc, deny)),
        }
    except Exception as exc:
        return SeccompProgram(None, f"could not compile the seccomp filter: {exc}")
    if any(not program or len(program) % 8 for program in (bpf, *stages.values())):
        return SeccompProgram(None, "libseccomp produced an empty or malformed program")
    return SeccompProgram(bpf, stages=stages)


def _child_filter(sc, deny):
    """Calls on other processes: allowed only with pid/who 0, the caller (issue #24).

    A pid argument is compared as 64 bits: a value whose low 32 bits are 0 but not its
    high ones (which the kernel would truncate to 0, the caller) is refused, never the
    other way round.
    """
    filt = sc.SyscallFilter(sc.ALLOW)
    for name, pid_arg in SELF_ONLY_SYSCALLS:
        try:
            filt.add_rule(deny, name, sc.Arg(pid_arg, sc.NE, 0))
        except (OSError, ValueError, RuntimeError):
            continue  # not a system call on this architecture
    filt.add_rule(deny, "setpriority", sc.Arg(0, sc.NE, PRIO_PROCESS))
    filt.add_rule(deny, "ioprio_set", sc.Arg(0, sc.NE, IOPRIO_WHO_PROCESS))
    # prlimit64(pid, resource, new, old): setting (new != NULL) only on the caller
    filt.add_rule(deny, "prlimit64", sc.Arg(0, sc.NE, 0), sc.Arg(2, sc.NE, 0))
    for name in OTHER_PROCESS_DENIED:
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            filt.add_rule(deny, name)
    return filt


def _read_only_filter(sc, deny):
    """No metadata change on any file: for the holders of a family that forked."""
    filt = sc.SyscallFilter(sc.ALLOW)
    for name in METADATA_SYSCALLS:
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            filt.add_rule(deny, name)
    for request in METADATA_IOCTLS:
        filt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    for command in LOCK_FCNTLS:
        for name in ("fcntl", "fcntl64"):
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                filt.add_rule(deny, name, sc.Arg(1, sc.EQ, command))
    return filt


def _export(filt) -> bytes:
    with tempfile.TemporaryFile() as f:
        filt.export_bpf(f)
        f.seek(0)
        return f.read()


def _bits(mask: int) -> list[int]:
    return [1 << i for i in range(mask.bit_length()) if mask >> i & 1]


__all__ = [
    "DENIED_SYSCALLS",
    "METADATA_SYSCALLS",
    "OTHER_PROCESS_DENIED",
    "SELF_ONLY_SYSCALLS",
    "SeccompProgram",
    "build_seccomp_program",
]
