"""Our retriever and sandbox as MCP servers, started through the real CLI
(``agentenvs mcp serve ...``) and used by the SDK's own ``mcp.Client``: stdio for the
retriever, streamable HTTP for the sandbox."""

from __future__ import annotations

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
        ran = text_of(await client.call_tool("run_python", {"code": "print(6 * 7)"}))
        assert ran.startswith("status: ok") and "stdout:\n42" in ran
        shell = text_of(await client.call_tool("run_bash", {"script": "echo $((2 + 3))"}))
        assert "stdout:\n5" in shell
        failed = text_of(await client.call_tool("run_python", {"code": "1 / 0"}))
        assert failed.startswith("status: error") and "ZeroDivisionError" in failed
        late = await client.call_tool(
            "run_python", {"code": "import time; time.sleep(30)", "timeout": 0.5}
        )
        assert text_of(late).startswith("status: timeout")
        refused = await client.call_tool("run_python", {"code": "1", "timeout": -1})
        assert refused.is_error and "timeout must be positive" in text_of(refused)
