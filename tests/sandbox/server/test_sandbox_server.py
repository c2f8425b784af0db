"""``agentenvs sandbox serve``: SandboxFusion's /run_code over the local backend.

The server is the real command, started on 127.0.0.1 in a subprocess. It is driven by
the real ``sandbox-fusion`` PyPI client (what verl and SandboxFusion users run), by raw
requests shaped like verl's, and by our own ``sandboxfusion`` backend: server and client
test each other, closing the loop without a fake.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from support import machine_skips
from support.sandbox_server_helpers import ServerProcess, module_server, post_run_code

from agentenvs.sandbox import ExecStatus, SandboxConfig, SandboxUnavailable, create
from agentenvs.sandbox.backends.sandboxfusion import SandboxFusionSandbox

SERVE_ARGS = ("--backend", "local", "--pool-size", "2", "--timeout", "5", "--memory-mb", "256")


server = module_server(*SERVE_ARGS)


@pytest_asyncio.fixture
async def client(server: ServerProcess) -> AsyncIterator[SandboxFusionSandbox]:
    sandbox = create(backend="sandboxfusion", url=server.url, timeout=5, max_concurrency=3)
    assert isinstance(sandbox, SandboxFusionSandbox)
    async with sandbox:
        yield sandbox


def post(server: ServerProcess, **body: object) -> dict:
    response = httpx.post(f"{server.url}/run_code", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


# --------------------------------------------------------------------------- the PyPI client


def test_sandbox_fusion_client_runs_code(server: ServerProcess) -> None:
    from sandbox_fusion import RunCodeRequest, RunStatus, run_code

    response = run_code(
        RunCodeRequest(
            code="import sys\nprint(input()[::-1])\nprint('e', file=sys.stderr)",
            stdin="abc",
            language="python",
        ),
        endpoint=server.url,
        max_attempts=1,
    )
    assert response.status == RunStatus.Success
    assert response.run_result is not None
    assert response.run_result.stdout == "cba\n" and response.run_result.stderr == "e\n"
    assert response.run_result.return_code == 0
    assert response.compile_result is None


def test_sandbox_fusion_client_sees_failures_and_timeouts(server: ServerProcess) -> None:
    from sandbox_fusion import (
        CommandRunStatus,
        RunCodeRequest,
        RunStatus,
        SummaryMapping,
        run_code,
        summary_run_code_result,
    )

    mapping = SummaryMapping(RunFailed="failed", RunTimeout="timeout")
    failed = run_code(
        RunCodeRequest(code="1/0", language="python"), endpoint=server.url, max_attempts=1
    )
    assert failed.status == RunStatus.Failed
    assert failed.run_result.return_code == 1 and "ZeroDivisionError" in failed.run_result.stderr
    assert summary_run_code_result(failed, mapping) == "failed"
    slow = run_code(
        RunCodeRequest(code="while True:\n    pass", run_timeout=1, language="python"),
        endpoint=server.url,
        max_attempts=1,
    )
    assert slow.status == RunStatus.Failed
    assert slow.run_result.status == CommandRunStatus.TimeLimitExceeded
    assert summary_run_code_result(slow, mapping) == "timeout"


def test_sandbox_fusion_async_client(server: ServerProcess) -> None:
    from sandbox_fusion import RunCodeRequest, RunStatus, run_code_async

    async def both() -> list:
        requests = [RunCodeRequest(code=f"print({i} * 2)", language="python") for i in range(3)]
        return await asyncio.gather(
            *(run_code_async(r, endpoint=server.url, max_attempts=1) for r in requests)
        )

    responses = asyncio.run(both())
    assert [r.status for r in responses] == [RunStatus.Success] * 3
    assert [r.run_result.stdout for r in responses] == ["0\n", "2\n", "4\n"]


# --------------------------------------------------------------------------- raw contract


def test_ping_and_script_semantics(server: ServerProcess) -> None:
    assert httpx.get(f"{server.url}/v1/ping", timeout=10).json() == "pong"
    # a script, as in SandboxFusion: the last bare expression is not displayed
    body = post(server, code="x = 2\nx * 21", language="python")
    assert body["status"] == "Success" and body["run_result"]["stdout"] == ""


def test_verl_shaped_request(server: ServerProcess) -> None:
    """The payload verl's sandbox_fusion utils send (memory_limit_MB included)."""
    body = post(
        server,
        compile_timeout=5,
        run_timeout=5,
        code="n = int(input())\nprint(sum(range(n)))",
        stdin="10\n",
        memory_limit_MB=256,
        language="python",
        files={},
        fetch_files=[],
    )
    assert body["status"] == "Success", body
    assert body["run_result"]["status"] == "Finished"
    assert body["run_result"]["stdout"] == "45\n"
    assert isinstance(body["run_result"]["execution_time"], float)


def test_memory_limit_and_unsupported_language(server: ServerProcess) -> None:
    body = post(
        server, code="x = bytearray(1024 * 1024**2)", language="python", memory_limit_MB=128
    )
    assert body["status"] == "Failed" and "MemoryError" in body["run_result"]["stderr"], body
    assert body["run_result"]["return_code"] != 0
    other = post_run_code(server.url, {"code": "console.log(1)", "language": "nodejs"}, expect=422)
    assert other["detail"][0]["field"] == "language" and "nodejs" in other["message"]


def test_files_in_and_out(server: ServerProcess) -> None:
    data = base64.b64encode(b"3\n4\n").decode()
    body = post(
        server,
        code="nums = [int(x) for x in open('in/data.txt')]\nopen('out.txt', 'w').write(str(sum(nums)))\nprint('ok')",
        language="python",
        files={"in/data.txt": data},
        fetch_files=["out.txt", "missing.txt"],
    )
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"] == "ok\n" and body["run_result"]["stderr"] == ""
    assert base64.b64decode(body["files"]["out.txt"]) == b"7"
    assert "missing.txt" not in body["files"]
    escape = post_run_code(
        server.url, {"code": "pass", "language": "python", "files": {"../x": data}}, expect=422
    )
    assert escape["detail"][0]["field"] == "files" and "inside the work dir" in escape["message"]


# --------------------------------------------------------------------------- our client, our server


async def test_our_client_against_our_server(client: SandboxFusionSandbox) -> None:
    shown = await client.run("import numpy as np\nnp.arange(4).sum()")
    assert shown.ok and shown.stdout == "6\n", shown  # displayed by the client, notebook-style
    error = await client.run("raise ValueError('bad')")
    assert error.status == ExecStatus.ERROR and "ValueError: bad" in error.stderr
    timeout = await client.run("import time\ntime.sleep(30)", timeout=1)
    assert timeout.status == ExecStatus.TIMEOUT
    memory = await client.run("x = bytearray(8 * 1024**3)")
    assert memory.status == ExecStatus.MEMORY
    echoed = await client.run("print(input())", stdin="hi")
    assert echoed.stdout == "hi\n"


async def test_our_client_sends_files_and_bash(client: SandboxFusionSandbox) -> None:
    result = await client.run(
        "open('out.bin', 'wb').write(open('in.bin', 'rb').read()[::-1])",
        files={"in.bin": b"\x00\x01\xff"},
        fetch_files=["out.bin", "missing"],
    )
    assert result.ok, result
    assert result.files == {"out.bin": b"\xff\x01\x00"}
    shell = await client.run("echo $((6 * 7)); echo oops >&2; exit 2", language="bash")
    assert shell.status == ExecStatus.ERROR and shell.return_code == 2
    assert shell.stdout == "42\n" and shell.stderr == "oops\n"


async def test_client_caps_output(server: ServerProcess) -> None:
    async with SandboxFusionSandbox(
        SandboxConfig(backend="sandboxfusion", url=server.url, max_output_bytes=1024)
    ) as sandbox:
        result = await sandbox.run("print('y' * 5000)")
    assert result.status == ExecStatus.OUTPUT_LIMIT
    assert result.stdout_truncated and len(result.stdout) == 1024


async def test_concurrency_is_bounded(client: SandboxFusionSandbox) -> None:
    results = await asyncio.gather(
        *(client.run(f"import time\ntime.sleep(0.2)\nprint({i})") for i in range(6))
    )
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]
    assert client.stats["retries"] == 0


async def test_session_replays_kept_cells(client: SandboxFusionSandbox) -> None:
    async with client.session() as session:
        assert (await session.run("import math\nx = 3\nprint('first')")).stdout == "first\n"
        second = await session.run("y = x * 2\ny")
        assert second.ok and second.stdout == "6\n", second  # earlier output is not repeated
        failed = await session.run("x = 100\n1/0")
        assert failed.status == ExecStatus.ERROR and "<cell-3>" in failed.stderr
        crashed = await session.run("while True:\n    pass", timeout=1)
        assert crashed.status == ExecStatus.TIMEOUT
        after = await session.run("x, y, math.floor(2.5)")
        assert after.ok and after.stdout == "(3, 6, 2)\n", after
        assert len(session.cells) == 3


async def test_capabilities_come_from_the_server(
    client: SandboxFusionSandbox, server: ServerProcess
) -> None:
    caps = client.capabilities()
    assert caps.backend == "sandboxfusion"
    assert caps.active["network_isolated"]
    assert "reported by the server (local backend)" in caps.notes["network_isolated"]
    # the README's layers, each wherever this machine offers it (probed on the machine)
    for layer in sorted(machine_skips.offered_layers()):
        assert caps.active.get(layer), (layer, caps.notes.get(layer))
    strict = SandboxFusionSandbox(
        SandboxConfig(backend="sandboxfusion", url=server.url, min_isolation=["teleportation"])
    )
    with pytest.raises(SandboxUnavailable):
        await strict.start()
    await strict.close()


# --------------------------------------------------------------------------- a dying server


async def test_killed_server_gives_a_clear_error_not_a_hang() -> None:
    machine_skips.require(*machine_skips.LOCAL_SANDBOX)
    proc = ServerProcess(*SERVE_ARGS)
    try:
        proc.wait_ready()  # a server that does not come up fails the test
        config = SandboxConfig(backend="sandboxfusion", url=proc.url, timeout=30, retries=2)
        async with SandboxFusionSandbox(config, backoff_base=0.05) as sandbox:
            assert (await sandbox.run("print('up')")).stdout == "up\n"
            in_flight = asyncio.ensure_future(sandbox.run("import time\ntime.sleep(30)"))
            await asyncio.sleep(1.0)
            proc.kill()
            result = await asyncio.wait_for(in_flight, 20)
            assert result.status == ExecStatus.SANDBOX_ERROR, result
            assert "gave up after 3 attempt(s)" in result.message and "connect" in result.message
            later = await asyncio.wait_for(sandbox.run("print(1)"), 20)
            assert later.status == ExecStatus.SANDBOX_ERROR and str(proc.port) in later.message

        from sandbox_fusion import RunCodeRequest, run_code

        with pytest.raises(Exception, match=r"Connection refused|connect"):
            run_code(
                RunCodeRequest(code="print(1)", language="python"),
                endpoint=proc.url,
                max_attempts=1,
            )
        unreachable = SandboxFusionSandbox(config)
        with pytest.raises(SandboxUnavailable, match="unreachable"):
            await asyncio.wait_for(unreachable.start(), 20)
        await unreachable.close()
    finally:
        proc.stop()
