"""``agentenvs sandbox serve``: SandboxFusion's ``/run_code`` contract over our sandbox.

Existing SandboxFusion clients (verl's sandbox tool and reward functions, the
``sandbox-fusion`` PyPI client, our own ``sandboxfusion`` backend) can use the local
(or docker) backend unchanged: same request and response fields, same statuses.

- ``POST /run_code``: SandboxFusion's request (:mod:`agentenvs.sandbox.server.request`
  checks every field; a bad one is a 422 naming it). The server's limits are ceilings:
  a request may lower them (:mod:`agentenvs.sandbox.server.limits`), never raise them.
- ``GET /v1/ping``: ``"pong"``, as SandboxFusion answers.
- ``GET /agentenvs/capabilities``: the backend's capability report (an extension; our
  client shows it, labelled as the server's claim).

Each 200 answer carries one extension object, ``agentenvs`` (what happened in our terms,
which limits were lowered), that SandboxFusion clients ignore. Where this server differs
from SandboxFusion on purpose is tabled in docs/sandbox_server.md.

As in SandboxFusion, code runs as a script: a final bare expression is not displayed
(``show_last_expression`` is off unless the config given says otherwise).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from agentenvs.sandbox.backends.sandboxfusion import cap_utf8
from agentenvs.sandbox.base import ExecResult, ExecStatus, Sandbox, SandboxConfig
from agentenvs.sandbox.capabilities import as_dict
from agentenvs.sandbox.server.body import BodyBudget, BodySizeLimit
from agentenvs.sandbox.server.connections import ClientLimits
from agentenvs.sandbox.server.limits import AppliedLimits, apply_limits
from agentenvs.sandbox.server.request import MAX_BODY_BYTES, RunCodeRequest, work_dir_path

PYTHON_NAMES = frozenset({"python", "python3"})
SERVED_LANGUAGES = sorted(PYTHON_NAMES | {"bash"})
SERVER_OUTPUT_BYTES = 1024 * 1024
"""Default per-stream output cap of the server: SandboxFusion's own capture size (1 MiB),
so a correct program printing 100 KB is a ``Success`` that verl scores as correct."""
BODY_BUDGET_BYTES = MAX_BODY_BYTES
"""Request bodies the server holds at once (issue #40): one at the cap, or any number of
smaller ones up to the same sum. A request holds its share until its answer is sent (its
parsed fields, decoded files and run: 3-7x the body's bytes in the server's memory);
one that cannot get it in time is answered 503 (``server/body.py``)."""


class CommandRunResult(BaseModel):
    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class AgentenvsReport(BaseModel):
    """The extension: our status and reason, and the limits a request asked above ours."""

    status: str
    message: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    clamped: dict[str, dict[str, float]] = Field(default_factory=dict)


class RunCodeResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)
    agentenvs: AgentenvsReport | None = None


def to_response(result: ExecResult, files: dict[str, str] | None = None) -> RunCodeResponse:
    """Map an :class:`ExecResult` to SandboxFusion's response.

    As SandboxFusion: ``message`` is ``''`` unless the sandbox itself failed, and a timed
    out run has ``return_code`` ``None``. Our reason goes in ``agentenvs.message``.
    """
    report = AgentenvsReport(
        status=result.status.value,
        message=result.message,
        stdout_truncated=result.stdout_truncated,
        stderr_truncated=result.stderr_truncated,
    )
    run = CommandRunResult(
        status="Finished",
        execution_time=result.duration,
        return_code=result.return_code,
        stdout=result.stdout,
        stderr=result.stderr,
    )
    if result.status == ExecStatus.SANDBOX_ERROR:
        run.status = "Error"
        message = result.message or "the sandbox failed"
        return RunCodeResponse(
            status="SandboxError", message=message, run_result=run, agentenvs=report
        )
    status: Literal["Success", "Failed"] = "Failed"
    if result.status == ExecStatus.TIMEOUT:
        run.status, run.return_code = "TimeLimitExceeded", None
    elif result.status == ExecStatus.OK:
        status, run.return_code = "Success", 0
    elif run.return_code in (None, 0):
        run.return_code = 1  # memory / output limit: the program did not finish normally
    return RunCodeResponse(
        status=status, message="", run_result=run, files=files or {}, agentenvs=report
    )


def fetched_by_client_name(request: RunCodeRequest, found: dict[str, bytes]) -> dict[str, str]:
    """Fetched files, base64, under the names the client asked for (SandboxFusion's keys).

    The sandbox reads them outside the program's process (``ExecResult.files``), so
    nothing the program prints can add or change one.
    """
    out = {}
    for asked in request.fetch_files:
        data = found.get(work_dir_path(asked))
        if data is not None:
            out[asked] = base64.b64encode(data).decode()
    return out


def lower_output_cap(result: ExecResult, limit: int) -> ExecResult:
    """Apply a request's own (lower) output cap after the run, as the backend would have."""
    result.stdout, out_cut = cap_utf8(result.stdout, limit)
    result.stderr, err_cut = cap_utf8(result.stderr, limit)
    if out_cut or err_cut:
        result.stdout_truncated |= out_cut
        result.stderr_truncated |= err_cut
        if result.status in (ExecStatus.OK, ExecStatus.ERROR):
            result.status = ExecStatus.OUTPUT_LIMIT
            result.message = f"output exceeded the request's max_output_bytes ({limit})"
    return result


def validation_error_response(errors: list[dict[str, Any]]) -> JSONResponse:
    """A 422 naming each bad field, without echoing its (possibly huge) value back."""
    detail = []
    for error in errors:
        loc = [str(part) for part in error.get("loc", ())]
        field = ".".join(part for part in loc[1:]) or "body"
        msg = str(error.get("msg", ""))
        if error.get("type") == "json_invalid":  # loc is ("body", character offset)
            field, msg = "body", f"not valid JSON (at character {loc[-1]})"
        detail.append({"field": field, "loc": loc, "msg": msg, "type": error.get("type")})
    message = "; ".join(f"{d['field']}: {d['msg']}" for d in detail)
    return JSONResponse(
        status_code=422, content={"detail": detail, "message": f"invalid request: {message}"}
    )


def language_error(language: str, served: list[str]) -> JSONResponse:
    return validation_error_response(
        [
            {
                "loc": ("body", "language"),
                "msg": f"language {language!r} is not served here (served: {', '.join(served)})",
                "type": "language_not_served",
            }
        ]
    )


def timed_out_without_running(limits: AppliedLimits) -> RunCodeResponse:
    """``run_timeout: 0``: SandboxFusion's answer (the run is over before it starts)."""
    result = ExecResult(
        ExecStatus.TIMEOUT, message="run_timeout 0: the run was not started", duration=0.0
    )
    return with_clamps(to_response(result), limits)


def with_clamps(response: RunCodeResponse, limits: AppliedLimits) -> RunCodeResponse:
    if response.agentenvs is not None:
        response.agentenvs.clamped = {k: c.as_dict() for k, c in limits.clamped.items()}
    return response


def create_app(
    sandbox: Sandbox | None = None,
    *,
    config: SandboxConfig | None = None,
    clients: ClientLimits | None = None,
    **backend_options: Any,
) -> FastAPI:
    """The FastAPI app; it starts ``sandbox`` (or one built from ``config``) and closes it."""
    clients = clients or ClientLimits()
    if sandbox is None:
        from agentenvs.sandbox.factory import backend_class

        cfg = config or SandboxConfig(
            show_last_expression=False, max_output_bytes=SERVER_OUTPUT_BYTES
        )
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
    app.state.body_budget = budget = BodyBudget(BODY_BUDGET_BYTES)
    app.add_middleware(
        BodySizeLimit,
        max_bytes=MAX_BODY_BYTES,
        budget=budget,
        timeout=clients.body_seconds,
        admit_seconds=clients.head_seconds,
    )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error_response(list(exc.errors()))

    @app.get("/v1/ping")
    async def ping() -> str:
        return "pong"

    @app.get("/agentenvs/capabilities")
    async def capabilities() -> dict[str, Any]:
        return as_dict(box.capabilities(), box.config.min_isolation)

    @app.post("/run_code", response_model=RunCodeResponse)
    async def run_code(request: RunCodeRequest) -> RunCodeResponse | JSONResponse:
        if request.language not in SERVED_LANGUAGES:
            return language_error(request.language, SERVED_LANGUAGES)
        limits = apply_limits(request, box.config)
        if limits.run_timeout == 0:
            return timed_out_without_running(limits)
        language = "python" if request.language in PYTHON_NAMES else request.language
        try:
            result = await box.run(
                request.code,
                timeout=limits.run_timeout,
                memory_limit_mb=limits.memory_limit_mb,
                stdin=request.stdin,
                files=request.decoded_files(),
                fetch_files=[work_dir_path(path) for path in request.fetch_files],
                language=language,
            )
        except Exception as exc:  # a backend bug must still answer in the contract's terms
            result = ExecResult(ExecStatus.SANDBOX_ERROR, message=f"{type(exc).__name__}: {exc}")
        files = fetched_by_client_name(request, result.files)
        if limits.max_output_bytes < box.config.max_output_bytes:
            result = lower_output_cap(result, limits.max_output_bytes)
        return with_clamps(to_response(result, files), limits)

    return app


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    config: SandboxConfig | None = None,
    log_level: str = "warning",
    clients: ClientLimits | None = None,
    **backend_options: Any,
) -> None:
    """Run the server until interrupted (what ``agentenvs sandbox serve`` calls)."""
    import uvicorn

    clients = clients or ClientLimits()
    uvicorn.run(
        create_app(config=config, clients=clients, **backend_options),
        host=host,
        port=port,
        log_level=log_level,
        http=clients.protocol(),  # a connection that brings no request head is closed
        limit_concurrency=clients.max_connections,
        loop="asyncio",  # the local backend starts workers as another user: uvloop cannot
    )
