"""What an egress approval shows and is bound to (pure): the action an approver sees, the headers that bind."""
from __future__ import annotations

import hashlib
from typing import Callable, Collection, Iterable, Mapping, Sequence
from urllib.parse import unquote

from gateway.approvals.rules import binding_hash, canonical_json
from gateway.policy.inputs import redact_headers

PREVIEW_BYTES = 2048


def egress_action(method: str, url: str, headers, body: bytes, markers=()) -> dict:
    """What the approver sees: method, URL, redacted headers and a body preview (pure)."""
    preview = body[:PREVIEW_BYTES].decode("utf-8", errors="replace")
    for marker in markers:
        if marker:
            preview = preview.replace(marker, "[redacted]")
    return {"method": method, "url": url, "headers": redact_headers(headers, markers),
            "body_preview": preview, "body_bytes": len(body), "body_sha256": hashlib.sha256(body).hexdigest()}


# Headers that do not take part in an egress approval's binding: hop-by-hop (and any header the Connection
# header names), proxy headers, Date, and those the method+URL or the body hash already bind.
UNBOUND_HEADERS = frozenset({
    "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "proxy-connection",
    "proxy-authorization", "proxy-authenticate", "via", "forwarded", "x-forwarded-for", "x-forwarded-host",
    "x-forwarded-proto", "x-forwarded-port", "x-real-ip", "date", "host", "content-length",
})


def binding_headers(headers: Iterable[tuple[str, str]],
                    secret_of: Callable[[str], Collection[str]] = lambda value: ()) -> list[tuple[str, str]]:
    """The headers an egress approval is bound to (pure): lower-case names, sorted by name (repeated headers
    keep their order), without UNBOUND_HEADERS. A value that carries placeholders (`secret_of` names their
    secrets, in any encoding) is bound by the secrets it names, never by the placeholder text."""
    pairs = [(name.lower().strip(), value.strip()) for name, value in headers]
    named_hop = {token.strip().lower() for name, value in pairs if name == "connection" for token in value.split(",")}
    out = []
    for name, value in pairs:
        if name in UNBOUND_HEADERS or name in named_hop or name.startswith("proxy-"):
            continue
        secrets = sorted(set(secret_of(value)))
        out.append((name, "{secret:" + ",".join(secrets) + "}" if secrets else value))
    return sorted(out, key=lambda pair: pair[0])


def egress_binding(session_id: str, method: str, url: str, body: bytes,
                   headers: Sequence[tuple[str, str]] = ()) -> str:
    """What an egress approval is bound to: session, method, URL, body hash and binding_headers."""
    canonical = canonical_json({"body_sha256": hashlib.sha256(body).hexdigest(), "headers": list(headers)})
    return binding_hash(session_id, "egress", f"{method} {url}", canonical)


# An AWS call's signature, its date and what the SDK adds per attempt: never part of its approval's binding.
AWS_UNBOUND_HEADERS = frozenset({
    "authorization", "x-amz-date", "x-amz-security-token", "user-agent", "x-amz-user-agent", "amz-sdk-invocation-id",
    "amz-sdk-request", "x-amzn-trace-id", "expect",
})
AWS_AUTH_QUERY = frozenset({"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-expires",
                            "x-amz-signedheaders", "x-amz-signature", "x-amz-security-token"})


def aws_binding(session_id: str, aws: Mapping[str, str], method: str, url: str, body: bytes,
                headers: Iterable[tuple[str, str]], secret_of: Callable[[str], Collection[str]]) -> str:
    """What an AWS call's approval is bound to: session, service, operation, resource, method, the URL without its
    presigning parameters, the body hash and the headers left when signature, date and SDK headers are dropped."""
    base, _, query = url.partition("?")
    kept = "&".join(sorted(p for p in query.split("&") if p and unquote(p.partition("=")[0]).lower()
                           not in AWS_AUTH_QUERY))
    bound = [(k, v) for k, v in binding_headers(headers, secret_of) if k not in AWS_UNBOUND_HEADERS]
    canonical = canonical_json({"aws": [aws.get("service", ""), aws.get("operation", ""), aws.get("resource", "")],
                                "body_sha256": hashlib.sha256(body).hexdigest(), "headers": bound})
    return binding_hash(session_id, "egress", f"{method} {base}?{kept}", canonical)
