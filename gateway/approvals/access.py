"""Access requests and grants, as pure functions of plain values (no I/O, `now` passed in).

An access request asks for a live allow of one host (optionally one port, some methods, a path prefix) for a
while. It is filed as an approval of kind "access" whose `action` holds the requested grant; each approver may
narrow it in their vote (never widen it); when approved, the grant in force is the requested one narrowed by every
approving vote (with a quorum the narrowest wins), running from the decision. Filing never resolves a name: a host
is judged by its text, an IP literal by its class, and a name in `egress.resolve` by the addresses given there.
"""
from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from gateway.net.addresses import IPNetwork, parse_ip_literal, vet_addresses
from gateway.net.hosts import normalise_host
from gateway.net.paths import normalise_path, path_covered
from gateway.store.records import Approval

INTERNAL_HOST = "sandgate.internal"
GRANTED = "egress.granted"          # the default egress policy's code for a request a live grant covers
ENDPOINT = f"http://{INTERNAL_HOST}/v1/access-requests"
HINT = f"to ask a person for access, POST {{\"host\", \"reason\"}} to {ENDPOINT}"

METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
FIELDS = frozenset({"host", "port", "methods", "path_prefix", "reason", "ttl_s"})
GRANT_FIELDS = frozenset({"methods", "path_prefix", "ttl_s"})
MAX_REASON = 1000
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cn", "Cs"})
MAX_PREFIX = 512
DEFAULT_TTL_S = 3600.0
# Names that mean this machine by convention (/etc/hosts on most systems), refused by their text like "localhost"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "localhost6", "localhost6.localdomain6",
                            "ip6-localhost", "ip6-loopback"})


class BadAccess(ValueError):
    """An access request or a grant sandgate refuses (a 400 with this text; `code` is its error code)."""

    def __init__(self, detail: str, code: str = "bad_request"):
        super().__init__(detail)
        self.code = code


@dataclass(frozen=True)
class AccessRequest:
    host: str
    port: int | None          # None: any port
    methods: tuple[str, ...]  # sorted, a subset of METHODS
    path_prefix: str          # normalised, starts with "/"
    reason: str
    ttl_s: float

    def grant(self) -> dict:
        return {"host": self.host, "port": self.port, "methods": list(self.methods),
                "path_prefix": self.path_prefix, "ttl_s": self.ttl_s}


def _methods(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(m, str) for m in value):
        raise BadAccess("methods must be a non-empty list of HTTP method names")
    out = {m.upper() for m in value}
    unknown = sorted(out - set(METHODS))
    if unknown:
        raise BadAccess(f"methods may only name {', '.join(METHODS)} (not {unknown[0][:20]!r})")
    return tuple(sorted(out))


def _prefix(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/") or len(value) > MAX_PREFIX:
        raise BadAccess(f"path_prefix must be a path starting with '/' (at most {MAX_PREFIX} characters)")
    if any(ord(c) < 0x21 or c in "?#" for c in value):
        raise BadAccess("path_prefix must not contain spaces, control characters, '?' or '#'")
    path = normalise_path(value)
    if not path:
        raise BadAccess("path_prefix must not hold encoded separators or dot segments")
    if any(unicodedata.category(c) in _INVISIBLE for c in path):   # "%00", "%0a", "%E2%80%AE" (bidi) decoded
        raise BadAccess("path_prefix must not contain control characters or invisible formatting (bidi, "
                        "zero-width), encoded or not")
    return path


def _ttl(value: Any, max_ttl_s: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise BadAccess("ttl_s must be a number of seconds > 0")
    if value > max_ttl_s:
        raise BadAccess(f"ttl_s is beyond approvals.max_grant_ttl_s ({max_ttl_s:g} s)")
    return float(value)


def check_host(raw: Any, resolve: Mapping[str, Sequence[str]], private_allow: Sequence[IPNetwork]) -> str:
    """The normalised host of an access request, or BadAccess. Never resolves the name."""
    bad = BadAccess("host must be a host name or an IP address (no scheme, port or path)")
    if not isinstance(raw, str) or not raw or len(raw) > 253:
        raise bad
    text = raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw
    if re.search(r"[/@\[\]\s]", text) or (":" in text and _literal(text) is None):
        raise bad
    try:
        host = normalise_host(text)
    except ValueError:
        raise bad from None
    if host in LOOPBACK_NAMES or host.endswith(".localhost") or host == INTERNAL_HOST:
        raise BadAccess(f"{host} is not a destination sandgate grants access to")
    literal = _literal(host)
    addresses: Sequence[str] | None = [str(literal)] if literal is not None else resolve.get(host)
    if addresses is not None:
        try:
            verdict = vet_addresses(addresses, 0, private_allow=private_allow)
        except ValueError:
            raise BadAccess(f"{host} maps to an address sandgate cannot read") from None
        if not verdict.allowed:
            raise BadAccess(f"{host} is refused: {verdict.reason}")
    elif "." not in host:
        raise BadAccess(f"{host} is not a fully qualified host name")
    return host


def _literal(text: str) -> object:
    try:
        return parse_ip_literal(text)
    except ValueError:
        return None


def parse_access_request(body: Any, *, max_ttl_s: float, resolve: Mapping[str, Sequence[str]],
                         private_allow: Sequence[IPNetwork] = ()) -> AccessRequest:
    if not isinstance(body, dict):
        raise BadAccess("the body must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise BadAccess(f"unknown field {unknown[0][:40]!r} (allowed: {', '.join(sorted(FIELDS))})",
                        "unknown_field")
    host = check_host(body.get("host"), resolve, private_allow)
    port = body.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise BadAccess("port must be a number from 1 to 65535")
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise BadAccess("reason is required: say why the access is needed")
    if len(reason) > MAX_REASON:
        raise BadAccess(f"reason is longer than {MAX_REASON} characters")
    methods = _methods(body["methods"]) if body.get("methods") is not None else METHODS
    prefix = _prefix(body["path_prefix"]) if body.get("path_prefix") is not None else "/"
    ttl = _ttl(body["ttl_s"], max_ttl_s) if body.get("ttl_s") is not None else min(DEFAULT_TTL_S, max_ttl_s)
    return AccessRequest(host, port, methods, prefix, reason, ttl)


@dataclass(frozen=True)
class AccessRules:
    """What filing checks against: approvals.max_grant_ttl_s, egress.resolve and egress.private_allow."""

    max_ttl_s: float = 86400.0
    resolve: Mapping[str, Sequence[str]] = field(default_factory=dict)
    private_allow: Sequence[IPNetwork] = ()

    def parse(self, body: Any) -> AccessRequest:
        return parse_access_request(body, max_ttl_s=self.max_ttl_s, resolve=self.resolve,
                                    private_allow=self.private_allow)


def narrow(current: Mapping[str, Any], change: Any, max_ttl_s: float) -> dict:
    """`current` narrowed by an approver's `{"methods"?, "path_prefix"?, "ttl_s"?}`; BadAccess when `change` would
    widen it (a method not granted, a prefix outside the granted one, a longer TTL) or is malformed."""
    if not isinstance(change, dict):
        raise BadAccess("grant must be an object")
    unknown = sorted(set(change) - GRANT_FIELDS)
    if unknown:
        raise BadAccess(f"grant: unknown field {unknown[0][:40]!r} (allowed: methods, path_prefix, ttl_s)",
                        "unknown_field")
    out = dict(current)
    if change.get("methods") is not None:
        methods = _methods(change["methods"])
        wider = sorted(set(methods) - set(current["methods"]))
        if wider:
            raise BadAccess(f"grant: {wider[0]} was not asked for (an approver may narrow, never widen)")
        out["methods"] = list(methods)
    if change.get("path_prefix") is not None:
        prefix = _prefix(change["path_prefix"])
        if not path_covered(prefix.rstrip("/") or "/", current["path_prefix"]):
            raise BadAccess(f"grant: {prefix} is outside {current['path_prefix']} (an approver may narrow, "
                            "never widen)")
        out["path_prefix"] = prefix
    if change.get("ttl_s") is not None:
        ttl = _ttl(change["ttl_s"], max_ttl_s)
        if ttl > float(current["ttl_s"]):
            raise BadAccess(f"grant: ttl_s {ttl:g} is longer than the {float(current['ttl_s']):g} s asked for")
        out["ttl_s"] = ttl
    return out


def grant_in_force(row: Approval) -> dict | None:
    """The grant an approved access item gives (None for anything else): the requested grant narrowed by every
    approving vote, expiring `ttl_s` after the decision. Withdrawn (`used_at` set) items give none."""
    if row.kind != "access" or row.status != "approved" or row.used_at is not None:
        return None
    decided = row.decided_at
    requested = (row.action or {}).get("grant")
    if decided is None or not isinstance(requested, dict):
        return None
    grant = dict(requested)
    for vote in row.votes or []:
        change = vote.get("grant") if vote.get("verdict") == "approve" else None
        if not change:
            continue
        try:        # each vote narrows what was asked; together, the narrowest of them applies
            voted = narrow(requested, change, float(requested["ttl_s"]))
        except BadAccess:           # stored votes were checked when cast; one that fails now grants nothing
            return None
        methods = sorted(set(grant["methods"]) & set(voted["methods"]))
        if path_covered(voted["path_prefix"].rstrip("/") or "/", grant["path_prefix"]):
            prefix = voted["path_prefix"]
        elif path_covered(grant["path_prefix"].rstrip("/") or "/", voted["path_prefix"]):
            prefix = grant["path_prefix"]
        else:
            return None             # two votes for disjoint prefixes: nothing both approved
        if not methods:
            return None
        grant = {**grant, "methods": methods, "path_prefix": prefix,
                 "ttl_s": min(float(grant["ttl_s"]), float(voted["ttl_s"]))}
    return {"host": grant["host"], "port": grant["port"], "methods": list(grant["methods"]),
            "path_prefix": grant["path_prefix"], "expires_at": float(decided) + float(grant["ttl_s"]),
            "approval": row.id}


def live_grants(rows: Iterable[Approval], now: float) -> list[dict]:
    """The grants in force at `now`, ordered by approval id (a stable policy input)."""
    out = [g for g in (grant_in_force(r) for r in rows) if g is not None and g["expires_at"] > now]
    return sorted(out, key=lambda g: g["approval"])


def covers(grant: Mapping[str, Any], method: str, host: str, port: int, path: str) -> bool:
    """Whether a live grant covers a request (the same test the default egress policy makes in Rego)."""
    if grant["host"] != host or (grant["port"] is not None and grant["port"] != port):
        return False
    if method == "CONNECT":
        return True
    return method in grant["methods"] and path_covered(normalise_path(path), grant["path_prefix"])
