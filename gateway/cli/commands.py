"""The `sandgate` command line: one argparse parser, each subcommand bound to its handler with
`set_defaults(func=...)`; every handler takes the loaded configuration and the parsed arguments."""
from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gateway.config import Config, load_config
from gateway.policy import commands as policy_commands
from gateway.runtime.eventloop import loop_factory
from gateway.cli.workers import run_workers, workers_refusal
from gateway.cli import audit as audit_commands
from gateway.cli import packages as package_commands
from gateway.cli import suggest as suggest_commands

if TYPE_CHECKING:
    from sandgate.transport import SandgateError

# Each command imports what only it uses when it runs (start-up time: every command pays for every module
# imported here): the harness side's `run` and `mcp` and the API client (aiohttp), the token signer (PyJWT and
# cryptography), the composition root (`serve`), SQLAlchemy and alembic (`db`).

Handler = Callable[[Config, argparse.Namespace], int]


# -- serve ---------------------------------------------------------------------------------------------------
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(text: str) -> str:
    """A log level's name (any case); argparse applies it to the default from SANDGATE_LOG_LEVEL too."""
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a log level (one of {', '.join(LOG_LEVELS)})")
    return text.upper()


def cmd_serve(cfg: Config, args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("mitmproxy").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if args.worker_index is None and cfg.api.harness_token_file:
        # the harness uses this token instead of DATA_DIR/harness.token: refuse to start when it would be refused
        from gateway.auth.tokens import TokenSigner, load_or_create_key, read_harness_token_file

        try:
            cfg.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            read_harness_token_file(Path(cfg.api.harness_token_file),
                                    TokenSigner(load_or_create_key(cfg.data_dir)))
        except ValueError as exc:
            print(f"sandgate: configuration error: {exc}", file=sys.stderr)
            return 2
    if args.worker_index is None and args.workers != 1:
        refusal = workers_refusal(cfg, args.workers)
        if refusal is not None:
            print(f"sandgate: {refusal}", file=sys.stderr)
            return 2
        return run_workers(cfg, args.workers, args.config, args.log_level, main)
    if cfg.policy.engine == "embedded" and cfg.policy.isolation == "process":
        from gateway.policy import forker

        forker.start()          # the policy workers' forker: made while this process has one thread (and is small)
    # The composition root pulls in mitmproxy and the whole service: loaded only by the command that runs it.
    from gateway.app import run_gateway

    if args.worker_index is not None:        # one of `serve --workers N`: listeners shared by SO_REUSEPORT
        return asyncio.run(run_gateway(cfg, worker=True), loop_factory=loop_factory(reuse_port=True))
    return asyncio.run(run_gateway(cfg), loop_factory=loop_factory())


# -- policy ---------------------------------------------------------------------------------------------------
def cmd_policy(cfg: Config, args: argparse.Namespace) -> int:
    """`policy eval --tool/--request` builds the input as the server does (the gate's and the proxy's builders,
    which only this layer may import); everything else is gateway/policy/commands.py's."""
    if args.policy_cmd == "eval" and (args.tool or args.request):
        from gateway.cli import policyeval

        return policyeval.run(cfg, args)
    if args.policy_cmd == "suggest":
        return suggest_commands.run(cfg, args)
    return policy_commands.run(cfg, args)


# -- db -----------------------------------------------------------------------------------------------------
def cmd_db(cfg: Config, args: argparse.Namespace) -> int:
    """`sandgate db upgrade`: bring the store's schema to this sandgate's newest revision (what `serve` also does
    at start), behind the migration lock. `sandgate db current`: print the store's revision and the newest."""
    from gateway.store import migrate        # SQLAlchemy and alembic: loaded only by the command that uses them
    from sqlalchemy import create_engine

    if cfg.store_url.startswith("sqlite"):
        cfg.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    engine = create_engine(cfg.store_url)
    try:
        if args.db_cmd == "current":
            with engine.connect() as conn:
                print(f"store revision {migrate.current(conn) or 'none'} (newest {migrate.head()})")
            return 0
        before, after = migrate.upgrade(engine)
    except Exception as exc:  # noqa: BLE001 - one line, no traceback (the URL may carry a password: not shown)
        print(f"sandgate: db {args.db_cmd} failed: {exc.__class__.__name__}: {str(exc).splitlines()[0][:200]}",
              file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    if before == after:
        print(f"sandgate: store already at revision {after}")
    else:
        print(f"sandgate: store upgraded from revision {before or 'none'} to {after}")
    return 0


# -- token ---------------------------------------------------------------------------------------------------
def token_claims(token: str) -> dict:
    """The claims of a token, unverified (to show or name it; never to trust it)."""
    import jwt

    return jwt.decode(token, options={"verify_signature": False})


MAX_TOKEN_TTL_S = 10 * 365 * 24 * 3600      # past this, exp overflows time_t on some platforms


def cmd_token(cfg: Config, args: argparse.Namespace) -> int:
    from gateway.api.timefmt import rfc3339
    from gateway.auth.tokens import DEFAULT_TTL_S, TokenSigner, load_or_create_key

    if args.words:
        if len(args.words) != 2 or args.words[0] != "revoke":
            print("sandgate: usage: sandgate token revoke JTI", file=sys.stderr)
            return 2
        return _revoke_token(cfg, args, args.words[1])
    if not args.role or not args.name:
        print("sandgate: token needs --role and --name", file=sys.stderr)
        return 2
    ttl_s = DEFAULT_TTL_S if args.ttl_s is None else args.ttl_s
    if not 0 < ttl_s <= MAX_TOKEN_TTL_S:            # 0 or less would mint a token already expired
        print(f"sandgate: --ttl-s must be from 1 to {MAX_TOKEN_TTL_S} (ten years) seconds", file=sys.stderr)
        return 2
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    signer = TokenSigner(load_or_create_key(cfg.data_dir))
    token = signer.mint(args.role, args.name, ttl_s)
    claims = token_claims(token)
    print(token)
    print(f"sandgate: {args.role} token for {args.name}, jti {claims['jti']}, expires {rfc3339(claims['exp'])}",
          file=sys.stderr)
    return 0


def _revoke_token(cfg: Config, args: argparse.Namespace, jti: str) -> int:
    if jti.count(".") == 2:              # a whole token was given: revoke it by its id
        try:
            jti = str(token_claims(jti)["jti"])
        except Exception:  # noqa: BLE001 - not a readable token
            print("sandgate: that is neither a token id nor a readable token", file=sys.stderr)
            return 2
    api = _api_or_fail(cfg, args)
    if api is None:
        return 2
    return _answer(api, "POST", "/v1/revocations", {"jti": jti})


# -- commands that talk to a running sandgate (sandgate/transport.py) -------------------------------------------
Api = tuple[str, str]                   # (API URL, token)


def _api_or_fail(cfg: Config, args: argparse.Namespace) -> Api | None:
    from sandgate.transport import command_endpoint

    api = command_endpoint(getattr(args, "api_url", None), getattr(args, "token", None), cfg.api_url,
                           listen_dir=cfg.data_dir)
    if not api[1]:
        print("sandgate: no token (use --token or SANDGATE_TOKEN)", file=sys.stderr)
        return None
    return api


def _failed(exc: SandgateError) -> int:
    """One `sandgate: STATUS CODE: DETAIL` line on stderr (or why sandgate was not reached): exit 1."""
    if exc.status == 0:
        print(f"sandgate: {exc.detail}", file=sys.stderr)
    else:
        print(f"sandgate: {exc.status} {exc.code}: {exc.detail}", file=sys.stderr)
    return 1


def _answer(api: Api, method: str, path: str, body: Any = None) -> int:
    """Make the call and print the JSON answer (0), or fail (1)."""
    from sandgate.transport import SandgateError, request_once

    try:
        answer = request_once(*api, method, path, body)
    except SandgateError as exc:
        return _failed(exc)
    if answer is not None:
        print(json.dumps(answer, indent=2))
    return 0


def _listing(api: Api, path: str, line: Callable[[dict], str]) -> int:
    """GET a list and print one line per item (0), or fail (1)."""
    from sandgate.transport import SandgateError, request_once

    try:
        items = request_once(*api, "GET", path)
    except SandgateError as exc:
        return _failed(exc)
    for item in items:
        print(line(item))
    return 0


def cmd_approvals(cfg: Config, args: argparse.Namespace) -> int:
    api = _api_or_fail(cfg, args)
    if api is None:
        return 2
    if args.approvals_cmd == "ls":
        q = f"?status={args.status}" + (f"&session={args.session}" if args.session else "")
        return _listing(api, "/v1/approvals" + q, lambda item: f"{item['id']}  {item['status']:9} {item['kind']:8} "
                                                               f"{item['session']}  {item['summary']}")
    if args.approvals_cmd == "show":
        return _answer(api, "GET", f"/v1/approvals/{args.id}")
    payload = {"reason": args.reason} if args.reason else {}
    return _answer(api, "POST", f"/v1/approvals/{args.id}/{args.approvals_cmd}", payload)


def cmd_secrets(cfg: Config, args: argparse.Namespace) -> int:
    api = _api_or_fail(cfg, args)
    if api is None:
        return 2
    if args.secrets_cmd == "ls":
        return _listing(api, "/v1/secrets", lambda item: f"{item['name']:20} {item['backend']:8} "
                                                         f"{','.join(item['hosts'])}")
    if args.secrets_cmd == "rm":
        return _answer(api, "DELETE", f"/v1/secrets/{args.name}")
    if args.secrets_cmd == "put":
        value = sys.stdin.read().rstrip("\n") if args.from_stdin else getpass.getpass(f"value for {args.name}: ")
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        return _answer(api, "PUT", f"/v1/secrets/{args.name}", {"value": value, "hosts": hosts})
    return 2


# -- the harness side (sandgate/): run and mcp ---------------------------------------------------------------
def cmd_run(cfg: Config, args: argparse.Namespace) -> int:
    from sandgate.run import cmd_run as run

    return run(cfg, args)


def cmd_mcp(cfg: Config, args: argparse.Namespace) -> int:
    from sandgate.mcp.command import cmd_mcp as mcp

    return mcp(cfg, args)


# -- the parser ----------------------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML configuration file")
    p.add_argument("--data-dir", help="data directory (default ./.sandgate)")


def _client(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--api-url", help="sandgate API URL (default: the data dir's listen.json, else api.listen)")
    p.add_argument("--token", help="API token (default $SANDGATE_TOKEN)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sandgate", description="security gateway for AI-agent sandboxes")
    sub = parser.add_subparsers(dest="cmd", required=True)

    serve = sub.add_parser("serve", help="run the proxy, API and approval page")
    _common(serve)
    serve.add_argument("--proxy-listen", help="HOST:PORT for the egress proxy")
    serve.add_argument("--api-listen", help="HOST:PORT for the API and page")
    serve.add_argument("--transparent-listen", help="HOST:PORT for the transparent listener (with --dns-listen)")
    serve.add_argument("--dns-listen", help="HOST:PORT (UDP) for the filtering resolver of transparent capture")
    serve.add_argument("--log-level", type=_log_level, default=os.environ.get("SANDGATE_LOG_LEVEL", "INFO"),
                       help="DEBUG, INFO, WARNING or ERROR (default $SANDGATE_LOG_LEVEL, else INFO)")
    serve.add_argument("--workers", type=int, default=1, metavar="N",
                       help="N processes sharing the proxy and API ports (PostgreSQL store only)")
    serve.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    serve.set_defaults(func=cmd_serve)

    db = sub.add_parser("db", help="database schema: `db upgrade` (also run at every serve start), `db current`")
    db.set_defaults(func=cmd_db)
    dsub = db.add_subparsers(dest="db_cmd", required=True)
    for name in ("upgrade", "current"):
        _common(dsub.add_parser(name))

    token = sub.add_parser("token", help="print a signed token, or `token revoke JTI` on a running sandgate",
                           usage="sandgate token --role ROLE --name NAME [--ttl-s N]\n"
                                 "       sandgate token revoke JTI [--api-url URL] [--token ADMIN_TOKEN]")
    _client(token)
    token.add_argument("words", nargs="*", metavar="revoke JTI", help="revoke the token with this id (admin)")
    token.add_argument("--role", choices=["harness", "approver", "admin"])
    token.add_argument("--name")
    token.add_argument("--ttl-s", type=int, default=None, help="lifetime in seconds, 1 to ten years (default 24 h)")
    token.set_defaults(func=cmd_token)

    audit_sub = policy_commands.register(sub, _common)
    for name in policy_commands.COMMANDS:
        sub.choices[name].set_defaults(func=policy_commands.run)
    sub.choices["policy"].set_defaults(func=cmd_policy)
    suggest_commands.register(sub.choices["policy"], _common)
    audit_commands.register(audit_sub, _common)
    sub.choices["audit"].set_defaults(func=audit_commands.run)     # the trail's commands; decision-log export there

    package_commands.register(sub, _common)

    approvals = sub.add_parser("approvals", help="list and decide approvals on a running sandgate")
    approvals.set_defaults(func=cmd_approvals)
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
    run.add_argument("--database", action="append", metavar="NAME",
                     help="give the session this database (NAME_DATABASE_URL, through the PostgreSQL gateway)")
    run.add_argument("--workload", choices=["ephemeral", "persistent"], default="ephemeral")
    run.add_argument("--ttl-s", type=int, default=None)
    run.add_argument("--isolate", action="store_true", help="run CMD in its own network namespace, every TCP connection and DNS query captured (root)")
    run.add_argument("command", nargs=argparse.REMAINDER)
    run.set_defaults(func=cmd_run)

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
    mcp.set_defaults(func=cmd_mcp)

    secrets = sub.add_parser("secrets", help="manage local secrets on a running sandgate")
    secrets.set_defaults(func=cmd_secrets)
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
    overrides: dict = {}
    if getattr(args, "proxy_listen", None):
        overrides.setdefault("proxy", {})["listen"] = args.proxy_listen
    if getattr(args, "api_listen", None):
        overrides.setdefault("api", {})["listen"] = args.api_listen
    for flag, key in (("transparent_listen", "transparent_listen"), ("dns_listen", "dns_listen")):
        if getattr(args, flag, None):
            overrides.setdefault("proxy", {})[key] = getattr(args, flag)
    try:
        cfg = load_config(args.config, args.data_dir, overrides=overrides)
    except ValueError as exc:
        print(f"sandgate: configuration error: {exc}", file=sys.stderr)
        return 2
    handler: Handler = args.func
    return handler(cfg, args)


if __name__ == "__main__":
    sys.exit(main())
