"""A real MCP server (the ``mcp`` SDK's ``MCPServer``) that a test can kill mid-episode.

``python tests/support/mcp_mortal_server.py [--http PORT]`` serves over stdio (or
streamable HTTP on 127.0.0.1:PORT) four tools: ``add``, ``pid`` (the server's process
id, so a test can SIGKILL it between two calls) and ``slow`` (answers after some
seconds, so a test can kill the server while a call is in flight); and ``lookup``,
during which the server is SIGKILLed: a server that dies mid-episode whatever the
caller does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

from mcp.server.mcpserver import MCPServer


def mortal_server() -> MCPServer:
    server = MCPServer("mortal-tools")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="This server's process id.")
    def pid() -> int:
        return os.getpid()

    @server.tool(description="Answer after `seconds` seconds.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @server.tool(description="Look something up (the server is SIGKILLed while it does).")
    def lookup(topic: str) -> str:
        os.kill(os.getpid(), signal.SIGKILL)
        return topic

    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None)
    args = parser.parse_args()
    if args.http is None:
        mortal_server().run("stdio")
    else:
        mortal_server().run("streamable-http", host="127.0.0.1", port=args.http)
