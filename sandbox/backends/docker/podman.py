"""A private podman API service, so the ``docker`` backend runs where no Docker Engine does.

``podman system service`` speaks Docker's REST API on a unix socket; pointing
``DOCKER_HOST`` (or ``SandboxConfig.docker_host``) at it lets the Docker SDK drive podman
unchanged. Everything lives in one directory of ours (containers.conf, storage.conf, image
store, run state, the socket), so the host's own podman setup is neither read nor
changed, and removing the directory removes every trace.

Settings that matter on machines like this one (Debian 12, hybrid cgroup v1):

- ``runtime = "runc"``: crun rejects hybrid cgroup hierarchies;
- ``cgroup_manager = "cgroupfs"``: there is no systemd to delegate to;
- ``default_ulimits = ["nofile=N:N", "nproc=M:M"]``: podman's defaults are above this
  machine's hard limits (nofile 20000) and root here lacks CAP_SYS_RESOURCE, so runc
  fails to start any container; both are capped at the hard limits of the process
  starting the service.

Used by the tests (a session fixture) and the benchmark; usable by hand::

    with PodmanService.start_new() as service:
        os.environ["DOCKER_HOST"] = service.docker_host
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from agentenvs.envs.errors import AgentEnvsError

DEFAULT_NOFILE = 4096
DEFAULT_NPROC = 32768


class PodmanUnavailable(AgentEnvsError, RuntimeError):
    """podman (or runc) is missing, or its service did not come up; the message says why."""


def capped_limit(kind: int, wanted: int) -> int:
    """``wanted``, but never above this process's hard limit of ``kind``.

    Without CAP_SYS_RESOURCE (as on this machine, even for root) the runtime cannot raise
    a hard limit, and podman's defaults (nofile 1048576, nproc 4194304) are far above it.
    """
    _, hard = resource.getrlimit(kind)
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def nofile_limit(wanted: int = DEFAULT_NOFILE) -> int:
    return capped_limit(resource.RLIMIT_NOFILE, wanted)


def nproc_limit(wanted: int = DEFAULT_NPROC) -> int:
    return capped_limit(resource.RLIMIT_NPROC, wanted)


def unavailable_reason() -> str | None:
    """None when a private podman service can be started here, else why not."""
    if shutil.which("podman") is None:
        return "podman is not installed (Debian: apt-get install podman runc)"
    if shutil.which("runc") is None:
        return "runc is not installed (Debian: apt-get install runc)"
    if os.geteuid() != 0 and not Path(f"/run/user/{os.geteuid()}").is_dir():
        return "rootless podman needs a login session (/run/user/<uid>); run as root"
    return None


def containers_conf(nofile: int, nproc: int, *, tmp_dir: Path) -> str:
    return (
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        'log_driver = "k8s-file"\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
        f'tmp_dir = "{tmp_dir}"\n'
        "[network]\n"
        f'network_config_dir = "{tmp_dir.parent / "networks"}"\n'
    )


def storage_conf(*, graphroot: Path, runroot: Path, driver: str = "overlay") -> str:
    return f'[storage]\ndriver = "{driver}"\ngraphroot = "{graphroot}"\nrunroot = "{runroot}"\n'


WATCHDOG = r"""
import os, select, shutil, signal, subprocess, sys
owner, log, state, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
if os.fork():
    os._exit(0)  # the watchdog is re-parented away from the owner: not its descendant
with open(log, "ab") as out:
    service = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
sys.stdout.write(f"{os.getpid()} {service.pid}\n")
sys.stdout.flush()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)  # the owner reads our pipes until EOF
cleanup = False
def stop(signum, frame):
    global cleanup
    cleanup = signum == signal.SIGUSR1
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGUSR1, stop)
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    watched = [os.pidfd_open(service.pid)]
    try:
        watched.append(os.pidfd_open(owner))
    except ProcessLookupError:
        cleanup = True
        sys.exit(0)
    ready, _, _ = select.select(watched, [], [])  # the service exited, or its owner did
    cleanup = watched[1] in ready
finally:
    if service.poll() is None:
        service.terminate()
        try:
            service.wait(15)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
    if cleanup and state != "-":
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        try:
            subprocess.run(["podman", "rm", "--all", "--force", "--time", "0"], timeout=300, **quiet)
        except Exception:
            pass
        shutil.rmtree(state, ignore_errors=True)
"""
"""Runs the service on behalf of its owner, detached (so the owner's process-leak checks
do not see it), and stops it when asked (SIGTERM; SIGUSR1: and remove its state) or when
the owner dies, even by SIGKILL: a crashed test run leaves no service, no container and
(for a temporary state directory) no files behind. Removing the state happens here, off
the owner's exit path: deleting an image store takes seconds on a busy disk."""


@dataclass
class PodmanService:
    """One ``podman system service`` process over a private state directory."""

    root: Path
    owns_root: bool = False
    nofile: int = field(default_factory=nofile_limit)
    nproc: int = field(default_factory=nproc_limit)
    watchdog_pid: int | None = None
    service_pid: int | None = None

    # ------------------------------------------------------------------ paths
    @property
    def socket_path(self) -> Path:
        return self.root / "podman.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def log_path(self) -> Path:
        return self.root / "service.log"

    def env(self) -> dict[str, str]:
        """Environment for any podman command that must see this private setup."""
        env = dict(os.environ)
        env["CONTAINERS_CONF"] = str(self.root / "containers.conf")
        env["CONTAINERS_STORAGE_CONF"] = str(self.root / "storage.conf")
        env.pop("CONTAINER_HOST", None)
        env.pop("CONTAINER_CONNECTION", None)
        return env

    def _write_config(self) -> None:
        for sub in ("storage", "run", "tmp", "networks"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "containers.conf").write_text(
            containers_conf(self.nofile, self.nproc, tmp_dir=self.root / "tmp")
        )
        (self.root / "storage.conf").write_text(
            storage_conf(graphroot=self.root / "storage", runroot=self.root / "run")
        )

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def start_new(cls, root: Path | str | None = None, *, timeout: float = 30.0) -> PodmanService:
        """Start a service over ``root`` (a fresh temporary directory when None)."""
        reason = unavailable_reason()
        if reason:
            raise PodmanUnavailable(reason)
        owns = root is None
        # Short path: a unix socket path must fit in 108 bytes.
        path = Path(tempfile.mkdtemp(prefix="agentenvs-podman-")) if root is None else Path(root)
        service = cls(root=path, owns_root=owns)
        service.start(timeout=timeout)
        return service

    @property
    def running(self) -> bool:
        return bool(self.service_pid) and _alive(self.service_pid)

    def start(self, timeout: float = 30.0) -> None:
        self._write_config()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        argv = ["podman", "system", "service", "--time=0", self.docker_host]
        launcher = subprocess.run(
            [
                sys.executable,
                "-c",
                WATCHDOG,
                str(os.getpid()),
                str(self.log_path),
                str(self.root) if self.owns_root else "-",
                *argv,
            ],
            env=self.env(),
            # conmon writes marker files (an ``oom`` file after an OOM kill) into its
            # working directory: keep them in the service's own state dir.
            cwd=str(self.root),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )
        try:
            watchdog, service = (int(x) for x in launcher.stdout.split())
        except ValueError:
            raise PodmanUnavailable(
                f"could not start podman system service: {launcher.stderr.strip() or self.log_tail()}"
            ) from None
        self.watchdog_pid, self.service_pid = watchdog, service
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                self.stop()
                raise PodmanUnavailable(f"podman system service exited: {self.log_tail()}")
            if self.socket_path.exists() and self._answers():
                return
            time.sleep(0.05)
        self.stop()
        raise PodmanUnavailable(
            f"podman system service did not answer within {timeout:g} s: {self.log_tail()}"
        )

    def _answers(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(2)
                sock.connect(str(self.socket_path))
                sock.sendall(b"GET /_ping HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n")
                return sock.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:].strip() or "(no output)"
        except OSError:
            return "(no log)"

    def podman(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """Run a podman command against this private setup."""
        return subprocess.run(
            ["podman", *args], env=self.env(), capture_output=True, text=True, timeout=timeout
        )

    def remove_containers(self) -> None:
        """Force-remove every container of this private setup (after a crash, say)."""
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.podman("rm", "--all", "--force", "--time", "0", timeout=120)

    def stop(self, *, remove_state: bool | None = None) -> None:
        """Stop the service; with ``remove_state`` (default: if we made the directory),
        also remove every container and the directory, in the background."""
        remove = remove_state if remove_state is not None else self.owns_root
        watchdog, service = self.watchdog_pid, self.service_pid
        self.watchdog_pid = self.service_pid = None
        delegated = False
        if watchdog and _alive(watchdog):
            with contextlib.suppress(ProcessLookupError):
                os.kill(watchdog, signal.SIGUSR1 if remove and self.owns_root else signal.SIGTERM)
                delegated = remove and self.owns_root
        if service and not _wait_gone(service, 20):
            with contextlib.suppress(ProcessLookupError):
                os.kill(service, signal.SIGKILL)
            _wait_gone(service, 5)
        if remove and not delegated:
            self.remove_containers()
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PodmanService:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
