"""`sandgate policy suggest`: proposed policy changes from the decision log's denials and the access requests
(gateway/policy/advisor.py decides what to propose). It prints them and never applies them: a unified diff
against the policy directory (`--format patch`, for `patch -p1` in that directory) or JSON.

Before printing, every proposal is checked in a scratch copy of the policy directory: the denials it cites are
re-decided under the proposed data (each must now be allowed) and its generated test must pass. Rows are read
from the store named by the configuration, or with `--api-url`/`--token` (admin) from a running sandgate's API,
as `sandgate audit export` does.
"""
from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TextIO
from urllib.parse import quote, urlencode

from gateway.config import Config

MAX_ROWS = 1_000_000        # denials kept (read page by page; rows an allow could not cure are dropped at once)
MAX_ACCESS = 100_000
PAGE = 5000
MAX_REPLAY = 5000           # a host's latest denials re-decided under the policy in force (and the proposed one)


def register(policy_parser: argparse.ArgumentParser, common: Callable[[argparse.ArgumentParser], None]) -> None:
    psub = next(a for a in policy_parser._actions if isinstance(a, argparse._SubParsersAction))
    p = psub.add_parser("suggest", help="propose policy changes (data and a test for each) from repeated denials "
                                        "and access requests; prints a patch, applies nothing")
    common(p)
    p.add_argument("--since", default="24h", help="1h, 30m, 2d, an RFC 3339 time or Unix seconds (default 24h)")
    p.add_argument("--min-count", type=int, default=3, metavar="N",
                   help="propose a host denied or asked for at least N times (default 3)")
    p.add_argument("--workload", choices=["ephemeral", "persistent"], help="only sessions of this workload")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="only sessions with this label (repeatable)")
    p.add_argument("--format", choices=["patch", "json"], default="patch")
    p.add_argument("--policies", help="the policy directory the patch is against (default policy.dir)")
    p.add_argument("--api-url", help="read through a running sandgate's API instead of the database (admin token)")
    p.add_argument("--token", help="admin token for --api-url (default $SANDGATE_TOKEN)")


def run(cfg: Config, args: argparse.Namespace) -> int:
    from gateway.policy.advisor import Filters
    from gateway.policy.factory import policy_dir
    from gateway.policy.logcommands import parse_since

    try:
        labels = tuple(sorted(_label(text) for text in args.label))
        filters = Filters(since=parse_since(args.since, time.time()), workload=args.workload, labels=labels,
                          min_count=args.min_count)
        directory = Path(args.policies) if args.policies else policy_dir(cfg.policy)
        if not directory.is_dir():
            raise ValueError(f"policy directory {directory} does not exist")
        if not args.policies and not cfg.policy.dir:
            print(f"sandgate policy suggest: against {directory}, the shipped policies (no policy.dir is "
                  "configured): apply it to your copy (policies/README.md, Site rules)", file=sys.stderr)
        if args.api_url or args.token:
            decisions, access, sessions = _read_api(cfg, args, filters.since)
        else:
            decisions, access, sessions = asyncio.run(_read_store(cfg, filters.since))
        return suggest(directory, decisions, access, sessions, filters, args.format, sys.stdout)
    except (ValueError, OSError) as exc:
        print(f"sandgate: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the store, the API or the policy: one line, no traceback
        print(f"sandgate: policy suggest failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}",
              file=sys.stderr)
        return 1


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--label takes KEY=VALUE, not {text!r}")
    return key, value


def suggest(directory: Path, decisions: list[dict], access: list[dict], sessions: dict[str, dict], filters: Any,
            fmt: str, out: TextIO) -> int:
    from gateway.policy import advisor
    from gateway.policy.evaluator import Evaluator
    from gateway.policy.loader import load_policy_dir
    from gateway.policy.testing import run_tests

    current = Evaluator(load_policy_dir(directory))
    # only what the policy in force still denies (a host allowed since then needs nothing), re-decided for the
    # hosts that could reach --min-count, each host's latest MAX_REPLAY denials
    selected = advisor.select(decisions, filters)
    seen = advisor.gather(selected, access, sessions, filters)
    hosts = {h for h, ev in seen.items() if ev.count >= filters.min_count}
    latest: dict[str, list[dict]] = {h: [] for h in hosts}
    for r in reversed(selected):
        rows = latest.get(r["input"]["request"]["host"])
        if rows is not None and len(rows) < MAX_REPLAY:
            rows.append(r)
    still = sorted((r for rows in latest.values() for r in rows if _denied(current, r["input"])),
                   key=lambda r: r.get("ts", 0))
    found = advisor.suggestions(advisor.gather(still, access, sessions, filters), filters)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    if not found:
        if fmt == "json":
            out.write(json.dumps({"policy_dir": str(directory), "data_file": None, "suggestions": [],
                                  "tests": {"passed": 0, "failed": 0}, "patch": ""}, indent=2) + "\n")
        print(f"sandgate: nothing to suggest: no host was denied (or asked for) {filters.min_count} times or more "
              "by the sessions selected", file=sys.stderr)
        return 0
    texts = {rel: (directory / rel).read_text(encoding="utf-8") for rel in advisor.DATA_FILES
             if (directory / rel).is_file()}
    data_path = advisor.data_file(texts)
    files: dict[str, tuple[str | None, str]] = {
        data_path: (texts.get(data_path), advisor.propose_data(data_path, texts.get(data_path), found))}
    for s in found:
        s.test_path = advisor.test_path(s.host)
        s.test_text = advisor.render_test(s, when)
        old = directory / s.test_path
        files[s.test_path] = (old.read_text(encoding="utf-8") if old.is_file() else None, s.test_text)
    with tempfile.TemporaryDirectory(prefix="sandgate-suggest-") as scratch:
        proposed_dir = Path(scratch) / "policies"
        shutil.copytree(directory, proposed_dir, ignore=shutil.ignore_patterns("__pycache__"))
        for rel, (_, new) in files.items():
            (proposed_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (proposed_dir / rel).write_text(new, encoding="utf-8")
        proposed = Evaluator(load_policy_dir(proposed_dir))
        for s in found:
            allowed = sum(_action(proposed, r["input"]) == "allow" for r in s.evidence.rows)
            s.replay = {"denied": len(s.evidence.rows), "would_allow": allowed}
        report = run_tests(proposed_dir, run=r"^data\.site\.suggested\.")
    failed = [r for r in report.results if not r.passed]
    patch = "".join(_diff(rel, old, new) for rel, (old, new) in files.items())
    if fmt == "json":
        out.write(json.dumps({"policy_dir": str(directory), "data_file": data_path,
                              "suggestions": [_view(s) for s in found], "tests": {
                                  "passed": sum(r.passed for r in report.results), "failed": len(failed)},
                              "patch": patch}, indent=2) + "\n")
    else:
        out.write(_preamble(directory, found, report))
        out.write(patch)
    for r in failed:
        print(f"sandgate: the generated test {r.name} ({r.file}:{r.line}) does not pass: {r.outcome} {r.detail}",
              file=sys.stderr)
    return 1 if failed else 0


def _denied(evaluator: Any, doc: Any) -> bool:
    """Still denied for want of an allow under this policy."""
    try:
        result = evaluator.decide("egress", doc)
    except Exception:  # noqa: BLE001 - an input the policy cannot decide is not evidence either way
        return False
    return result.get("action") == "deny" and list(result.get("codes") or []) == ["egress.not_allowlisted"]


def _action(evaluator: Any, doc: Any) -> str:
    try:
        return str(evaluator.decide("egress", doc).get("action"))
    except Exception:  # noqa: BLE001 - an error is a deny, as the engine's
        return "deny"


def _view(s: Any) -> dict:
    ev = s.evidence
    return {"host": s.host, "entry": s.entry,
            "scope": {"workload": s.scope.workload, "labels": dict(s.scope.labels), "text": s.scope.describe()},
            "evidence": {"denials": ev.denials, "access_requests": ev.access_requests, "sessions": len(ev.scopes),
                         "ports": sorted(ev.ports), "methods": dict(ev.methods), "first": _ts(ev.first),
                         "last": _ts(ev.last), "request_ids": ev.request_ids, "access_request_ids": ev.access_ids},
            "replay": s.replay, "test_file": s.test_path}


def _ts(value: float) -> str | None:
    from gateway.policy.logcommands import rfc3339

    return rfc3339(value) if value else None


def _preamble(directory: Path, found: list, report: Any) -> str:
    """Lines before the first `---` (patch ignores them): what is proposed and why."""
    lines = [f"sandgate policy suggest: {len(found)} proposal(s) against {directory}",
             f"apply: cd {directory} && patch -p1 < THIS_FILE; then: sandgate policy test {directory}"]
    for s in found:
        ev = s.evidence
        lines.append(f"  allow {s.entry} for {s.scope.describe()}: {ev.denials} denials, {ev.access_requests} "
                     f"access requests, {len(ev.scopes)} sessions; the proposed data allows "
                     f"{s.replay.get('would_allow', 0)} of the {s.replay.get('denied', 0)} denials")
    passed = sum(r.passed for r in report.results)
    lines.append(f"  generated tests under the proposed data: {passed} passed, {len(report.results) - passed} failed")
    return "".join(_printable(line) + "\n" for line in lines) + "\n"


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)


def _diff(rel: str, old: str | None, new: str) -> str:
    before = [] if old is None else old.splitlines(keepends=True)
    if before and not before[-1].endswith("\n"):
        before[-1] += "\n"
    lines = difflib.unified_diff(before, new.splitlines(keepends=True),
                                 fromfile="/dev/null" if old is None else f"a/{rel}", tofile=f"b/{rel}")
    return "".join(lines)


# -- reading ----------------------------------------------------------------------------------------------------

async def _read_store(cfg: Config, since: float) -> tuple[list[dict], list[dict], dict[str, dict]]:
    from gateway.policy import advisor
    from gateway.store import Store
    from gateway.store.decisions import DecisionStore

    if cfg.store_url.startswith("sqlite") and not Path(cfg.store_url.split("///", 1)[-1]).exists():
        raise ValueError(f"no store at {cfg.store_url} (use --data-dir or --config)")
    store = Store(cfg.store_url)
    try:
        await store.open()
        decisions: list[dict] = []
        after = None
        while len(decisions) < MAX_ROWS:
            page = await DecisionStore(store).list_decisions(since, None, "egress", limit=PAGE, after_seq=after)
            decisions += [r for r in page if advisor.is_curable(r)]
            if len(page) < PAGE:
                break
            after = page[-1]["seq"]
        access = [r for r in await store.list_approvals(kind="access", limit=MAX_ACCESS)
                  if float(r.get("created_at") or 0) >= since]
        sessions = {}
        for sid in {str(r["session"]) for r in access}:
            row = await store.get_session(sid)
            if row is not None:
                sessions[sid] = {"workload": row.get("workload"), "labels": row.get("labels") or {}}
        return decisions, access, sessions
    finally:
        store.close()


def _read_api(cfg: Config, args: argparse.Namespace, since: float) -> tuple[list[dict], list[dict], dict[str, dict]]:
    from gateway.policy import advisor
    from sandgate.transport import SandgateError, command_endpoint, request_once

    url, token = command_endpoint(args.api_url, args.token, cfg.api_url)
    if not token:
        raise ValueError("no token (use --token or SANDGATE_TOKEN; an admin token)")
    try:
        decisions: list[dict] = []
        after = None
        while True:
            query = {"kind": "egress", "since": repr(since), **({"after": after} if after is not None else {})}
            page = request_once(url, token, "GET", "/v1/decisions?" + urlencode(query))
            for entry in page["decisions"]:
                row = {"kind": "egress", "ts": _parse_ts(entry["timestamp"]), "input": entry["input"],
                       "result": entry["result"], "request_id": entry.get("request_id"),
                       "session": (entry["input"].get("session") or {}).get("id")}
                if advisor.is_curable(row):
                    decisions.append(row)
            after = page.get("next")
            if after is None or len(decisions) >= MAX_ROWS:
                break
        access = []
        for row in request_once(url, token, "GET", "/v1/approvals?kind=access"):
            row = {**row, "created_at": _parse_ts(row["created_at"])}
            if row["created_at"] >= since:
                access.append(row)
        sessions = {}
        for sid in {str(r["session"]) for r in access}:
            try:
                doc = request_once(url, token, "GET", f"/v1/sessions/{quote(sid, safe='')}")
            except SandgateError as exc:
                if exc.status == 404:
                    continue
                raise
            sessions[sid] = {"workload": doc.get("workload"), "labels": doc.get("labels") or {}}
    except SandgateError as exc:
        where = f"{exc.status} {exc.code}: " if exc.status else ""
        raise ValueError(f"{where}{exc.detail}") from None
    return decisions, access, sessions


def _parse_ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
