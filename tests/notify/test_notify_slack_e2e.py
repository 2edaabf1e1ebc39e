"""Webhook notifications in Slack's format, through a real sandgate and a real aiohttp receiver on loopback: the
Slack message links to the approval on the page and escapes the agent's words. (A restart in the middle of the
retries: test_notify_e2e.py, which restarts its module's sandgate.)"""
from __future__ import annotations

from tests.conftest import LOOPBACK_CONFIG
from tests.notify.receiver import Receiver
from tests.notify.test_notify_e2e import Started, file_access


def test_slack_format_links_to_the_approval_on_the_page(tmp_path):
    receiver = Receiver(None).start()     # a Slack incoming webhook checks no signature
    sg = Started(tmp_path / "sg", {**LOOPBACK_CONFIG, "web": {"public_url": "https://sandgate.example/"},
                                   "notify": {"webhook_url": receiver.url, "format": "slack"}}).start()
    try:
        sid = sg.session(allow=[])["id"]
        aid = file_access(sg, sid, "api.partner.test")
        assert sg.call("POST", f"/v1/approvals/{aid}/deny", sg.approver, json={"reason": "not <today>"}).ok
        assert receiver.wait_for(lambda ds: len(ds) >= 2)
        filed, denied = (d.doc for d in receiver.snapshot())
        for doc in (filed, denied):
            assert set(doc) == {"text", "blocks"}
            buttons = [e for b in doc["blocks"] if b["type"] == "actions" for e in b["elements"]]
            assert [b["url"] for b in buttons] == [f"https://sandgate.example/approvals/{aid}"]
        assert "access approval needs a decision" in filed["text"] and "api.partner.test" in filed["text"]
        assert "&lt;!channel&gt; pls" in filed["blocks"][0]["text"]["text"]      # the agent's words, escaped
        assert "<!channel>" not in str(filed)
        assert "denied by approver:alice" in denied["text"]
        assert "not &lt;today&gt;" in denied["blocks"][0]["text"]["text"]
        assert all(d.signature == "" for d in receiver.snapshot())
    finally:
        sg.stop()
        receiver.stop()
