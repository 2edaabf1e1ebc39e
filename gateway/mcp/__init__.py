"""MCP tool-call context: what the server reads of a tool call made through `sandgate mcp` (pure)."""
