"""The seccomp filters: the policy of ``seccomp_rules`` compiled for this machine.

The filters are compiled on the host with ``pyseccomp`` (libseccomp) into classic-BPF
programs; the supervisor loads the first into itself before serving, so every execution
inherits it and cannot remove it. Default allow, with a deny list: a default-deny list
would break numpy/sympy on the next libc update, while the calls denied are exactly the
kernel attack surface and escape routes that untrusted Python has no business using.
Foreign architectures (x32, i386 through ``int 0x80``) are killed by libseccomp's arch
check.

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
  extended attributes, inode flags, locks, leases or hints may change any more, and no
  file may be watched. Landlock does not cover these, and the family shares one tmpfs:
  without it they would be a channel between branches.

Fail closed (issue #40): every rule is installed or the sandbox does not start. A name
the library does not know is added by its number (``seccomp_rules.SYSCALL_NUMBERS``); a
number the library resolves differently from ours, or a name neither knows, raises
:class:`~agentenvs.sandbox.base.SandboxUnavailable`. Only a machine without libseccomp
at all gets no filter (the capability report says so, and forks are refused).
"""

from __future__ import annotations

import errno
import platform
import tempfile
from dataclasses import dataclass, field

from agentenvs.sandbox.base import SandboxUnavailable
from agentenvs.sandbox.pool.seccomp_rules import STAGES, SYSCALL_NUMBERS, Cond, Rule

NOT_ON_THIS_ARCH = -2
"""libseccomp's negative pseudo-numbers (below -1) name calls absent from an architecture."""


@dataclass(frozen=True)
class SeccompProgram:
    bpf: bytes | None
    reason: str = ""
    """Why there is no program, when there is none."""
    stages: dict[str, bytes] = field(default_factory=dict)
    """Programs stacked on it later: ``children`` (no calls on other processes) and
    ``read_only`` (no metadata changes, once a family forked)."""


def syscall_number(sc, name: str, machine: str | None = None) -> int | None:
    """``name``'s number on this machine; ``None`` where it is no system call at all.

    libseccomp's answer is checked against ours where both know the name; a name only
    one of them knows is resolved by that one; a name neither knows cannot be denied,
    which stops the sandbox from starting (``SandboxUnavailable``).
    """
    ours = SYSCALL_NUMBERS.get(machine or platform.machine(), {}).get(name)
    try:
        resolved = int(sc.resolve_syscall(sc.Arch.NATIVE, name))
    except (OSError, ValueError, RuntimeError):
        resolved = -1
    if resolved >= 0:
        if ours is not None and ours != resolved:
            raise SandboxUnavailable(
                f"seccomp: libseccomp numbers {name} {resolved}, the sandbox's table {ours}: "
                "refusing to guess which the kernel means"
            )
        return resolved
    if ours is not None:
        return ours
    if resolved <= NOT_ON_THIS_ARCH:
        return None  # libseccomp knows it: not a system call on this architecture
    raise SandboxUnavailable(
        f"seccomp: neither libseccomp nor the sandbox's table knows the system call {name!r} "
        f"on {platform.machine()}: its rule cannot be installed"
    )


def _argument(sc, cond: Cond):
    if cond.op == "ne":
        return sc.Arg(cond.index, sc.NE, cond.value)
    if cond.op == "eq32":
        return sc.Arg(cond.index, sc.MASKED_EQ, 0xFFFFFFFF, cond.value)
    return sc.Arg(cond.index, sc.MASKED_EQ, cond.value, cond.value)  # "bit"


def compile_stage(
    sc, rules: tuple[Rule, ...], *, deny_errno: int = errno.EPERM, leave_out: Rule | None = None
) -> bytes:
    """One stage's BPF program; any rule that cannot be added raises ``SandboxUnavailable``.

    ``deny_errno`` replaces EPERM (the tests use a distinctive one to tell the filter's
    answer from the kernel's); ``leave_out`` drops one rule (the tests' proof that each
    rule is what stops its probe).
    """
    filt = sc.SyscallFilter(sc.ALLOW)
    for rule in rules:
        if rule == leave_out:
            continue
        number = syscall_number(sc, rule.syscall)
        if number is None:
            continue
        code = deny_errno if rule.errno == errno.EPERM else rule.errno
        try:
            filt.add_rule(sc.ERRNO(code), number, *(_argument(sc, c) for c in rule.when))
        except (OSError, ValueError, RuntimeError) as exc:
            raise SandboxUnavailable(
                f"seccomp: the rule {rule.label} cannot be installed: {exc}"
            ) from exc
    with tempfile.TemporaryFile() as f:
        filt.export_bpf(f)
        f.seek(0)
        program = f.read()
    if not program or len(program) % 8:
        raise SandboxUnavailable("seccomp: libseccomp produced an empty or malformed program")
    return program


def build_seccomp_program(
    *, deny_errno: int = errno.EPERM, leave_out: Rule | None = None
) -> SeccompProgram:
    """Compile every stage for this machine; ``SandboxUnavailable`` if a rule cannot be."""
    try:
        import pyseccomp as sc
    except Exception as exc:  # missing package or missing libseccomp.so
        return SeccompProgram(None, f"pyseccomp/libseccomp unavailable: {exc}")
    programs = {
        name: compile_stage(sc, rules, deny_errno=deny_errno, leave_out=leave_out)
        for name, rules in STAGES.items()
    }
    base = programs.pop("base")
    return SeccompProgram(base, stages=programs)


__all__ = ["SeccompProgram", "build_seccomp_program", "compile_stage", "syscall_number"]
