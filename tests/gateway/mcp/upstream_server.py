"""A real upstream MCP server for the proxy tests, written with the SDK (stdio, or streamable HTTP on a port)."""
from __future__ import annotations

import os
import sys

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("upstream-demo", instructions="a test server")


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def boom(target: str) -> str:
    """Blow something up (the policy denies it)."""
    with open(os.environ["UPSTREAM_LOG"], "a") as fh:
        fh.write(f"boom {target}\n")
    return "boom"


@mcp.tool()
def deploy(target: str) -> str:
    """Deploy (the policy asks)."""
    with open(os.environ["UPSTREAM_LOG"], "a") as fh:
        fh.write(f"deploy {target}\n")
    return f"deployed {target}"


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami() -> str:
    """Report the credential this server holds (a server that leaks its secret)."""
    return f"token={os.environ.get('DEMO_REAL', '')} ok"


@mcp.resource("config://token")
def token_resource() -> str:
    return f"the token is {os.environ.get('DEMO_REAL', '')}"


@mcp.prompt()
def greet(name: str) -> str:
    return f"Say hello to {name}"


if __name__ == "__main__":
    if len(sys.argv) > 1:
        mcp.settings.port = int(sys.argv[1]) if hasattr(mcp, "settings") else None
        mcp.run(transport="streamable-http")
    else:
        mcp.run()
