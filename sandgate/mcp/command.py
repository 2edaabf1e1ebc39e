"""`sandgate mcp --session ID [--name SERVER] -- CMD [ARGS...]` and its streamable-HTTP variants.

Upstream: an MCP server started as CMD (stdio), or `--upstream URL` (a remote streamable-HTTP server, with
`--upstream-header 'Name: value'` for its credentials). Front: stdio (the agent starts `sandgate mcp` as its MCP
server), or `--listen HOST:PORT`: streamable HTTP at `http://HOST:PORT/mcp`, where every request needs
`Authorization: Bearer <token>` (`SANDGATE_MCP_TOKEN`, else a random one printed on the first stdout line as
`{"url": ..., "token": ...}`).
"""
from __future__ import annotations

import hmac
import json
import logging
import os
import re
import secrets
import socket
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator
from urllib.parse import urlsplit

import anyio

from sandgate.client import Client
from sandgate.transport import command_endpoint
from sandgate.types import SandgateError

log = logging.getLogger("sandgate.mcp")


class McpSetupError(Exception):
    """Bad options or an unusable session: one line for the user, exit 2."""


def server_name(explicit: str | None, cmd: list[str], upstream: str | None) -> str:
    """The server's identity in policy input: chosen by the harness (`--name`), never by the server itself."""
    raw = explicit or (urlsplit(upstream).hostname or "remote" if upstream else Path(cmd[0]).stem)
    name = re.sub(r"[^A-Za-z0-9_.:@+-]", "_", raw)[:128].lstrip("_.:@+-")
    if not name:
        raise McpSetupError("--name: give the server a name (letters, digits, _.:@+-)")
    return name


def parse_headers(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition(":")
        if not sep or not name.strip() or any(c in value for c in "\r\n"):
            raise McpSetupError(f"--upstream-header {value!r}: use 'Name: value'")
        out[name.strip()] = rest.strip()
    return out


def parse_env(values: list[str], environ: dict[str, str]) -> dict[str, str]:
    """`--env NAME=VALUE` or `--env NAME` (taken from sandgate's own environment) for the upstream server."""
    out: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise McpSetupError(f"--env {value!r}: not a variable name")
        if name == "SANDGATE_TOKEN":
            raise McpSetupError("--env: the harness token never goes to an MCP server")
        if sep:
            out[name] = rest
        elif name in environ:
            out[name] = environ[name]
    return out


@asynccontextmanager
async def upstream_streams(cmd: list[str], url: str | None, headers: dict[str, str],
                           env: dict[str, str]) -> AsyncIterator[Any]:
    if url:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        async with create_mcp_http_client(headers=headers) as http, streamable_http_client(url, http_client=http) \
                as streams:
            yield streams
    else:
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env)
        async with stdio_client(params, errlog=sys.stderr) as streams:
            yield streams


class BearerGuard:
    """ASGI: every HTTP request must carry `Authorization: Bearer <token>` (compared in constant time)."""

    def __init__(self, app: Any, token: str):
        self.app, self.expected = app, b"Bearer " + token.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                body = b'{"error": "unauthorized", "detail": "a bearer token is required"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


MAX_HTTP_SESSIONS = 64
SESSION_IDLE_S = 1800.0


async def serve_http(server: Any, listen: str, token: str) -> None:
    import uvicorn

    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(128)            # listening before the URL is printed: a client may connect at once
    bound = sock.getsockname()[1]
    # An agent opening MCP sessions without end would make this process keep each one's stream: at most
    # MAX_HTTP_SESSIONS at once (beyond: 503), each closed after SESSION_IDLE_S without a request.
    app = BearerGuard(server.streamable_http_app(host=host, max_sessions=MAX_HTTP_SESSIONS,
                                                 session_idle_timeout=SESSION_IDLE_S), token)
    shown = f"[{host}]" if ":" in host else host
    print(json.dumps({"url": f"http://{shown}:{bound}/mcp", "token": token}), flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


async def proxy_main(args: Any, api_url: str, token: str) -> int:
    cmd = list(args.command or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if bool(cmd) == bool(args.upstream):
        raise McpSetupError("give the upstream MCP server as `-- CMD [ARGS...]` or as --upstream URL (one of them)")
    name = server_name(args.name, cmd, args.upstream)
    headers = parse_headers(args.upstream_header or [])
    env = parse_env(args.env or [], dict(os.environ))
    async with Client(api_url, token) as client:
        try:
            info = await client.get_session(args.session)
        except SandgateError as exc:
            raise McpSetupError(f"session {args.session}: {exc.detail or exc.code}") from None
        if info.status != "active":
            raise McpSetupError(f"session {args.session} is {info.status}")
        # the MCP SDK (about 1 s of CPU to import) once the options and the session are known to be good: a bad
        # invocation is refused without it
        from mcp import ClientSession
        from mcp.server.stdio import stdio_server

        from sandgate.mcp.gate import SandgateGate
        from sandgate.mcp.proxy import McpProxy

        gate = SandgateGate(client, args.session, name, has_secrets=bool(info.secrets), wait_s=args.approval_wait_s)
        async with upstream_streams(cmd, args.upstream, headers, env) as (read, write), \
                ClientSession(read, write) as upstream:
            init = await gate.scrub(await upstream.initialize())
            server = McpProxy(upstream, init, gate).server()
            if args.listen:
                await serve_http(server, args.listen, os.environ.get("SANDGATE_MCP_TOKEN") or
                                 secrets.token_urlsafe(32))
            else:
                async with stdio_server() as (front_read, front_write):
                    await server.run(front_read, front_write, server.create_initialization_options())
    return 0


class OneLineFormatter(logging.Formatter):
    """Log lines without tracebacks (the SDK logs some upstream failures with one): stderr stays readable."""

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return ""

    def format(self, record: logging.LogRecord) -> str:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return super().format(record)


def cmd_mcp(cfg: Any, args: Any) -> int:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter("sandgate mcp: %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    api_url, token = command_endpoint(args.api_url, args.token, cfg.api_url, cfg.data_dir,
                                      token_file=cfg.api.harness_token_file or None)
    if not token:
        print("sandgate mcp: no harness token (use --token, SANDGATE_TOKEN or the data dir's harness.token)",
              file=sys.stderr)
        return 2
    try:
        return anyio.run(proxy_main, args, api_url, token)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one line for the user, never a traceback
        leaf = first_leaf(exc)
        if isinstance(leaf, McpSetupError):
            print(f"sandgate mcp: {leaf}", file=sys.stderr)
            return 2
        from mcp.shared.exceptions import MCPError

        if isinstance(leaf, MCPError):
            print(f"sandgate mcp: the upstream MCP server failed: {leaf.message}", file=sys.stderr)
        elif isinstance(leaf, (OSError, SandgateError)):
            print(f"sandgate mcp: {leaf}", file=sys.stderr)
        else:
            log.debug("mcp proxy failed", exc_info=exc)
            print(f"sandgate mcp: failed: {leaf.__class__.__name__}", file=sys.stderr)
        return 1


def first_leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (nested) exception groups, as anyio task groups raise them."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
