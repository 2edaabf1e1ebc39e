"""Typed results and errors of the harness SDK (`sandgate.client`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


class SandgateError(Exception):
    """An API call failed: `status` (HTTP, 0 when sandgate was not reached), a stable `code`, human `detail`."""

    def __init__(self, status: int, code: str, detail: str = ""):
        super().__init__(f"{status} {code}: {detail}" if status else f"{code}: {detail}")
        self.status, self.code, self.detail = status, code, detail


class Unauthorized(SandgateError):
    """401 (missing, invalid or expired token) or 403 (a token of a role that may not do this)."""


class NotFound(SandgateError):
    """404: no such session or approval (or one of another harness)."""


class Conflict(SandgateError):
    """409: e.g. the session has ended, or an approval was already decided."""


class Unavailable(SandgateError):
    """sandgate could not be reached, or answered 5xx (store or secret backend down)."""


class ToolDenied(SandgateError):
    """Raised by a guarded tool function when the policy (or a person) said no. `decision` says why."""

    def __init__(self, decision: "Decision"):
        super().__init__(403, "toolcall.denied", "; ".join(decision.reasons) or "denied")
        self.decision = decision


def error_for(status: int, body: Any) -> SandgateError:
    code = body.get("error", "error") if isinstance(body, Mapping) else "error"
    detail = body.get("detail", "") if isinstance(body, Mapping) else str(body or "")[:200]
    cls = {401: Unauthorized, 403: Unauthorized, 404: NotFound, 409: Conflict}.get(status)
    if cls is None:
        cls = Unavailable if status >= 500 else SandgateError
    return cls(status, str(code), str(detail))


@dataclass(frozen=True)
class SessionInfo:
    """A session as the API reports it. `token`, `proxy_url`, `ca_pem` and `env` only on creation."""
    id: str
    workload: str
    status: str
    expires_at: str
    allow: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    workspace: str = "/workspace"
    ca_path: str = "/etc/sandgate/ca.pem"
    frozen: bool = False
    created_at: str = ""
    token: str | None = None
    proxy_url: str | None = None
    ca_pem: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    source: str | None = None                        # the source address it is bound to (transparent capture)
    transparent: Mapping[str, str] | None = None     # on creation with a source: {"listen", "dns"} (HOST:PORT)
    budgets: Mapping[str, int] = field(default_factory=dict)      # in force (0 = none)
    budgets_spent: tuple[str, ...] = ()              # the counted budgets spent: every action asks
    stats: Mapping[str, int] = field(default_factory=dict)        # the session's counters, every replica's

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SessionInfo":
        return cls(id=d["id"], workload=d.get("workload", ""), status=d.get("status", ""),
                   expires_at=d.get("expires_at", ""), allow=tuple(d.get("allow") or ()),
                   secrets=tuple(d.get("secrets") or ()), labels=dict(d.get("labels") or {}),
                   workspace=d.get("workspace", "/workspace"), ca_path=d.get("ca_path", ""),
                   frozen=bool(d.get("frozen")), created_at=d.get("created_at", ""), token=d.get("token"),
                   proxy_url=d.get("proxy_url"), ca_pem=d.get("ca_pem"), env=dict(d.get("env") or {}),
                   source=d.get("source"), transparent=d.get("transparent"), budgets=dict(d.get("budgets") or {}),
                   budgets_spent=tuple(d.get("budgets_spent") or ()), stats=dict(d.get("stats") or {}))


@dataclass(frozen=True)
class Approval:
    id: str
    status: str                      # pending | approved | denied | expired | cancelled
    kind: str
    session: str
    summary: str = ""
    reasons: tuple[str, ...] = ()
    decided_by: str | None = None
    reason: str | None = None
    expires_at: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Approval":
        return cls(id=d["id"], status=d["status"], kind=d.get("kind", ""), session=d.get("session", ""),
                   summary=d.get("summary", ""), reasons=tuple(d.get("reasons") or ()),
                   decided_by=d.get("decided_by"), reason=d.get("reason"), expires_at=d.get("expires_at", ""))


@dataclass(frozen=True)
class Decision:
    """The answer to `check()`: `allow` or `deny` (an "ask" is waited on and becomes one of them).

    `asked` tells that a person was asked; `approval` is then the approval as last seen. A wait that ran out
    is a deny with code `approval.timeout` (the approval stays pending: approved later, an identical call goes
    through once)."""
    action: str
    reasons: tuple[str, ...] = ()
    codes: tuple[str, ...] = ()
    id: str = ""
    asked: bool = False
    approval: Approval | None = None

    @property
    def allowed(self) -> bool:
        return self.action == "allow"


@dataclass(frozen=True)
class Event:
    """One audit event of a session (`GET /v1/events`)."""
    seq: int
    kind: str
    action: str
    ts: str = ""
    session: str | None = None
    step: int | None = None
    reasons: tuple[str, ...] = ()
    codes: tuple[str, ...] = ()
    request_id: str | None = None
    method: str | None = None
    host: str | None = None
    path: str | None = None
    http_status: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Event":
        return cls(seq=int(d.get("seq") or 0), kind=d.get("kind", ""), action=d.get("action") or "",
                   ts=d.get("ts") or "", session=d.get("session"), step=d.get("step"),
                   reasons=tuple(d.get("reasons") or ()), codes=tuple(d.get("codes") or ()),
                   request_id=d.get("request_id"), method=d.get("method"), host=d.get("host"), path=d.get("path"),
                   http_status=d.get("http_status"), detail=dict(d.get("detail") or {}))

    @property
    def refused(self) -> bool:
        """An egress request (or exfiltration attempt) that sandgate refused."""
        return self.kind in ("egress", "exfiltration") and self.action == "deny"
