"""Our retriever and sandbox as MCP servers, started through the real CLI
(``agentenvs mcp serve ...``) and used by the SDK's own ``mcp.Client``: stdio for the
retriever, streamable HTTP for the sandbox."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from mcp import Client, StdioServerParameters

from agentenvs.envs.search_r1.protocol import format_passages
from agentenvs.envs.search_r1.retrievers import make_retriever

pytestmark = pytest.mark.services
AGENTENVS = str(Path(sys.executable).with_name("agentenvs"))


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def test_the_retriever_over_stdio_gives_what_search_r1_shows():
    params = StdioServerParameters(command=AGENTENVS, args=["mcp", "serve", "retriever"])
    query = "Which river flows through the capital?"
    async with Client(params) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert list(tools) == ["search"]
        assert tools["search"].input_schema["required"] == ["query"]
        found = await client.call_tool("search", {"query": query, "topk": 2})
        empty = await client.call_tool("search", {"query": "   "})
        too_many = await client.call_tool("search", {"query": query, "topk": 500})
    (passages,) = await make_retriever().search([query], 2)
    assert not found.is_error and text_of(found) == format_passages(passages)
    assert text_of(found).startswith("Doc 1(Title:")
    assert empty.is_error and "query is empty" in text_of(empty)
    assert too_many.is_error and "topk must be from 1 to 20" in text_of(too_many)


served_pids: dict[str, int] = {}
"""The sandbox MCP server's process id, by URL (its workers are its children)."""


@pytest.fixture(scope="module")
def sandbox_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [AGENTENVS, "mcp", "serve", "sandbox", "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    served_pids[url] = server.pid
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=20)


async def test_the_sandbox_over_http_runs_code_and_reports_failures(sandbox_url):
    async with Client(sandbox_url) as client:
        names = sorted(tool.name for tool in (await client.list_tools()).tools)
        assert names == ["run_bash", "run_python"]
        ran = await client.call_tool("run_python", {"code": "print(6 * 7)"})
        assert not ran.is_error
        assert text_of(ran).startswith("status: ok") and "stdout:\n42" in text_of(ran)
        shell = text_of(await client.call_tool("run_bash", {"script": "echo $((2 + 3))"}))
        assert "stdout:\n5" in shell
        # A program that failed, crashed or ran out of time is a tool error (issue 46).
        failed = await client.call_tool("run_python", {"code": "1 / 0"})
        assert failed.is_error and "status: error" in text_of(failed)
        assert "ZeroDivisionError" in text_of(failed)
        crashed = await client.call_tool(
            "run_python", {"code": "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"}
        )
        assert crashed.is_error and "status: error" in text_of(crashed)
        late = await client.call_tool(
            "run_python", {"code": "import time; time.sleep(30)", "timeout": 0.5}
        )
        assert late.is_error and "status: timeout" in text_of(late)
        refused = await client.call_tool("run_python", {"code": "1", "timeout": -1})
        assert refused.is_error and "timeout must be positive" in text_of(refused)


async def test_a_sandbox_worker_killed_mid_run_is_the_server_failing_not_the_program(sandbox_url):
    """Before: the dead worker came back as ``status: sandbox_error`` text, a tool result
    the model was scored on. Now the server answers a JSON-RPC error, which the client
    raises as MCPUnavailable (retried by the collector)."""
    from agentenvs.envs.mcp.client import MCPServerConfig, MCPToolbox, MCPUnavailable
    from agentenvs.sandbox.pool.worker import children_of, process_name

    async with MCPToolbox([MCPServerConfig(name="sandbox", url=sandbox_url)]) as box:
        running = asyncio.ensure_future(
            box.call("run_python", {"code": "import time; time.sleep(20)"}, 60)
        )

        def descendants(pid: int) -> list[int]:
            return [d for c in children_of(pid) for d in (c, *descendants(c))]

        deadline = time.monotonic() + 30
        while not any(process_name(p) == "python3" for p in descendants(served_pids[sandbox_url])):
            assert time.monotonic() < deadline, "the program never started in a worker"
            await asyncio.sleep(0.1)  # the program runs: its worker has it
        for pid in children_of(served_pids[sandbox_url]):
            if process_name(pid) == "bwrap":
                os.kill(pid, signal.SIGKILL)
        with pytest.raises(MCPUnavailable, match="sandbox could not run the program"):
            await asyncio.wait_for(running, timeout=40)
        again = await box.call("run_python", {"code": "print(7)"}, 60)  # a fresh worker
        assert again.outcome == "ok" and "stdout:\n7" in again.text
