"""Holding an "ask" egress request until a person decides (or hold_timeout_s runs out)."""
from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Sequence

from mitmproxy import http

from gateway.approvals import binding_hash, canonical_json
from gateway.policy.inputs import redact_headers

if TYPE_CHECKING:
    from gateway.egress.addon import EgressAddon, FlowState

log = logging.getLogger("sandgate.egress")

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


async def hold_egress(addon: "EgressAddon", flow: http.HTTPFlow, st: "FlowState") -> None:
    """Called from the `request` hook with the body read. Leaves flow.response unset to forward it."""
    gw = addon.gw
    queue = gw.approvals
    body = flow.request.raw_content or b""
    if flow.request.stream or len(body) > gw.inspect_max_bytes:
        return addon.deny(flow, "approval.body_too_large", "approval required, but the body is too large to hold")
    sid = st.session["id"]
    url = flow.request.pretty_url
    markers = gw.broker_hooks.markers_for(st.session) if gw.broker_hooks is not None else ()
    secret_of = gw.broker_hooks.secrets_in if gw.broker_hooks is not None else (lambda value: ())
    binding = egress_binding(sid, flow.request.method, url, body,
                             binding_headers(flow.request.headers.items(multi=True), secret_of))
    reasons = list(st.decision.reasons) if st.decision else []
    used = await queue.find_unused(binding, sid)
    if used is not None and await queue.consume(used, f"session:{sid}"):
        st.extra["audit"] = {"approval_id": used["id"], "approved_by": used["decided_by"]}
        return
    summary = f"{flow.request.method} {url}"
    item = await queue.file(session=sid, kind="egress", binding=binding, summary=summary,
                            action=egress_action(flow.request.method, url, flow.request.headers.items(multi=True),
                                                 body, markers),
                            reasons=reasons, requested_by=f"session:{sid}",
                            ttl_s=st.decision.approval_ttl_s if st.decision else None)
    st.extra["approval_id"] = item["id"]
    queue.track_held(flow.client_conn, item["id"])
    try:
        row = await queue.wait(item["id"], queue.hold_timeout_s)
    finally:
        queue.untrack_held(flow.client_conn, item["id"])
    status = row["status"] if row else "missing"
    st.extra["audit"] = {"approval_id": item["id"], "approval_status": status}
    if status == "approved" and await queue.consume(row, f"session:{sid}"):
        st.extra["audit"]["approved_by"] = row["decided_by"]
        return
    if status == "denied":
        return addon.deny(flow, "approval.denied", f"denied by {row['decided_by']}: {row['reason']}")
    if status == "pending":
        return addon.deny(flow, "approval.timeout", "approval required: not decided in time (still pending)")
    return addon.deny(flow, f"approval.{status}", f"approval required: the approval is {status}")
