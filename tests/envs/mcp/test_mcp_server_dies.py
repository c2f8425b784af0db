"""A tool server that dies is the infrastructure's failure, never the model's (issue 46).

Real MCP servers (the SDK's ``MCPServer``, ``tests/support/mcp_mortal_server.py``) are
SIGKILLed while a call is in flight. Before: over stdio the model was answered
``Error: ... Connection closed`` and its episode ended ``ok`` with a reward; over
streamable HTTP the SDK's ``CancelledError`` reached the episode. Now the caller gets
:class:`MCPUnavailable` (transient), the collector retries the group with fresh
servers and records it failed when they die again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from support.env_servers import free_port
from support.paths import REPO

from agentenvs.envs.errors import is_transient
from agentenvs.envs.mcp.client import MCPServerConfig, MCPToolbox, MCPUnavailable
from agentenvs.envs.registry import make
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.policies import make_policy

pytestmark = pytest.mark.services
MORTAL = str(REPO / "tests" / "support" / "mcp_mortal_server.py")


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture
def mortal_http():
    port = free_port()
    process = subprocess.Popen([sys.executable, MORTAL, "--http", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "the MCP server exited at start"
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "the MCP server did not answer"
                time.sleep(0.1)
        yield MCPServerConfig(name="mortal", url=url)
    finally:
        process.kill()
        process.wait(timeout=20)


STDIO = MCPServerConfig(name="mortal", command=sys.executable, args=[MORTAL])


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_server_killed_during_a_call_is_unavailable_not_a_tool_error(transport, request):
    server = STDIO if transport == "stdio" else request.getfixturevalue("mortal_http")
    async with MCPToolbox([server]) as box:
        assert (await box.call("add", {"a": 2, "b": 3}, 10)).text == "5"
        pid = int((await box.call("pid", {}, 10)).text)
        loop = asyncio.get_running_loop()
        loop.call_later(0.5, os.kill, pid, signal.SIGKILL)
        with pytest.raises(MCPUnavailable, match="'mortal' went away") as raised:
            await asyncio.wait_for(box.call("slow", {"seconds": 30}, 60), timeout=30)
        assert is_transient(raised.value)
        # Every later call says so too, at once (no hang, no "Connection closed" text).
        with pytest.raises(MCPUnavailable):
            await asyncio.wait_for(box.call("add", {"a": 1, "b": 1}, 10), timeout=10)


async def test_a_dead_stdio_server_fails_the_group_after_a_retry(tokenizer, tmp_path):
    task = {
        "prompt": "What is the answer?",
        "answer": "42",
        "script": [call("lookup", topic="the answer"), "The answer is 42."],
    }
    config = make("mcp_tools", servers=[STDIO.model_dump()], tasks=[task])
    store = TrajectoryStore(tmp_path / "mcp.jsonl")
    result = await collect([config.group_builder(0, 1, tokenizer)], make_policy("scripted"),
                           CollectOptions(retries=1, progress=False), store=store)  # fmt: skip
    assert not result.ok, "the episode was scored although its tool server died"
    (failed,) = result.failed
    assert "MCPUnavailable" in failed.error and "'mortal' went away" in failed.error
    assert failed.attempts == 2  # tried again with a fresh server, then recorded
    records = [json.loads(line) for line in store.path.read_text().splitlines()]
    assert [r["status"] for r in records] == ["failed"]


async def test_a_retriever_whose_backend_is_down_is_unavailable_over_mcp():
    """Our retriever MCP server over a retrieval service that does not answer: before,
    the agent read ``Error executing tool search: ... unavailable`` as the tool's answer;
    now the server answers a JSON-RPC error and the client raises MCPUnavailable."""
    from agentenvs.envs.mcp.servers.retriever import retriever_server
    from agentenvs.envs.openenv.running import serve_app
    from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig

    down = RetrieverConfig(kind="http", url=f"http://127.0.0.1:{free_port()}/retrieve",
                           timeout_s=2, max_retries=0)  # fmt: skip
    with serve_app(retriever_server(down).streamable_http_app()) as running:
        server = MCPServerConfig(name="retriever", url=f"{running.url}/mcp")
        async with MCPToolbox([server]) as box:
            refused = await box.call("search", {"query": "  "}, 10)  # the caller's mistake
            assert refused.outcome == "error" and "query is empty" in refused.text
            with pytest.raises(MCPUnavailable, match="retriever is unavailable"):
                await box.call("search", {"query": "Which river?"}, 30)


def test_the_error_codes_are_the_sdks():
    import mcp_types

    from agentenvs.envs.mcp import client

    assert client.CONNECTION_CLOSED == mcp_types.CONNECTION_CLOSED
    assert client.INTERNAL_ERROR == mcp_types.INTERNAL_ERROR
