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


def serve_http(port: int, token: str) -> None:
    """Streamable HTTP on 127.0.0.1:PORT/mcp; every request needs `Authorization: Bearer TOKEN`."""
    import uvicorn

    app = mcp.streamable_http_app()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {token}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no"})
            return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        serve_http(int(sys.argv[1]), sys.argv[2])
    else:
        mcp.run()
