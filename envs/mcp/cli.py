"""``agentenvs mcp serve retriever|sandbox``: our retriever or sandbox as an MCP server.

stdio by default (an MCP client starts the command and talks over its stdin/stdout,
so nothing else may print to stdout); ``--http PORT`` serves streamable HTTP at
``http://HOST:PORT/mcp`` instead. ``python -m agentenvs.envs.mcp.cli`` runs it alone.
"""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    help="MCP: serve our retriever or sandbox to external agents.", no_args_is_help=True
)
KINDS = ("retriever", "sandbox")


def build_server(kind: str):  # -> MCPServer (imported lazily: the main CLI mounts this app)
    if kind == "retriever":
        from agentenvs.envs.mcp.servers.retriever import retriever_server

        return retriever_server()
    if kind == "sandbox":
        from agentenvs.envs.mcp.servers.sandbox import sandbox_server

        return sandbox_server()
    raise typer.BadParameter(f"unknown MCP server {kind!r}; choose {' or '.join(KINDS)}")


@app.command("serve")
def serve_command(
    kind: Annotated[str, typer.Argument(help="retriever or sandbox.")],
    http: Annotated[
        int | None, typer.Option("--http", help="Serve streamable HTTP on this port, not stdio.")
    ] = None,
    host: Annotated[str, typer.Option("--host", help="HTTP: address to bind.")] = "127.0.0.1",
) -> None:
    """Serve one of our tools over MCP (stdio unless --http)."""
    server = build_server(kind)
    if http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=http)


if __name__ == "__main__":
    app()
