"""The seccomp policy: which system calls sandboxed code may not make.

The filter is compiled on the host with ``pyseccomp`` (libseccomp) into a classic-BPF
program; the supervisor loads it into itself before serving, so every execution inherits
it and cannot remove it. Default allow, with a deny list: a default-deny list would break
numpy/sympy on the next libc update, while the calls below are exactly the kernel attack
surface and escape routes that untrusted Python has no business using. Foreign
architectures (x32, i386 through ``int 0x80``) are killed by libseccomp's arch check.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import tempfile
from dataclasses import dataclass

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
TIOCSTI = 0x5412
TIOCLINUX = 0x541C


@dataclass(frozen=True)
class SeccompProgram:
    bpf: bytes | None
    reason: str = ""
    """Why there is no program, when there is none."""


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
        with tempfile.TemporaryFile() as f:
            filt.export_bpf(f)
            f.seek(0)
            bpf = f.read()
    except Exception as exc:
        return SeccompProgram(None, f"could not compile the seccomp filter: {exc}")
    if not bpf or len(bpf) % 8:
        return SeccompProgram(None, "libseccomp produced an empty or malformed program")
    return SeccompProgram(bpf)


def _bits(mask: int) -> list[int]:
    return [1 << i for i in range(mask.bit_length()) if mask >> i & 1]


__all__ = ["DENIED_SYSCALLS", "SeccompProgram", "build_seccomp_program"]
