"""MCP both ways: tools from MCP servers in our environments (:mod:`.client`, :mod:`.layer`,
:mod:`.task`), and our retriever and sandbox as MCP servers (:mod:`.servers`, :mod:`.cli`).
Needs the ``mcp`` extra; nothing here imports the SDK until a server is used."""
