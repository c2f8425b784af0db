"""MCPToolbox against real MCP servers: the published ``mcp-server-time`` over stdio, and
a server built with the SDK's ``MCPServer`` served over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import sys

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from agentenvs.envs.mcp.client import (
    MCPConfigError,
    MCPServerConfig,
    MCPToolbox,
    MCPUnavailable,
)
from agentenvs.envs.openenv.running import serve_app

pytestmark = pytest.mark.services

TIME_SERVER = MCPServerConfig(
    name="time",
    command=sys.executable,
    args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
)


def http_tools() -> MCPServer:
    server = MCPServer("test-tools")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Answer after `seconds` seconds.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @server.tool(description="Always fails.")
    def broken() -> str:
        raise ToolError("the tool is broken on purpose")

    return server


@pytest.fixture(scope="module")
def http_url():
    with serve_app(http_tools().streamable_http_app()) as running:
        yield f"{running.url}/mcp"


async def test_a_published_stdio_server_offers_its_tools_in_template_format():
    async with MCPToolbox([TIME_SERVER]) as box:
        names = sorted(spec["function"]["name"] for spec in box.specs)
        assert names == ["convert_time", "get_current_time"]
        convert = next(s for s in box.specs if s["function"]["name"] == "convert_time")
        assert convert["type"] == "function"
        assert set(convert["function"]["parameters"]["required"]) == {
            "source_timezone",
            "time",
            "target_timezone",
        }
        done = await box.call(
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
            10,
        )
        assert done.outcome == "ok" and '"time_difference": "+9.0h"' in done.text
        bad = await box.call("get_current_time", {"timezone": "Nowhere/City"}, 10)
        assert bad.outcome == "error" and "Nowhere/City" in bad.text


async def test_http_server_calls_errors_and_timeouts_come_back_as_results(http_url):
    server = MCPServerConfig(name="tools", url=http_url)
    async with MCPToolbox([server]) as box:
        assert sorted(s["function"]["name"] for s in box.specs) == ["add", "broken", "slow"]
        assert (await box.call("add", {"a": 2, "b": 40}, 5)).text == "42"
        late = await box.call("slow", {"seconds": 5}, 0.3)
        assert late.outcome == "timeout" and "timed out after 0.3s" in late.text
        assert 0.3 <= late.seconds < 2
        broken = await box.call("broken", {}, 5)
        assert broken.outcome == "error" and "broken on purpose" in broken.text
        unknown = await box.call("nope", {}, 5)
        assert unknown.outcome == "error" and "no tool named 'nope'" in unknown.text
        assert (await box.call("add", {"a": 1, "b": 1}, 5)).text == "2"  # still connected
        assert box.server_of("add") == "tools"


async def test_both_transports_in_one_toolbox_and_a_tool_filter(http_url):
    servers = [TIME_SERVER, MCPServerConfig(name="tools", url=http_url, tools=["add"])]
    async with MCPToolbox(servers) as box:
        names = sorted(s["function"]["name"] for s in box.specs)
        assert names == ["add", "convert_time", "get_current_time"]
        assert box.server_of("convert_time") == "time"


async def test_one_tool_name_on_two_servers_is_refused(http_url):
    twice = [MCPServerConfig(name="a", url=http_url), MCPServerConfig(name="b", url=http_url)]
    with pytest.raises(MCPConfigError, match="'add' is offered by MCP servers 'a' and 'b'"):
        await MCPToolbox(twice).open()


async def test_a_server_that_is_not_there_is_unavailable():
    gone = MCPServerConfig(name="gone", url="http://127.0.0.1:9/mcp")
    with pytest.raises(MCPUnavailable, match="'gone' did not start"):
        await MCPToolbox([gone], connect_timeout=10).open()
    with pytest.raises(ValueError, match="exactly one of command or url"):
        MCPServerConfig(name="both", command="x", url="http://127.0.0.1:9/mcp")
