"""The ``local`` backend: a warm pool of bubblewrap-sandboxed, pre-imported interpreters.

``run()`` borrows an idle worker (at most ``pool_size`` run at once), asks it to fork a
fresh child for the code and returns what happened. A worker that dies is replaced on
its next use; a request that never reached a worker is retried once on a fresh one.
``session()`` takes a dedicated worker whose fork-chain keeps the notebook namespace
(see ``sandbox/supervisor/sessions.py``); if that worker or its state holder is lost, the session replays
its earlier successful cells on a fresh one, and says so.
"""

from __future__ import annotations

import os

from agentenvs.sandbox.backends.local.assess import assess
from agentenvs.sandbox.backends.local.cgroups import CgroupSupport, remove_stale_groups
from agentenvs.sandbox.backends.local.launch import DEFAULT_WARMUP, LaunchPlan
from agentenvs.sandbox.backends.local.worker import Worker
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
from agentenvs.sandbox.pool.seccomp import build_seccomp_program
from agentenvs.sandbox.pool.session import SupervisedSession
from agentenvs.sandbox.pool.supervised import (
    MB,
    SESSION_FORK_LIMIT,
    SESSION_PROCESSES,
    SupervisedSandbox,
    oom_between,
)
from agentenvs.sandbox.pool.uids import UidAllocator

CGROUP_HEADROOM_BYTES = 128 * MB
"""Above the per-execution memory limit: room for the supervisor's own copy-on-write pages."""


class LocalSandbox(SupervisedSandbox[Worker]):
    """Local, daemon-less sandbox (see the package docstring for the layers).

    Backend-specific knobs are constructor arguments; the shared limits live in
    :class:`SandboxConfig`.
    """

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        python: str = "/usr/bin/python3",
        preload: tuple[str, ...] = ("numpy", "sympy"),
        warmup: str | None = DEFAULT_WARMUP,
        use_bwrap: bool | None = None,
        use_cgroups: bool = True,
        use_seccomp: bool = True,
        use_landlock: bool = True,
        uid_base: int = 1_900_000,
        session_spares: int = 1,
        start_timeout: float = 60.0,
    ) -> None:
        super().__init__(config or SandboxConfig())
        self.python = python
        self.preload = list(preload)
        self.warmup = warmup if preload else None
        self.use_bwrap = use_bwrap
        self.use_cgroups = use_cgroups
        self.use_seccomp = use_seccomp
        self.use_landlock = use_landlock
        self._init_pool(session_spares, start_timeout)
        self._uids = UidAllocator.shared(uid_base) if os.geteuid() == 0 else None
        self._plan: LaunchPlan | None = None
        self._cgroups: CgroupSupport | None = None
        self._cgroup_notes: dict[str, str] = {}
        self._seccomp_reason = ""
        self._starting: set[Worker] = set()
        self.stats["spawned"] = 0

    # ------------------------------------------------------------------ setup
    def _check_python(self) -> None:
        if not os.access(self.python, os.X_OK):
            raise SandboxUnavailable(
                f"the sandboxed interpreter {self.python} is missing: install Debian's python3 "
                "(with python3-numpy and python3-sympy) or pass python=..."
            )

    def _prepare(self) -> LaunchPlan:
        if self._plan is not None:
            return self._plan
        self._check_python()
        unknown = unknown_layers(self.config.min_isolation)
        if unknown:
            enforce_minimum(Capabilities(backend="local"), self.config.min_isolation)
        seccomp = build_seccomp_program() if self.use_seccomp else None
        self._seccomp_reason = (
            seccomp.reason if seccomp else "disabled by configuration (use_seccomp=False)"
        )
        if self.use_cgroups and os.geteuid() == 0:
            self._cgroups = CgroupSupport.detect()
            self._cgroup_notes = dict(self._cgroups.notes)
            remove_stale_groups(self._cgroups)
            if self._cgroups.memory_parent is None and self._cgroups.pids_parent is None:
                self._cgroups = None
        else:
            reason = (
                "disabled by configuration (use_cgroups=False)"
                if not self.use_cgroups
                else ("creating cgroups needs root (or a delegated cgroup)")
            )
            self._cgroup_notes = {"memory": reason, "pids": reason}
        self._plan = LaunchPlan.detect(
            python=self.python,
            workdir_bytes=self.config.workdir_size_mb * MB,
            preload=self.preload,
            warmup=self.warmup,
            seccomp_bpf=seccomp.bpf if seccomp else None,
            seccomp_stages=seccomp.stages if seccomp else None,
            landlock=self.use_landlock,
            use_bwrap=self.use_bwrap,
        )
        return self._plan

    def _new_worker_object(self) -> Worker:
        assert self._plan is not None
        return Worker(
            self._plan,
            cgroups=self._cgroups,
            uids=self._uids,
            pids_max=self.config.max_processes + SESSION_PROCESSES + SESSION_FORK_LIMIT + 2,
            memory_limit_bytes=self.config.memory_limit_mb * MB + CGROUP_HEADROOM_BYTES,
        )

    async def _spawn(self) -> Worker:
        worker = self._new_worker_object()
        self._starting.add(worker)
        try:
            await worker.start(self.start_timeout)
        finally:
            self._starting.discard(worker)
        self.stats["spawned"] += 1
        return self._watch_health(worker)

    def _health_pid(self, worker: Worker) -> int | None:
        return worker.supervisor_pid if worker.cgroup is not None else None

    async def _launch_first(self) -> Worker:
        return await self._first_worker(self._prepare())

    async def _assess_worker(self, worker: Worker, probe: dict) -> Capabilities:
        assert self._plan is not None
        return assess(
            worker,
            probe,
            plan_notes=self._plan.notes,
            cgroup_notes=self._cgroup_notes,
            seccomp_reason=self._seccomp_reason,
            limits=self._limits(),
        )

    async def _first_worker(self, plan: LaunchPlan) -> Worker:
        try:
            return await self._spawn()
        except WorkerStartError as exc:
            if plan.mode != "bwrap" or self.use_bwrap:
                raise SandboxUnavailable(f"the local sandbox cannot start a worker: {exc}") from exc
            # bubblewrap is installed but cannot run here (e.g. user namespaces disabled).
            plan.fallback_to_direct(f"bubblewrap failed on this machine: {exc}")
            try:
                return await self._spawn()
            except WorkerStartError as exc2:
                raise SandboxUnavailable(
                    f"the local sandbox cannot start a worker: {exc2}"
                ) from exc2

    def _probe_sandbox(self) -> LocalSandbox:
        return LocalSandbox(
            self.config.model_copy(update={"min_isolation": [], "pool_size": 1}),
            python=self.python,
            preload=tuple(self.preload),
            warmup=self.warmup,
            use_bwrap=self.use_bwrap,
            use_cgroups=self.use_cgroups,
            use_seccomp=self.use_seccomp,
            use_landlock=self.use_landlock,
        )

    # ------------------------------------------------------------------ runs
    def _oom_count(self, worker: Worker) -> int | None:
        return worker.cgroup.oom_kills() if worker.cgroup is not None else None

    def _branch_memory(self, worker: Worker) -> BranchMemory | str | None:
        if worker.cgroup is None or worker.cgroup.memory is None:
            return None  # no memory group: the sessions share none (rlimits bound each)
        return BranchMemory(
            worker.cgroup.memory,
            2 if worker.cgroup.v2 else 1,
            branch_bytes=self.config.memory_limit_mb * MB + CGROUP_HEADROOM_BYTES,
            headroom_bytes=CGROUP_HEADROOM_BYTES,
        )

    def _supervisor_host_pid(self, worker: Worker) -> int | None:
        return worker.supervisor_pid

    def _apply_memory_limit(self, worker: Worker, memory_bytes: int) -> None:
        if worker.branches is not None:
            return  # the worker's group is the sum of its branches' (``branch_memory``)
        if worker.cgroup is not None:
            worker.cgroup.set_memory_limit(memory_bytes + CGROUP_HEADROOM_BYTES)

    async def _dead_result(
        self, worker: Worker, exc: WorkerDead, memory_mb: int, oom_before: int | None
    ) -> ExecResult:
        oom = oom_between(oom_before, self._oom_count(worker))
        await worker.kill()
        if oom:
            return ExecResult(
                ExecStatus.MEMORY,
                message="the sandbox worker was killed by the out-of-memory killer",
            )
        return ExecResult(ExecStatus.SANDBOX_ERROR, message=str(exc))

    # ------------------------------------------------------------------ sessions
    def session(self) -> LocalSession:
        session = LocalSession(self)
        self._sessions.add(session)
        return session

    # ------------------------------------------------------------------ teardown
    def host_pids(self) -> set[int]:
        """Host pids of every live worker process (bubblewrap + supervisor), for leak checks."""
        pids: set[int] = set()
        for worker in self._all_workers():
            pids |= worker.host_pids()
        return pids

    def sandbox_uids(self) -> set[int]:
        return {w.uid for w in self._all_workers() if w.uid is not None}

    def _all_workers(self) -> list[Worker]:
        workers = [slot.worker for slot in self._slots if slot.worker is not None]
        workers += self._spares + self._standby
        workers += list(self._starting)
        workers += self._session_workers()
        return workers


class LocalSession(SupervisedSession[Worker]):
    """Cells sharing one namespace, on a dedicated worker (see ``supervisor.Holder``)."""

    _sandbox: LocalSandbox

    async def _lost_worker_result(
        self, worker: Worker, exc: WorkerDead, oom_before: int | None
    ) -> ExecResult:
        oom = oom_between(oom_before, self._oom_count(worker))
        await worker.kill()
        status = ExecStatus.MEMORY if oom else ExecStatus.SANDBOX_ERROR
        message = f"{exc}; the session's earlier cells will be replayed on a fresh worker"
        return ExecResult(status, message=message)
