"""The one interface every sandbox backend implements.

Code written by a model is hostile. A backend runs it with bounded time, memory,
processes and output, and reports what happened as data (:class:`ExecResult`),
never as an exception: a timeout or a crash is an outcome, not an error. Only a
broken sandbox (it cannot run anything at all) is reported as ``sandbox_error``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentenvs.envs.errors import AgentEnvsError


class ExecStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    """The code raised or exited non-zero."""
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT_LIMIT = "output_limit"
    SANDBOX_ERROR = "sandbox_error"
    """The sandbox itself failed (not the code): a dead worker, a lost server."""


@dataclass
class ExecResult:
    status: ExecStatus
    stdout: str = ""
    stderr: str = ""
    return_code: int | None = None
    duration: float = 0.0
    """Wall seconds of the execution itself."""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    message: str = ""
    """Why, for anything but ``ok`` (the sandbox's words, not the program's); also notes
    such as limits a server lowered."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Fetched files (``fetch_files``): only those that existed as regular files within the
    limits, read by the sandbox outside the program's process, so a program cannot forge
    them by printing a marker."""
    clamped: dict[str, dict[str, float]] = field(default_factory=dict)
    """Limits a server lowered to its own ceilings (``agentenvs sandbox serve``'s
    ``agentenvs.clamped``): field -> ``{"requested": ..., "applied": ...}``. Empty when the
    run got what was asked for."""

    @property
    def ok(self) -> bool:
        return self.status == ExecStatus.OK


class SandboxConfig(BaseModel):
    """Limits and choices common to every backend."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "docker", "sandboxfusion"] = "local"
    timeout: float = Field(10.0, gt=0, description="Wall seconds per execution.")
    cpu_seconds: float | None = Field(
        None, gt=0, description="CPU seconds per execution (default: timeout + 1)."
    )
    memory_limit_mb: int = Field(1024, ge=32, description="Per execution.")
    max_processes: int = Field(64, ge=1)
    max_output_bytes: int = Field(64 * 1024, ge=256, description="Per stream.")
    max_file_bytes: int = Field(16 * 1024 * 1024, ge=0)
    workdir_size_mb: int = Field(64, ge=1)
    show_last_expression: bool = Field(
        True, description="Show the value of a final bare expression, as a notebook does."
    )
    pool_size: int = Field(2, ge=1, description="Warm workers kept ready.")
    spare_workers: int = Field(
        0,
        ge=0,
        description="Warm workers kept aside (local/docker): one takes over at once from a "
        "worker that must be recycled, or serves a request while every pool worker is held "
        "by a long run.",
    )
    session_fork: Literal["process", "replay"] = Field(
        "process",
        description="How Session.fork() copies a notebook (local/docker): 'process' forks "
        "the state holder inside its worker (milliseconds; from then on the forked family "
        "may read but not write files); 'replay' re-runs the kept cells on a worker of its "
        "own (files stay writable). sandboxfusion always replays.",
    )
    min_isolation: list[str] = Field(
        default_factory=list,
        description="Isolation layers that must be active, else the sandbox refuses to start "
        "(names as in the capability report: e.g. 'namespaces', 'seccomp', 'unprivileged_uid').",
    )
    # docker
    docker_image: str = "agentenvs-sandbox:latest"
    docker_host: str | None = None
    # sandboxfusion
    url: str | None = None
    max_concurrency: int = Field(8, ge=1)
    retries: int = Field(3, ge=0)


@dataclass
class Capabilities:
    """Which isolation layers are active, and why the others are not."""

    backend: str
    active: dict[str, bool] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def missing(self, required: list[str]) -> list[str]:
        return [name for name in required if not self.active.get(name, False)]


class SandboxUnavailable(AgentEnvsError, RuntimeError):
    """The sandbox cannot start, or cannot start with the isolation asked for."""


class SessionForkError(AgentEnvsError, RuntimeError):
    """A session could not be forked (the backend cannot, or rebuilding its state failed)."""


class Session(ABC):
    """Cells that share variables, as in one notebook kernel for one episode.

    A cell that times out, crashes or exhausts memory is killed; the variables of
    earlier successful cells survive.
    """

    @abstractmethod
    async def run(self, code: str, *, timeout: float | None = None) -> ExecResult: ...

    @abstractmethod
    async def close(self) -> None: ...

    async def fork(self) -> Session:
        """A new, independent session whose namespace starts as a copy of this one's.

        For tree rollouts (a ReTool episode forked mid-way). Backends say how they copy
        the state; one that cannot raises :class:`SessionForkError`.
        """
        raise SessionForkError(f"{type(self).__name__} cannot fork")

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class Sandbox(ABC):
    """A backend. Create with :func:`agentenvs.sandbox.create`; use as an async context."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config

    @abstractmethod
    async def start(self) -> None:
        """Bring up workers; raise :class:`SandboxUnavailable` below ``min_isolation``."""

    @abstractmethod
    async def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        memory_limit_mb: int | None = None,
        stdin: str | None = None,
        files: Mapping[str, bytes] | None = None,
        fetch_files: Sequence[str] = (),
        language: str = "python",
    ) -> ExecResult:
        """Run one program in a fresh process; no state survives it.

        ``files`` are written into the work dir before the program starts (paths relative
        to it); ``fetch_files`` are read back after it ended, into ``ExecResult.files``.
        ``language`` is ``"python"`` or ``"bash"`` (same limits, same isolation); any
        other is a ``sandbox_error`` result.
        """

    async def _refuse_or_start(self, *, closed: bool) -> ExecResult | None:
        """Start on first use; return the ``SANDBOX_ERROR`` result ``run`` should give instead.

        Why: ``run`` reports an unusable sandbox (closed, or unable to start) as a
        result rather than raising, so callers such as envs never see an exception.
        Returns ``None`` when the sandbox is ready to run code.
        """
        if closed:
            return ExecResult(ExecStatus.SANDBOX_ERROR, message="the sandbox is closed")
        try:
            await self.start()
        except SandboxUnavailable as exc:
            return ExecResult(ExecStatus.SANDBOX_ERROR, message=str(exc))
        return None

    @abstractmethod
    def session(self) -> Session: ...

    @abstractmethod
    def capabilities(self) -> Capabilities: ...

    @abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
