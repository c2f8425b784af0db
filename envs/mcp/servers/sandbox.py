"""Our code sandbox as an MCP server: ``run_python`` and ``run_bash`` tools.

Each call is one program in a fresh sandboxed process (the local bubblewrap backend
by default, :mod:`agentenvs.sandbox`), with the sandbox's limits: wall time, memory,
output size. The answer says how the run ended (ok, error, timeout, memory...) and
gives stdout and stderr, so an agent reads a failure as text, as ReTool's model does.

Three kinds of answer, so a client can tell the program's failure from the sandbox's:

* the program ran and exited cleanly: the text, ``isError: false``;
* the program failed (an exception, a crash, a timeout, the memory or output limit):
  the same text with ``isError: true`` (a tool execution error, the model's to read);
* the sandbox could not run it (a worker that died, a backend that cannot start): a
  JSON-RPC error (``INTERNAL_ERROR``), which agentenvs' client treats as the server
  being unavailable (retried), never as something the model did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from agentenvs.sandbox.base import ExecResult, SandboxConfig


def describe(result: ExecResult) -> str:
    """One run as text: its status line, then its output streams."""
    lines = [f"status: {result.status}" + (f" ({result.message})" if result.message else "")]
    if result.return_code is not None:
        lines.append(f"exit code: {result.return_code}")
    lines.append("stdout:\n" + result.stdout + ("\n[truncated]" if result.stdout_truncated else ""))
    if result.stderr:
        lines.append(
            "stderr:\n" + result.stderr + ("\n[truncated]" if result.stderr_truncated else "")
        )
    return "\n".join(lines)


def sandbox_server(config: SandboxConfig | None = None) -> MCPServer:
    """An ``MCPServer`` running code in :func:`agentenvs.sandbox.factory.create`'s sandbox,
    started on the first call (in the loop that serves the calls)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from agentenvs.sandbox.factory import create

    server = MCPServer(
        "agentenvs-sandbox",
        instructions="Run short Python or bash programs in an isolated sandbox.",
    )
    held: dict[str, Any] = {}

    async def sandbox() -> Any:
        if "sandbox" not in held:
            box = create(config)
            await box.start()
            held["sandbox"] = box
        return held["sandbox"]

    async def run(code: str, language: str, timeout: float | None) -> str:
        from mcp import MCPError
        from mcp_types import INTERNAL_ERROR

        from agentenvs.sandbox.base import ExecStatus

        if timeout is not None and timeout <= 0:
            raise ToolError(f"timeout must be positive seconds, not {timeout}")
        result = await (await sandbox()).run(code, timeout=timeout, language=language)
        if result.status == ExecStatus.SANDBOX_ERROR:
            raise MCPError(
                INTERNAL_ERROR, f"the sandbox could not run the program: {result.message}"
            )
        if not result.ok:
            raise ToolError(describe(result))
        return describe(result)

    @server.tool(
        name="run_python",
        description="Run a Python program in a fresh sandboxed process; returns its status, "
        "stdout and stderr (a final bare expression's value is shown).",
    )
    async def run_python(code: str, timeout: float | None = None) -> str:
        return await run(code, "python", timeout)

    @server.tool(
        name="run_bash",
        description="Run a bash script in a fresh sandboxed process; returns its status, "
        "stdout and stderr.",
    )
    async def run_bash(script: str, timeout: float | None = None) -> str:
        return await run(script, "bash", timeout)

    return server
