"""The jail an agent harness runs in: bubblewrap, a work dir, and no network but its gateway.

A harness executes the commands its model writes, so everything inside is hostile. The
jail is built the way the sandbox builds its workers (``agentenvs.sandbox``; its
``/etc`` stand-ins, uid allocator and cgroups are reused here) and differs where a
long-running agent CLI needs it to:

* fresh user, pid, mount, network, IPC, UTS and cgroup namespaces (``--unshare-all``);
  bubblewrap started as a dedicated unprivileged host uid when the host is root, so
  RLIMIT_NPROC counts and host files are a stranger's; ``--die-with-parent`` and a
  session of its own, so a killed episode leaves nothing running;
* a read-only root of ``/usr`` (and the ``/lib``, ``/bin`` links), a few synthetic
  ``/etc`` files, the harness's install folders read-only at their own paths; writable
  only ``/app`` (the task's work dir), ``/home/agent``, a size-limited ``/tmp`` and the
  gateway folder;
* the network namespace has only loopback: the gateway is a Unix socket bound in from
  the host, and a small relay inside (Debian's ``python3``) listens on
  ``127.0.0.1:<port>`` and passes each connection to it. That socket is the one way
  out, and it leads to this episode's session only;
* a wall-clock limit (the whole namespace is killed), a memory and a process ceiling
  (a cgroup when the host offers one), no core files, a file-size ceiling.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.sandbox.backends.local.cgroups import CgroupSupport, WorkerCgroup
from agentenvs.sandbox.backends.local.launch import FAKE_ETC, SANDBOX_UID, system_dir_binds
from agentenvs.sandbox.pool.uids import UidAllocator

UID_BASE = 1_700_000
"""Host uids of harness jails (the sandbox's workers use other ranges)."""
APP = "/app"
HOME = "/home/agent"
GATEWAY_DIR = "/run/agentenvs"
RELAY_PORT = 8000
"""Where the relay listens inside the jail: the harness's base URL is on this port."""
SOCKET_NAME = "gateway.sock"
OUTPUT_TAIL = 4000

RELAY = r"""
import os, socket, sys, threading
host, port, path, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((host, port))
server.listen(64)
open(ready, "w").close()
def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
def serve(client):
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        return
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
    pump(client, upstream)
    client.close(); upstream.close()
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""
"""The relay run inside the jail: TCP on loopback to the gateway's Unix socket."""


class JailError(AgentEnvsError, RuntimeError):
    """The jail cannot be built on this host (no bubblewrap, no user namespaces)."""


@dataclass(frozen=True)
class JailSpec:
    """One run inside a jail."""

    command: Sequence[str]
    root: Path
    """A host folder of this episode; the jail's writable folders are made under it."""
    env: Mapping[str, str] = field(default_factory=dict)
    readonly: Sequence[Path] = ()
    """Host folders visible read-only at their own paths (the harness's install)."""
    mounts: Mapping[str, Path] = field(default_factory=dict)
    """Extra read-only mounts: path inside -> host path (a task's tests at /tests)."""
    writable: Mapping[str, Path] = field(default_factory=dict)
    """Extra writable mounts: path inside -> host folder (a verifier's /logs)."""
    app: Path | None = None
    """The host folder mounted at /app (default: ``root/app``)."""
    gateway: Path | None = None
    """Host folder holding the gateway's socket (:data:`SOCKET_NAME`); None: no network."""
    timeout: float = 600.0
    memory_mb: int | None = 4096
    max_processes: int = 512
    tmp_mb: int = 1024


@dataclass
class JailResult:
    returncode: int | None
    timed_out: bool
    seconds: float
    output: str
    """The tail of what the command wrote (stdout and stderr together)."""


def _bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise JailError("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    return found


def workdir(spec: JailSpec) -> Path:
    return spec.app or spec.root / "app"


def home(spec: JailSpec) -> Path:
    return spec.root / "home"


def _etc(root: Path) -> Path:
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    for name, content in FAKE_ETC.items():
        text = content.replace("/usr/sbin/nologin", "/bin/bash")
        text = text.replace(f":{SANDBOX_UID}:sandbox:/tmp:", f":{SANDBOX_UID}:agent:{HOME}:")
        (etc / name).write_text(text.replace("sandbox", "agent"))
    return etc


def bwrap_argv(spec: JailSpec) -> list[str]:
    """The bubblewrap command line for ``spec``."""
    argv = [_bwrap(), "--unshare-all", "--die-with-parent", "--new-session"]
    argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "agent"]
    argv += ["--clearenv"]
    env = {"HOME": HOME, "USER": "agent", "LANG": "C.UTF-8", "TERM": "dumb", "TMPDIR": "/tmp"}
    env.update(spec.env)
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += system_dir_binds()
    etc = _etc(spec.root)
    argv += ["--dir", "/etc"]
    for path in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives", "/etc/ssl"):
        argv += ["--ro-bind-try", path, path]
    for name in sorted(FAKE_ETC):
        argv += ["--ro-bind", str(etc / name), f"/etc/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(spec.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    for path in spec.readonly:
        argv += ["--ro-bind", str(path), str(path)]
    for inside, host in spec.mounts.items():
        argv += ["--ro-bind", str(host), inside]
    for inside, host in spec.writable.items():
        argv += ["--bind", str(host), inside]
    argv += ["--bind", str(workdir(spec)), APP, "--bind", str(home(spec)), HOME]
    if spec.gateway is not None:
        argv += ["--bind", str(spec.gateway), GATEWAY_DIR]
    argv += ["--remount-ro", "/", "--chdir", APP]
    return [*argv, "/bin/sh", "-c", _entry(spec), "harness", *spec.command]


def _entry(spec: JailSpec) -> str:
    """The jail's first process: start the relay, wait until it listens, run the command."""
    if spec.gateway is None:
        return 'exec "$@"'
    ready = "/tmp/.relay-ready"
    relay = f"{GATEWAY_DIR}/relay.py"
    socket_path = f"{GATEWAY_DIR}/{SOCKET_NAME}"
    return (
        f"/usr/bin/python3 -I {relay} 127.0.0.1 {RELAY_PORT} {socket_path} {ready} "
        f">/dev/null 2>&1 &\n"
        f"for i in $(seq 200); do [ -e {ready} ] && break; sleep 0.05; done\n"
        'exec "$@"'
    )


def _reachable(path: Path) -> None:
    """bubblewrap, started as the jail's uid, must be able to walk to every folder it
    mounts: each folder above ``path`` needs the others' search bit."""
    for folder in [path, *path.parents]:
        if folder.exists() and not folder.stat().st_mode & 0o001:
            raise JailError(
                f"{folder} is not reachable by the jail's unprivileged uid (no o+x): keep "
                "the jail's folders under one that others may pass through (chmod o+x)"
            )


def prepare(spec: JailSpec, uid: int | None) -> None:
    """Make the jail's writable folders (owned by ``uid``) and the relay script."""
    for path in (workdir(spec), home(spec), *spec.writable.values()):
        path.mkdir(parents=True, exist_ok=True)
    if spec.gateway is not None:
        spec.gateway.mkdir(parents=True, exist_ok=True)
        (spec.gateway / "relay.py").write_text(RELAY)
    if uid is None:
        return
    for folder in (
        spec.root.parent,
        *(Path(p).parent for p in [*spec.readonly, *spec.mounts.values()]),
    ):
        _reachable(folder)
    os.chown(spec.root, uid, uid)
    for path in (workdir(spec), home(spec), spec.gateway, *spec.writable.values()):
        if path is None:
            continue
        for folder, _, files in os.walk(path):
            os.chown(folder, uid, uid)
            for name in files:
                os.chown(Path(folder) / name, uid, uid)


class Jail:
    """A command running in a jail: wait for it, or kill it (and everything it started)."""

    def __init__(self, spec: JailSpec, *, uid: int | None = None) -> None:
        self.spec = spec
        self.uid = uid
        self.process: asyncio.subprocess.Process | None = None
        self.cgroup: WorkerCgroup | None = None
        self.started = 0.0
        self._output = spec.root / "output.log"
        self._result: JailResult | None = None

    @classmethod
    async def start(cls, spec: JailSpec) -> Jail:
        uid = UidAllocator.shared(UID_BASE).acquire() if os.geteuid() == 0 else None
        jail = cls(spec, uid=uid)
        try:
            prepare(spec, uid)
            await jail._spawn()
        except BaseException:
            jail.release()
            raise
        return jail

    async def _spawn(self) -> None:
        spec, uid = self.spec, self.uid
        argv = bwrap_argv(spec)

        def drop() -> None:  # in the child, before exec
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_FSIZE, (2**31, 2**31))
            if uid is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (spec.max_processes, spec.max_processes))
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)

        output = open(self._output, "wb")  # noqa: SIM115  (handed to the child)
        try:
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=asyncio.subprocess.STDOUT,
                preexec_fn=drop,
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin"},
            )
        finally:
            output.close()
        self.started = time.monotonic()
        support = CgroupSupport.detect()
        if support.memory_parent is not None or support.pids_parent is not None:
            self.cgroup = WorkerCgroup(
                support, f"agentenvs-{os.getpid()}-harness-{self.process.pid}"
            )
            if spec.memory_mb is not None:
                self.cgroup.set_memory_limit(spec.memory_mb * 1024 * 1024)
            self.cgroup.set_pids_max(spec.max_processes)
            self.cgroup.add(self.process.pid)

    def remaining(self) -> float:
        return max(0.0, self.spec.timeout - (time.monotonic() - self.started))

    async def wait(self) -> JailResult:
        """The run's result once it ended (killed at its time limit)."""
        if self._result is not None:
            return self._result
        assert self.process is not None
        timed_out = False
        try:
            await asyncio.wait_for(self.process.wait(), self.remaining())
        except TimeoutError:
            timed_out = True
            await self.kill()
        self._result = JailResult(
            None if timed_out else self.process.returncode,
            timed_out,
            time.monotonic() - self.started,
            self.output_tail(),
        )
        self.release()
        return self._result

    async def kill(self) -> None:
        """Kill the jail's whole process group (bubblewrap takes its namespace with it)."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 10)

    def output_tail(self) -> str:
        try:
            data = self._output.read_bytes()
        except OSError:
            return ""
        return data[-OUTPUT_TAIL:].decode("utf-8", "replace")

    def release(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.uid is not None:
            UidAllocator.shared(UID_BASE).release(self.uid)
            self.uid = None


async def run_jailed(spec: JailSpec) -> JailResult:
    """Run ``spec`` to its end (or its time limit)."""
    jail = await Jail.start(spec)
    try:
        return await jail.wait()
    finally:
        await jail.kill()
        jail.release()
