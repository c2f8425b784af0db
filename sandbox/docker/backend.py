"""The ``docker`` backend: warm sandbox containers driven through the Docker API.

Works against a Docker Engine and against podman's Docker-compatible service
(:mod:`agentenvs.sandbox.docker.podman`), chosen by ``SandboxConfig.docker_host`` or
``DOCKER_HOST``. Each worker is one container (see :mod:`.worker` for its settings) that
runs the shared warm supervisor: ``run()`` borrows an idle container, which forks a fresh
pre-imported child for the code, kills whatever it left and wipes the work dir; the
container itself is reused. ``mode="per_call"`` instead creates and removes a container
for every execution (the common approach; kept for comparison in the benchmark).

The image is built from this host's Debian files on first use (:mod:`.image`) when the
default tag is configured; a custom ``docker_image`` is used as it is.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import os
import platform
import socket
import uuid
import weakref
from dataclasses import dataclass
from typing import Any, Literal

from agentenvs.sandbox.base import (
    Capabilities,
    ExecResult,
    ExecStatus,
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    Session,
)
from agentenvs.sandbox.capabilities import enforce_minimum, run_sync, unknown_layers
from agentenvs.sandbox.docker.assess import assess
from agentenvs.sandbox.docker.image import IMAGE_TAG, ImageBuildError, ensure_image
from agentenvs.sandbox.docker.worker import (
    INSTANCE_LABEL,
    LABEL,
    OWNER_LABEL,
    ContainerSettings,
    ContainerWorker,
    container_environment,
)
from agentenvs.sandbox.local.backend import to_exec_result
from agentenvs.sandbox.local.launch import UidAllocator
from agentenvs.sandbox.local.worker import WorkerDead, WorkerStartError

MB = 1024 * 1024
CONTAINER_HEADROOM_BYTES = 256 * MB
"""Above the per-execution memory limit: the supervisor's pre-imported heap, the tmpfs."""
REQUEST_GRACE_SECONDS = 10.0
SUPERVISOR_PROCESSES = 1
SESSION_PROCESSES = 2  # supervisor + state holder
UID_BASE = 1_800_000
USERNS_UID_BASE = 20_000
"""Under userns-remap or a rootless engine only uids below 65536 are mapped."""

_ARCH_ALIASES = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}


def _arch(name: str) -> str:
    return _ARCH_ALIASES.get(name.lower(), name.lower())


_UID_ALLOCATORS: dict[int, UidAllocator] = {}


def _shared_uids(base: int) -> UidAllocator:
    """One allocator per process: two sandboxes never hand out the same uid."""
    if base not in _UID_ALLOCATORS:
        _UID_ALLOCATORS[base] = UidAllocator(base, span=40_000)
    return _UID_ALLOCATORS[base]


@dataclass
class _Slot:
    worker: ContainerWorker | None = None


class DockerSandbox(Sandbox):
    """Warm containers (or one container per call) running the sandbox supervisor.

    Backend-specific knobs are constructor arguments; the shared limits live in
    :class:`SandboxConfig` (``docker_image``, ``docker_host`` included).
    """

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        client: Any = None,
        mode: Literal["warm", "per_call"] = "warm",
        preload: tuple[str, ...] | None = None,
        cpus: float = 1.0,
        use_seccomp: bool = True,
        use_landlock: bool = True,
        build_image: bool | None = None,
        session_spares: int = 1,
        start_timeout: float = 60.0,
    ) -> None:
        super().__init__(config or SandboxConfig(backend="docker"))
        self.mode = mode
        if preload is None:
            # A container used once gains nothing from pre-importing.
            preload = ("numpy", "sympy") if mode == "warm" else ()
        self.preload = list(preload)
        self.cpus = cpus
        self.use_seccomp = use_seccomp
        self.use_landlock = use_landlock
        self.build_image = build_image
        self.session_spares = session_spares if mode == "warm" else 0
        self.start_timeout = start_timeout
        self._client = client
        self._owns_client = client is None
        self._settings: ContainerSettings | None = None
        self._uids: UidAllocator | None = None
        self._seccomp_note = ""
        self._engine_info: dict = {}
        self._caps: Capabilities | None = None
        self._slots: list[_Slot] = []
        self._idle: asyncio.Queue[_Slot] | None = None
        self._per_call: asyncio.Semaphore | None = None
        self._spares: list[ContainerWorker] = []
        self._sessions: weakref.WeakSet[DockerSession] = weakref.WeakSet()
        self._transient: set[ContainerWorker] = set()
        self._tasks: set[asyncio.Task] = set()
        self._start_lock: asyncio.Lock | None = None
        self._started = False
        self._closed = False
        self.image_info: Any = None
        self.instance_id = uuid.uuid4().hex
        """Label value on every container of this sandbox (see ``INSTANCE_LABEL``)."""
        self.stats = {"runs": 0, "retries": 0, "containers_started": 0}

    # ------------------------------------------------------------------ setup
    def _connect(self) -> Any:
        try:
            import docker
        except ImportError as exc:
            raise SandboxUnavailable(
                "the docker backend needs the docker SDK: pip install 'agentenvs[docker]'"
            ) from exc

        if self._client is None:
            host = self.config.docker_host
            # Every worker holds one connection (its attach stream) for its whole life.
            pool = 2 * self.config.pool_size + self.session_spares + 8
            try:
                self._client = (
                    docker.DockerClient(base_url=host, max_pool_size=pool)
                    if host
                    else docker.from_env(max_pool_size=pool)
                )
            except docker.errors.DockerException as exc:
                raise SandboxUnavailable(
                    f"cannot reach a Docker engine at {host or os.environ.get('DOCKER_HOST') or 'the default socket'}: "
                    f"{exc} (set SandboxConfig.docker_host or DOCKER_HOST; podman: "
                    "`podman system service --time=0 unix:///tmp/podman.sock`)"
                ) from exc
        try:
            self._client.ping()
            self._engine_info = self._client.info()
        except Exception as exc:
            raise SandboxUnavailable(f"the Docker engine does not answer: {exc}") from exc
        return self._client

    def _ensure_image(self) -> None:
        import docker

        tag = self.config.docker_image
        build = self.build_image if self.build_image is not None else tag == IMAGE_TAG
        if build:
            try:
                self.image_info = ensure_image(self._client, tag)
                return
            except ImageBuildError as exc:
                build_error = exc
        else:
            build_error = None
        try:
            self._client.images.get(tag)
        except docker.errors.ImageNotFound as exc:
            hint = f" and it could not be built here: {build_error}" if build_error else ""
            raise SandboxUnavailable(
                f"the sandbox image {tag} is not available on the engine{hint} "
                "(build it with `python -m agentenvs.sandbox.docker.image`)"
            ) from exc

    def _remove_stale_containers(self) -> None:
        """Containers left by a process of this host that no longer exists."""
        me = socket.gethostname()
        with contextlib.suppress(Exception):
            for container in self._client.containers.list(all=True, filters={"label": LABEL}):
                owner = (container.labels or {}).get(OWNER_LABEL, "")
                host, _, pid = owner.rpartition(":")
                if host == me and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                    with contextlib.suppress(Exception):
                        container.remove(force=True)

    def _remove_own_containers(self) -> None:
        """Whatever this sandbox created and a removal missed (engine hiccups): remove it."""
        with contextlib.suppress(Exception):
            label = f"{INSTANCE_LABEL}={self.instance_id}"
            for container in self._client.containers.list(all=True, filters={"label": label}):
                with contextlib.suppress(Exception):
                    container.remove(force=True)

    def _prepare(self) -> ContainerSettings:
        if self._settings is not None:
            return self._settings
        unknown = unknown_layers(self.config.min_isolation)
        if unknown:
            enforce_minimum(Capabilities(backend="docker"), self.config.min_isolation)
        self._connect()
        self._remove_stale_containers()
        self._ensure_image()
        seccomp_bpf = None
        if not self.use_seccomp:
            self._seccomp_note = "the sandbox's filter is disabled (use_seccomp=False)"
        elif _arch(str(self._engine_info.get("Architecture", ""))) != _arch(platform.machine()):
            self._seccomp_note = "the engine's architecture differs from this host's"
        else:
            from agentenvs.sandbox.local.seccomp import build_seccomp_program

            program = build_seccomp_program()
            if program.bpf:
                seccomp_bpf = base64.b64encode(program.bpf).decode()
            self._seccomp_note = program.reason
        security = " ".join(str(o) for o in self._engine_info.get("SecurityOptions") or [])
        remapped = "userns" in security or "rootless" in security
        self._uids = _shared_uids(USERNS_UID_BASE if remapped else UID_BASE)
        cfg = self.config
        self._settings = ContainerSettings(
            image=cfg.docker_image,
            memory_bytes=cfg.memory_limit_mb * MB + CONTAINER_HEADROOM_BYTES,
            pids_limit=cfg.max_processes + SESSION_PROCESSES + 2,
            nano_cpus=int(self.cpus * 1e9),
            workdir_bytes=cfg.workdir_size_mb * MB,
            preload=self.preload,
            seccomp_bpf=seccomp_bpf,
            landlock=self.use_landlock,
            labels={
                OWNER_LABEL: f"{socket.gethostname()}:{os.getpid()}",
                INSTANCE_LABEL: self.instance_id,
            },
        )
        return self._settings

    def _limits(
        self,
        *,
        timeout: float | None = None,
        memory_limit_mb: int | None = None,
        session: bool = False,
    ) -> dict:
        cfg = self.config
        timeout = float(timeout or cfg.timeout)
        cpu = cfg.cpu_seconds if cfg.cpu_seconds is not None else timeout + 1
        overhead = SESSION_PROCESSES if session else SUPERVISOR_PROCESSES
        return {
            "timeout": timeout,
            "cpu_seconds": math.ceil(cpu),
            "memory_bytes": (memory_limit_mb or cfg.memory_limit_mb) * MB,
            "max_processes": cfg.max_processes + overhead,
            "max_output_bytes": cfg.max_output_bytes,
            "max_file_bytes": cfg.max_file_bytes,
            "max_open_files": 512,
        }

    async def _spawn(self) -> ContainerWorker:
        assert self._settings is not None and self._uids is not None
        if self._closed:
            raise WorkerStartError("the sandbox is closed")
        uid = self._uids.acquire()
        worker = ContainerWorker(self._client, self._settings, uid)
        self._transient.add(worker)
        try:
            await worker.start(self.start_timeout)
        except BaseException:
            self._uids.release(uid)
            raise
        finally:
            self._transient.discard(worker)
        self.stats["containers_started"] += 1
        return worker

    async def _retire(self, worker: ContainerWorker) -> None:
        await worker.kill()
        if self._uids is not None:
            self._uids.release(worker.uid)

    async def start(self) -> None:
        if self._closed:
            raise SandboxUnavailable("this sandbox has been closed")
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            await asyncio.to_thread(self._prepare)
            try:
                first = await self._spawn()
            except WorkerStartError as exc:
                raise SandboxUnavailable(
                    f"the docker sandbox cannot start a container: {exc}"
                ) from exc
            try:
                probe = await first.request({"op": "probe", "limits": self._limits()}, 60)
                self._caps = await asyncio.to_thread(self._assess, first, probe)
                enforce_minimum(self._caps, self.config.min_isolation)
            except BaseException:
                await self._retire(first)
                raise
            if self.mode == "per_call":
                await self._retire(first)
                self._per_call = asyncio.Semaphore(self.config.pool_size)
            else:
                others = await asyncio.gather(
                    *(self._spawn() for _ in range(self.config.pool_size - 1)),
                    return_exceptions=True,
                )
                self._slots = [_Slot(first)] + [
                    _Slot(w if isinstance(w, ContainerWorker) else None) for w in others
                ]
                self._idle = asyncio.Queue()
                for slot in self._slots:
                    self._idle.put_nowait(slot)
            self._started = True

    def _assess(self, worker: ContainerWorker, probe: dict) -> Capabilities:
        worker.container.reload()
        return assess(
            hello=worker.hello,
            probe=probe,
            host_config=worker.container.attrs.get("HostConfig") or {},
            host_pid=worker.host_pid,
            engine_info=self._engine_info,
            allowed_env=set(container_environment()),
            seccomp_note=self._seccomp_note,
            limits=self._limits(),
        )

    def capabilities(self) -> Capabilities:
        if self._caps is None:
            return run_sync(self._measure_capabilities())
        return self._caps

    async def _measure_capabilities(self) -> Capabilities:
        probe_sandbox = DockerSandbox(
            self.config.model_copy(update={"min_isolation": [], "pool_size": 1}),
            preload=(),
            cpus=self.cpus,
            use_seccomp=self.use_seccomp,
            use_landlock=self.use_landlock,
            build_image=self.build_image,
            session_spares=0,
        )
        async with probe_sandbox:
            assert probe_sandbox._caps is not None
            return probe_sandbox._caps

    # ------------------------------------------------------------------ runs
    async def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        memory_limit_mb: int | None = None,
        stdin: str | None = None,
    ) -> ExecResult:
        if self._closed:
            return ExecResult(ExecStatus.SANDBOX_ERROR, message="the sandbox is closed")
        try:
            await self.start()
        except SandboxUnavailable as exc:
            return ExecResult(ExecStatus.SANDBOX_ERROR, message=str(exc))
        limits = self._limits(timeout=timeout, memory_limit_mb=memory_limit_mb)
        request = {
            "op": "run",
            "code": code,
            "limits": limits,
            "stdin": stdin,
            "show_last": self.config.show_last_expression,
        }
        try:
            if self.mode == "per_call":
                return await self._run_per_call(request, limits)
            assert self._idle is not None
            slot = await self._idle.get()
            try:
                return await self._run_in_slot(slot, request, limits)
            finally:
                self._idle.put_nowait(slot)
        finally:
            self.stats["runs"] += 1

    async def _ready_worker(self, slot: _Slot) -> ContainerWorker:
        worker = slot.worker
        if worker is not None and worker.alive and not worker.recycle:
            return worker
        slot.worker = None
        if worker is not None:
            await self._retire(worker)
        slot.worker = await self._spawn()
        return slot.worker

    async def _execute(self, worker: ContainerWorker, request: dict, limits: dict) -> ExecResult:
        """One request on one worker; raises WorkerDead (the caller retires the worker)."""
        before = worker.oom.read()
        response = await worker.request(request, limits["timeout"] + REQUEST_GRACE_SECONDS)
        after = worker.oom.read()
        oom = before is not None and after is not None and after > before
        return to_exec_result(response, oom=oom, memory_mb=limits["memory_bytes"] // MB)

    async def _dead_result(
        self, worker: ContainerWorker, exc: WorkerDead, memory_mb: int
    ) -> ExecResult:
        oom = await asyncio.to_thread(worker.oom_killed)
        await self._retire(worker)
        if oom:
            return ExecResult(
                ExecStatus.MEMORY,
                message=f"the sandbox container was killed by the out-of-memory killer (limit {memory_mb} MB)",
            )
        return ExecResult(ExecStatus.SANDBOX_ERROR, message=str(exc))

    async def _run_in_slot(self, slot: _Slot, request: dict, limits: dict) -> ExecResult:
        for attempt in range(2):
            try:
                worker = await self._ready_worker(slot)
            except WorkerStartError as exc:
                return ExecResult(
                    ExecStatus.SANDBOX_ERROR, message=f"could not start a sandbox container: {exc}"
                )
            try:
                return await self._execute(worker, request, limits)
            except WorkerDead as exc:
                slot.worker = None
                if not exc.delivered and attempt == 0:
                    await self._retire(worker)
                    self.stats["retries"] += 1
                    continue
                return await self._dead_result(worker, exc, limits["memory_bytes"] // MB)
        return ExecResult(
            ExecStatus.SANDBOX_ERROR, message="no sandbox container could take the request"
        )

    async def _run_per_call(self, request: dict, limits: dict) -> ExecResult:
        assert self._per_call is not None
        async with self._per_call:
            try:
                worker = await self._spawn()
            except WorkerStartError as exc:
                return ExecResult(
                    ExecStatus.SANDBOX_ERROR, message=f"could not start a sandbox container: {exc}"
                )
            self._transient.add(worker)
            try:
                return await self._execute(worker, request, limits)
            except WorkerDead as exc:
                return await self._dead_result(worker, exc, limits["memory_bytes"] // MB)
            finally:
                self._transient.discard(worker)
                await self._retire(worker)

    # ------------------------------------------------------------------ sessions
    def session(self) -> DockerSession:
        session = DockerSession(self)
        self._sessions.add(session)
        return session

    async def _take_session_worker(self) -> ContainerWorker:
        await self.start()
        worker = None
        while self._spares and worker is None:
            candidate = self._spares.pop()
            if candidate.alive:
                worker = candidate
            else:
                await self._retire(candidate)
        if worker is None:
            worker = await self._spawn()
        self._refill_spares()
        return worker

    def _refill_spares(self) -> None:
        if self._closed or len(self._spares) >= self.session_spares:
            return

        async def refill() -> None:
            with contextlib.suppress(WorkerStartError):
                worker = await self._spawn()
                if self._closed:
                    await self._retire(worker)
                else:
                    self._spares.append(worker)

        task = asyncio.ensure_future(refill())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ introspection
    def workers(self) -> list[ContainerWorker]:
        workers = [slot.worker for slot in self._slots if slot.worker is not None]
        workers += self._spares
        workers += [s._worker for s in list(self._sessions) if s._worker is not None]
        workers += list(self._transient)
        return workers

    def host_pids(self) -> set[int]:
        """Host pids of the containers' own processes (local engines), for leak checks."""
        pids: set[int] = set()
        for worker in self.workers():
            pids |= worker.own_host_pids()
        return pids

    def sandbox_uids(self) -> set[int]:
        return {w.uid for w in self.workers()}

    def container_ids(self) -> set[str]:
        return {w.container.id for w in self.workers() if w.container is not None}

    # ------------------------------------------------------------------ teardown
    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for session in list(self._sessions):
            await session.close()
        workers = [slot.worker for slot in self._slots if slot.worker is not None] + self._spares
        for slot in self._slots:
            slot.worker = None
        self._spares = []
        await asyncio.gather(*(self._retire(w) for w in workers), return_exceptions=True)
        if self._client is not None and self._settings is not None:
            await asyncio.to_thread(self._remove_own_containers)
        if self._owns_client and self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()


class DockerSession(Session):
    """Cells sharing one namespace in a dedicated container (the supervisor's fork chain).

    If the state is lost (a cell killed the state holder, or the container died), the
    earlier successful cells are replayed, quietly, on a fresh holder or container.
    """

    def __init__(self, sandbox: DockerSandbox) -> None:
        self._sandbox = sandbox
        self._worker: ContainerWorker | None = None
        self._cells: list[str] = []
        self._lock = asyncio.Lock()
        self._closed = False
        self._needs_replay = False
        self.replays = 0

    async def __aenter__(self) -> DockerSession:
        async with self._lock:
            await self._ensure_worker()
        return self

    async def _ensure_worker(self) -> ContainerWorker:
        if self._worker is not None and self._worker.alive and not self._worker.recycle:
            return self._worker
        if self._worker is not None:
            await self._sandbox._retire(self._worker)
            self._worker = None
            self._needs_replay = bool(self._cells)
        worker = await self._sandbox._take_session_worker()
        self._worker = worker
        await worker.request(
            {"op": "session_open", "limits": self._sandbox._limits(session=True)}, 30
        )
        return worker

    async def run(self, code: str, *, timeout: float | None = None) -> ExecResult:
        if self._closed:
            return ExecResult(ExecStatus.SANDBOX_ERROR, message="the session is closed")
        async with self._lock:
            notes: list[str] = []
            result, response = ExecResult(ExecStatus.SANDBOX_ERROR), {}
            for attempt in range(2):
                try:
                    worker = await self._ensure_worker()
                except (WorkerStartError, WorkerDead, SandboxUnavailable) as exc:
                    return ExecResult(
                        ExecStatus.SANDBOX_ERROR, message=f"could not start the session: {exc}"
                    )
                if self._needs_replay:
                    notes.append(await self._replay(worker))
                result, response = await self._cell(worker, code, timeout)
                if response.get("not_run") and attempt == 0:
                    self._needs_replay = bool(self._cells)
                    continue
                break
            if response.get("adopted"):
                self._cells.append(code)
            if response.get("state_lost") and not response.get("not_run"):
                self._needs_replay = bool(self._cells)
                if self._worker is not None and self._worker.alive:
                    notes.append(await self._replay(self._worker))
            if notes:
                result.message = "; ".join(n for n in [result.message, *notes] if n)
            return result

    async def _cell(
        self, worker: ContainerWorker, code: str, timeout: float | None
    ) -> tuple[ExecResult, dict]:
        cfg = self._sandbox.config
        timeout = float(timeout or cfg.timeout)
        request = {
            "op": "cell",
            "code": code,
            "timeout": timeout,
            "show_last": cfg.show_last_expression,
        }
        limits = {"timeout": timeout, "memory_bytes": cfg.memory_limit_mb * MB}
        try:
            before = worker.oom.read()
            response = await worker.request(request, timeout + REQUEST_GRACE_SECONDS)
            after = worker.oom.read()
        except WorkerDead as exc:
            result = await self._sandbox._dead_result(worker, exc, cfg.memory_limit_mb)
            self._worker = None
            self._needs_replay = bool(self._cells)
            result.message += "; the session's earlier cells will be replayed in a fresh container"
            return result, {"not_run": not exc.delivered}
        oom = before is not None and after is not None and after > before
        return to_exec_result(response, oom=oom, memory_mb=limits["memory_bytes"] // MB), response

    async def _replay(self, worker: ContainerWorker) -> str:
        """Rebuild lost state by re-running the cells that had been kept, quietly."""
        self._needs_replay = False
        self.replays += 1
        cells, self._cells = self._cells, []
        failed = 0
        for code in cells:
            _, response = await self._cell(worker, code, None)
            if response.get("adopted"):
                self._cells.append(code)
            else:
                failed += 1
            if self._worker is None or not self._worker.alive:
                break
        note = f"the session's state was rebuilt by replaying {len(cells)} earlier cell(s)"
        return note + (f" ({failed} did not complete)" if failed else "")

    async def close(self) -> None:
        self._closed = True
        if self._worker is not None:
            worker, self._worker = self._worker, None
            await self._sandbox._retire(worker)
