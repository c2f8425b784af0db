"""The ``docker`` backend: warm sandbox containers driven through the Docker API.

Works against a Docker Engine and against podman's Docker-compatible service
(:mod:`agentenvs.sandbox.backends.docker.podman`), chosen by ``SandboxConfig.docker_host`` or
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
import os
import platform
import socket
import uuid
from typing import Any, Literal

from agentenvs.sandbox.backends.docker.assess import assess
from agentenvs.sandbox.backends.docker.image import IMAGE_TAG, ImageBuildError, ensure_image
from agentenvs.sandbox.backends.docker.worker import (
    INSTANCE_LABEL,
    LABEL,
    OWNER_LABEL,
    ContainerSettings,
    ContainerWorker,
    container_environment,
)
from agentenvs.sandbox.base import (
    Capabilities,
    ExecResult,
    ExecStatus,
    SandboxConfig,
    SandboxUnavailable,
)
from agentenvs.sandbox.capabilities import enforce_minimum, unknown_layers
from agentenvs.sandbox.pool.branch_memory import BranchMemory
from agentenvs.sandbox.pool.errors import WorkerDead, WorkerStartError
from agentenvs.sandbox.pool.health import CgroupDirs
from agentenvs.sandbox.pool.session import SupervisedSession
from agentenvs.sandbox.pool.supervised import (
    MB,
    SESSION_FORK_LIMIT,
    SESSION_PROCESSES,
    SupervisedSandbox,
)
from agentenvs.sandbox.pool.uids import UidAllocator

CONTAINER_HEADROOM_BYTES = 256 * MB
"""Above the per-execution memory limit: the supervisor's pre-imported heap, the tmpfs."""
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


class DockerSandbox(SupervisedSandbox[ContainerWorker]):
    """Warm containers (or one container per call) running the sandbox supervisor.

    Backend-specific knobs are constructor arguments; the shared limits live in
    :class:`SandboxConfig` (``docker_image``, ``docker_host`` included).
    """

    worker_noun = "container"

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
        self._init_pool(session_spares if mode == "warm" else 0, start_timeout)
        self._client = client
        self._owns_client = client is None
        self._settings: ContainerSettings | None = None
        self._uids: UidAllocator | None = None
        self._seccomp_note = ""
        self._engine_info: dict = {}
        self._per_call: asyncio.Semaphore | None = None
        self._transient: set[ContainerWorker] = set()
        self.image_info: Any = None
        self.instance_id = uuid.uuid4().hex
        """Label value on every container of this sandbox (see ``INSTANCE_LABEL``)."""
        self.stats["containers_started"] = 0

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
                "(build it with `python -m agentenvs.sandbox.backends.docker.image`)"
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
        seccomp_stages: dict[str, str] = {}
        if not self.use_seccomp:
            self._seccomp_note = "the sandbox's filter is disabled (use_seccomp=False)"
        elif _arch(str(self._engine_info.get("Architecture", ""))) != _arch(platform.machine()):
            self._seccomp_note = "the engine's architecture differs from this host's"
        else:
            from agentenvs.sandbox.pool.seccomp import build_seccomp_program

            program = build_seccomp_program()
            if program.bpf:
                seccomp_bpf = base64.b64encode(program.bpf).decode()
            seccomp_stages = {
                name: base64.b64encode(bpf).decode() for name, bpf in program.stages.items()
            }
            self._seccomp_note = program.reason
        security = " ".join(str(o) for o in self._engine_info.get("SecurityOptions") or [])
        remapped = "userns" in security or "rootless" in security
        self._uids = _shared_uids(USERNS_UID_BASE if remapped else UID_BASE)
        cfg = self.config
        self._settings = ContainerSettings(
            image=cfg.docker_image,
            memory_bytes=cfg.memory_limit_mb * MB + CONTAINER_HEADROOM_BYTES,
            pids_limit=cfg.max_processes + SESSION_PROCESSES + SESSION_FORK_LIMIT + 2,
            nano_cpus=int(self.cpus * 1e9),
            workdir_bytes=cfg.workdir_size_mb * MB,
            preload=self.preload,
            seccomp_bpf=seccomp_bpf,
            seccomp_stages=seccomp_stages,
            landlock=self.use_landlock,
            labels={
                OWNER_LABEL: f"{socket.gethostname()}:{os.getpid()}",
                INSTANCE_LABEL: self.instance_id,
            },
        )
        return self._settings

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
        return self._watch_health(worker)

    def _health_pid(self, worker: ContainerWorker) -> int | None:
        return worker.host_pid if self.mode == "warm" else None

    async def _retire(self, worker: ContainerWorker) -> None:
        await worker.kill()
        if self._uids is not None:
            self._uids.release(worker.uid)

    async def _launch_first(self) -> ContainerWorker:
        await asyncio.to_thread(self._prepare)
        try:
            return await self._spawn()
        except WorkerStartError as exc:
            raise SandboxUnavailable(f"the docker sandbox cannot start a container: {exc}") from exc

    async def _assess_worker(self, worker: ContainerWorker, probe: dict) -> Capabilities:
        return await asyncio.to_thread(self._assess, worker, probe)

    async def _fill_pool(self, first: ContainerWorker) -> None:
        if self.mode == "per_call":
            await self._retire(first)
            self._per_call = asyncio.Semaphore(self.config.pool_size)
        else:
            await super()._fill_pool(first)

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

    def _probe_sandbox(self) -> DockerSandbox:
        return DockerSandbox(
            self.config.model_copy(update={"min_isolation": [], "pool_size": 1}),
            preload=(),
            cpus=self.cpus,
            use_seccomp=self.use_seccomp,
            use_landlock=self.use_landlock,
            build_image=self.build_image,
            session_spares=0,
        )

    # ------------------------------------------------------------------ runs
    async def _dispatch(self, request: dict, limits: dict) -> ExecResult:
        if self.mode == "per_call":
            return await self._run_per_call(request, limits)
        return await super()._dispatch(request, limits)

    def _branch_memory(self, worker: ContainerWorker) -> BranchMemory | str | None:
        if not worker.host_pid:
            return (
                "the container's memory group is on a remote engine: its sessions cannot "
                "get one each, so they are not forked in the container"
            )
        dirs = CgroupDirs.of_pid(worker.host_pid)
        if dirs.memory is None:
            return "the container's memory group is not visible on this host"
        return BranchMemory(
            dirs.memory,
            dirs.version,
            branch_bytes=self.config.memory_limit_mb * MB + CONTAINER_HEADROOM_BYTES,
            headroom_bytes=CONTAINER_HEADROOM_BYTES,
        )

    def _supervisor_host_pid(self, worker: ContainerWorker) -> int | None:
        return worker.host_pid

    def _oom_count(self, worker: ContainerWorker) -> int | None:
        return worker.oom.read()

    async def _dead_result(
        self,
        worker: ContainerWorker,
        exc: WorkerDead,
        memory_mb: int,
        oom_before: int | None = None,
    ) -> ExecResult:
        oom = await asyncio.to_thread(worker.oom_killed)
        await self._retire(worker)
        if oom:
            return ExecResult(
                ExecStatus.MEMORY,
                message=f"the sandbox container was killed by the out-of-memory killer (limit {memory_mb} MB)",
            )
        return ExecResult(ExecStatus.SANDBOX_ERROR, message=str(exc))

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

    # ------------------------------------------------------------------ introspection
    def workers(self) -> list[ContainerWorker]:
        workers = [slot.worker for slot in self._slots if slot.worker is not None]
        workers += self._spares + self._standby
        workers += self._session_workers()
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
        await super().close()
        if self._client is not None and self._settings is not None:
            await asyncio.to_thread(self._remove_own_containers)
        if self._owns_client and self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()


class DockerSession(SupervisedSession[ContainerWorker]):
    """Cells sharing one namespace in a dedicated container (the supervisor's fork chain).

    If the state is lost (a cell killed the state holder, or the container died), the
    earlier successful cells are replayed, quietly, on a fresh holder or container.
    """

    _sandbox: DockerSandbox

    async def _lost_worker_result(
        self, worker: ContainerWorker, exc: WorkerDead, oom_before: int | None
    ) -> ExecResult:
        result = await self._sandbox._dead_result(worker, exc, self._sandbox.config.memory_limit_mb)
        self._worker = None
        result.message += "; the session's earlier cells will be replayed in a fresh container"
        return result
