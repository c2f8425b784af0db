"""The one list of skips the suite allows: what this machine cannot offer.

A test is skipped only through this module, and only for a condition listed in
:data:`CONDITIONS`: a named fact about the machine, with its reason and a probe that asks
the machine itself (is the binary there, does the kernel answer the syscall, can an
unprivileged process create a user namespace), never whether our own code managed to
start. Whatever our code gets wrong (an image that does not build, a first container that
does not run, a server that does not come up) is a failure, not a skip::

    pytestmark = machine_skips.needs(*machine_skips.LOCAL_SANDBOX)  # a marker
    machine_skips.require("landlock")                                # inside a fixture

Both skip with a reason that starts with the tag ``machine-skip[<name>]:``.
``support.skip_policy`` (loaded by tests/conftest.py) lists every skip of a run and fails
the run on any skip that does not carry the tag of a listed condition the machine really
lacks (it probes again): see ``make test``.

The capability tests use the same probes the other way round: every isolation layer the
README lists (seccomp, Landlock, cgroups, an unprivileged uid) must be active in the
sandbox wherever the machine offers it (:func:`offered_layers`).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TAG = "machine-skip"
TAG_PATTERN = re.compile(rf"^{TAG}\[([a-z0-9-]+)\]: ")
MARKER = "machine"
"""``@pytest.mark.machine("bubblewrap", ...)``: skip (tagged) unless the machine offers all."""

UNPRIVILEGED_UID = 65534
"""``nobody``: the uid the probes switch to where a host-root test must act unprivileged."""


@dataclass(frozen=True)
class Condition:
    name: str
    reason: str
    """What the machine lacks, and how to get it; the skip's text after the tag."""
    probe: Callable[[], str | None]
    """None when the machine offers it, else what the machine said."""


# ----------------------------------------------------------------------------- probes


MACHINE_SAYS_NO = 3
"""A probe child's exit status when the machine refused (any other failure is the probe's)."""

_PRELUDE = f"""
import ctypes, os, struct, sys  # first: the interpreter's own files may be root's only
def no(message):
    print(message)
    sys.exit({MACHINE_SAYS_NO})
"""

_DROP_TO_NOBODY = f"""
if os.geteuid() == 0:
    try:
        os.setgroups([])
        os.setgid({UNPRIVILEGED_UID})
        os.setuid({UNPRIVILEGED_UID})
    except OSError as exc:
        no(f"root cannot switch to uid {UNPRIVILEGED_UID}: {{exc}}")
"""


class ProbeError(RuntimeError):
    """A probe failed in a way that says nothing about the machine: a bug to fix."""


def _run_python(code: str, *, python: str = sys.executable, timeout: float = 60) -> str | None:
    """Run ``code`` (after :data:`_PRELUDE`) in a fresh interpreter: None when it exits 0,
    what it printed when it calls ``no(...)``; any other outcome raises :class:`ProbeError`."""
    try:
        done = subprocess.run(
            [python, "-I", "-c", _PRELUDE + code],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProbeError(f"{python}: {exc}") from exc
    if done.returncode == 0:
        return None
    if done.returncode == MACHINE_SAYS_NO:
        return done.stdout.strip() or "refused"
    raise ProbeError(f"the probe crashed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def _probe_bubblewrap() -> str | None:
    return None if shutil.which("bwrap") else "no bwrap on PATH"


def _probe_user_namespaces() -> str | None:
    """An unprivileged process creates a user namespace (what bubblewrap does)."""
    return _run_python(
        _DROP_TO_NOBODY + "libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER\n"
        "    no(f'unshare(CLONE_NEWUSER) as uid {os.getuid()}: '"
        " + os.strerror(ctypes.get_errno()))\n"
    )


def _probe_debian_python() -> str | None:
    if not os.access("/usr/bin/python3", os.X_OK):
        return "no /usr/bin/python3"
    return _run_python(
        "try:\n    import numpy, sympy\nexcept ImportError as exc:\n    no(str(exc))\n",
        python="/usr/bin/python3",
    )


def _probe_unprivileged_uid() -> str | None:
    """Code can run as a non-root uid: we are one, or root can switch to one."""
    if os.geteuid() != 0:
        return None
    return _run_python(_DROP_TO_NOBODY + "assert os.getuid() != 0\n")


def _probe_seccomp() -> str | None:
    """A process installs a seccomp filter (an allow-all one) and is in mode 2 after."""
    return _run_python(
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS\n"
        "    no('PR_SET_NO_NEW_PRIVS: ' + os.strerror(ctypes.get_errno()))\n"
        "insn = ctypes.create_string_buffer(struct.pack('=HBBI', 0x06, 0, 0, 0x7FFF0000), 8)\n"
        "class Prog(ctypes.Structure):\n"
        "    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]\n"
        "prog = Prog(1, ctypes.addressof(insn))  # one instruction: SECCOMP_RET_ALLOW\n"
        "if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER\n"
        "    no('PR_SET_SECCOMP: ' + os.strerror(ctypes.get_errno()))\n"
        "if 'Seccomp:\\t2' not in open('/proc/self/status').read():\n"
        "    no('a filter was installed but /proc/self/status does not say mode 2')\n"
    )


def _probe_landlock() -> str | None:
    """The kernel answers landlock_create_ruleset's version query with an ABI >= 1."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # syscall 444 on every architecture; flags 1: LANDLOCK_CREATE_RULESET_VERSION
    abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi >= 1:
        return None
    return f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}"


def _own_cgroups() -> dict[str, str]:
    """controller ("" for the unified hierarchy) -> this process's cgroup path."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _probe_cgroups() -> str | None:
    """A child group below our own gets a memory and a process-count limit, and takes
    a process: what a sandbox worker's group needs (cgroup v1 or v2)."""
    root = Path("/sys/fs/cgroup")
    try:
        own = _own_cgroups()
    except (OSError, ValueError) as exc:
        return f"/proc/self/cgroup: {exc}"
    name = f"agentenvs-machine-probe-{os.getpid()}"
    if (root / "memory" / "memory.limit_in_bytes").exists():  # v1 (or hybrid)
        groups = {
            "memory": (root / "memory" / own.get("memory", "/").lstrip("/") / name),
            "pids": (root / "pids" / own.get("pids", "/").lstrip("/") / name),
        }
        limits = {"memory": ("memory.limit_in_bytes", "268435456"), "pids": ("pids.max", "64")}
    elif (root / "cgroup.controllers").exists():  # v2
        group = root / own.get("", "/").lstrip("/") / name
        groups = {"memory": group, "pids": group}
        limits = {"memory": ("memory.max", "268435456"), "pids": ("pids.max", "64")}
    else:
        return "no cgroup filesystem at /sys/fs/cgroup"
    made: list[Path] = []
    sleeper = None
    try:
        for controller, group in groups.items():
            if group not in made:
                try:
                    group.mkdir()
                except OSError as exc:
                    return f"mkdir {group}: {exc.strerror}"
                made.append(group)
            knob, value = limits[controller]
            try:
                (group / knob).write_text(value)
            except OSError as exc:
                return f"{controller}: cannot write {group / knob}: {exc.strerror}"
        sleeper = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL)
        for group in made:
            try:
                (group / "cgroup.procs").write_text(str(sleeper.pid))
            except OSError as exc:
                return f"cannot move a process into {group}: {exc.strerror}"
        seen = Path(f"/proc/{sleeper.pid}/cgroup").read_text()
        if sum(line.endswith(f"/{name}") for line in seen.splitlines()) < len(made):
            return f"the process is not in the new group(s): {seen.strip()}"
        return None
    except OSError as exc:
        return str(exc)
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        for group in reversed(made):
            for _ in range(50):  # the killed process leaves its group a moment later
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)


def _probe_podman() -> str | None:
    for binary in ("podman", "runc"):
        if shutil.which(binary) is None:
            return f"no {binary} on PATH"
    if os.geteuid() != 0 and not Path(f"/run/user/{os.geteuid()}").is_dir():
        return f"not root and no login session (/run/user/{os.geteuid()}) for rootless podman"
    return None


def _probe_user_mode_linux() -> str | None:
    """A user-mode Linux kernel and mkfs.ext2 (its disk image) are on PATH."""
    for binary in ("linux.uml", "mkfs.ext2"):
        if shutil.which(binary) is None:
            return f"no {binary} on PATH"
    return _probe_uml_runs_a_process()


def _probe_uml_runs_a_process() -> str | None:
    """The kernel boots and runs one user process (/bin/true as init) on this CPU.

    Debian's UML 6.1 cannot set a process's FPU registers through ptrace on CPUs whose
    XSAVE area outgrew it (AMX, as on recent Xeons): every user process dies at once
    ("ptrace set fp regs failed") and the kernel panics before any test code runs.
    """
    command = [
        "linux.uml", "mem=64M", "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "ro",
        "init=/bin/true", "con=null", "con0=fd:0,fd:1",
    ]  # fmt: skip
    try:
        run = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        return None  # it did not fail fast: let the tests boot it and judge
    if "ptrace set fp regs failed" in run.stdout + run.stderr:
        return (
            "the user-mode Linux kernel cannot run a user process on this CPU "
            "(ptrace set fp regs failed: the CPU's XSAVE area, e.g. with AMX, outgrew it)"
        )
    return None


def _probe_chromium() -> str | None:
    if shutil.which("chromium") or shutil.which("chromium-browser"):
        return None
    return "no chromium or chromium-browser on PATH"


def _probe_vllm_vision() -> str | None:
    """vLLM's Qwen-VL code needs torchvision; the CPU torch here has none that loads."""
    python = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        return f"no vLLM venv at {python.parent.parent}"
    code = "import torch, torchvision; torch.ops.torchvision.nms"
    run = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    if run.returncode == 0:
        return None
    return (run.stderr.strip().splitlines() or ["torchvision does not import"])[-1][:200]


CONDITIONS: dict[str, Condition] = {
    c.name: c
    for c in (
        Condition(
            "bubblewrap",
            "bubblewrap (bwrap) is not installed: apt-get install bubblewrap "
            "(`make system-packages` does, as root)",
            _probe_bubblewrap,
        ),
        Condition(
            "user-namespaces",
            "the kernel does not let an unprivileged process create a user namespace "
            "(bubblewrap needs one)",
            _probe_user_namespaces,
        ),
        Condition(
            "debian-python",
            "Debian's /usr/bin/python3 with python3-numpy and python3-sympy is missing "
            "(the sandbox runs it; `make system-packages` installs them, as root)",
            _probe_debian_python,
        ),
        Condition(
            "landlock",
            "the kernel offers no Landlock",
            _probe_landlock,
        ),
        Condition(
            "seccomp",
            "the kernel does not let a process install a seccomp filter",
            _probe_seccomp,
        ),
        Condition(
            "cgroups",
            "this process cannot create a cgroup with memory and pids limits below its own",
            _probe_cgroups,
        ),
        Condition(
            "unprivileged-uid",
            "the host is root without the right to switch to another uid",
            _probe_unprivileged_uid,
        ),
        Condition(
            "podman",
            "podman and runc cannot run here: apt-get install podman runc "
            "(`make system-packages` does, as root; rootless needs a login session)",
            _probe_podman,
        ),
        Condition(
            "user-mode-linux",
            "no user-mode Linux kernel that runs here to boot a pure cgroup v2 hierarchy in "
            "(this kernel's memory and pids controllers may be held by cgroup v1): apt-get "
            "install user-mode-linux e2fsprogs (`make system-packages` does, as root)",
            _probe_user_mode_linux,
        ),
        Condition(
            "vllm-vision",
            "the vLLM venv has no working torchvision, which vLLM's Qwen-VL models import "
            "(PyPI's torchvision for torch 2.13 is CUDA-linked; a CPU build of it is needed)",
            _probe_vllm_vision,
        ),
        Condition(
            "chromium",
            "chromium is not installed: apt-get install chromium "
            "(`make system-packages` does, as root)",
            _probe_chromium,
        ),
    )
}

LOCAL_SANDBOX = ("bubblewrap", "user-namespaces", "debian-python")
"""What the local backend needs to run as the tests expect (bubblewrap workers)."""
DOCKER_SANDBOX = ("podman", "debian-python")
"""What the docker backend's tests need: the image is built from the host's Debian files."""

LAYER_CONDITIONS: dict[str, str] = {
    "seccomp": "seccomp",
    "landlock": "landlock",
    "cgroup_memory": "cgroups",
    "cgroup_pids": "cgroups",
    "unprivileged_uid": "unprivileged-uid",
}
"""Isolation layers the README lists -> the machine condition that makes each possible."""


# ----------------------------------------------------------------------------- the API


@functools.cache
def probe(name: str) -> str | None:
    """None when the machine offers ``name``, else what the machine said (cached).

    A probe that raises is a bug of the probe: the error propagates (the test errors),
    it never becomes an allowed skip.
    """
    return CONDITIONS[name].probe()


def offers(name: str) -> bool:
    return probe(name) is None


def skip_reason(name: str) -> str | None:
    """The tagged skip text when the machine lacks ``name``, else None."""
    said = probe(name)
    if said is None:
        return None
    return f"{TAG}[{name}]: {CONDITIONS[name].reason} ({said})"


def require(*names: str) -> None:
    """Skip the calling test (tagged) unless the machine offers every one of ``names``."""
    import pytest

    for name in names:
        reason = skip_reason(name)
        if reason:
            # reported at the test's own location, as a skipif mark is, not at this line
            raise pytest.skip.Exception(reason, _use_item_location=True)


def needs(*names: str):
    """A marker (``pytestmark = needs(...)``, ``@needs(...)``): :func:`require` at setup."""
    import pytest

    unknown = [name for name in names if name not in CONDITIONS]
    if unknown:
        raise KeyError(f"not listed in machine_skips.CONDITIONS: {unknown}")
    return getattr(pytest.mark, MARKER)(*names)


def condition_of(reason: str) -> str | None:
    """The condition a skip's text names by its tag, None when it carries none."""
    match = TAG_PATTERN.match(reason)
    return match.group(1) if match else None


def offered_layers() -> set[str]:
    """The README's layers (:data:`LAYER_CONDITIONS`) this machine can give a sandbox."""
    return {layer for layer, name in LAYER_CONDITIONS.items() if offers(name)}
