"""Our Search-R1 retriever as an MCP server: one ``search`` tool over a corpus.

An external agent (any MCP client) gets the same passages our Search-R1 environment
shows the model: the same retriever backends (:mod:`agentenvs.envs.search_r1.retrievers`,
BM25 over the shipped synthetic world's corpus by default) and the same passage layout
(``Doc 1(Title: ...) text``, :func:`~agentenvs.envs.search_r1.protocol.format_passages`).
A query the retriever refuses is a tool error (``isError: true``); a retriever that
cannot search (no index, its server down) is a JSON-RPC ``INTERNAL_ERROR``, which
agentenvs' client treats as the server being unavailable (retried, never scored).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig

MAX_TOPK = 20


def retriever_server(
    config: RetrieverConfig | None = None, *, topk: int | None = None
) -> MCPServer:
    """An ``MCPServer`` with a ``search(query, topk)`` tool; the index loads on first use."""
    from mcp import MCPError
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import INTERNAL_ERROR

    from agentenvs.envs.search_r1.protocol import format_passages
    from agentenvs.envs.search_r1.retrievers import make_retriever
    from agentenvs.envs.search_r1.retrievers.base import QueryRejected, RetrieverError
    from agentenvs.envs.search_r1.retrievers.config import RetrieverConfig

    settings = config or RetrieverConfig()
    default_topk = topk or settings.topk
    server = MCPServer(
        "agentenvs-retriever",
        instructions="Search a text corpus; each result is a passage with its title.",
    )
    held: dict[str, Any] = {}

    @server.tool(
        name="search",
        description=f"Search the corpus for passages about `query`; returns the best `topk` "
        f"(1 to {MAX_TOPK}, default {default_topk}) as numbered passages with titles.",
    )
    async def search(query: str, topk: int = default_topk) -> str:
        if not query.strip():
            raise ToolError("query is empty: say what to search for")
        if not 1 <= topk <= MAX_TOPK:
            raise ToolError(f"topk must be from 1 to {MAX_TOPK}, not {topk}")
        try:
            if "retriever" not in held:
                held["retriever"] = make_retriever(settings)
            (passages,) = await held["retriever"].search([query], topk)
        except QueryRejected as err:  # this query, not the service: the caller's to read
            raise ToolError(f"the retriever refused the query: {err}") from None
        except RetrieverError as err:  # the index or its server: not the caller's doing
            raise MCPError(INTERNAL_ERROR, f"the retriever is unavailable: {err}") from None
        return format_passages(passages) if passages else "No passages found."

    return server
