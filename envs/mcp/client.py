"""Tools from MCP servers, through the official ``mcp`` SDK (stdio and streamable HTTP).

:class:`MCPToolbox` connects to each configured server, lists its tools and offers
them in the chat template's tool format (``{"type": "function", "function": {name,
description, parameters}}``, what ``apply_chat_template(tools=...)`` takes). A call
has its own timeout; its outcome (ok, error, timeout) comes back as data, never as
an exception, because the model chose the call and a task scores what happened. The
one exception is a server that is gone (:class:`MCPUnavailable`): nothing the model
did, so the episode is not scored on it; the collector retries the group.

Each server's ``mcp.Client`` lives in a task of its own for its whole life: the SDK
holds anyio task groups, which must be entered and left by one task, while an
episode's steps and its close come from whichever tasks the collector runs them in.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentenvs.envs.errors import AgentEnvsError, TransientError

CONNECTION_CLOSED = -32000
"""The SDK's error code for a connection that ended (``mcp_types.CONNECTION_CLOSED``)."""
INTERNAL_ERROR = -32603
"""JSON-RPC's code for a server that failed to handle a request (not a refusal of it)."""
SERVER_FAILURES = frozenset({CONNECTION_CLOSED, INTERNAL_ERROR})
"""Error codes that say the server could not serve the call: :class:`MCPUnavailable`."""


class MCPUnavailable(TransientError, ConnectionError):
    """An MCP server did not start, did not answer its handshake, or went away during
    the episode: an infrastructure failure of the moment, so the collector retries the
    group (and records it failed if it stays down), never scoring the model on it."""


class MCPConfigError(AgentEnvsError, ValueError):
    """The MCP servers' setup is wrong (two tools with one name, say)."""


class MCPServerConfig(BaseModel):
    """One MCP server: a command to run over stdio, or a streamable-HTTP URL."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., description="A short name for logs and metrics.")
    command: str | None = Field(None, description="stdio: the executable to start.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    env: dict[str, str] | None = Field(None, description="stdio: extra environment variables.")
    url: str | None = Field(None, description="streamable HTTP: the server's MCP endpoint.")
    tools: list[str] | None = Field(None, description="Offer only these tools (None: all).")

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r}: give exactly one of command or url")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


@dataclass
class ToolResult:
    """What one call did: its text for the model, and its outcome for the records."""

    text: str
    outcome: Literal["ok", "error", "timeout"]
    seconds: float
    detail: str = ""


def tool_spec(tool: Any) -> dict[str, Any]:
    """An MCP ``Tool`` as a chat-template tool spec (OpenAI function format)."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description or "",
            "parameters": tool.input_schema or {"type": "object", "properties": {}},
        },
    }


def result_text(result: Any) -> str:
    """The text a call result carries: its text blocks, else its structured content."""
    import json

    parts = [block.text for block in result.content if block.type == "text"]
    if parts:
        return "\n".join(parts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True)
    kinds = sorted({block.type for block in result.content})
    return f"(the tool returned no text; content kinds: {', '.join(kinds) or 'none'})"


@dataclass
class _Call:
    name: str
    arguments: dict[str, Any]
    timeout: float
    answer: asyncio.Future


@dataclass
class _Connection:
    """One server's client, owned by the task :meth:`run` runs in.

    A server that goes away (its process died, its HTTP endpoint stopped answering)
    ends the connection: the call in flight and every later one raise
    :class:`MCPUnavailable`, an infrastructure failure the collector retries, never a
    tool error the model would be scored on. Over stdio the SDK reports it as a
    ``Connection closed`` error; over streamable HTTP its cancel scope cancels this
    task: neither reaches the caller as such.
    """

    config: MCPServerConfig
    connect_timeout: float
    requests: asyncio.Queue = field(default_factory=asyncio.Queue)
    ready: asyncio.Future | None = None
    task: asyncio.Task | None = None

    async def run(self) -> None:
        from mcp import Client, StdioServerParameters

        assert self.ready is not None
        target: Any = self.config.url
        if self.config.transport == "stdio":
            target = StdioServerParameters(
                command=str(self.config.command), args=self.config.args, env=self.config.env
            )
        gone = "the connection ended"
        try:
            async with Client(target) as client:
                listed = await client.list_tools()
                if not self.ready.done():
                    self.ready.set_result(list(listed.tools))
                while True:
                    call = await self.requests.get()
                    if call is None:
                        return
                    if not await self._serve(client, call):
                        return  # the server is gone: this connection serves nothing more
        except BaseException as err:
            leaf = _first_leaf(err)
            gone = f"{type(leaf).__name__}: {leaf}"
            if not self.ready.done():
                self.ready.set_exception(
                    MCPUnavailable(f"MCP server {self.config.name!r} did not start: {err!r}")
                )
            if not isinstance(err, Exception):
                raise
        finally:
            self._fail_waiting(gone)

    async def _serve(self, client: Any, call: _Call) -> bool:
        """Run one call and answer it; False when the server turned out to be gone."""
        from mcp import MCPError

        try:
            result = await asyncio.wait_for(
                client.call_tool(call.name, call.arguments), call.timeout
            )
        except asyncio.CancelledError:  # the SDK tore the connection down (or close() did)
            self._answer(call, error=self._unavailable(f"{call.name} was cut off"))
            raise
        except MCPError as err:
            if err.code not in SERVER_FAILURES:  # the server refused this call: the model's
                self._answer(call, error=err)
                return True
            self._answer(call, error=self._unavailable(f"{call.name}: {err.error.message}"))
            return err.code != CONNECTION_CLOSED  # a closed connection serves nothing more
        except Exception as err:  # a timeout, a bad argument: delivered to the caller
            self._answer(call, error=err)
            return True
        self._answer(call, result=result)
        return True

    def _unavailable(self, what: str) -> MCPUnavailable:
        return MCPUnavailable(f"MCP server {self.config.name!r} went away ({what})")

    @staticmethod
    def _answer(call: _Call, *, result: Any = None, error: BaseException | None = None) -> None:
        if call.answer.done():
            return
        if error is not None:
            call.answer.set_exception(error)
        else:
            call.answer.set_result(result)

    def _fail_waiting(self, why: str) -> None:
        """Calls still queued when the connection ends get :class:`MCPUnavailable`."""
        while not self.requests.empty():
            call = self.requests.get_nowait()
            if call is not None:
                self._answer(call, error=self._unavailable(why))

    async def open(self) -> list[Any]:
        self.ready = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(self.run(), name=f"mcp:{self.config.name}")
        try:
            return await asyncio.wait_for(asyncio.shield(self.ready), self.connect_timeout)
        except TimeoutError:
            await self.close()
            raise MCPUnavailable(
                f"MCP server {self.config.name!r} did not answer in {self.connect_timeout}s"
            ) from None

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> Any:
        if self.task is None or self.task.done():
            raise MCPUnavailable(f"MCP server {self.config.name!r} is not connected")
        answer = asyncio.get_running_loop().create_future()
        self.requests.put_nowait(_Call(name, arguments, timeout, answer))
        return await answer

    async def close(self) -> None:
        task, self.task = self.task, None
        if task is None:
            return
        self.requests.put_nowait(None)
        try:
            await asyncio.wait_for(task, 10)
        except (TimeoutError, Exception):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def _first_leaf(error: BaseException) -> BaseException:
    """The first error inside (nested) exception groups: the one worth naming."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


class MCPToolbox:
    """The tools of several MCP servers behind one name -> call mapping.

    ``async with MCPToolbox(servers) as box``: connects, lists, and on exit closes every
    server (a stdio server's process ends with its client).
    """

    def __init__(self, servers: list[MCPServerConfig], *, connect_timeout: float = 30.0) -> None:
        self.servers = list(servers)
        self.connect_timeout = connect_timeout
        self._connections: list[_Connection] = []
        self._owner: dict[str, _Connection] = {}
        self.specs: list[dict[str, Any]] = []

    async def open(self) -> MCPToolbox:
        try:
            for server in self.servers:
                connection = _Connection(server, self.connect_timeout)
                self._connections.append(connection)
                for tool in await connection.open():
                    if server.tools is not None and tool.name not in server.tools:
                        continue
                    if tool.name in self._owner:
                        raise MCPConfigError(
                            f"tool {tool.name!r} is offered by MCP servers "
                            f"{self._owner[tool.name].config.name!r} and {server.name!r}"
                        )
                    self._owner[tool.name] = connection
                    self.specs.append(tool_spec(tool))
        except BaseException:
            await self.close()
            raise
        return self

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        """Run one call; unknown tools, tool errors and timeouts come back as results."""
        started = time.monotonic()
        connection = self._owner.get(name)
        if connection is None:
            known = ", ".join(sorted(self._owner)) or "none"
            return ToolResult(f"Error: no tool named {name!r} (tools: {known})", "error", 0.0)
        try:
            result = await connection.call(name, arguments, timeout)
        except TimeoutError:
            seconds = time.monotonic() - started
            return ToolResult(f"Error: {name} timed out after {timeout:g}s", "timeout", seconds)
        except MCPUnavailable:  # a dead server is not the model's doing: retried, not scored
            raise
        except Exception as err:
            seconds = time.monotonic() - started
            return ToolResult(f"Error: {name} failed: {err}", "error", seconds, repr(err))
        seconds = time.monotonic() - started
        text = result_text(result)
        if result.is_error:
            return ToolResult(text, "error", seconds, "the tool reported an error")
        return ToolResult(text, "ok", seconds)

    def server_of(self, name: str) -> str | None:
        connection = self._owner.get(name)
        return connection.config.name if connection is not None else None

    async def close(self) -> None:
        connections, self._connections = self._connections, []
        self._owner = {}
        for connection in connections:
            await connection.close()

    async def __aenter__(self) -> MCPToolbox:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
