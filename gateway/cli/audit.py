"""`sandgate audit verify|pubkey|export`: the audit trail's own commands (the store and the key named by the
configuration). `export --format opa-decision-log` is the decision log's (gateway/policy/logcommands.py)."""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any, Callable

from gateway.config import Config


def register(asub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    verify = asub.add_parser("verify", help="check the audit trail's hash chain and signed checkpoints (exit 0 "
                                            "intact, 1 naming the first bad row)")
    common(verify)
    verify.add_argument("--pubkey", metavar="FILE", help="public key(s) to check checkpoints with (PEM or base64, "
                                                         "as `audit pubkey` prints); default the data dir's key")
    pubkey = asub.add_parser("pubkey", help="print the public key that signs audit checkpoints")
    common(pubkey)


def run(cfg: Config, args: argparse.Namespace) -> int:
    if args.audit_cmd == "export" and (args.api_url or args.token):
        if args.format != "opa-decision-log":
            print("sandgate: --api-url/--token export the decision log (--format opa-decision-log); the OCSF "
                  "export reads the database", file=sys.stderr)
            return 2
        return _export_api(cfg, args)
    if args.audit_cmd == "export" and args.format == "opa-decision-log":
        from gateway.policy import commands as policy_commands

        return policy_commands.run(cfg, args)
    try:
        if args.audit_cmd == "pubkey":
            return _pubkey(cfg)
        if args.audit_cmd == "verify":
            return asyncio.run(_verify(cfg, args.pubkey))
        return asyncio.run(_export_ocsf(cfg, args))
    except (ValueError, OSError) as exc:
        print(f"sandgate: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the store: one line, no traceback (the URL may hold a password)
        print(f"sandgate: audit {args.audit_cmd} failed: {exc.__class__.__name__}: "
              f"{str(exc).splitlines()[0][:200] if str(exc) else ''}", file=sys.stderr)
        return 1


def _pubkey(cfg: Config) -> int:
    from gateway.audit.checkpoints import KEY_FILE, key_id, load_or_create_audit_key, public_pem

    if not (cfg.data_dir / KEY_FILE).exists():
        raise ValueError(f"no audit key in {cfg.data_dir} (sandgate serve makes it at its first start)")
    public = load_or_create_audit_key(cfg.data_dir).public_key()
    print(f"# sandgate audit key {key_id(public)}")
    print(public_pem(public), end="")
    return 0


def _open_store(cfg: Config) -> Any:
    from gateway.store import Store

    if cfg.store_url.startswith("sqlite") and not Path(cfg.store_url.split("///", 1)[-1]).exists():
        raise ValueError(f"no store at {cfg.store_url} (use --data-dir or --config)")
    return Store(cfg.store_url)


async def _verify(cfg: Config, pubkey: str | None) -> int:
    from gateway.audit.checkpoints import KEY_FILE, load_or_create_audit_key, load_public_keys
    from gateway.audit.verify import verify_trail
    from gateway.store.trail import TrailStore

    if pubkey:
        keys = load_public_keys(Path(pubkey).read_text())
    elif (cfg.data_dir / KEY_FILE).exists():
        keys = [load_or_create_audit_key(cfg.data_dir).public_key()]
    else:
        raise ValueError(f"no audit key in {cfg.data_dir}: pass --pubkey FILE")
    store = _open_store(cfg)
    try:
        await store.open()
        verdict = await store.read(verify_trail, TrailStore(store), keys)
    finally:
        store.close()
    if not verdict.ok:
        print(f"sandgate: audit trail broken at {verdict.problem} ({verdict.checked} rows before it intact)")
        return 1
    sealed = (f"{verdict.signed} signed checkpoint{'s' if verdict.signed != 1 else ''}, the last at row id "
              f"{verdict.last_signed_id}; {verdict.unsealed} row{'s' if verdict.unsealed != 1 else ''} after it"
              if verdict.signed else "no signed checkpoint yet (only the chain itself was checked)")
    print(f"sandgate: audit trail intact: {verdict.checked} rows checked; {sealed}")
    return 0


async def _export_ocsf(cfg: Config, args: argparse.Namespace) -> int:
    import json
    import time

    from gateway.audit.ocsf import ocsf_event
    from gateway.policy.logcommands import parse_since
    from gateway.store.trail import TrailStore

    now = time.time()
    since = parse_since(args.since, now)
    until = parse_since(args.until, now) if args.until else None
    store = _open_store(cfg)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        await store.open()

        def write() -> int:
            count = 0
            for row in TrailStore(store).rows_sync():
                if row["ts"] < since or (until is not None and row["ts"] >= until):
                    continue
                if args.kind and row["kind"] != args.kind:
                    continue
                if ((args.session and row["session"] != args.session) or (args.id and str(row["id"]) != args.id)
                        or (args.request_id and row["request_id"] != args.request_id)):
                    continue
                event = ocsf_event(row)
                if event is None:
                    continue
                out.write(json.dumps(event, sort_keys=True, ensure_ascii=False) + "\n")
                count += 1
            return count
        count = await store.read(write)
    finally:
        store.close()
        if args.output:
            out.close()
    print(f"sandgate: {count} OCSF events written", file=sys.stderr)
    return 0


def _export_api(cfg: Config, args: argparse.Namespace) -> int:
    """The decision log through `GET /v1/decisions` (admin), page by page, for someone without the database."""
    import json
    from urllib.parse import urlencode

    from sandgate.transport import SandgateError, command_endpoint, request_once

    url, token = command_endpoint(args.api_url, args.token, cfg.api_url)
    if not token:
        print("sandgate: no token (use --token or SANDGATE_TOKEN; an admin token)", file=sys.stderr)
        return 2
    query = {"since": args.since, "until": args.until, "kind": args.kind, "session": args.session, "id": args.id,
             "request_id": args.request_id}
    query = {k: v for k, v in query.items() if v}
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    count = 0
    try:
        after = None
        while True:
            page = request_once(url, token, "GET", "/v1/decisions?" + urlencode(
                {**query, **({"after": after} if after is not None else {})}))
            for entry in page["decisions"]:
                out.write(json.dumps(entry, sort_keys=True) + "\n")
                count += 1
            after = page.get("next")
            if after is None:
                break
    except SandgateError as exc:
        where = f"{exc.status} {exc.code}: " if exc.status else ""
        print(f"sandgate: {where}{exc.detail}", file=sys.stderr)
        return 1
    finally:
        if args.output:
            out.close()
    return 0
