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

from gateway.approvals.access import grant_in_force
from gateway.approvals.rules import FINAL_STATES, KINDS
from gateway.store.records import Approval, AuditEvent, Session

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


def approvals_so_far(row: Approval) -> int:
    return len({v.by for v in row.ballots if v.verdict == "approve"})


def _action(row: Approval) -> Mapping[str, Any]:
    return row.action if isinstance(row.action, Mapping) else {}


def _pairing(row: Approval) -> tuple[list[tuple[str, str]], list[str]]:
    """(reason, codes) pairs, and the codes no reason could be given. The shipped decision lists reasons in their
    codes' order, so codes are paired by position when their numbers agree; one code stands beside every reason
    and one reason beside every code. Otherwise (a code with several reasons) which code is whose is not known,
    and the codes are listed on their own rather than beside the wrong reason."""
    reasons = [str(r) for r in row.reasons or []]
    codes = [str(c) for c in _action(row).get("codes") or [] if not str(c).startswith("approval.")]
    if len(codes) == len(reasons):
        return list(zip(reasons, codes)), []
    if len(codes) == 1:
        return [(r, codes[0]) for r in reasons], []
    if len(set(reasons)) == 1:
        return [(reasons[0], ", ".join(codes))], []
    return [(r, "") for r in reasons], codes


def _reasons(row: Approval) -> list[tuple[str, str]]:
    """(reason, codes) pairs as the page shows them: a reason repeated word for word shown once."""
    folded: dict[str, list[str]] = {}
    for reason, code in _pairing(row)[0]:
        folded.setdefault(reason, [])
        if code and code not in folded[reason]:
            folded[reason].append(code)
    return [(r, ", ".join(c)) for r, c in folded.items()]


def unpaired_codes(row: Approval) -> str:
    """The codes that could not be put beside a reason ("" when every code is beside one)."""
    return ", ".join(_pairing(row)[1])


def reason_items(row: Approval) -> list[dict]:
    """The reasons with their codes, as the page shows them (`_reasons`)."""
    return [{"reason": r, "code": c} for r, c in _reasons(row)]


def labels_text(labels: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((labels or {}).items()))


def queue_item(row: Approval, now: float, labels: Mapping[str, Any] | None = None) -> dict:
    return {"id": row.id, "summary": row.summary or row.id, "kind": row.kind, "session": row.session,
            "age": duration(now - row.created_at), "left": duration(row.expires_at - now),
            "created": iso(row.created_at), "progress": progress(row),
            "reasons": "; ".join(r for r, _ in _reasons(row)), "labels": labels_text(labels),
            "requested_by": row.requested_by or ""}


def progress(row: Approval) -> str:
    quorum = int(row.quorum or 1)
    return f"{approvals_so_far(row)} of {quorum} approvals" if quorum > 1 else ""


def pending_items(rows: Iterable[Approval], now: float,
                  labels: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict]:
    """Pending and not yet past their TTL, oldest first; `labels`: each session's labels (by session id)."""
    live = [r for r in rows if r.status == "pending" and r.expires_at > now]
    return [queue_item(r, now, (labels or {}).get(r.session)) for r in sorted(live, key=lambda r: (r.created_at, r.id))]


def action_view(kind: str, action: Mapping[str, Any]) -> dict:
    if kind == "access":
        grant = action.get("grant") or {}
        return {"host": grant.get("host", ""), "port": grant.get("port") or "any",
                "methods": list(grant.get("methods") or []), "path_prefix": grant.get("path_prefix", "/"),
                "ttl_s": grant.get("ttl_s", 0), "ttl": duration(float(grant.get("ttl_s") or 0)),
                "request_reason": action.get("request_reason", "")}
    if kind == "toolcall":
        return {"tool": action.get("tool", ""), "args": pretty_json(action.get("args", {}))}
    headers = action.get("headers") or {}
    pairs = headers.items() if isinstance(headers, Mapping) else [tuple(h) for h in headers]
    return {"method": action.get("method", ""), "url": action.get("url", ""),
            "headers": [(k, v) for k, v in pairs], "body_preview": action.get("body_preview", ""),
            "body_bytes": action.get("body_bytes", 0), "body_sha256": action.get("body_sha256", "")}


def session_view(row: Session | None, now: float, status: str) -> dict | None:
    if row is None:
        return None
    return {"id": row.id, "workload": row.workload, "labels": sorted((row.labels or {}).items()),
            "age": duration(now - row.created_at), "frozen": bool(row.frozen), "status": status,
            "allow": [str(a) for a in row.allow or []], "workspace": row.workspace or "/workspace",
            "secrets": [str(s) for s in row.secrets or []]}


def step_view(ev: AuditEvent) -> dict:
    detail = ev.detail or {}
    if ev.method or ev.host:
        what = f"{ev.method or ''} {ev.host or ''}{ev.path or ''}".strip()
    else:
        what = str(detail.get("summary") or detail.get("tool") or detail.get("approval_id") or "")
    return {"when": when(ev.ts), "step": "" if ev.step is None else ev.step, "kind": ev.kind,
            "action": ev.action or "", "what": what, "status": ev.http_status or "",
            "reasons": "; ".join(str(r) for r in ev.reasons or [])}


def hold_note(row: Approval, hold_s: float | None, now: float) -> str:
    """For a pending held egress request: how long its client still waits, or that it stopped waiting."""
    if row.kind != "egress" or row.status != "pending" or not hold_s:
        return ""
    left = row.created_at + hold_s - now
    if left > 0:
        return f"The request is held open for {duration(left)} more."
    return ("The held request already timed out (its client got 403); approving lets an identical retry "
            "through once.")


MAX_DENIALS = 10


def granted_view(row: Approval) -> dict | None:
    """An approved access request's grant as decided (methods, prefix, expiry); None for anything else."""
    grant = grant_in_force(row) if row.kind == "access" else None
    if grant is None:
        return None
    return {"methods": ", ".join(grant.get("methods") or ()), "path_prefix": grant.get("path_prefix", "/"),
            "expires": when(grant.get("expires_at"))}


def host_denials(events: Iterable[AuditEvent], host: str) -> list[dict]:
    """An access request's context: the session's recent denials of the host it asks for, newest first."""
    shown = [e for e in events if e.action == "deny" and e.host == host]
    shown.sort(key=lambda e: (e.ts or 0, e.seq or 0), reverse=True)
    return [step_view(e) for e in shown[:MAX_DENIALS]]


def recent_steps(events: Iterable[AuditEvent]) -> list[dict]:
    """The session's recent events, newest first, each ask once: an `approval.filed` row is left out when the
    tool call or request that asked is listed (its row carries the same approval id)."""
    events = list(events)
    asked = {(e.detail or {}).get("approval_id") for e in events if e.kind != "approval.filed"}
    shown = [e for e in events if not (e.kind == "approval.filed" and (e.detail or {}).get("approval_id") in asked)]
    shown.sort(key=lambda e: (e.ts or 0, e.seq or 0), reverse=True)
    return [step_view(e) for e in shown]


def approve_note(row: Approval, reuse_s: float | None) -> str:
    """What approving does, in one plain line."""
    if row.kind == "access":
        return ("Approving grants the access below, narrowed as you set it: reusable until it expires (counted from "
                "the decision), withdrawable at any time; every deny and ask rule still applies under it.")
    window = f" An identical retry within {duration(reuse_s)} also passes." if reuse_s else ""
    unit = ""
    if row.kind == "toolcall" and isinstance((_action(row).get("args") or {}).get("command"), str):
        unit = " A compound command is approved as a unit: all of it, exactly as shown."
    what = "this exact request" if row.kind == "egress" else "this exact call"
    return f"Approving lets {what} through once.{window}{unit}"


def clocks_note(row: Approval, hold_s: float | None) -> str:
    """The two clocks: the item's expiry, and (egress) how long the held request waits."""
    text = (f"This item expires {when(row.expires_at)}: after that it can no longer be approved, and the "
            "caller must ask again.")
    if row.kind == "egress" and hold_s:
        text += (f" The held request waits {duration(hold_s)} at most; if it is decided later, only an identical "
                 "retry benefits.")
    return text


def detail_view(row: Approval, session: Session | None, session_status: str, events: Iterable[AuditEvent],
                now: float, hold_s: float | None = None, reuse_s: float | None = None,
                denials: Iterable[AuditEvent] = ()) -> dict:
    action = _action(row)
    return {
        "denials": host_denials(denials, str((action.get("grant") or {}).get("host") or ""))
        if row.kind == "access" else [],
        "grant": granted_view(row),
        "hold_note": hold_note(row, hold_s, now),
        "requested_by": row.requested_by or "", "reason_items": reason_items(row),
        "unpaired_codes": unpaired_codes(row),
        "effects": [str(e) for e in action.get("effects") or []][:20],
        "approve_note": approve_note(row, reuse_s), "clocks_note": clocks_note(row, hold_s),
        "id": row.id, "status": row.status, "kind": row.kind, "summary": row.summary,
        "session_id": row.session, "session": session_view(session, now, session_status),
        "action": action_view(row.kind, row.action or {}), "reasons": list(row.reasons or []),
        "created": when(row.created_at), "expires": when(row.expires_at),
        "left": duration(row.expires_at - now), "age": duration(now - row.created_at),
        "decided_by": row.decided_by, "decided_at": when(row.decided_at),
        "reason": row.reason or "", "used_at": when(row.used_at) if row.used_at else "",
        "votes": [{"by": v.by, "verdict": v.verdict, "at": when(v.at), "reason": v.reason} for v in row.ballots],
        "quorum": int(row.quorum or 1), "progress": progress(row),
        "steps": recent_steps(events),
    }


def history_items(rows: Iterable[Approval], limit: int = 200) -> list[dict]:
    decided = [r for r in rows if r.status in FINAL_STATES]
    decided.sort(key=lambda r: (r.decided_at or r.created_at, r.id), reverse=True)
    return [{"id": r.id, "summary": r.summary or r.id, "status": r.status, "kind": r.kind,
             "session": r.session, "decided_by": r.decided_by or "", "decided_at": when(r.decided_at),
             "reason": r.reason or ""} for r in decided[:limit]]
