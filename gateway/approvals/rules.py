"""What approvals are, as pure functions of plain values: binding, reuse, tally, states (no I/O, `now` passed in)."""
from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any, Iterable, Mapping

from gateway.store.records import Approval, Session

KINDS = ("toolcall", "egress", "access")
FINAL_STATES = ("approved", "denied", "expired", "cancelled")       # an item in one of these never changes again


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode


def canonical_json(value: Any) -> str:
    return _CANONICAL(value)


def binding_hash(session: str, kind: str, target: str, canonical: str, via: str | None = None) -> str:
    """What an approval is bound to: (session, kind, tool or method+URL, canonical args or body hash) and, when
    given, the way the action reached sandgate (`via`: a PostgreSQL wire statement is not a `sql` tool call).
    Without `via` the hash is that of the four parts alone; with it, of five: no choice of the others makes one
    equal the other."""
    parts = [session, kind, target, canonical] if via is None else [session, kind, target, canonical, via]
    return hashlib.sha256(canonical_json(parts).encode()).hexdigest()


def reusable(row: Approval, session: Session | None, now: float, window_s: float) -> bool:
    """Whether an approved, unused item may let an identical action through again: within `window_s` of the
    decision, and only while its session is live and not frozen."""
    decided = row.decided_at
    return (row.status == "approved" and row.used_at is None and decided is not None
            and now - float(decided) <= window_s and session is not None and not session.frozen)


def overdue(row: Approval, now: float) -> bool:
    """A pending item past its TTL: it expires (nobody decided in time)."""
    return row.status == "pending" and now >= row.expires_at


def new_approval_id() -> str:
    return "a_" + secrets.token_hex(8)


def tally(votes: Iterable[Mapping[str, Any]], quorum: int) -> bool:
    """True when `quorum` distinct approvers voted approve."""
    return len({v["by"] for v in votes if v.get("verdict") == "approve"}) >= quorum
