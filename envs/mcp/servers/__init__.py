"""Our retriever and sandbox as MCP servers (``agentenvs mcp serve retriever|sandbox``)."""
