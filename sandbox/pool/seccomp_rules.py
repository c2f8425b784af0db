"""The seccomp policy as data: every rule, the stage that holds it, and a probe that meets it.

Three programs (see ``pool/seccomp.py`` for why each exists):

- ``base``: loaded by the supervisor itself, inherited by everything in the sandbox;
- ``children``: stacked by every child of the supervisor (runs, holders, cells, forks);
- ``read_only``: stacked by every holder of a session family that forked.

Each :class:`Rule` names a system call, the argument conditions under which it is
refused, and a ``probe``: arguments that meet the rule and are harmless when the rule is
missing (an invalid descriptor, a null or all-ones pointer, a pid that does not exist,
flags the kernel rejects). The tests load each program in a child, make every rule's
probe, and see the rule's own errno; and build each program without one rule at a time
and see its probe get through (``tests/sandbox/pool/test_sandbox_seccomp_rules.py``).

Numbers, not only names: libseccomp resolves a name from its own table, which lags the
kernel (2.5.4 does not know ``setxattrat``, ``removexattrat``, ``file_setattr``...). A
rule whose name the library cannot resolve is added by number (``SYSCALL_NUMBERS``);
a name that neither knows stops the sandbox from starting, never a silent skip.

Argument comparisons: seccomp compares 64-bit values while the kernel reads an ``int``
argument (an ``fcntl``/``ioctl`` command, a ``which``) as its low 32 bits, so an
"equals" rule compares the low 32 bits only (``eq32``); a "not equal" rule compares all
64 bits, which refuses a value that differs only in the high half (the safe direction).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Literal

ALL_ONES = -1
"""A probe argument: an invalid descriptor, an all-ones pointer (EFAULT), invalid flags."""
NO_SUCH_PID = 999_999
"""A probe argument for calls on another process: no process has it here."""
HIGH_BITS = 1 << 32
"""Added to a 32-bit command in a probe: the kernel ignores it, the rule must too."""

# Syscall numbers for names a libseccomp may not know. Numbers from 424 on are the same
# on every architecture (the unified table); the others are x86_64's.
UNIFIED_NUMBERS: dict[str, int] = {
    "pidfd_getfd": 438,
    "mount_setattr": 442,
    "quotactl_fd": 443,
    "move_mount": 429,
    "open_tree": 428,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "clone3": 435,
    "process_madvise": 440,
    "process_mrelease": 448,
    "fchmodat2": 452,
    "setxattrat": 463,
    "removexattrat": 466,
    "open_tree_attr": 467,
    "file_setattr": 469,
}
X86_64_NUMBERS: dict[str, int] = {
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "unshare": 272,
    "setns": 308,
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "chroot": 161,
    "bpf": 321,
    "perf_event_open": 298,
    "userfaultfd": 323,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "open_by_handle_at": 304,
    "name_to_handle_at": 303,
    "fanotify_init": 300,
    "lookup_dcookie": 212,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "reboot": 169,
    "swapon": 167,
    "swapoff": 168,
    "acct": 163,
    "quotactl": 179,
    "syslog": 103,
    "iopl": 172,
    "ioperm": 173,
    "settimeofday": 164,
    "clock_settime": 227,
    "clock_adjtime": 305,
    "adjtimex": 159,
    "vhangup": 153,
    "sethostname": 170,
    "setdomainname": 171,
    "clone": 56,
    "socket": 41,
    "ioctl": 16,
    "fcntl": 72,
    "setpriority": 141,
    "sched_setscheduler": 144,
    "sched_setparam": 142,
    "sched_setattr": 314,
    "sched_setaffinity": 203,
    "ioprio_set": 251,
    "migrate_pages": 256,
    "move_pages": 279,
    "prlimit64": 302,
    "chmod": 90,
    "fchmod": 91,
    "fchmodat": 268,
    "chown": 92,
    "fchown": 93,
    "lchown": 94,
    "fchownat": 260,
    "utime": 132,
    "utimes": 235,
    "utimensat": 280,
    "futimesat": 261,
    "setxattr": 188,
    "lsetxattr": 189,
    "fsetxattr": 190,
    "removexattr": 197,
    "lremovexattr": 198,
    "fremovexattr": 199,
    "flock": 73,
    "inotify_init": 253,
    "inotify_init1": 294,
    "inotify_add_watch": 254,
}
SYSCALL_NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {**X86_64_NUMBERS, **UNIFIED_NUMBERS},
    "aarch64": dict(UNIFIED_NUMBERS),
}
"""Machine (``platform.machine()``) -> name -> number, used where libseccomp has no name."""


@dataclass(frozen=True)
class Cond:
    """One argument condition of a rule (all of a rule's conditions must hold)."""

    index: int
    op: Literal["ne", "eq32", "bit"]
    """``ne``: the 64-bit value differs; ``eq32``: the low 32 bits equal ``value``;
    ``bit``: every bit of ``value`` is set."""
    value: int


@dataclass(frozen=True)
class Rule:
    """Refuse ``syscall`` (with ``errno``) when every condition holds."""

    syscall: str
    when: tuple[Cond, ...] = ()
    probe: tuple[int, ...] = (ALL_ONES,) * 6
    errno: int = errno.EPERM

    @property
    def label(self) -> str:
        conditions = ", ".join(f"arg{c.index} {c.op} {c.value:#x}" for c in self.when)
        return f"{self.syscall}({conditions})" if conditions else self.syscall


def _denied(*names: str) -> tuple[Rule, ...]:
    return tuple(Rule(name) for name in names)


def _eq32(syscall: str, index: int, value: int, arity: int = 3) -> Rule:
    """Refuse ``syscall`` when argument ``index`` is ``value`` (low 32 bits)."""
    probe = [ALL_ONES] * arity
    probe[index] = value | HIGH_BITS
    return Rule(syscall, (Cond(index, "eq32", value),), tuple(probe))


def _not_self(syscall: str, pid_arg: int, arity: int = 3) -> Rule:
    """Refuse ``syscall`` on any process but the caller (pid argument 0)."""
    probe = [0] * arity
    probe[pid_arg] = NO_SUCH_PID
    return Rule(syscall, (Cond(pid_arg, "ne", 0),), tuple(probe))


CLONE_SIGHAND = 0x00000800
"""Added to a clone probe: without CLONE_VM the kernel refuses it (EINVAL), so a probe
whose rule is missing creates no process."""
CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
AF_UNIX, AF_INET = 1, 2
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
PRIO_PROCESS, PRIO_PGRP = 0, 1
IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP = 1, 2
RLIMIT_NOFILE = 7

BASE_RULES: tuple[Rule, ...] = (
    # debugging / reading other processes
    *_denied("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"),
    # namespaces, mounts, root changes
    *_denied("unshare", "setns", "mount", "umount2", "pivot_root", "chroot"),
    *_denied("mount_setattr", "move_mount", "open_tree", "open_tree_attr"),
    *_denied("fsopen", "fsconfig", "fsmount", "fspick"),
    # kernel attack surface
    *_denied("io_uring_setup", "io_uring_enter", "io_uring_register", "bpf"),
    *_denied("perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key"),
    *_denied("open_by_handle_at", "name_to_handle_at", "fanotify_init", "lookup_dcookie"),
    # the machine itself
    *_denied("kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module"),
    *_denied("reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog"),
    *_denied("iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex"),
    *_denied("vhangup", "sethostname", "setdomainname"),
    # clone3 passes its flags in memory, where a filter cannot look: it "does not exist"
    # (ENOSYS), and libc falls back to clone(), whose flags are checked below
    Rule("clone3", (), (0, 0), errno=errno.ENOSYS),
    *(
        Rule("clone", (Cond(0, "bit", bit),), (bit | CLONE_SIGHAND, 0, 0, 0, 0))
        for bit in CLONE_NAMESPACE_FLAGS.values()
    ),
    # only Unix-domain sockets (multiprocessing uses them); no IP, netlink or packet
    Rule("socket", (Cond(0, "ne", AF_UNIX),), (AF_INET, ALL_ONES, 0)),
    _eq32("ioctl", 1, TIOCSTI),
    _eq32("ioctl", 1, TIOCLINUX),
)
"""The supervisor's own filter: the kernel's attack surface and every escape route."""

CHILDREN_RULES: tuple[Rule, ...] = (
    _not_self("setpriority", 1),
    Rule("setpriority", (Cond(0, "ne", PRIO_PROCESS),), (PRIO_PGRP, 0, 0)),
    _not_self("sched_setscheduler", 0),
    _not_self("sched_setparam", 0, 2),
    _not_self("sched_setattr", 0),
    _not_self("sched_setaffinity", 0),
    Rule("ioprio_set", (Cond(1, "ne", 0),), (IOPRIO_WHO_PROCESS, NO_SUCH_PID, 0)),
    Rule("ioprio_set", (Cond(0, "ne", IOPRIO_WHO_PROCESS),), (IOPRIO_WHO_PGRP, 0, 0)),
    _not_self("migrate_pages", 0, 4),
    _not_self("move_pages", 0, 6),
    # prlimit64(pid, resource, new, old): setting (new != NULL) only on the caller
    Rule(
        "prlimit64",
        (Cond(0, "ne", 0), Cond(2, "ne", 0)),
        (NO_SUCH_PID, RLIMIT_NOFILE, ALL_ONES, 0),
    ),
    # calls on another process through a pidfd, which a filter cannot compare
    *_denied("process_madvise", "process_mrelease"),
)
"""Calls that act on another process (scheduling, priority, affinity, limits, memory):
only on the caller itself, so no run reaches the supervisor and no branch its family."""

FCNTL_SHARED_STATE = {
    "F_SETLK": 6,
    "F_SETLKW": 7,
    "F_OFD_SETLK": 37,
    "F_OFD_SETLKW": 38,
    "F_SETLEASE": 1024,
    "F_NOTIFY": 1026,
    "F_SET_RW_HINT": 1036,
    "F_SET_FILE_RW_HINT": 1038,
}
"""``fcntl`` commands that change state other processes see on a shared file: locks,
leases, directory notifications, write-life hints (reading them stays allowed)."""
METADATA_IOCTLS = {
    "FS_IOC_SETFLAGS": 0x40086602,
    "FS_IOC32_SETFLAGS": 0x40046602,
    "FS_IOC_FSSETXATTR": 0x401C5820,
    "FS_IOC_SETVERSION": 0x40087602,
    "FS_IOC32_SETVERSION": 0x40047602,
}

READ_ONLY_RULES: tuple[Rule, ...] = (
    # modes and owners
    *_denied("chmod", "fchmod", "fchmodat", "fchmodat2"),
    *_denied("chown", "fchown", "lchown", "fchownat"),
    # times
    *_denied("utime", "utimes", "utimensat", "futimesat"),
    # extended attributes and inode flags
    *_denied("setxattr", "lsetxattr", "fsetxattr", "setxattrat"),
    *_denied("removexattr", "lremovexattr", "fremovexattr", "removexattrat"),
    Rule("file_setattr"),
    *(_eq32("ioctl", 1, request) for request in METADATA_IOCTLS.values()),
    # locks, leases, notifications, hints
    Rule("flock"),
    *(_eq32("fcntl", 1, command) for command in FCNTL_SHARED_STATE.values()),
    # watching the family's files being read
    *_denied("inotify_init", "inotify_init1", "inotify_add_watch"),
)
"""What a forked family may not do to the files its branches share (one tmpfs): change
any file's mode, owner, times, xattrs, flags, locks, leases or hints, or watch it."""

STAGES: dict[str, tuple[Rule, ...]] = {
    "base": BASE_RULES,
    "children": CHILDREN_RULES,
    "read_only": READ_ONLY_RULES,
}
