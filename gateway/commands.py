"""CLI subcommands other than `serve`. Client commands talk to a running sandgate over its API."""
from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gateway.api.timefmt import rfc3339
from gateway.auth import DEFAULT_TTL_S, TokenSigner, load_or_create_key
from gateway.config import Config


def cmd_token(cfg: Config, args: Any) -> int:
    if args.words:
        if len(args.words) != 2 or args.words[0] != "revoke":
            print("sandgate: usage: sandgate token revoke JTI", file=sys.stderr)
            return 2
        return _revoke_token(cfg, args, args.words[1])
    if not args.role or not args.name:
        print("sandgate: token needs --role and --name", file=sys.stderr)
        return 2
    ttl_s = DEFAULT_TTL_S if args.ttl_s is None else args.ttl_s
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    signer = TokenSigner(load_or_create_key(cfg.data_dir))
    token = signer.mint(args.role, args.name, ttl_s)
    claims = token_claims(token)
    print(token)
    print(f"sandgate: {args.role} token for {args.name}, jti {claims['jti']}, expires {rfc3339(claims['exp'])}",
          file=sys.stderr)
    return 0


def token_claims(token: str) -> dict:
    """The claims of a token, unverified (to show or name it; never to trust it)."""
    import jwt

    return jwt.decode(token, options={"verify_signature": False})


def _revoke_token(cfg: Config, args: Any, jti: str) -> int:
    if jti.count(".") == 2:              # a whole token was given: revoke it by its id
        try:
            jti = str(token_claims(jti)["jti"])
        except Exception:  # noqa: BLE001 - not a readable token
            print("sandgate: that is neither a token id nor a readable token", file=sys.stderr)
            return 2
    client = _client_or_fail(cfg, args)
    if client is None:
        return 2
    try:
        return _print_result(*client.call("POST", "/v1/revocations", {"jti": jti}))
    except (urllib.error.URLError, OSError) as exc:
        print(f"sandgate: cannot reach {client.base}: {exc}", file=sys.stderr)
        return 1


class ApiClient:
    def __init__(self, cfg: Config, args: Any):
        self.base = (getattr(args, "api_url", None) or cfg.api_url).rstrip("/")
        self.token = getattr(args, "token", None) or os.environ.get("SANDGATE_TOKEN", "")

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, {"error": "http_error", "detail": raw.decode(errors="replace")[:200]}


def _print_result(status: int, body: Any) -> int:
    if status >= 400:
        detail = body.get("detail", "") if isinstance(body, dict) else ""
        code = body.get("error", "error") if isinstance(body, dict) else "error"
        print(f"sandgate: {status} {code}: {detail}", file=sys.stderr)
        return 1
    if body is not None:
        print(json.dumps(body, indent=2))
    return 0


def _client_or_fail(cfg: Config, args: Any) -> ApiClient | None:
    client = ApiClient(cfg, args)
    if not client.token:
        print("sandgate: no token (use --token or SANDGATE_TOKEN)", file=sys.stderr)
        return None
    return client


def cmd_approvals(cfg: Config, args: Any) -> int:
    client = _client_or_fail(cfg, args)
    if client is None:
        return 2
    try:
        if args.approvals_cmd == "ls":
            q = f"?status={args.status}" + (f"&session={args.session}" if args.session else "")
            status, body = client.call("GET", "/v1/approvals" + q)
            if status < 400:
                for item in body:
                    print(f"{item['id']}  {item['status']:9} {item['kind']:8} {item['session']}  {item['summary']}")
                return 0
            return _print_result(status, body)
        if args.approvals_cmd == "show":
            return _print_result(*client.call("GET", f"/v1/approvals/{args.id}"))
        verb = args.approvals_cmd
        payload = {"reason": args.reason} if args.reason else {}
        return _print_result(*client.call("POST", f"/v1/approvals/{args.id}/{verb}", payload))
    except (urllib.error.URLError, OSError) as exc:
        print(f"sandgate: cannot reach {client.base}: {exc}", file=sys.stderr)
        return 1


def cmd_secrets(cfg: Config, args: Any) -> int:
    client = _client_or_fail(cfg, args)
    if client is None:
        return 2
    try:
        if args.secrets_cmd == "ls":
            status, body = client.call("GET", "/v1/secrets")
            if status < 400:
                for item in body:
                    print(f"{item['name']:20} {item['backend']:8} {','.join(item['hosts'])}")
                return 0
            return _print_result(status, body)
        if args.secrets_cmd == "rm":
            return _print_result(*client.call("DELETE", f"/v1/secrets/{args.name}"))
        if args.secrets_cmd == "put":
            if args.from_stdin:
                value = sys.stdin.read().rstrip("\n")
            else:
                import getpass

                value = getpass.getpass(f"value for {args.name}: ")
            hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
            status, body = client.call("PUT", f"/v1/secrets/{args.name}", {"value": value, "hosts": hosts})
            return _print_result(status, body)
    except (urllib.error.URLError, OSError) as exc:
        print(f"sandgate: cannot reach {client.base}: {exc}", file=sys.stderr)
        return 1
    return 2
