"""How a worker process is started: bubblewrap when it works, a plain process otherwise.

With bubblewrap the supervisor is pid 1 of fresh user, pid, mount, network, IPC, UTS and
cgroup namespaces, sees a read-only root holding only ``/usr`` (plus the ``/lib``-style
links), a handful of synthetic ``/etc`` files (no host ``/etc/passwd``), a minimal
``/dev``, its own ``/proc``, and two size-limited tmpfs mounts (``/tmp``, the work dir,
and ``/dev/shm``). No ``/root``, no ``/home``, no host ``/tmp``, no network but a
loopback that is down. The environment is replaced, not filtered.

When the host is root, bubblewrap itself is started as a dedicated unprivileged uid, so
the sandbox is a non-root user in the initial namespace too: RLIMIT_NPROC is enforced
(the kernel exempts uid 0) and file permissions are those of a stranger.

Without bubblewrap (not installed, or user namespaces disabled) the "direct" launcher
runs the same supervisor as that uid in a private host directory; rlimits, seccomp,
Landlock and cgroups still apply, namespaces do not, and the capability report says so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentenvs.sandbox.pool.environment import sandbox_environment
from agentenvs.sandbox.pool.protocol import BOOTSTRAP

SANDBOX_UID = 1000
"""The uid/gid the code sees inside the user namespace."""

SANDBOX_WORKDIR = "/tmp"
SANDBOX_SHM = "/dev/shm"

PYTHON_PATH = [
    "/usr/local/lib/python{major}.{minor}/dist-packages",
    "/usr/lib/python3/dist-packages",
]
"""Debian's site directories, added by the supervisor (the interpreter runs with -S -I)."""

ETC_FILES_FROM_HOST = ["/etc/ld.so.cache", "/etc/localtime"]
ETC_DIRS_FROM_HOST = ["/etc/alternatives"]

DEFAULT_WARMUP = """
import numpy as np
import sympy as sp
x, y = sp.symbols("x y")
sp.integrate(x**2, (x, 0, 3)); sp.integrate(sp.sin(x) * sp.exp(x), x)
sp.solve(x**2 - 4, x); sp.solve([x + y - 2, x - y], [x, y])
sp.simplify(sp.sin(x) ** 2 + sp.cos(x) ** 2); sp.factor(x**2 - 1); sp.expand((x + 1) ** 3)
sp.diff(sp.sin(x) * x, x); sp.limit(sp.sin(x) / x, x, 0); sp.series(sp.exp(x), x, 0, 4)
sp.Matrix([[1, 2], [3, 4]]).inv(); sp.nsimplify(0.5); sp.sqrt(8); sp.Rational(1, 3) + 1
sp.isprime(97); sp.factorint(360); sp.binomial(10, 3); sp.N(sp.pi, 30); sp.latex(x**2)
np.linalg.solve(np.eye(3), np.ones(3)); np.linalg.eig(np.eye(3)); np.random.default_rng(0).random(3)
"""
"""Run once in each worker after the imports: first calls into sympy import submodules and
fill caches (an ``integrate`` costs ~100 ms the first time, ~3 ms after); children inherit
the result instead of paying it on every execution."""

FAKE_ETC = {
    "passwd": (
        f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:{SANDBOX_WORKDIR}:/usr/sbin/nologin\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    ),
    "group": f"sandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}


def system_dir_binds() -> list[str]:
    """bubblewrap arguments for the host's programs and libraries, read-only: ``/usr``,
    and ``/bin``, ``/lib``... as the symlinks (merged /usr) or directories they are here."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), f"/{name}"]
    return argv


def _bwrap_version(bwrap: str) -> tuple[int, ...]:
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10
        ).stdout
        return tuple(int(x) for x in out.split()[-1].split("."))
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return ()


@dataclass
class SpawnSpec:
    """Everything needed to start one worker process."""

    argv: list[str]
    env: dict[str, str]
    pass_fds: list[int]
    config: dict
    uid: int | None
    cwd: str | None = None
    host_workdir: Path | None = None

    def close_fds(self) -> None:
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pass_fds = []


@dataclass
class LaunchPlan:
    """How this host starts workers; built once per sandbox."""

    mode: Literal["bwrap", "direct"]
    python: str
    bwrap: str | None
    workdir_bytes: int
    preload: list[str]
    warmup: str | None
    seccomp_bpf: bytes | None
    landlock: bool
    disable_userns: bool = False
    seccomp_stages: dict[str, bytes] = field(default_factory=dict)
    """The filters the supervisor's children add (``SeccompProgram.stages``)."""
    notes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def detect(
        cls,
        *,
        python: str,
        workdir_bytes: int,
        preload: list[str],
        warmup: str | None,
        seccomp_bpf: bytes | None,
        landlock: bool,
        use_bwrap: bool | None,
        seccomp_stages: dict[str, bytes] | None = None,
    ) -> LaunchPlan:
        notes: dict[str, str] = {}
        bwrap = shutil.which("bwrap") if use_bwrap is not False else None
        mode: Literal["bwrap", "direct"] = "bwrap"
        if use_bwrap is False:
            notes["namespaces"] = "bubblewrap disabled by configuration (use_bwrap=False)"
            mode = "direct"
        elif bwrap is None:
            notes["namespaces"] = (
                "bubblewrap (bwrap) not found: install the Debian package 'bubblewrap'"
            )
            mode = "direct"
        version = _bwrap_version(bwrap) if bwrap else ()
        return cls(
            mode=mode,
            python=python,
            bwrap=bwrap if mode == "bwrap" else None,
            workdir_bytes=workdir_bytes,
            preload=preload,
            warmup=warmup,
            seccomp_bpf=seccomp_bpf,
            seccomp_stages=dict(seccomp_stages or {}),
            landlock=landlock,
            disable_userns=version >= (0, 8),
            notes=notes,
        )

    def fallback_to_direct(self, reason: str) -> None:
        self.mode = "direct"
        self.bwrap = None
        self.notes["namespaces"] = reason

    # -------------------------------------------------------------------- per worker
    def spawn_spec(self, uid: int | None, host_tmp: Path) -> SpawnSpec:
        if self.mode == "bwrap":
            return self._bwrap_spec(uid)
        return self._direct_spec(uid, host_tmp)

    def _config(
        self, *, workdir: str, scratch: list[str], landlock: dict | None, pid_ns: bool
    ) -> dict:
        """The supervisor's config frame. With namespaces (``pid_ns``) the mounts are the
        sandbox's own, and no run may reach a host inode through them (``seal``); the
        direct launcher shares the host's ``/dev`` (any process of the uid can set
        ``/dev/null``'s times), which the capability report's ``namespaces`` note says."""
        import base64

        return {
            "python_path": PYTHON_PATH,
            "preload": self.preload,
            "warmup": self.warmup,
            "workdir": workdir,
            "scratch_dirs": scratch,
            "seccomp_bpf": base64.b64encode(self.seccomp_bpf).decode()
            if self.seccomp_bpf
            else None,
            "seccomp_stages": {
                name: base64.b64encode(bpf).decode() for name, bpf in self.seccomp_stages.items()
            },
            "landlock": landlock if self.landlock else None,
            "landlock_scope_signals": True,
            "subreaper": True,
            "pid_namespace": pid_ns,
            "seal": {"require_private": pid_ns},
        }

    def _bwrap_spec(self, uid: int | None) -> SpawnSpec:
        assert self.bwrap is not None
        env = sandbox_environment(SANDBOX_WORKDIR)
        fds: list[int] = []
        argv = [self.bwrap, "--unshare-all", "--unshare-user"]
        if self.disable_userns:
            argv.append("--disable-userns")
        argv += [
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            "--hostname",
            "sandbox",
            "--clearenv",
        ]
        for key, value in env.items():
            argv += ["--setenv", key, value]
        argv += system_dir_binds()
        argv += ["--dir", "/etc"]
        for path in ETC_FILES_FROM_HOST + ETC_DIRS_FROM_HOST:
            argv += ["--ro-bind-try", path, path]
        for name, content in FAKE_ETC.items():
            fd = os.memfd_create(f"etc-{name}")
            os.write(fd, content.encode())
            os.lseek(fd, 0, os.SEEK_SET)
            fds.append(fd)
            argv += ["--perms", "0444", "--ro-bind-data", str(fd), f"/etc/{name}"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        argv += ["--size", str(self.workdir_bytes), "--perms", "0700", "--tmpfs", SANDBOX_WORKDIR]
        argv += ["--size", str(self.workdir_bytes), "--perms", "0700", "--tmpfs", SANDBOX_SHM]
        argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", SANDBOX_WORKDIR]
        argv += [self.python, "-I", "-S", "-B", "-c", BOOTSTRAP]
        landlock = {
            "read": ["/"],
            "write": [SANDBOX_WORKDIR, SANDBOX_SHM],
            "write_files": ["/dev/null", "/dev/zero", "/dev/full"],
        }
        config = self._config(
            workdir=SANDBOX_WORKDIR, scratch=[SANDBOX_SHM], landlock=landlock, pid_ns=True
        )
        return SpawnSpec(argv=argv, env=env, pass_fds=fds, config=config, uid=uid)

    def _direct_spec(self, uid: int | None, host_tmp: Path) -> SpawnSpec:
        workdir = host_tmp
        workdir.mkdir(mode=0o700)
        if uid is not None:
            os.chown(workdir, uid, uid)
        env = sandbox_environment(str(workdir))
        landlock = {
            "read": [
                "/usr",
                "/bin",
                "/sbin",
                "/lib",
                "/lib64",
                "/proc",
                *ETC_FILES_FROM_HOST,
                *ETC_DIRS_FROM_HOST,
            ],
            "write": [str(workdir)],
            "write_files": ["/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random"],
        }
        config = self._config(workdir=str(workdir), scratch=[], landlock=landlock, pid_ns=False)
        argv = [self.python, "-I", "-S", "-B", "-c", BOOTSTRAP]
        return SpawnSpec(
            argv=argv,
            env=env,
            pass_fds=[],
            config=config,
            uid=uid,
            cwd=str(workdir),
            host_workdir=workdir,
        )
