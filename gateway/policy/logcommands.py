"""Commands over the decision log (the store is imported when one runs, not when the parser is built): `sandgate audit export --format opa-decision-log`, `sandgate policy replay`
(re-decide logged inputs against a candidate policy) and `sandgate policy diff` (the shadow policy's
divergences). They read the store named by the configuration (`store.url`, default the data dir's SQLite)."""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TextIO

KINDS = ("egress", "toolcall")

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float) -> float:
    """'1h' / '30m' / '2d' (ago), an RFC 3339 time, or Unix seconds -> Unix seconds. ValueError otherwise."""
    text = text.strip()
    m = _RELATIVE.match(text)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since: not a time: {text!r} (use 1h, 30m, an RFC 3339 time or Unix seconds)") \
            from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def rfc3339(ts: float) -> str:
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}Z"


def opa_decision_log_entry(row: dict) -> dict:
    """One decision-log row in OPA's decision log event format, with the id the user holds (`request_id`: the
    proxy's, in every 403 body, or the tool call's `t_...`) beside OPA's fields."""
    entry = {
        "decision_id": row["id"],
        "timestamp": rfc3339(row["ts"]),
        "path": f"sandgate/{row['kind']}/decision",
        "input": row["input"],
        "result": row["result"],
        "bundles": {"sandgate": {"revision": row["policy_rev"]}},
        "labels": {"app": "sandgate", "engine": row["engine"]},
        "metrics": {"timer_server_handler_ns": int(row["latency_us"]) * 1000},
    }
    if row.get("request_id"):
        entry["request_id"] = row["request_id"]
    return entry


def summarise_change(old: dict, new: dict) -> str | None:
    """None when the decisions agree (action and codes), else 'allow -> deny [codes] -> [codes]'."""
    if old.get("action") == new.get("action") and sorted(old.get("codes", [])) == sorted(new.get("codes", [])):
        return None
    return (f"{old.get('action')} -> {new.get('action')}  "
            f"[{', '.join(old.get('codes', []))}] -> [{', '.join(new.get('codes', []))}]")


def register(psub: Any, sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> Any:
    """The policy subcommands over the decision log, and `audit` with `export`; returns the `audit` subparsers
    (the CLI adds the trail's own commands to them)."""
    replay = psub.add_parser("replay", help="re-decide logged inputs against a candidate policy")
    common(replay)
    replay.add_argument("--since", required=True, help="1h, 30m, 2d, an RFC 3339 time or Unix seconds")
    replay.add_argument("--until", help="same forms as --since")
    replay.add_argument("--policies", required=True, help="the candidate policy directory")
    replay.add_argument("--kind", choices=KINDS)
    replay.add_argument("--json", action="store_true", help="JSON Lines instead of text")
    diff = psub.add_parser("diff", help="list where the shadow policy disagreed with the live one")
    common(diff)
    diff.add_argument("--since", default="0", help="1h, 30m, 2d, an RFC 3339 time or Unix seconds")
    diff.add_argument("--kind", choices=KINDS)
    diff.add_argument("--json", action="store_true", help="JSON Lines instead of text")
    audit = sub.add_parser("audit", help="export the decision log or the audit trail; verify the trail")
    asub = audit.add_subparsers(dest="audit_cmd", required=True)
    export = asub.add_parser("export", help="write logged decisions (opa-decision-log) or audit events (ocsf) as "
                                            "JSON Lines")
    common(export)
    export.add_argument("--format", required=True, choices=["opa-decision-log", "ocsf"])
    export.add_argument("--since", default="0", help="1h, 30m, 2d, an RFC 3339 time or Unix seconds")
    export.add_argument("--until")
    export.add_argument("--kind", choices=KINDS)
    export.add_argument("--session", help="only this session's")
    export.add_argument("--id", help="only this row: a decision id (opa-decision-log) or an event id (ocsf)")
    export.add_argument("--request-id", help="only this request: the request_id of a 403 body, or a tool call's id")
    export.add_argument("--output", "-o", help="file to write (default stdout)")
    export.add_argument("--api-url", help="read through a running sandgate's API instead of the database "
                                          "(opa-decision-log; needs an admin token)")
    export.add_argument("--token", help="admin token for --api-url (default $SANDGATE_TOKEN)")
    return asub


async def _read(cfg: Any, what: str, since: float, until: float | None, kind: str | None,
                **match: str | None) -> list[dict]:
    from gateway.store import Store
    from gateway.store.decisions import DecisionStore

    if cfg.store_url.startswith("sqlite") and not Path(cfg.store_url.split("///", 1)[-1]).exists():
        raise ValueError(f"no store at {cfg.store_url} (use --data-dir or --config)")
    store = Store(cfg.store_url)
    try:
        await store.open()
        decisions = DecisionStore(store)
        if what == "decisions":
            return await decisions.list_decisions(since, until, kind, **match)
        return await decisions.list_divergences(since, until, kind)
    finally:
        store.close()


def run(cfg: Any, args: Any) -> int:
    now = time.time()
    try:
        since = parse_since(args.since, now)
        until = parse_since(args.until, now) if getattr(args, "until", None) else None
        if args.cmd == "audit":
            rows = asyncio.run(_read(cfg, "decisions", since, until, args.kind, session=args.session, id=args.id,
                                     request_id=args.request_id))
            out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
            try:
                for row in rows:
                    out.write(json.dumps(opa_decision_log_entry(row), sort_keys=True) + "\n")
            finally:
                if args.output:
                    out.close()
            return 0
        if args.policy_cmd == "replay":
            rows = asyncio.run(_read(cfg, "decisions", since, until, args.kind))
            return replay(rows, Path(args.policies), args.json, sys.stdout)
        rows = asyncio.run(_read(cfg, "divergences", since, None, args.kind))
        return diff(rows, args.json, sys.stdout)
    except (ValueError, OSError) as exc:
        print(f"sandgate: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a store or policy failure: one line, no traceback
        print(f"sandgate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def replay(rows: list[dict], policies: Path, as_json: bool, out: TextIO) -> int:
    from gateway.policy.evaluator import Evaluator
    from gateway.policy.loader import load_policy_dir

    evaluator = Evaluator(load_policy_dir(policies))
    changes: Counter = Counter()
    for row in rows:
        new = evaluator.decide(row["kind"], row["input"])
        change = summarise_change(row["result"], new)
        if change is None:
            continue
        changes[(row["result"].get("action"), new["action"])] += 1
        if as_json:
            out.write(json.dumps({"decision_id": row["id"], "timestamp": rfc3339(row["ts"]), "kind": row["kind"],
                                  "session": row["session"], "logged": row["result"], "candidate": new}) + "\n")
        else:
            out.write(f"{rfc3339(row['ts'])} {row['id']} {row['kind']:8} {change}\n")
    total = sum(changes.values())
    detail = ", ".join(f"{a} -> {b}: {n}" for (a, b), n in sorted(changes.items()))
    summary = f"{len(rows)} decisions replayed, {total} would change" + (f" ({detail})" if detail else "")
    (sys.stderr if as_json else out).write(summary + "\n")
    return 0


def diff(rows: list[dict], as_json: bool, out: TextIO) -> int:
    for row in rows:
        if as_json:
            out.write(json.dumps({"decision_id": row["decision_id"], "timestamp": rfc3339(row["ts"]),
                                  "kind": row["kind"], "session": row["session"], "input": row["input"],
                                  "live": row["live"], "shadow": row["shadow"], "live_rev": row["live_rev"],
                                  "shadow_rev": row["shadow_rev"]}) + "\n")
        else:
            change = summarise_change(row["live"], row["shadow"]) or "(same)"
            out.write(f"{rfc3339(row['ts'])} {row['decision_id']} {row['kind']:8} live {change.replace(' -> ', ' -> shadow ', 1)}\n")
    (sys.stderr if as_json else out).write(f"{len(rows)} divergences\n")
    return 0
