"""Policy inputs: pure builders for `input` documents (egress and tool calls). No I/O, `now` passed in."""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping
from urllib.parse import parse_qsl

from gateway.net.paths import normalise_path

REDACTED = "[redacted]"
SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key",
                               "x-auth-token", "private-token"})


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text` with each lone surrogate (a byte that was not UTF-8, as mitmproxy surrogate-escapes it) replaced by
    U+FFFD. HTTP allows such bytes in header values (obs-text); the policy engine cannot take them (it refuses the
    input, or crashes), so a request carrying one is decided on this form."""
    return text if text.isascii() or not _SURROGATE.search(text) else _SURROGATE.sub("\ufffd", text)


def build_session_input(session: Mapping[str, Any], now: float, stats: Mapping[str, Any] | None = None) -> dict:
    return {
        "id": session["id"],
        "workload": session["workload"],
        "labels": dict(session.get("labels") or {}),
        "frozen": bool(session.get("frozen")),
        "age_s": session_age(session, now),
        "allow": list(session.get("allow") or []),
        "workspace": session.get("workspace") or "/workspace",
        "secrets": list(session.get("secrets") or []),
        "stats": dict(stats if stats is not None else session.get("stats") or {}),
        "budgets": dict(session.get("budgets") or {}),               # every key (0 = none): sessions/budgets.py
        "budgets_spent": list(session.get("budgets_spent") or []),   # the counted budgets spent, sorted
    }


# What changes in a session's input from one call to the next while the session itself does not (its row, its
# budgets and which of them are spent): its age and its counters. session_changes(...) gives them for a call:
# build_session_input's output with these values set is what it would build at that call.
SESSION_CHANGES = frozenset({"age_s", "stats"})


def session_age(session: Mapping[str, Any], now: float) -> float:
    return max(0.0, now - float(session["created_at"]))


def session_changes(session: Mapping[str, Any], now: float, stats: Mapping[str, Any]) -> dict:
    """`age_s` and `stats` of build_session_input(session, now, stats)."""
    return {"age_s": session_age(session, now), "stats": dict(stats)}


def parse_query(query: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        out.setdefault(name, []).append(value)
    return out


def redact_headers(headers: Iterable[tuple[str, str]], secret_markers: Iterable[str] = ()) -> dict[str, str]:
    """Lower-case name -> value; credentials and anything carrying a placeholder are redacted."""
    markers = [m for m in secret_markers if m]
    out: dict[str, str] = {}
    for name, value in headers:
        name, value = valid_text(name), valid_text(value)
        key = name.lower()
        if key in SENSITIVE_HEADERS or any(m in value for m in markers):
            value = REDACTED
        out[key] = value if key not in out else f"{out[key]}, {value}"
    return out


def build_egress_input(*, session: Mapping[str, Any], now: float, method: str, scheme: str, host: str,
                       port: int, path: str, query: str = "", headers: Iterable[tuple[str, str]] = (),
                       ip: str = "", ip_class: str = "", secrets: Iterable[str] = (),
                       stats: Mapping[str, Any] | None = None, markers: Iterable[str] = (),
                       package: Mapping[str, Any] | None = None, tunnel: bool = False,
                       aws: Mapping[str, Any] | None = None,
                       grants: Iterable[Mapping[str, Any]] = ()) -> dict:
    session_doc = build_session_input(session, now, stats)
    session_doc["grants"] = [dict(g) for g in grants]    # the live grants only (approvals/access.py): no clock
    doc = {
        "kind": "egress",
        "session": session_doc,
        "request": {
            "method": method.upper(),
            "scheme": scheme,
            "host": host,
            "port": int(port),
            "path": valid_text(path),
            "path_normalised": normalise_path(valid_text(path)) if path else "",
            "query": parse_query(valid_text(query)),
            "headers": redact_headers(headers, markers),
            "ip": ip,
            "ip_class": ip_class,
            "secrets": sorted(set(secrets)),
            "tunnel": bool(tunnel),         # a request inside a tunnel whose CONNECT was allowed
        },
    }
    if package is not None:                 # a package download: {"ecosystem", "name", "version", "advisories"}
        doc["request"]["package"] = dict(package)
    if aws is not None:                     # an AWS call signed with the session's aws placeholder
        doc["request"]["aws"] = {k: aws.get(k, "") for k in ("service", "region", "operation", "resource")}
    return doc
