"""``agentenvs sandbox serve``: SandboxFusion's ``/run_code`` contract over our sandbox.

Existing SandboxFusion clients (verl's sandbox tool and reward functions, the
``sandbox-fusion`` PyPI client, our own ``sandboxfusion`` backend) can use the local
(or docker) backend unchanged: same request and response fields, same statuses.

- ``POST /run_code``: ``code``, ``language`` (only ``python`` is served; anything else is
  a ``SandboxError``), ``run_timeout``, ``memory_limit_MB`` (<= 0: the server's
  default), ``stdin``, ``files`` (relative path -> base64, written to the work dir
  before the code runs), ``fetch_files`` (read back, base64, after it ran);
  ``compile_timeout`` is accepted and unused (Python is not compiled).
- ``GET /v1/ping``: ``"pong"``, as SandboxFusion answers.
- ``GET /agentenvs/capabilities``: the backend's capability report (an extension; our
  client shows it, labelled as the server's claim).

As in SandboxFusion, code runs as a script: a final bare expression is not displayed
(``show_last_expression`` is off unless the config given says otherwise).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import posixpath
import secrets
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from agentenvs.sandbox.base import ExecResult, ExecStatus, Sandbox, SandboxConfig
from agentenvs.sandbox.capabilities import as_dict

SERVED_LANGUAGES = {"python", "python3"}


class RunCodeRequest(BaseModel):
    """SandboxFusion's request body (unknown fields, e.g. ``args``, are ignored)."""

    model_config = ConfigDict(extra="ignore")

    code: str
    language: str = "python"
    compile_timeout: float = 10
    run_timeout: float = 10
    memory_limit_MB: int = -1
    stdin: str | None = None
    files: dict[str, str | None] = Field(default_factory=dict)
    fetch_files: list[str] = Field(default_factory=list)


class CommandRunResult(BaseModel):
    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


class RequestError(ValueError):
    """The request cannot be served (reported as ``SandboxError`` with this message)."""


def _relative_path(path: str) -> str:
    normal = posixpath.normpath(path)
    if posixpath.isabs(path) or normal == ".." or normal.startswith("../"):
        raise RequestError(f"file paths must stay inside the work dir: {path!r}")
    return normal


def with_files(code: str, files: dict[str, str | None], fetch: list[str]) -> tuple[str, str]:
    """Wrap ``code`` to write ``files`` first and report ``fetch`` after; returns (code, marker).

    The fetched files travel back on stderr after a random marker the code cannot guess,
    and the server strips them from what the client sees.
    """
    marker = "agentenvs-files-" + secrets.token_hex(16)
    writes = {}
    for path, content in files.items():
        if content is None:
            continue
        try:
            base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise RequestError(f"files[{path!r}] is not base64: {exc}") from exc
        writes[_relative_path(path)] = content
    fetched = [_relative_path(p) for p in fetch]
    program = (
        "def __agentenvs_files():\n"
        "    import base64, os\n"
        f"    for path, data in {writes!r}.items():\n"
        "        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
        "        with open(path, 'wb') as f:\n"
        "            f.write(base64.b64decode(data))\n"
        "__agentenvs_files()\n"
        "del __agentenvs_files\n"
        "def __agentenvs_fetch():\n"
        "    import base64, json, sys\n"
        "    out = {}\n"
        f"    for path in {fetched!r}:\n"
        "        try:\n"
        "            with open(path, 'rb') as f:\n"
        "                out[path] = base64.b64encode(f.read()).decode()\n"
        "        except OSError:\n"
        "            pass\n"
        "    sys.stdout.flush()\n"
        f"    sys.stderr.write('\\n{marker}' + json.dumps(out) + '\\n')\n"
        "    sys.stderr.flush()\n"
        "try:\n"
        f"    exec(compile({code!r}, '<code>', 'exec'), globals())\n"
        "finally:\n"
        "    __agentenvs_fetch()\n"
    )
    return program, marker


def split_fetched(stderr: str, marker: str) -> tuple[str, dict[str, str]]:
    head, found, tail = stderr.rpartition("\n" + marker)
    if not found:
        return stderr, {}
    try:
        files = json.loads(tail.strip())
    except ValueError:
        return head, {}
    return head, {k: v for k, v in files.items() if isinstance(v, str)}


def to_response(result: ExecResult, files: dict[str, str] | None = None) -> RunCodeResponse:
    """Map an :class:`ExecResult` to SandboxFusion's response."""
    run = CommandRunResult(
        status="Finished",
        execution_time=result.duration,
        return_code=result.return_code,
        stdout=result.stdout,
        stderr=result.stderr,
    )
    if result.status == ExecStatus.SANDBOX_ERROR:
        run.status = "Error"
        return RunCodeResponse(status="SandboxError", message=result.message, run_result=run)
    if result.status == ExecStatus.TIMEOUT:
        run.status = "TimeLimitExceeded"
        return RunCodeResponse(status="Failed", message="", run_result=run, files=files or {})
    if result.status == ExecStatus.OK:
        run.return_code = 0
        return RunCodeResponse(status="Success", message="", run_result=run, files=files or {})
    if run.return_code in (None, 0):
        run.return_code = 1  # memory / output limit: the program did not finish normally
    return RunCodeResponse(
        status="Failed", message=result.message, run_result=run, files=files or {}
    )


def create_app(
    sandbox: Sandbox | None = None,
    *,
    config: SandboxConfig | None = None,
    **backend_options: Any,
) -> FastAPI:
    """The FastAPI app; it starts ``sandbox`` (or one built from ``config``) and closes it."""
    if sandbox is None:
        from agentenvs.sandbox.factory import backend_class

        cfg = config or SandboxConfig(show_last_expression=False)
        sandbox = backend_class(cfg.backend)(cfg, **backend_options)
    box = sandbox

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await box.start()
        try:
            yield
        finally:
            await box.close()

    app = FastAPI(
        title="agentenvs sandbox (SandboxFusion-compatible)",
        lifespan=lifespan,
        version="1",
    )
    app.state.sandbox = box

    @app.get("/v1/ping")
    async def ping() -> str:
        return "pong"

    @app.get("/agentenvs/capabilities")
    async def capabilities() -> dict[str, Any]:
        return as_dict(box.capabilities(), box.config.min_isolation)

    @app.post("/run_code", response_model=RunCodeResponse)
    async def run_code(request: RunCodeRequest) -> RunCodeResponse:
        if request.language not in SERVED_LANGUAGES:
            return RunCodeResponse(
                status="SandboxError",
                message=f"language {request.language!r} is not served here (only python)",
            )
        code, marker = request.code, ""
        try:
            if request.files or request.fetch_files:
                code, marker = with_files(request.code, request.files, request.fetch_files)
        except RequestError as exc:
            return RunCodeResponse(status="SandboxError", message=str(exc))
        memory = request.memory_limit_MB if request.memory_limit_MB > 0 else None
        try:
            result = await box.run(
                code,
                timeout=request.run_timeout if request.run_timeout > 0 else None,
                memory_limit_mb=memory,
                stdin=request.stdin,
            )
        except Exception as exc:  # a backend bug must still answer in the contract's terms
            return RunCodeResponse(status="SandboxError", message=f"{type(exc).__name__}: {exc}")
        files: dict[str, str] = {}
        if marker:
            result.stderr, files = split_fetched(result.stderr, marker)
        return to_response(result, files)

    return app


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    config: SandboxConfig | None = None,
    log_level: str = "warning",
    **backend_options: Any,
) -> None:
    """Run the server until interrupted (what ``agentenvs sandbox serve`` calls)."""
    import uvicorn

    uvicorn.run(
        create_app(config=config, **backend_options), host=host, port=port, log_level=log_level
    )
