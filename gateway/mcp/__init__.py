"""MCP: the tool-call context of MCP tools (pure) and the `sandgate mcp` proxy (an API client, on the `mcp` SDK)."""
