"""The body of a delivery and its signature (pure)."""
from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from gateway.notify.messages import render, sign, slack_escape

ROW = {"id": "a_1", "session": "s_1", "kind": "access", "status": "pending", "binding": "b", "summary":
       "access to api.partner.test/v1/ (GET) for 60 s", "action": {"grant": {
           "host": "api.partner.test", "port": None, "methods": ["GET"], "path_prefix": "/v1/", "ttl_s": 60},
           "request_reason": "<!channel> see <https://evil.test|the docs> & more"},
       "reasons": ["access requested"], "created_at": 1.0, "expires_at": 3601.0, "decided_at": None,
       "decided_by": None, "reason": None, "votes": [], "quorum": 1, "used_at": None, "requested_by": "session:s_1",
       "version": 0}


def test_signature_is_the_hmac_sha256_of_the_exact_body():
    body = render("json", "approval.filed", "d_1", 5.0, ROW, "")
    assert sign(b"k", body) == "sha256=" + hmac.new(b"k", body, hashlib.sha256).hexdigest()
    assert sign(b"k", body) != sign(b"other", body)


def test_json_body_is_the_event_and_the_approval_as_the_api_shows_it():
    doc = json.loads(render("json", "approval.filed", "d_1", 5.0, ROW, "https://gate.example/"))
    assert doc["event"] == "approval.filed" and doc["delivery"] == "d_1" and doc["ts"].endswith("Z")
    assert doc["url"] == "https://gate.example/approvals/a_1"
    assert doc["approval"]["id"] == "a_1" and doc["approval"]["status"] == "pending"
    assert "binding" not in doc["approval"] and "version" not in doc["approval"]
    # the same bytes on every retry
    assert render("json", "approval.filed", "d_1", 5.0, ROW, "https://gate.example") == \
        render("json", "approval.filed", "d_1", 5.0, dict(ROW), "https://gate.example")


def test_json_without_public_url_has_no_link():
    assert json.loads(render("json", "approval.filed", "d_1", 5.0, ROW, ""))["url"] is None


@pytest.mark.parametrize("text,escaped", [
    ("<!channel>", "&lt;!channel&gt;"), ("<https://x|y>", "&lt;https://x|y&gt;"), ("a & b", "a &amp; b"),
    ("&lt;", "&amp;lt;"), ("plain", "plain")])
def test_slack_escape(text, escaped):
    assert slack_escape(text) == escaped


def test_slack_message_links_to_the_page_and_escapes_the_agents_words():
    doc = json.loads(render("slack", "approval.filed", "d_1", 5.0, ROW, "https://gate.example"))
    assert set(doc) == {"text", "blocks"} and "needs a decision" in doc["text"]
    whole = json.dumps(doc)
    assert "<!channel>" not in whole and "<https://evil.test" not in whole
    assert "&lt;!channel&gt;" in whole
    buttons = [e for b in doc["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert [b["url"] for b in buttons] == ["https://gate.example/approvals/a_1"]
    assert "unverified" in doc["blocks"][0]["text"]["text"]


def test_slack_message_of_a_decision_names_who_and_why():
    decided = {**ROW, "status": "denied", "decided_by": "approver:alice", "reason": "not <now>", "decided_at": 9.0}
    doc = json.loads(render("slack", "approval.denied", "d_2", 9.0, decided, "https://gate.example"))
    assert "denied by approver:alice" in doc["text"]
    assert "not &lt;now&gt;" in doc["blocks"][0]["text"]["text"]
