"""`sandgate mcp`: an MCP proxy in front of an MCP server whose tool calls sandgate decides (an API client,
on the `mcp` SDK): the command (command), the proxy (proxy), the gate that asks sandgate (gate), argument
walking (walk)."""
