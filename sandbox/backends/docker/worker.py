"""One warm worker of the ``docker`` backend: a container running the sandbox supervisor.

The container's only process is the same standalone supervisor the ``local`` backend runs
(``agentenvs/sandbox/supervisor/``), started as pid 1 by the image's Python with
the shared bootstrap, speaking the same frames over the container's stdin/stdout (the
attach stream). It pre-imports numpy and sympy once and forks a fresh child per
execution; as pid 1 of the container's pid namespace it kills everything an execution
left behind with ``kill(-1)``, and signals from the code cannot reach it.

Container settings (see :class:`ContainerSettings`): no network, read-only root, tmpfs
work dir and ``/dev/shm`` (size-limited, noexec), memory (+swap) / pids / CPU limits,
every capability dropped, ``no-new-privileges``, a dedicated non-root uid per worker, a
replaced environment. On top, inside: the supervisor's own seccomp filter (stacked on the
engine's), Landlock where the kernel and the engine's seccomp profile allow it, and
per-execution rlimits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

from agentenvs.sandbox.backends.docker.attach import AttachClosed, AttachStream
from agentenvs.sandbox.pool.environment import sandbox_environment
from agentenvs.sandbox.pool.errors import WorkerStartError
from agentenvs.sandbox.pool.mount_seal import DEVICE_NODES, MountPlan
from agentenvs.sandbox.pool.protocol import BOOTSTRAP
from agentenvs.sandbox.pool.worker import (
    IDLE_PROCESS_NAME,
    FramedRequests,
    children_of,
    process_name,
)

MB = 1024 * 1024
LABEL = "io.agentenvs.sandbox"
OWNER_LABEL = "io.agentenvs.sandbox.owner"
"""host:pid of the process that created the container (stale ones are removed)."""
INSTANCE_LABEL = "io.agentenvs.sandbox.instance"
"""One value per sandbox object: its containers, whatever state they are in."""
WORKDIR = "/tmp"
SHM = "/dev/shm"
PYTHON = "/usr/bin/python3"
PYTHON_PATH = ["/usr/lib/python3/dist-packages"]

FINISHED_PREFIX = "exit:"
"""Process name of an execution that has finished (set by the supervisor's child)."""

_serials = count(1)


def container_environment() -> dict[str, str]:
    """The complete environment of sandboxed code (the same one the local backend uses)."""
    return sandbox_environment(WORKDIR)


def bootstrap_command(env: dict[str, str]) -> list[str]:
    """``python -c`` that replaces the environment, then runs the shared bootstrap.

    Engines add variables of their own (``HOSTNAME``, ``container``, ``TERM``); clearing
    ``os.environ`` at the C level before anything else runs means the supervisor, and so
    every execution it forks, sees exactly ``env``.
    """
    prelude = f"import os\nos.environ.clear()\nos.environ.update({env!r})\n"
    return [PYTHON, "-I", "-S", "-B", "-c", prelude + BOOTSTRAP]


@dataclass
class ContainerSettings:
    """How every container of one sandbox is created."""

    image: str
    memory_bytes: int
    pids_limit: int
    nano_cpus: int
    workdir_bytes: int
    preload: list[str]
    seccomp_bpf: str | None
    """Base64 classic-BPF program for the supervisor to load (None: the engine's only)."""
    landlock: bool
    seccomp_stages: dict[str, str] = field(default_factory=dict)
    """Base64 filters the supervisor's children add (``SeccompProgram.stages``)."""
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=container_environment)

    def create_kwargs(self, uid: int, name: str) -> dict[str, Any]:
        import docker.types

        tmpfs_options = f"size={self.workdir_bytes},mode=1777,noexec,nosuid,nodev"
        # The host's device nodes, read-only: a writable one lets a run set the times of
        # the engine host's own /dev/null (issue #40); the devices themselves still work.
        devices = [
            docker.types.Mount(node, node, type="bind", read_only=True) for node in DEVICE_NODES
        ]
        return {
            "image": self.image,
            "command": bootstrap_command(self.env),
            "name": name,
            "hostname": "sandbox",
            "user": f"{uid}:{uid}",
            "working_dir": WORKDIR,
            "environment": self.env,
            "stdin_open": True,
            "tty": False,
            "network_mode": "none",
            "read_only": True,
            # Our own tmpfs mounts, sized; read-only empty ones where podman would add
            # unbounded writable ones (--read-only-tmpfs) that executions could share.
            "tmpfs": {
                WORKDIR: tmpfs_options,
                "/run": "ro,size=16k,mode=755",
                "/var/tmp": "ro,size=16k,mode=755",
            },
            "mounts": devices,
            "shm_size": self.workdir_bytes,
            "mem_limit": self.memory_bytes,
            "memswap_limit": self.memory_bytes,
            "pids_limit": self.pids_limit,
            "nano_cpus": self.nano_cpus,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "ipc_mode": "private",
            "labels": {LABEL: "1", **self.labels},
            "detach": True,
        }

    def supervisor_config(self) -> dict[str, Any]:
        return {
            "python_path": PYTHON_PATH,
            "preload": self.preload,
            "workdir": WORKDIR,
            "scratch_dirs": [SHM],
            "seccomp_bpf": self.seccomp_bpf,
            "seccomp_stages": self.seccomp_stages,
            "landlock": {
                "read": ["/"],
                "write": [WORKDIR, SHM],
                "write_files": ["/dev/null", "/dev/zero", "/dev/full"],
            }
            if self.landlock
            else None,
            "landlock_scope_signals": True,
            "subreaper": True,
            "pid_namespace": True,
            "seal": {"require_private": True},
        }


class OomCounter:
    """The container's cgroup OOM-kill count, read on the host (local engines only).

    A program killed by the kernel's OOM killer just dies of SIGKILL; only the cgroup
    knows why. Works for cgroup v1 (``memory.oom_control``) and v2 (``memory.events``)
    when the engine runs on this machine; otherwise :meth:`read` returns None.
    """

    def __init__(self, host_pid: int | None) -> None:
        self.path: Path | None = None
        if host_pid:
            self.path = self._find(host_pid)

    @staticmethod
    def _find(pid: int) -> Path | None:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            hierarchy, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                candidate = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control"
                if candidate.exists():
                    return candidate
            if hierarchy == "0" and controllers == "":
                candidate = Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events"
                if candidate.exists():
                    return candidate
                unified = Path("/sys/fs/cgroup/unified") / path.lstrip("/") / "memory.events"
                if unified.exists():
                    return unified
        return None

    def read(self) -> int | None:
        if self.path is None:
            return None
        try:
            for line in self.path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            return None
        return None


class ContainerWorker(FramedRequests):
    """A started container with the supervisor in it; one request at a time."""

    noun = "container"
    timeout_fate = "removed"
    start_failure = "the sandbox supervisor did not start in the container"
    _send_errors = (AttachClosed,)
    _handshake_errors = (AttachClosed,)

    def __init__(self, client: Any, settings: ContainerSettings, uid: int) -> None:
        super().__init__()
        self.client = client
        self.settings = settings
        self.uid = uid
        self.serial = next(_serials)
        self.name = f"agentenvs-{os.getpid()}-{self.serial}-{os.urandom(3).hex()}"
        self.container: Any = None
        self.stream: AttachStream | None = None
        self.host_pid: int | None = None
        self.oom = OomCounter(None)
        self._removed = False

    # ------------------------------------------------------------------ lifecycle
    def _create_and_attach(self) -> Any:
        kwargs = self.settings.create_kwargs(self.uid, self.name)
        self.container = self.client.containers.create(**kwargs)
        attached = self.client.api.attach_socket(
            self.container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        return attached

    def _start_and_inspect(self) -> None:
        self.container.start()
        self.container.reload()
        pid = (self.container.attrs.get("State") or {}).get("Pid") or None
        # The engine's pid is only ours to look at if the engine runs on this machine:
        # the process's cgroup then names the container.
        self.host_pid = pid if pid and _cgroup_names(pid, self.container.id) else None

    def _mount_plan(self) -> tuple[int, MountPlan] | None:
        """Where the engine runs on this machine (and lets the host join the container's
        namespaces): ``/dev/shm`` ``noatime``, ``/dev/pts`` read-only, ``/proc`` showing a
        process only what it may trace. Forks need them; without, they are refused."""
        if not self.host_pid:
            return None
        plan = MountPlan(read_only=("/dev/pts",), noatime=(WORKDIR, SHM), hide_processes=True)
        return self.host_pid, plan

    async def _start(self, timeout: float) -> dict:
        try:
            attached = await _finish_in_thread(self._create_and_attach)
        except Exception as exc:
            raise WorkerStartError(f"the engine could not create the container: {exc}") from exc
        self.stream = AttachStream(attached)
        self.stream.start()
        try:
            await _finish_in_thread(self._start_and_inspect)
        except Exception as exc:
            raise WorkerStartError(f"the engine could not start the container: {exc}") from exc
        if self.host_pid:
            self.oom = OomCounter(self.host_pid)
        return await self._handshake(self.settings.supervisor_config(), timeout)

    @property
    def alive(self) -> bool:
        return not self._dead and self.stream is not None and not self.stream.stdout.at_eof()

    def _remove(self, attempts: int = 6) -> None:
        """Force-remove the container, retrying through the engine's transient states.

        podman refuses a forced removal while the container is between "running" and
        "stopped" ("container state improper"), e.g. when it is exiting by itself.
        """
        if self.container is None or self._removed:
            return
        import docker.errors

        for attempt in range(attempts):
            try:
                self.container.remove(force=True)
                break
            except docker.errors.NotFound:
                break
            except Exception:
                if attempt == attempts - 1:
                    return  # left for the stale-container sweep of a later start
                time.sleep(0.05 * (attempt + 1))
        self._removed = True

    def kill_now(self) -> None:
        """Synchronous part of :meth:`kill` (safe in a cancelled task): stop the I/O."""
        self._dead = True
        if self.stream is not None:
            self.stream.close_now()

    async def kill(self) -> None:
        """Remove the container (SIGKILL to everything in it) and close the stream."""
        self._dead = True
        await _finish_in_thread(self._remove)
        if self.branches is not None:  # ours, inside the engine's group: ours to remove
            self.branches.remove_all()
            with contextlib.suppress(OSError):
                self.branches.group.rmdir()
        if self.stream is not None:
            await self.stream.close()

    def oom_killed(self) -> bool:
        """After the container died: did the engine record an OOM kill?"""
        if self.container is None:
            return False
        try:
            self.container.reload()
        except Exception:
            return False
        return bool((self.container.attrs.get("State") or {}).get("OOMKilled"))

    def stderr_tail(self) -> str:
        return self.stream.stderr_tail() if self.stream is not None else ""

    def own_host_pids(self) -> set[int]:
        """The container's own processes on the host: the supervisor and its idle child.

        After answering a run, the supervisor forks the next execution's child ahead of
        time; that child carries the supervisor's idle process name until its request
        arrives. A finished execution names itself ``exit:<code>`` and may still be
        tearing down just after the answer (the supervisor reaps it off the critical
        path). Those names tell them from leftovers. Empty when the engine runs elsewhere.
        """
        pid = self.host_pid
        if self._dead:
            return set()
        if not pid and self.container is not None and not self.hello:
            # Still starting: no code has run in it yet, so whatever runs in its cgroup is
            # its own start-up (the supervisor importing numpy...).
            return _processes_in_cgroup_of(self.container.id)
        if not pid or not Path(f"/proc/{pid}").exists():
            return set()
        return {pid} | {child for child in children_of(pid) if _own_child(process_name(child))}

    # ------------------------------------------------------------------ requests
    def _reader(self) -> asyncio.StreamReader:
        assert self.stream is not None
        return self.stream.stdout

    async def _send(self, frame: bytes) -> None:
        assert self.stream is not None
        await self.stream.write(frame)

    async def _died(self) -> None:
        self.kill_now()


async def _finish_in_thread(fn: Any) -> Any:
    """Run a blocking engine call in a thread; if cancelled, still wait for it to finish.

    A cancelled ``to_thread`` does not stop the thread: the container would be created
    after the caller gave up, with nobody left to remove it. Waiting lets the caller's
    cleanup see (and remove) what the call made.
    """
    future = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await future
        raise


def wait_gone(pid: int | None, timeout: float = 5.0) -> bool:
    """True once a host pid is gone (for tests and cleanup checks)."""
    if not pid:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.02)
    return False


def _own_child(name: str) -> bool:
    """The supervisor's idle child, or an execution that finished and is exiting."""
    return name == IDLE_PROCESS_NAME or (
        name.startswith(FINISHED_PREFIX) and name[len(FINISHED_PREFIX) :].isdigit()
    )


def _cgroup_names(pid: int, container_id: str) -> bool:
    try:
        return container_id in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def _processes_in_cgroup_of(container_id: str) -> set[int]:
    """Host pids whose cgroup names the container (a local engine's container processes)."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit() and _cgroup_names(int(name), container_id):
            found.add(int(name))
    return found
