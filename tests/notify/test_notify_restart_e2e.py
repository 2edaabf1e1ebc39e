"""Webhook notifications across a restart and in Slack's format, through a real sandgate and a real aiohttp
receiver on loopback: a restart in the middle of the retries delivers after the restart, once; the Slack message
links to the approval on the page and escapes the agent's words."""
from __future__ import annotations

import time

from tests.conftest import LOOPBACK_CONFIG
from tests.notify.receiver import Receiver
from tests.notify.test_notify_e2e import SECRET, Started, failures, file_access, file_toolcall, once_each, start


def test_restart_in_the_middle_of_retries_delivers_after_the_restart(tmp_path):
    receiver = Receiver(SECRET)           # not started: every attempt fails
    sg = start(tmp_path / "sg", receiver, secret=SECRET)        # the key itself, not a source
    with sg:
        sid = sg.session(allow=[])["id"]
        filed = [file_toolcall(sg, sid, f"r-{i}") for i in range(3)]
        deadline = time.time() + 20
        while not failures(sg) and time.time() < deadline:
            time.sleep(0.2)
        assert failures(sg), "retrying"
    receiver.start()
    try:
        with sg:
            assert receiver.wait_for(lambda ds: len(ds) >= 3, timeout=60)
            time.sleep(1.5)
            once_each(receiver, {(a, "approval.filed") for a in filed})
    finally:
        receiver.stop()


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
