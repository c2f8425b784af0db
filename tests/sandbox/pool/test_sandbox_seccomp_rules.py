"""Issue #40, class 2: every seccomp rule the sandbox declares is installed, here, and each
is what stops its probe.

On this kernel and this libseccomp (the real ``pyseccomp``): each stage is compiled with
a distinctive errno, loaded into a forked child (dropped to an unprivileged uid when the
tests run as root, so that a missing rule could not do harm), and every rule's probe
(``seccomp_rules.Rule.probe``) is made with ``syscall(2)``: the answer must be the
filter's errno, not the kernel's. Then each stage is compiled without one rule at a time
and that rule's probe must get the kernel's answer instead. A rule that cannot be
installed stops the sandbox from starting.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform

import pytest
from support import machine_skips

from agentenvs.sandbox import SandboxUnavailable
from agentenvs.sandbox.pool import seccomp_rules
from agentenvs.sandbox.pool.seccomp import build_seccomp_program, compile_stage, syscall_number
from agentenvs.sandbox.pool.seccomp_rules import STAGES, Rule
from agentenvs.sandbox.supervisor.restrictions import apply_seccomp

pytestmark = machine_skips.needs("seccomp")

MARKER = errno.ENOTRECOVERABLE
"""An errno no probe gets from the kernel: seen only when the filter answered."""
NOBODY = 65534


def _expected(rule: Rule) -> int:
    return MARKER if rule.errno == errno.EPERM else rule.errno


def _probe_in_child(program: bytes, rules: list[Rule]) -> list[int]:
    """Load ``program`` in a forked, unprivileged child and make each rule's probe."""
    import pyseccomp as sc

    calls = [(syscall_number(sc, r.syscall), r.probe) for r in rules]
    unnumbered = [r.label for r, (number, _) in zip(rules, calls, strict=True) if number is None]
    assert not unnumbered, f"rules with no number on this machine: {unnumbered}"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        answers: list[int] = []
        try:
            os.close(read)
            os.setsid()
            if os.geteuid() == 0:
                os.setgroups([])
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
            if apply_seccomp(program) is not None:
                os._exit(3)
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            for number, args in calls:
                ctypes.set_errno(0)
                rc = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args))
                answers.append(ctypes.get_errno() if rc == -1 else 0)
            os.write(write, json.dumps(answers).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert data, f"the probing child failed (status {status:#x})"
    return json.loads(data)


def _stage(name: str, **options) -> bytes:
    import pyseccomp as sc

    return compile_stage(sc, STAGES[name], deny_errno=MARKER, **options)


def _on_this_arch(rules: tuple[Rule, ...]) -> list[Rule]:
    """Every rule but those whose call libseccomp says this architecture lacks."""
    import pyseccomp as sc

    return [r for r in rules if sc.resolve_syscall(sc.Arch.NATIVE, r.syscall) >= -1]


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_every_declared_rule_is_installed_here(stage: str) -> None:
    rules = _on_this_arch(STAGES[stage])
    answers = _probe_in_child(_stage(stage), rules)
    missing = {
        r.label: errno.errorcode.get(got, got)
        for r, got in zip(rules, answers, strict=True)
        if got != _expected(r)
    }
    assert not missing, f"rules that did not answer their probe: {missing}"


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_each_rule_is_what_stops_its_probe(stage: str) -> None:
    """Without the rule the probe reaches the kernel (its answer is not the filter's):
    no rule's probe is stopped by another rule, so each test above proves its own."""
    rules = _on_this_arch(STAGES[stage])
    stopped_anyway = {}
    for rule in rules:
        (got,) = _probe_in_child(_stage(stage, leave_out=rule), [rule])
        if got == _expected(rule):
            stopped_anyway[rule.label] = errno.errorcode.get(got, got)
    assert not stopped_anyway, f"probes stopped without their rule: {stopped_anyway}"


def test_names_libseccomp_cannot_resolve_are_denied_by_number() -> None:
    """libseccomp 2.5.4 (Debian 12) has no name for the newest calls: their rules are
    added by number, and where the library knows a name its number is ours."""
    import pyseccomp as sc

    table = seccomp_rules.SYSCALL_NUMBERS.get(platform.machine(), {})
    for name, number in table.items():
        resolved = sc.resolve_syscall(sc.Arch.NATIVE, name)
        if resolved >= 0:
            assert resolved == number, (name, resolved, number)
        assert syscall_number(sc, name) == number
    for name in ("setxattrat", "removexattrat", "file_setattr"):
        assert any(r.syscall == name for r in STAGES["read_only"]), name


async def test_a_rule_that_cannot_be_installed_stops_the_sandbox(monkeypatch) -> None:
    """A rule naming a call neither libseccomp nor the table knows: no filter is built
    without it, and a sandbox refuses to start rather than run with less."""
    from agentenvs.sandbox.backends.local.backend import LocalSandbox

    broken = {**STAGES, "read_only": (*STAGES["read_only"], Rule("no_such_syscall"))}
    monkeypatch.setattr("agentenvs.sandbox.pool.seccomp.STAGES", broken)
    with pytest.raises(SandboxUnavailable, match="no_such_syscall"):
        build_seccomp_program()
    sandbox = LocalSandbox(use_bwrap=False)
    with pytest.raises(SandboxUnavailable, match="no_such_syscall"):
        await sandbox.start()
    await sandbox.close()
