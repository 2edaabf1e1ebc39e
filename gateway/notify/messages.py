"""What a notification says: the body of one delivery (`json` or `slack`) and its signature. Pure.

A `json` body is `{"event", "delivery", "ts", "approval", "url"}`, `approval` as `GET /v1/approvals/{id}` shows
it at the time of the event. A `slack` body is an incoming-webhook message (`text` and `blocks`) with a button
to the approval on the page: approving stays on the page, behind its login. Text that came from a sandbox (an
agent's reason, a summary) is escaped for Slack's mrkdwn, so it can neither mention a channel nor make a link.
"""
from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from gateway.api.approvals import approval_view
from gateway.api.timefmt import rfc3339

SIGNATURE_HEADER = "X-Sandgate-Signature"
DELIVERY_HEADER = "X-Sandgate-Delivery"
EVENT_HEADER = "X-Sandgate-Event"
SLACK_TEXT_MAX = 2900                 # a section's text is at most 3000 characters

_VERBS = {"approval.filed": "needs a decision", "approval.approved": "approved", "approval.denied": "denied",
          "approval.expired": "expired", "approval.cancelled": "cancelled"}


def sign(key: bytes, body: bytes) -> str:
    """The `X-Sandgate-Signature` value: `sha256=` and the hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def approval_link(public_url: str, aid: str) -> str | None:
    return f"{public_url.rstrip('/')}/approvals/{aid}" if public_url else None


def slack_escape(text: str) -> str:
    """Slack's three control characters, escaped as Slack asks: `<!channel>`, `<url|text>` become plain text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render(fmt: str, event: str, delivery: str, ts: float, approval: dict, public_url: str) -> bytes:
    """The exact bytes POSTed (the same on every retry of a delivery: the signature covers them)."""
    view = approval_view(approval)
    link = approval_link(public_url, view["id"])
    if fmt == "slack":
        doc: dict[str, Any] = slack_message(event, view, link)
    else:
        doc = {"event": event, "delivery": delivery, "ts": rfc3339(ts), "approval": view, "url": link}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def slack_message(event: str, view: dict, link: str | None) -> dict:
    verb = _VERBS.get(event, event)
    by = f" by {view['decided_by']}" if view.get("decided_by") and event in ("approval.approved",
                                                                              "approval.denied") else ""
    head = f"sandgate: {view['kind']} approval {verb}{by}: {view['summary']}"
    lines = [f"*{slack_escape(view['kind'])} approval {verb}{slack_escape(by)}*", slack_escape(view["summary"])]
    asked = (view.get("action") or {}).get("request_reason") if view["kind"] == "access" else None
    if asked:
        lines.append(f"_the agent's reason (unverified):_ {slack_escape(str(asked))}")
    if view.get("reason") and event != "approval.filed":
        lines.append(f"_reason:_ {slack_escape(str(view['reason']))}")
    blocks: list[dict] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)[:SLACK_TEXT_MAX]}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": slack_escape(
            f"session {view['session']} · approval {view['id']} · {view['status']}")}]},
    ]
    if link:
        blocks.append({"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": "Open in sandgate"}, "url": link}]})
    return {"text": slack_escape(head)[:SLACK_TEXT_MAX], "blocks": blocks}
