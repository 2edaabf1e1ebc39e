"""Pure view-model builders for the approval page: plain values in, plain values out (no I/O, no clock).

Everything shown may be attacker-controlled (tool arguments, URLs, headers, labels). Jinja autoescaping makes
it inert HTML; `reveal` additionally makes invisible and bidirectional-control characters visible, so an
argument cannot look different from what it is ("Trojan Source" tricks).
"""
from __future__ import annotations

import json
import unicodedata
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from gateway.approvals.rules import FINAL_STATES, KINDS

_KEEP = {"\n", "\t"}


def reveal(value: Any) -> str:
    """str(value) with control, format (bidi, zero-width) and separator characters shown as \\u{XXXX}."""
    text = "" if value is None else str(value)
    out = []
    for ch in text:
        if ch not in _KEEP and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cn"):
            out.append(f"\\u{{{ord(ch):04X}}}")
        else:
            out.append(ch)
    return "".join(out)


def pretty_json(value: Any) -> str:
    return reveal(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str))


def when(ts: float | None) -> str:
    if ts is None:
        return "—"
    return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(float(ts), tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def duration(seconds: float | None) -> str:
    """45s, 3m 05s, 2h 10m, 3d 4h; negative or missing -> 0s."""
    s = max(0, int(seconds or 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def approvals_so_far(row: Mapping[str, Any]) -> int:
    return len({v["by"] for v in row.get("votes") or [] if v.get("verdict") == "approve"})


def queue_item(row: Mapping[str, Any], now: float) -> dict:
    return {"id": row["id"], "summary": row["summary"] or row["id"], "kind": row["kind"], "session": row["session"],
            "age": duration(now - row["created_at"]), "left": duration(row["expires_at"] - now),
            "created": iso(row["created_at"]), "progress": progress(row)}


def progress(row: Mapping[str, Any]) -> str:
    quorum = int(row.get("quorum") or 1)
    return f"{approvals_so_far(row)} of {quorum} approvals" if quorum > 1 else ""


def pending_items(rows: Iterable[Mapping[str, Any]], now: float) -> list[dict]:
    """Pending and not yet past their TTL, oldest first."""
    live = [r for r in rows if r["status"] == "pending" and r["expires_at"] > now]
    return [queue_item(r, now) for r in sorted(live, key=lambda r: (r["created_at"], r["id"]))]


def action_view(kind: str, action: Mapping[str, Any]) -> dict:
    if kind == "toolcall":
        return {"tool": action.get("tool", ""), "args": pretty_json(action.get("args", {}))}
    headers = action.get("headers") or {}
    pairs = headers.items() if isinstance(headers, Mapping) else [tuple(h) for h in headers]
    return {"method": action.get("method", ""), "url": action.get("url", ""),
            "headers": [(k, v) for k, v in pairs], "body_preview": action.get("body_preview", ""),
            "body_bytes": action.get("body_bytes", 0), "body_sha256": action.get("body_sha256", "")}


def session_view(row: Mapping[str, Any] | None, now: float, status: str) -> dict | None:
    if row is None:
        return None
    return {"id": row["id"], "workload": row["workload"], "labels": sorted((row.get("labels") or {}).items()),
            "age": duration(now - row["created_at"]), "frozen": bool(row.get("frozen")), "status": status}


def step_view(ev: Mapping[str, Any]) -> dict:
    detail = ev.get("detail") or {}
    if ev.get("method") or ev.get("host"):
        what = f"{ev.get('method') or ''} {ev.get('host') or ''}{ev.get('path') or ''}".strip()
    else:
        what = str(detail.get("summary") or detail.get("tool") or detail.get("approval_id") or "")
    return {"when": when(ev["ts"]), "step": "" if ev.get("step") is None else ev["step"], "kind": ev["kind"],
            "action": ev.get("action") or "", "what": what, "status": ev.get("http_status") or "",
            "reasons": "; ".join(str(r) for r in ev.get("reasons") or [])}


def hold_note(row: Mapping[str, Any], hold_s: float | None, now: float) -> str:
    """For a pending held egress request: how long its client still waits, or that it stopped waiting."""
    if row["kind"] != "egress" or row["status"] != "pending" or not hold_s:
        return ""
    left = row["created_at"] + hold_s - now
    if left > 0:
        return f"The request is held open for {duration(left)} more."
    return ("The held request already timed out (its client got 403); approving lets an identical retry "
            "through once.")


def detail_view(row: Mapping[str, Any], session: Mapping[str, Any] | None, session_status: str,
                events: Iterable[Mapping[str, Any]], now: float, hold_s: float | None = None) -> dict:
    return {
        "hold_note": hold_note(row, hold_s, now),
        "id": row["id"], "status": row["status"], "kind": row["kind"], "summary": row["summary"],
        "session_id": row["session"], "session": session_view(session, now, session_status),
        "action": action_view(row["kind"], row.get("action") or {}), "reasons": list(row.get("reasons") or []),
        "created": when(row["created_at"]), "expires": when(row["expires_at"]),
        "left": duration(row["expires_at"] - now), "age": duration(now - row["created_at"]),
        "decided_by": row.get("decided_by"), "decided_at": when(row.get("decided_at")),
        "reason": row.get("reason") or "", "used_at": when(row["used_at"]) if row.get("used_at") else "",
        "votes": [{"by": v["by"], "verdict": v["verdict"], "at": when(v.get("at")), "reason": v.get("reason", "")}
                  for v in row.get("votes") or []],
        "quorum": int(row.get("quorum") or 1), "progress": progress(row),
        "steps": [step_view(e) for e in events],
    }


def history_items(rows: Iterable[Mapping[str, Any]], limit: int = 200) -> list[dict]:
    decided = [r for r in rows if r["status"] in FINAL_STATES]
    decided.sort(key=lambda r: (r.get("decided_at") or r["created_at"], r["id"]), reverse=True)
    return [{"id": r["id"], "summary": r["summary"] or r["id"], "status": r["status"], "kind": r["kind"],
             "session": r["session"], "decided_by": r.get("decided_by") or "", "decided_at": when(r.get("decided_at")),
             "reason": r.get("reason") or ""} for r in decided[:limit]]
