"""The ``sandboxfusion`` client's own logic: display transform, replay, response mapping,
retries, timeouts and the concurrency bound.

End-to-end runs against a real server are in test_sandbox_server.py (our server). The
real SandboxFusion service cannot run here (it needs its own container image), so the
failure modes of a remote service (503s, hangs, 400s) come from a small scripted HTTP
server on 127.0.0.1 speaking the same contract: a stand-in for that remote service only.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
import pytest_asyncio
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from support.sandbox_server_helpers import free_port

from agentenvs.sandbox import ExecStatus, SandboxConfig, SandboxUnavailable
from agentenvs.sandbox.backends.sandboxfusion import (
    REPLAY_FAILED_EXIT,
    REPLAY_MARKER,
    SandboxFusionSandbox,
    replay_program,
    show_last_expression,
    to_exec_result,
)

# --------------------------------------------------------------------------- display transform


def _run_python(code: str) -> subprocess.CompletedProcess:
    """Our own generated (trusted) code, run by a plain interpreter to check its behaviour."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("code", "stdout"),
    [
        ("1 + 1", "2\n"),
        ("x = 5\nx * 2", "10\n"),
        ("s = 'é✓'; s", "'é✓'\n"),
        ("(1,\n 2,\n 3)", "(1, 2, 3)\n"),
        ("print('p')", "p\n"),  # returns None: nothing more
        ("None", ""),
        ("x = 1\nx;", ""),  # a trailing semicolon hides the value, as in notebooks
        ("x = 1\nx  # comment", "1\n"),
        ("x = '#;'\nx", "'#;'\n"),  # not a trailing semicolon
        ("x = 3", ""),
        ("for i in range(2):\n    i", ""),
    ],
)
def test_show_last_expression(code: str, stdout: str) -> None:
    transformed = show_last_expression(code)
    assert len(transformed.splitlines()) == len(code.splitlines())  # line numbers unchanged
    assert _run_python(transformed).stdout == stdout


def test_show_last_expression_leaves_broken_code_alone() -> None:
    assert show_last_expression("def (") == "def ("
    result = _run_python(show_last_expression("x = 1\n1 / 0"))
    assert "line 2" in result.stderr and "ZeroDivisionError" in result.stderr


def test_replay_program_hides_earlier_output_and_keeps_state() -> None:
    program = replay_program(
        ["x = 20\nprint('hidden')", "import sys\nprint('gone', file=sys.stderr)"], "print(x + 1)"
    )
    result = _run_python(program)
    assert result.returncode == 0
    assert result.stdout == "21\n" and result.stderr == ""


def test_replay_program_reports_a_failing_replay() -> None:
    result = _run_python(replay_program(["x = 1", "raise KeyError('k')"], "print(x)"))
    assert result.returncode == REPLAY_FAILED_EXIT
    assert f"{REPLAY_MARKER} 2 failed: KeyError" in result.stderr
    assert result.stdout == ""


# --------------------------------------------------------------------------- response mapping

RUN_OK = {
    "status": "Finished",
    "execution_time": 0.05,
    "return_code": 0,
    "stdout": "hello\n",
    "stderr": "",
}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (
            {
                "status": "Success",
                "message": "",
                "compile_result": None,
                "run_result": RUN_OK,
                "files": {},
            },
            ExecStatus.OK,
        ),
        (
            {
                "status": "Failed",
                "message": "",
                "run_result": {
                    **RUN_OK,
                    "return_code": 1,
                    "stderr": "Traceback...\nValueError: x\n",
                },
            },
            ExecStatus.ERROR,
        ),
        (
            {
                "status": "Failed",
                "message": "",
                "run_result": {**RUN_OK, "return_code": 1, "stderr": "Traceback...\nMemoryError\n"},
            },
            ExecStatus.MEMORY,
        ),
        (
            {
                "status": "Failed",
                "message": "",
                "run_result": {**RUN_OK, "status": "TimeLimitExceeded", "return_code": None},
            },
            ExecStatus.TIMEOUT,
        ),
        (
            {"status": "SandboxError", "message": "worker lost", "run_result": None},
            ExecStatus.SANDBOX_ERROR,
        ),
        (
            {"status": "SandboxError", "message": "", "run_result": {**RUN_OK, "status": "Error"}},
            ExecStatus.SANDBOX_ERROR,
        ),
        (
            {
                "status": "Failed",
                "message": "",
                "compile_result": {"status": "Finished", "return_code": 1, "stderr": "error: x"},
                "run_result": None,
            },
            ExecStatus.ERROR,
        ),
        ({"status": "Success", "message": ""}, ExecStatus.SANDBOX_ERROR),
        (  # an agentenvs server's extension tells an output-limit stop from an error
            {
                "status": "Failed",
                "message": "",
                "run_result": {**RUN_OK, "return_code": 1},
                "agentenvs": {"status": "output_limit", "message": "stdout passed the cap"},
            },
            ExecStatus.OUTPUT_LIMIT,
        ),
        (  # ... and never turns a sandbox error into less
            {
                "status": "SandboxError",
                "message": "worker lost",
                "agentenvs": {"status": "ok", "message": ""},
            },
            ExecStatus.SANDBOX_ERROR,
        ),
        (  # an unknown status in the extension is ignored
            {
                "status": "Success",
                "message": "",
                "run_result": RUN_OK,
                "agentenvs": {"status": "?"},
            },
            ExecStatus.OK,
        ),
    ],
)
def test_response_mapping(body: dict, status: ExecStatus) -> None:
    result = to_exec_result(body, max_output_bytes=1024)
    assert result.status == status, result
    if status != ExecStatus.OK:
        assert result.message


def test_output_is_capped_by_the_client() -> None:
    body = {"status": "Success", "message": "", "run_result": {**RUN_OK, "stdout": "ab" * 1000}}
    result = to_exec_result(body, max_output_bytes=300)
    assert result.status == ExecStatus.OUTPUT_LIMIT
    assert result.stdout_truncated and result.stdout == "ab" * 150


# --------------------------------------------------------------------------- a scripted remote service


@dataclass
class Script:
    """What the stand-in server does with each request, in order (then: succeed)."""

    steps: list[str] = field(default_factory=list)  # "503", "400", "hang", "ok"
    seen: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    payloads: list[dict] = field(default_factory=list)


def _service(script: Script) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/ping")
    async def ping() -> str:
        return "pong"

    @app.post("/run_code")
    async def run_code(request: Request) -> JSONResponse:
        payload = await request.json()
        script.payloads.append(payload)
        step = script.steps[script.seen] if script.seen < len(script.steps) else "ok"
        script.seen += 1
        script.in_flight += 1
        script.max_in_flight = max(script.max_in_flight, script.in_flight)
        try:
            await asyncio.sleep(0.2 if step == "ok" else 0)
            if step == "hang":
                await asyncio.sleep(60)
            if step in ("503", "400"):
                return JSONResponse({"detail": "scripted"}, status_code=int(step))
            run = {**RUN_OK, "stdout": f"ran {len(payload['code'])}\n"}
            return JSONResponse(
                {"status": "Success", "message": "", "run_result": run, "files": {}}
            )
        finally:
            script.in_flight -= 1

    return app


@pytest_asyncio.fixture
async def remote() -> AsyncIterator[tuple[str, Script]]:
    script = Script()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(_service(script), host="127.0.0.1", port=port, log_level="error")
    )
    task = asyncio.ensure_future(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", script
    finally:
        server.should_exit = True
        server.force_exit = True
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 10)


def _client(url: str, **update: object) -> SandboxFusionSandbox:
    settings: dict = {"backend": "sandboxfusion", "url": url, "timeout": 2, "retries": 3, **update}
    config = SandboxConfig(**settings)
    return SandboxFusionSandbox(config, backoff_base=0.01, http_slack=1.0)


async def test_failing_ping_is_unavailable_with_the_http_status() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="down")

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    config = SandboxConfig(backend="sandboxfusion", url="http://sandbox.invalid")
    sandbox = SandboxFusionSandbox(config, client=client)
    with pytest.raises(SandboxUnavailable, match="answered 503") as raised:
        await sandbox.start()
    assert raised.value.status == 503
    await client.aclose()


async def test_request_fields(remote: tuple[str, Script]) -> None:
    url, script = remote
    async with _client(
        url + "/run_code", memory_limit_mb=300
    ) as sandbox:  # a /run_code URL works too
        result = await sandbox.run("print(1)", stdin="in", timeout=3)
    assert result.ok
    (payload,) = script.payloads
    assert payload == {
        "code": "print(1)",
        "language": "python",
        "compile_timeout": 3.0,
        "run_timeout": 3.0,
        "memory_limit_MB": 300,
        "stdin": "in",
        "files": {},
        "fetch_files": [],
    }


async def test_retries_5xx_then_succeeds(remote: tuple[str, Script]) -> None:
    url, script = remote
    script.steps = ["503", "503"]
    async with _client(url) as sandbox:
        result = await sandbox.run("print(1)")
        assert result.ok, result
        assert sandbox.stats["retries"] == 2 and script.seen == 3


async def test_gives_up_after_the_configured_retries(remote: tuple[str, Script]) -> None:
    url, script = remote
    script.steps = ["503"] * 10
    async with _client(url, retries=2) as sandbox:
        result = await sandbox.run("print(1)")
    assert result.status == ExecStatus.SANDBOX_ERROR
    assert "gave up after 3 attempt(s)" in result.message and "503" in result.message
    assert script.seen == 3


async def test_client_errors_and_hangs_are_not_retried(remote: tuple[str, Script]) -> None:
    url, script = remote
    script.steps = ["400", "hang"]
    async with _client(url) as sandbox:
        bad = await sandbox.run("print(1)")
        assert bad.status == ExecStatus.SANDBOX_ERROR and "400" in bad.message
        hung = await asyncio.wait_for(sandbox.run("print(1)", timeout=1), 20)
        assert hung.status == ExecStatus.SANDBOX_ERROR and "no answer" in hung.message
    assert script.seen == 2


async def test_requests_in_flight_are_bounded(remote: tuple[str, Script]) -> None:
    url, script = remote
    async with _client(url, max_concurrency=2) as sandbox:
        results = await asyncio.gather(*(sandbox.run("print(1)") for _ in range(6)))
    assert all(r.ok for r in results)
    assert script.max_in_flight == 2


async def test_session_sends_the_replay(remote: tuple[str, Script]) -> None:
    url, script = remote
    async with _client(url) as sandbox, sandbox.session() as session:
        assert (await session.run("a = 1")).ok
        assert (await session.run("b = a + 1")).ok
    first, second = (p["code"] for p in script.payloads)
    assert first == "a = 1"
    assert "'a = 1'" in second and "b = a + 1" in second
    assert second == replay_program(["a = 1"], "b = a + 1")
