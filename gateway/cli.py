"""The `sandgate` command line."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from gateway.config import load_config
from gateway.policy import commands as policy_commands


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML configuration file")
    p.add_argument("--data-dir", help="data directory (default ./.sandgate)")


def _client(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--api-url", help="sandgate API URL (default from api.listen)")
    p.add_argument("--token", help="API token (default $SANDGATE_TOKEN)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandgate", description="security gateway for AI-agent sandboxes")
    sub = parser.add_subparsers(dest="cmd", required=True)

    serve = sub.add_parser("serve", help="run the proxy, API and approval page")
    _common(serve)
    serve.add_argument("--proxy-listen", help="HOST:PORT for the egress proxy")
    serve.add_argument("--api-listen", help="HOST:PORT for the API and page")
    serve.add_argument("--log-level", default=os.environ.get("SANDGATE_LOG_LEVEL", "INFO"))

    token = sub.add_parser("token", help="print a signed token, or `token revoke JTI` on a running sandgate",
                           usage="sandgate token --role ROLE --name NAME [--ttl-s N]\n"
                                 "       sandgate token revoke JTI [--api-url URL] [--token ADMIN_TOKEN]")
    _client(token)
    token.add_argument("words", nargs="*", metavar="revoke JTI", help="revoke the token with this id (admin)")
    token.add_argument("--role", choices=["harness", "approver", "admin"])
    token.add_argument("--name")
    token.add_argument("--ttl-s", type=int, default=None, help="lifetime in seconds (default 24 h)")

    policy_commands.register(sub, _common)

    approvals = sub.add_parser("approvals", help="list and decide approvals on a running sandgate")
    asub = approvals.add_subparsers(dest="approvals_cmd", required=True)
    als = asub.add_parser("ls")
    _client(als)
    als.add_argument("--status", default="pending")
    als.add_argument("--session")
    for name in ("show", "approve", "deny"):
        a = asub.add_parser(name)
        _client(a)
        a.add_argument("id")
        if name != "show":
            a.add_argument("--reason", default=None, required=(name == "deny"))

    run = sub.add_parser("run", help="run a command in a sandbox session (sandgate run [OPTIONS] -- CMD ...)")
    _client(run)
    run.add_argument("--allow", action="append", metavar="HOST", help="allow this host (repeatable)")
    run.add_argument("--secret", action="append", metavar="NAME", help="give the session this secret")
    run.add_argument("--workload", choices=["ephemeral", "persistent"], default="ephemeral")
    run.add_argument("--ttl-s", type=int, default=None)
    run.add_argument("--isolate", action="store_true", help="own network namespace (root; not in this build)")
    run.add_argument("command", nargs=argparse.REMAINDER)

    mcp = sub.add_parser("mcp", help="an MCP proxy whose tool calls sandgate decides (sandgate mcp ... -- CMD ...)")
    _client(mcp)
    mcp.add_argument("--session", required=True, help="the session the tool calls belong to")
    mcp.add_argument("--name", help="the server's name in policy input (default: the command's or URL's name)")
    mcp.add_argument("--upstream", metavar="URL", help="a remote streamable-HTTP MCP server instead of CMD")
    mcp.add_argument("--upstream-header", action="append", metavar="'NAME: VALUE'", help="header for --upstream")
    mcp.add_argument("--env", action="append", metavar="NAME[=VALUE]", help="variable for the upstream CMD")
    mcp.add_argument("--listen", metavar="HOST:PORT", help="serve streamable HTTP at /mcp instead of stdio")
    mcp.add_argument("--approval-wait-s", type=float, default=300.0, help="how long an asked call waits")
    mcp.add_argument("command", nargs=argparse.REMAINDER)

    secrets = sub.add_parser("secrets", help="manage local secrets on a running sandgate")
    ssub = secrets.add_subparsers(dest="secrets_cmd", required=True)
    sput = ssub.add_parser("put")
    _client(sput)
    sput.add_argument("name")
    sput.add_argument("--hosts", required=True, help="comma-separated hosts the secret is bound to")
    sput.add_argument("--from-stdin", action="store_true")
    sls = ssub.add_parser("ls")
    _client(sls)
    srm = ssub.add_parser("rm")
    _client(srm)
    srm.add_argument("name")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        overrides: dict = {}
        if args.cmd == "serve":
            if args.proxy_listen:
                overrides.setdefault("proxy", {})["listen"] = args.proxy_listen
            if args.api_listen:
                overrides.setdefault("api", {})["listen"] = args.api_listen
        cfg = load_config(args.config, args.data_dir, overrides=overrides)
    except ValueError as exc:
        print(f"sandgate: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.cmd == "serve":
        logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s %(message)s")
        logging.getLogger("mitmproxy").setLevel(logging.WARNING)
        from gateway.app import run_gateway

        return asyncio.run(run_gateway(cfg))
    if args.cmd in policy_commands.COMMANDS:
        return policy_commands.run(cfg, args)
    if args.cmd == "mcp":
        from gateway.mcp.command import cmd_mcp

        return cmd_mcp(cfg, args)
    if args.cmd == "run":
        from gateway.run import cmd_run

        return cmd_run(cfg, args)
    from gateway import commands

    return getattr(commands, f"cmd_{args.cmd}")(cfg, args)


if __name__ == "__main__":
    sys.exit(main())
