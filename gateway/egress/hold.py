"""Holding an "ask" egress request until a person decides (or hold_timeout_s runs out)."""
from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING

from mitmproxy import http

from gateway.approvals import binding_hash
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


def egress_binding(session_id: str, method: str, url: str, body: bytes) -> str:
    return binding_hash(session_id, "egress", f"{method} {url}", hashlib.sha256(body).hexdigest())


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
    binding = egress_binding(sid, flow.request.method, url, body)
    reasons = list(st.decision.reasons) if st.decision else []
    used = await queue.find_unused(binding)
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
